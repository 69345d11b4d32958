"""Issue 9, items 6 and 7 and ``[tool.graph_budget]``: configured budgets always run, every
problem of a budget file or of the project's settings is reported, and a bad setting is one
line (pytest's usage error, exit 4; the CLI's, exit 2), never an INTERNALERROR.

The model is the tiny one of ``test_plugin.py``: ``nn.Linear(64, 32)`` on a ``(4, 64)`` input
does 2*4*64*32 + 4*32 = 16,512 FLOPs, under every ``flops_max = "1M"`` written here.
"""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_graphbudget import cli
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.run import settings as project_settings

MODELS = """
import torch
from pytest_graphbudget import ModelCase

def linear():
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name="linear")
"""

TABLE = '[models.{name}]\nfactory = "models:linear"\nflops_max = "1M"\n'


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A user project: tests/ with one plain test, budgets/ with one budget file."""
    pytester.makepyfile(models=MODELS)
    pytester.syspathinsert()
    pytester.mkpydir("tests").joinpath("test_plain.py").write_text("def test_plain():\n    pass\n")
    write(pytester, "budgets/nets.toml", TABLE.format(name="lin"))
    return pytester


def write(pytester: pytest.Pytester, name: str, text: str) -> None:
    path = pytester.path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


def configure(pytester: pytest.Pytester, graph_budget: str, testpaths: str = '["tests"]') -> None:
    pytester.makepyprojecttoml(
        f"[tool.pytest.ini_options]\ntestpaths = {testpaths}\n\n"
        f"[tool.graph_budget]\n{textwrap.dedent(graph_budget).lstrip()}"
    )


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--graph-budget", "-v", *args)


# -- item 6: configured budgets always run; an explicit path always works --------------------


def test_configured_budgets_run_although_testpaths_names_only_tests(project):
    configure(project, 'budgets = ["budgets"]')
    result = run(project)
    result.stdout.fnmatch_lines(["*tests/test_plain.py::test_plain PASSED*"])
    result.stdout.fnmatch_lines(["*budgets/nets.toml::lin PASSED*"])
    result.assert_outcomes(passed=2)


def test_configured_budgets_run_from_a_subdirectory_and_beside_a_test_path(project, monkeypatch):
    configure(project, 'budgets = "budgets"')  # one path may be a string
    run(project, "tests").assert_outcomes(passed=2)
    monkeypatch.chdir(project.path / "tests")  # pytest then collects the current directory only
    run(project).assert_outcomes(passed=2)


def test_a_configured_path_need_not_be_called_budgets(project):
    write(project, "perf/limits/edge.toml", TABLE.format(name="edge"))
    configure(project, 'budgets = ["perf"]')
    # the budgets moved to perf/: a budgets/ that holds some and no path covers is refused
    (project.path / "budgets" / "nets.toml").unlink()
    result = run(project)
    result.stdout.fnmatch_lines(["*perf/limits/edge.toml::edge PASSED*"])
    result.assert_outcomes(passed=2)  # the plain test and edge


def test_a_budget_file_named_on_the_command_line_runs_wherever_it_is(project):
    write(project, "perf/edge.toml", TABLE.format(name="edge"))
    configure(project, 'budgets = ["budgets"]')
    result = run(project, "perf/edge.toml")
    result.stdout.fnmatch_lines(["*perf/edge.toml::edge PASSED*"])
    result.assert_outcomes(passed=1)  # naming a budget file selects it: nothing is added
    assert "not found" not in result.stdout.str() + result.stderr.str()


def test_a_selection_on_the_command_line_is_kept(project):
    """A node id, a part of a budget path, or --ignore: the user chose what runs."""
    write(project, "budgets/vision/convs.toml", TABLE.format(name="conv"))
    configure(project, 'budgets = ["budgets"]')
    run(project, "tests/test_plain.py::test_plain").assert_outcomes(passed=1)
    run(project, "--ignore=budgets").assert_outcomes(passed=1)
    run(project, "budgets/nets.toml::lin").assert_outcomes(passed=1)
    run(project, "budgets/vision").assert_outcomes(passed=1)
    run(project, "tests").assert_outcomes(passed=3)


def test_a_configured_baseline_is_not_a_budget_file(project):
    # Every figure of the linear model, counted by hand (see the module's docstring): MACs
    # 4*64*32; weights 2,080 x 4 B; peak and traffic 8,320 + 1,024 (input) + 512 (output) B.
    write(
        project,
        "budgets/figures.toml",
        '[models."budgets/nets.toml::lin"]\nflops = 16512\nmacs = 8192\nparams = 2080\n'
        "peak_memory_bytes = 9856\nweights_bytes = 8320\ntraffic_bytes = 9856\n"
        # and its tables by module: a bare Linear is all <root>
        + "".join(
            f'[models."budgets/nets.toml::lin".{table}]\n"<root>" = {value}\n'
            for table, value in [
                ("modules", 16512),
                ("by_module.params", 2080),
                ("by_module.peak_memory_bytes", 9856),
                ("by_module.traffic_bytes", 9856),
            ]
        ),
    )
    configure(project, 'budgets = ["budgets"]\nbaseline = "budgets/figures.toml"')
    run(project).assert_outcomes(passed=2)


def test_a_configured_budget_path_that_does_not_exist_is_a_usage_error(project):
    configure(project, 'budgets = ["budgets", "limits"]')
    result = run(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: [[]tool.graph_budget[]] budgets: *limits does not exist*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


# -- item 7: every problem of a budget file is reported, every valid table runs --------------

BAD_FILE = """
[default]
tolerance = "2%"

[defaults]
tolerance = "2 percent"
hardware = "a10"

[models.good]
factory = "models:linear"
flops_max = "1M"
tolerance = "2%"
hardware = "a100"

[models.typos]
factory = "models:linear"
flop_max = "1M"
memory_max = "lots"

[models.other]
factory = "models:linear"
flops_max = "1M"

[model.misplaced]
flops_max = "1M"
"""


def test_one_bad_table_neither_stops_the_valid_tables_nor_hides_other_problems(project):
    """Each problem is its own failure and a valid table runs; but a table left on a broken
    ``[defaults]`` value (``other``) is an error naming it, never judged without it (it was
    judged, and passed, on generic with the default tolerance)."""
    write(project, "budgets/nets.toml", BAD_FILE)
    result = run(project, "budgets")
    result.stdout.fnmatch_lines(["*budgets/nets.toml::good PASSED*"])
    result.stdout.fnmatch_lines(["*budgets/nets.toml::other FAILED*"])
    result.assert_outcomes(passed=1, failed=5)
    out = result.stdout.str()
    for line in (
        "budgets/nets.toml:1: unknown table [default] (did you mean 'defaults'?)",
        "budgets/nets.toml:23: unknown table [model] (did you mean 'models'?)",
        "inherits a broken [defaults] setting: tolerance in [defaults] of budgets/nets.toml: "
        "cannot read '2 percent'",
        "inherits a broken [defaults] setting: hardware in [defaults] of budgets/nets.toml: "
        "unknown hardware 'a10'",
        "tolerance in [defaults] of budgets/nets.toml: cannot read '2 percent'",
        "hardware in [defaults] of budgets/nets.toml: unknown hardware 'a10'",
        "unknown budget key 'flop_max' in budgets/nets.toml::typos (did you mean 'flops_max'?)",
        "memory_max in budgets/nets.toml::typos: cannot read 'lots'",
    ):
        assert line in out, line
    assert "Traceback" not in out


def test_defaults_cannot_say_which_model_a_table_checks(project):
    """``[defaults] model = ...`` replaced the model of every table that named none, though a
    table is the zoo model it is named after: ``[models.resnet50]`` passed on resnet18's
    figures (3.64G FLOPs, 11.7M params, where resnet50 has 8.2G and 25.6M). A table that
    names its own model or factory is checked as before."""
    write(
        project,
        "budgets/nets.toml",
        '[defaults]\nfactory = "models:linear"\n\n[models.resnet50]\nparams_max = "30M"\n\n'
        '[models.own]\nfactory = "models:linear"\nflops_max = "1M"\n',
    )
    result = run(project, "budgets")
    result.stdout.fnmatch_lines(["*budgets/nets.toml::own PASSED*"])
    result.stdout.fnmatch_lines(["*budgets/nets.toml::resnet50 FAILED*"])
    out = result.stdout.str()
    said = "factory in [defaults] of budgets/nets.toml: [defaults] cannot say which model a table"
    assert f"inherits a broken [defaults] setting: {said}" in out
    assert "set it in each table" in out


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", 'budgets/nets.toml: no [[]models."<name>"[]] table, so it checks nothing'),
        ('models = "resnet18"', "budgets/nets.toml: models must be tables*got 'resnet18'"),
        ("defaults = 3\n" + TABLE.format(name="lin"), "budgets/nets.toml: defaults must be a *"),
        (
            'flops_max = "1M"\n' + TABLE.format(name="lin"),
            "*:1: unknown top-level key 'flops_max'*",
        ),
        ("[models]\nlin = 3", "budgets/nets.toml: models.lin must be a table, got 3"),
    ],
)
def test_a_budget_file_of_the_wrong_shape_is_a_one_line_failure(project, text, problem):
    write(project, "budgets/nets.toml", text)
    write(project, "budgets/other.toml", TABLE.format(name="other"))
    result = run(project, "budgets")
    result.stdout.fnmatch_lines([problem])
    result.stdout.fnmatch_lines(["*budgets/other.toml::other PASSED*"])
    assert "Traceback" not in result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_a_budget_file_that_is_not_text_fails_alone(project):
    (project.path / "budgets" / "blob.toml").write_bytes(b"\xff\xfe\x00binary")
    result = run(project, "budgets")
    result.stdout.fnmatch_lines(["*budgets/blob.toml: cannot read: *"])
    result.assert_outcomes(passed=1, failed=1)


# -- [tool.graph_budget]: a bad value is one line and exit 4, an unknown key too --------------


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('tolerance = "2 percent"', "tolerance in *: cannot read '2 percent'; expected *"),
        (
            'hardware = "a10"',
            "hardware in *: unknown hardware 'a10' (did you mean 'a10g'?); known *",
        ),
        ("tolerence = 0.02", "*: unknown key 'tolerence' (did you mean 'tolerance'?)"),
        ("budget = ['budgets']", "*: unknown key 'budget' (did you mean 'budgets'?)"),
        ('strict = "yes"', "*: strict must be true or false*"),
        ("budgets = [1]", "*: budgets must be a path or a list of paths*, got [[]1[]]"),
        ("baseline = 7", "*: baseline must be the baseline file's path*"),
        ('hardware_profiles = "npu"', "*: hardware_profiles must be tables*"),
        ("[tool.graph_budget.hardware_profiles.npu]\nbandwidth_gbs = 0", "*hardware_profiles.npu*"),
    ],
)
def test_a_bad_setting_is_a_one_line_usage_error(project, table, problem):
    configure(project, table)
    result = run(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {problem}"])
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output
    assert "Traceback" not in output


def test_every_bad_setting_is_reported_at_once(project):
    configure(project, 'tolerance = "2 percent"\nhardware = "a10"\ntolerence = 1')
    result = run(project)
    errors = [line for line in result.stderr.lines if line.startswith("ERROR: ")]
    assert len(errors) == 3, errors
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_good_settings_still_apply(project):
    configure(project, 'hardware = "a100"\ntolerance = "2%"\nstrict = true\nbudgets = []')
    write(project, "tests/test_hw.py", HARDWARE_TEST)
    # --graph-budget-update: under strict a model without a baseline entry is an error
    result = run(project, "tests", "--graph-budget-update")
    result.assert_outcomes(passed=2)


HARDWARE_TEST = """
import torch

def test_defaults(graph_profile):
    prof = graph_profile(torch.nn.Linear(4, 4), (torch.randn(1, 4),))
    assert prof.hardware.name == "a100"
"""


def test_the_command_line_checks_the_same_settings(tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.graph_budget]\ntolerence = "2%"\nhardware = "a10"\n'
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["hardware"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "unknown key 'tolerence' (did you mean 'tolerance'?)" in err[0]
    assert "unknown hardware 'a10'" in err[0]


def test_a_refused_profile_named_as_the_hardware_is_said_once(tmp_path, monkeypatch, capsys):
    """User trial: a profile with a key it does not take, named by ``hardware``, read as two
    problems, the second "unknown hardware 'mycard'; known profiles: ..." without it."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.graph_budget]\nhardware = "MyCard"\n'
        "[tool.graph_budget.hardware_profiles.mycard]\n"
        'peak_tflops = {float32 = 50}\nbandwidth_gbs = 900\ndevice = "cuda"\n'
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["hardware"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "hardware_profiles.mycard: hardware 'mycard': unknown key 'device'" in err[0]
    assert "unknown hardware" not in err[0], err


# -- issue 22, items 9 and 10: legal TOML that no setting can hold is one line ----------------

HUGE = "1" + "0" * 400  # an integer beyond any float: legal TOML


@pytest.mark.parametrize(
    "profile",
    [
        f"peak_tflops = {{float32 = {HUGE}}}\nbandwidth_gbs = 100",
        f"peak_flops = {{float32 = 1e13}}\nbandwidth = {HUGE}",
    ],
    ids=["peak", "bandwidth"],
)
def test_a_hardware_profile_beyond_a_float_is_one_line_in_pytest_and_the_cli(
    project, profile, monkeypatch, capsys
):
    configure(project, f"[tool.graph_budget.hardware_profiles.npu]\n{profile}")
    result = run(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    problem = "*hardware_profiles.npu: hardware 'npu': * must be a number > 0, got 1000*(too large)"
    result.stderr.fnmatch_lines([f"ERROR: {problem}"])
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and "Traceback" not in output
    monkeypatch.chdir(project.path)
    capsys.readouterr()
    for argv, code in ((["hardware"], 2), (["check"], 2)):  # every command: 2
        assert cli.main(argv) == code
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "must be a number > 0, got 1000" in err[0], err


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("tool = 0", "tool must be a table, got 0"),
        ('[tool]\npytest = "x"', "tool.pytest must be a table, got 'x'"),
        ("[tool.pytest]\nini_options = 3", "tool.pytest.ini_options must be a table, got 3"),
    ],
)
def test_a_tool_table_that_is_not_a_table_is_one_line(tmp_path, monkeypatch, capsys, text, problem):
    """pytest itself stops on these with a traceback; the command line says it in one line."""
    (tmp_path / "pyproject.toml").write_text(text + "\n")
    (tmp_path / "budgets").mkdir()
    (tmp_path / "budgets" / "nets.toml").write_text(TABLE.format(name="lin"))
    monkeypatch.chdir(tmp_path)
    for argv, code in ((["check"], 2), (["hardware"], 2)):
        assert cli.main(argv) == code
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].endswith(f"pyproject.toml: {problem}"), err


# -- no table makes the settings check crash ------------------------------------------------

KEYS = st.sampled_from([*project_settings.KEYS, "tolerence", "peak_tflops", "bandwidth_gbs"])
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.sampled_from([10**400, -(10**400), 2**1024])  # legal TOML beyond any float
    | st.floats(allow_nan=True)
    | st.text(max_size=8)
    | st.sampled_from(["2%", "generic", "a100", "budgets", "", "-1"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=6), inner, max_size=3)
        # a hardware profile's keys, at any depth: hardware_profiles.<name>.peak_tflops
        | st.dictionaries(KEYS | st.sampled_from(["float32", "bandwidth"]), inner, max_size=3)
    ),
    max_leaves=6,
)
TABLES = st.dictionaries(KEYS | st.text(max_size=6), VALUES, max_size=5)
PROFILE = st.fixed_dictionaries(
    {},
    optional={
        "peak_tflops": st.dictionaries(st.sampled_from(["float32", "int8"]), VALUES) | VALUES,
        "bandwidth_gbs": VALUES,
    },
)
PROFILES = st.fixed_dictionaries(
    {"hardware_profiles": st.dictionaries(st.text(max_size=4), PROFILE, max_size=2)}
)


@settings(max_examples=300, deadline=None)
@given(table=TABLES | VALUES | PROFILES)
@example(table={"hardware_profiles": {"\n": None}})  # a profile's name holding a newline
@example(table={"hardware_profiles": {"a\nb": {"peak_tflops": "x"}}})
def test_any_settings_table_is_settings_or_a_list_of_one_line_problems(table):
    try:
        found = project_settings.check(table)
    except project_settings.SettingsError as exc:
        assert exc.problems
        assert all(p and "\n" not in p for p in exc.problems)
        assert isinstance(exc, GraphBudgetError)
    else:
        assert isinstance(table, dict)
        assert set(table) <= set(project_settings.KEYS)
        assert found.defaults.tolerance == found.tolerance >= 0
