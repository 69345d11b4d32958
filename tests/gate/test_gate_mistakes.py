"""Issue 21: a mistake in the baseline or the settings never turns the gate off.

Each test is a user's project of its own (``pyproject.toml``, ``budgets/``, a baseline), run as
the user runs it: ``pytest --graph-budget`` in process (pytester) and ``graph-budget check``
through ``cli.main``. The model is ``nn.Linear(64, 32)``: on a ``(4, 64)`` input it does
2*4*64*32 + 4*32 = 16,512 FLOPs; on ``(8, 64)`` (``doubled``) twice that, 33,024 (+100%),
with the same 64*32 + 32 = 2,080 parameters and 8,320 bytes of weights. So a model that
doubled its FLOPs, MACs, activations and traffic keeps its params and weights: only the
figures a user deleted from its baseline entry would have caught it.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from pytest_graphbudget import cli

MODELS = """
import torch
from pytest_graphbudget import ModelCase

def linear(batch=4):
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, 32), (torch.randn(batch, 64),), name="linear")

def doubled():
    return linear(batch=8)
"""
TABLES = """
[models.kept]
factory = "models:linear"
flops_max = "1M"

[models.grows]
factory = "models:{grows}"
flops_max = "1M"
"""
PYTEST = "[tool.pytest.ini_options]\naddopts = '-p no:cacheprovider'\n"
NO_BASELINE = "no baseline: regressions not checked"


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A user project: models.py, budgets/nets.toml with two models, pyproject.toml."""
    pytester.makepyfile(models=MODELS)
    pytester.syspathinsert()
    monkeypatch.delitem(sys.modules, "models", raising=False)
    write(pytester, "budgets/nets.toml", TABLES.format(grows="linear"))
    pytester.makepyprojecttoml(PYTEST)
    for name in [n for n in os.environ if n.startswith("GITHUB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", "120")
    return pytester


def write(pytester: pytest.Pytester, name: str, text: str) -> None:
    path = pytester.path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


def configure(pytester: pytest.Pytester, graph_budget: str) -> None:
    pytester.makepyprojecttoml(f"{PYTEST}\n[tool.graph_budget]\n{graph_budget}\n")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--graph-budget", "budgets/", *args)


def report(pytester: pytest.Pytester, name: str = "r.json") -> dict:
    return json.loads((pytester.path / name).read_text())


# -- item 1: an entry missing a tracked figure is that model's error -------------------------


def delete_lines(text: str, table: str, keys: tuple[str, ...]) -> tuple[str, int]:
    """``text`` without the ``keys`` lines of ``table``, as a user deletes them by hand; and
    the line of the table's header (1-based)."""
    lines, out, inside, header = text.splitlines(), [], False, 0
    for number, line in enumerate(lines, 1):
        if line.startswith("["):
            inside = line == f"[{table}]"
            header = number if inside else header
        if inside and line.split(" = ")[0] in keys:
            continue
        out.append(line)
    return "\n".join(out) + "\n", header


def test_deleted_baseline_lines_are_the_models_error_in_every_report(project):
    run(project, "--graph-budget-update").assert_outcomes(passed=2)
    baseline = project.path / "budgets" / "baseline.toml"
    deleted = ("flops", "macs", "peak_memory_bytes", "traffic_bytes")
    text, line = delete_lines(baseline.read_text(), 'models."budgets/nets.toml::grows"', deleted)
    baseline.write_text(text)
    write(project, "budgets/nets.toml", TABLES.format(grows="doubled"))  # FLOPs x2

    result = run(project, "--graph-budget-json=r.json", "--graph-budget-junit=r.xml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    problem = (
        f"budgets/baseline.toml:{line}: [budgets/nets.toml::grows] no flops, macs, "
        "peak_memory_bytes, traffic_bytes: a figure missing from the entry is not checked"
    )
    assert problem in result.stdout.str()
    models = {m["id"]: m for m in report(project)["models"]}
    assert report(project)["passed"] is False
    assert models["budgets/nets.toml::grows"]["error"].startswith(problem)
    assert models["budgets/nets.toml::kept"]["verdict"] == "pass"  # the other is still checked
    junit = (project.path / "r.xml").read_text()
    assert 'errors="1"' in junit and 'type="graph-budget error"' in junit


def test_a_baseline_entrys_error_points_at_the_baseline_line_in_every_report(project, monkeypatch):
    """User trial: the ``flops`` line deleted from an entry. The message named
    ``budgets/baseline.toml:N``, but the ``::error`` annotation, the JSON report's path and
    line and the comment's heading pointed at the budget's table (``budgets/nets.toml:5``)."""
    run(project, "--graph-budget-update").assert_outcomes(passed=2)
    baseline = project.path / "budgets" / "baseline.toml"
    table = 'models."budgets/nets.toml::grows"'
    text, line = delete_lines(baseline.read_text(), table, ("flops",))
    baseline.write_text(text)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(project.path / "summary.md"))
    result = run(project, "--graph-budget-json=r.json", "--graph-budget-markdown=r.md")
    result.assert_outcomes(passed=1, failed=1)
    place = f"budgets/baseline.toml:{line}"
    annotation = f"::error file=budgets/baseline.toml,line={line},title=Graph budget%3A grows "
    (error,) = [x for x in result.stdout.lines if x.startswith("::error")]
    assert error.startswith(annotation + "could not be checked::" + place), error
    grows = {m["id"]: m for m in report(project)["models"]}["budgets/nets.toml::grows"]
    assert grows["error"].startswith(f"{place}: [budgets/nets.toml::grows] no flops")
    assert (grows["path"], grows["line"]) == ("budgets/baseline.toml", line)
    assert f"#### 💥 `grows` · `{place}`" in (project.path / "r.md").read_text()


DEEPER = """
import collections
import torch
from pytest_graphbudget import ModelCase

def net(hidden=32):
    torch.manual_seed(0)
    layers = collections.OrderedDict(
        encoder=torch.nn.Linear(64, hidden), head=torch.nn.Linear(hidden, 16)
    )
    return ModelCase(torch.nn.Sequential(layers), (torch.randn(4, 64),), name="net")

def wider():
    return net(hidden=48)
"""
# FLOPs by hand on a (4, 64) input, 2*batch*in*out + batch*out a Linear: hidden 32, the
# encoder 2*4*64*32 + 4*32 = 16,512 and the head 2*4*32*16 + 4*16 = 4,160 (20,672 in all);
# hidden 48, the encoder 2*4*64*48 + 4*48 = 24,768 and the head 2*4*48*16 + 4*16 = 6,208.
ENCODER, HEAD = 2 * 4 * 64 * 32 + 4 * 32, 2 * 4 * 32 * 16 + 4 * 16
WIDER_HEAD = 2 * 4 * 48 * 16 + 4 * 16


def test_a_module_line_deleted_from_the_baseline_is_an_error_not_growth(project):
    """User trial: ``conv2 = ...`` deleted from an entry's ``modules`` table was accepted
    without a word, and once the model grew, ``grew most: conv2 +3.56M`` named the module's
    whole value as its growth. A table that lacks a module the model has, and falls short of
    the entry's total, lost a line: the model's error at the table's line, as a deleted total
    is, and no layer is named as grown by what the baseline lost."""
    project.makepyfile(models=DEEPER)
    write(project, "budgets/nets.toml", TABLES.format(grows="net").replace("linear", "net"))
    run(project, "--graph-budget-update").assert_outcomes(passed=2)
    baseline = project.path / "budgets" / "baseline.toml"
    import tomlkit

    entry = tomlkit.parse(baseline.read_text())["models"]["budgets/nets.toml::grows"]
    assert entry["modules"] == {"encoder": ENCODER, "head": HEAD}  # the hand count
    table = 'models."budgets/nets.toml::grows".modules'
    text, line = delete_lines(baseline.read_text(), table, ("head",))
    baseline.write_text(text)
    write(project, "budgets/nets.toml", TABLES.format(grows="wider").replace("linear", "net"))

    result = run(project, "--graph-budget-json=r.json", "--graph-budget-markdown=r.md")
    result.assert_outcomes(passed=1, failed=1)
    grows = {m["id"]: m for m in report(project)["models"]}["budgets/nets.toml::grows"]
    assert grows["error"].startswith(
        f"budgets/baseline.toml:{line}: [budgets/nets.toml::grows] modules: lacks 'head', "
        "which the model has, though its modules add up to 16.5k of the entry's 20.7k FLOPs"
    ), grows["error"]
    assert (grows["path"], grows["line"]) == ("budgets/baseline.toml", line)
    (flops,) = [f["message"] for f in grows["findings"] if f["key"] == "baseline.flops"]
    assert "grew most" not in flops, flops  # not "head +6.21k", WIDER_HEAD's whole value
    markdown = (project.path / "r.md").read_text()
    assert "| layer | FLOPs" not in markdown  # the layers table leaves FLOPs out
    # the same table whole, with a module the base never had: new, so grown by all of it
    write(project, "budgets/nets.toml", TABLES.format(grows="net").replace("linear", "net"))
    run(project, "--graph-budget-update").assert_outcomes(passed=2)
    text, _ = delete_lines(baseline.read_text(), table, ("head",))
    baseline.write_text(text.replace(f"encoder = {ENCODER}", f"encoder = {ENCODER + HEAD}"))
    result = run(project, "--graph-budget-json=r.json")
    grows = {m["id"]: m for m in report(project)["models"]}["budgets/nets.toml::grows"]
    assert grows["error"] is None, grows["error"]


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("modules", "modules: no modules, though the entry records 20.7k FLOPs"),
        ("by_module.params", "by_module.params: no modules, though the entry records 2.61k params"),
    ],
)
def test_a_whole_table_deleted_from_the_baseline_is_an_error(project, table, says):
    """User trial: a whole table by module deleted (header and lines) was accepted: the totals
    were still compared, but a model that grew could no longer name the layers that grew. The
    table every written entry has is missing: the model's error, as a deleted line is."""
    project.makepyfile(models=DEEPER)
    write(project, "budgets/nets.toml", TABLES.format(grows="net").replace("linear", "net"))
    run(project, "--graph-budget-update").assert_outcomes(passed=2)
    baseline = project.path / "budgets" / "baseline.toml"
    header = f'[models."budgets/nets.toml::grows".{table}]'
    chunks = baseline.read_text().split("\n\n")
    kept = [c for c in chunks if not c.startswith(header)]
    assert len(kept) == len(chunks) - 1
    baseline.write_text("\n\n".join(kept))
    line = baseline.read_text().splitlines().index('[models."budgets/nets.toml::grows"]') + 1

    result = run(project, "--graph-budget-json=r.json")
    result.assert_outcomes(passed=1, failed=1)
    models = {m["id"]: m for m in report(project)["models"]}
    assert models["budgets/nets.toml::grows"]["error"] == (
        f"budgets/baseline.toml:{line}: [budgets/nets.toml::grows] {says}: the table deleted?; "
        "fix it or rewrite it with --graph-budget-update"
    )
    assert models["budgets/nets.toml::kept"]["error"] is None


# -- item 2: a share written as a bare number above 1 -----------------------------------------


@pytest.mark.parametrize("written", ["2", '"2"'])
def test_a_bare_tolerance_above_one_is_an_error_that_gives_the_fix(project, written):
    configure(project, f"tolerance = {written}")
    result = run(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f'ERROR: *tolerance = {written} would be 200%: did you mean "2%" or 0.02?']
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("written", ["1", "1.0", '"1"'])
def test_a_bare_tolerance_of_one_is_an_error_too(project, written, capsys):
    """1 was read as 100%: a user who meant the default's 1% let a +53% regression by."""
    configure(project, f"tolerance = {written}")
    result = run(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f'ERROR: *tolerance = {written} would be 100%: did you mean "1%" or 0.01? Write "100%"*']
    )
    assert cli.main(["compare", "a.json", "b.json", "--max-growth", "1"]) == 2
    assert "--max-growth 1 would be 100%" in capsys.readouterr().err


def test_shares_are_checked_alike_in_budget_files_markers_and_the_command_line(project, capsys):
    write(
        project,
        "budgets/nets.toml",
        """
        [defaults]
        tolerance = "1%"

        [models.kept]
        factory = "models:linear"
        compute_bound_min = 40

        [models.grows]
        factory = "models:linear"
        tolerance = 5
        """,
    )
    project.makepyfile(
        test_shared_marks="""
        import pytest, torch

        @pytest.mark.graph_budget(tolerance=3)
        def test_marked(graph_profile):
            graph_profile(torch.nn.Linear(4, 4), (torch.randn(1, 4),))
        """
    )
    result = project.runpytest("--graph-budget", "budgets/", "test_shared_marks.py")
    result.assert_outcomes(failed=2, errors=1)
    out = result.stdout.str()
    assert 'compute_bound_min = 40 would be 4000%: did you mean "40%" or 0.4?' in out
    assert 'tolerance = 5 would be 500%: did you mean "5%" or 0.05?' in out
    assert 'tolerance = 3 would be 300%: did you mean "3%" or 0.03?' in out
    # The command line's shares: refused before any model is built, with both fixes.
    assert cli.main(["compare", "a.json", "b.json", "--max-growth", "2"]) == 2
    err = capsys.readouterr().err
    assert "--max-growth 2 would be 200%: did you mean --max-growth 2% or --max-growth 0.02?" in err
    assert cli.main(["init", "resnet18", "--headroom", "10"]) == 2
    err = capsys.readouterr().err
    assert "--headroom 10 would be 1000%: did you mean --headroom 10% or --headroom 0.1?" in err
    assert len(err.strip().splitlines()) == 1


# -- item 3: a baseline path that does not exist ----------------------------------------------


def test_a_configured_baseline_that_does_not_exist_is_an_error_until_written(project, capsys):
    run(project, "--graph-budget-update").assert_outcomes(passed=2)  # budgets/baseline.toml
    configure(project, 'baseline = "budget/baseline.toml"')  # a typo of the path
    result = run(project, "--graph-budget-json=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=2)
    problem = (
        "budget/baseline.toml: the baseline set in [tool.graph_budget] of "
        f"{project.path / 'pyproject.toml'} does not exist; create it with pytest "
        "--graph-budget --graph-budget-update or fix the path"
    )
    assert all(m["error"] == problem for m in report(project)["models"])
    # graph-budget check says the same, naming its own flag.
    assert cli.main(["check", "--json", "c.json"]) == 1
    (model, _) = report(project, "c.json")["models"]
    assert model["error"] == problem.replace(
        "pytest --graph-budget --graph-budget-update", "graph-budget check --update"
    )
    # Writing it is the fix.
    run(project, "--graph-budget-update").assert_outcomes(passed=2)
    assert (project.path / "budget" / "baseline.toml").is_file()
    run(project).assert_outcomes(passed=2)


def test_a_baseline_set_by_an_ini_option_that_does_not_exist_is_an_error(project):
    result = run(
        project, "-o", "graph_budget_baseline=budget/baseline.toml", "--graph-budget-json=r.json"
    )
    result.assert_outcomes(failed=2)
    (model, _) = report(project)["models"]
    assert model["error"].startswith("budget/baseline.toml: the baseline set in ")
    assert "(ini option graph_budget_baseline) does not exist" in model["error"]


def test_without_a_baseline_file_every_report_says_regressions_were_not_checked(
    project, monkeypatch
):
    summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    outputs = ("r.json", "r.xml", "r.md", "r.html")
    flags = [
        f"--graph-budget-{kind}={name}"
        for kind, name in zip(("json", "junit", "markdown", "html"), outputs, strict=True)
    ]
    result = run(project, *flags)
    result.assert_outcomes(passed=2)  # the run works: nothing to compare with yet
    title = f"2 models within budget; {NO_BASELINE}"
    assert title in result.stdout.lines  # terminal
    assert f"::warning title=Graph budget%3A no baseline::{title}" in result.stdout.lines
    assert report(project)["title"] == title
    assert f'name="graph budget: {title}"' in (project.path / "r.xml").read_text()
    assert f"Graph budget: {title}" in (project.path / "r.md").read_text().splitlines()[1]
    assert f"Graph budget: {title}" in summary.read_text()
    assert NO_BASELINE in (project.path / "r.html").read_text()
    # Once the baseline is written, the runs compare with it and the title says nothing more.
    run(project, "--graph-budget-update").assert_outcomes(passed=2)
    again = run(project, "--graph-budget-json=r.json")
    assert NO_BASELINE not in again.stdout.str() + report(project)["title"]


# -- item 5: a misspelt settings table --------------------------------------------------------


@pytest.mark.parametrize(
    "table", ["graph-budget", "graphbudget", "graph_budgets", "Graph_Budget", "pytest-graphbudget"]
)
def test_a_misspelt_settings_table_is_an_error_with_the_right_name(project, capsys, table):
    project.makepyprojecttoml(f'{PYTEST}\n[tool.{table}]\ntolerance = "2%"\n\n[tool.ruff]\n')
    said = f"[tool.{table}] is not read by pytest-graphbudget: did you mean [tool.graph_budget]?"
    result = run(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: *pyproject.toml: {said.replace('[', '[[]')}"])
    capsys.readouterr()
    assert cli.main(["check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(said)


# -- item 8: pytest and graph-budget check read the same settings -----------------------------


def test_a_nested_project_is_read_alike_by_pytest_and_check(project, monkeypatch, capsys):
    """The root's pyproject.toml configures pytest and the gate; ``sub/`` has a pyproject.toml
    of its own (a package's). pytest, run in ``sub/``, takes the root as its rootdir (its
    ``[tool.pytest.ini_options]`` is there), and so must ``graph-budget check``."""
    configure(project, 'hardware = "a100"\ntolerance = "5%"')
    write(project, "sub/pyproject.toml", '[project]\nname = "sub"\n\n[tool.graph_budget]\n')
    write(project, "sub/budgets/nets.toml", '[models.lin]\nfactory = "models:linear"\n')
    monkeypatch.chdir(project.path / "sub")
    run(project, "--graph-budget-update").assert_outcomes(passed=1)
    result = run(project, "--graph-budget-json=p.json")
    result.stdout.fnmatch_lines([f"rootdir: {project.path}", "configfile: pyproject.toml"])
    assert cli.main(["check", "budgets/", "--json", "c.json"]) == 0, capsys.readouterr()
    plugin, command = report(project, "sub/p.json"), report(project, "sub/c.json")
    for doc in (plugin, command):
        (model,) = doc["models"]
        assert model["id"] == "sub/budgets/nets.toml::lin"
        assert (model["budget"]["hardware"], model["budget"]["tolerance"]) == ("a100", 0.05)
        assert model["baseline"]["flops"] == 2 * 4 * 64 * 32 + 4 * 32  # the root's baseline
    assert (project.path / "budgets" / "baseline.toml").is_file()


def test_a_deleted_baseline_entry_shows_in_the_title(project, capsys, monkeypatch):
    """User trial: a model's whole entry deleted, and the model doubled (+100%): "2 models
    within budget", the only trace a ``new`` in one cell. The title says what is unchecked,
    and the icon is no longer a plain green."""
    assert run(project, "--graph-budget-update").ret == 0
    import tomlkit

    baseline = project.path / "budgets" / "baseline.toml"
    document = tomlkit.parse(baseline.read_text())
    del document["models"]["budgets/nets.toml::grows"]  # the entry and its layers' tables
    baseline.write_text(tomlkit.dumps(document))
    write(project, "budgets/nets.toml", TABLES.format(grows="doubled"))
    result = run(project, "--graph-budget-json=r.json", "--graph-budget-markdown=r.md")
    assert result.ret == 0  # within its limit: only its growth went unchecked
    title = "2 models within budget; 1 model not in the baseline (new?): growth not checked"
    assert report(project)["title"] == title
    markdown = (project.path / "r.md").read_text()
    assert f"### ⚠️ Graph budget: {title}\n" in markdown
    assert "Lighter than the baseline" not in markdown  # the notice is no drop
    grows = {m["id"]: m for m in report(project)["models"]}["budgets/nets.toml::grows"]
    assert "not in budgets/baseline.toml: its growth is not checked" in str(grows["findings"])
    monkeypatch.chdir(project.path)
    assert cli.main(["check"]) == 0
    assert title in capsys.readouterr().out


def test_a_budget_folder_no_run_collects_is_a_usage_error(project, capsys, monkeypatch):
    """User trial: budget/heavy.toml (the singular) was never collected, by pytest or by
    check, without a word: its model over budget, the run green."""
    write(project, "budget/heavy.toml", TABLES.format(grows="doubled").replace("1M", "1k"))
    write(project, "budget/notes.txt", "not TOML\n")
    result = project.runpytest("--graph-budget")  # what CI runs: no path named
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    problem = (
        "budget/nets.toml looks like a budget file, but no run collects budget/: budget files "
        "are read from budgets/ or the paths of [tool.graph_budget] budgets; move it to "
        "budgets/, or add 'budget' to budgets in pyproject.toml"
    ).replace("nets.toml", "heavy.toml")
    result.stderr.fnmatch_lines([f"ERROR: {problem}"])
    monkeypatch.chdir(project.path)
    assert cli.main(["check"]) == 2
    assert problem in capsys.readouterr().err
    configure(project, 'budgets = ["budgets", "budget"]')  # the fix it names
    assert project.runpytest("--graph-budget").ret == pytest.ExitCode.TESTS_FAILED
    write(project, "budget/heavy.toml", "[tool.other]\nx = 1\n")  # another tool's file: left alone
    configure(project, "")
    assert project.runpytest("--graph-budget").ret == pytest.ExitCode.OK


def refused_by_pytest_and_check(project, capsys, monkeypatch, problem: str) -> None:
    """``pytest --graph-budget`` (what CI runs: no path named) and ``check`` both stop on
    ``problem``, a usage error, before any model is built."""
    result = project.runpytest("--graph-budget")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {problem}"])
    monkeypatch.chdir(project.path)
    assert cli.main(["check"]) == 2
    assert problem in capsys.readouterr().err


def test_budgets_left_out_of_the_configured_paths_is_a_usage_error(project, capsys, monkeypatch):
    """User trial: init's own advice (add perf/ to [tool.graph_budget] budgets) left the root
    budgets/ uncollected, since configured paths replace it: its models were no longer
    checked, even under --graph-budget-strict, and their baseline entries never read stale."""
    write(project, "perf/extra.toml", TABLES.format(grows="linear"))
    configure(project, 'budgets = ["perf"]')
    problem = (
        "budgets/nets.toml is a budget file, but no run collects budgets/: the paths of "
        "[tool.graph_budget] budgets replace it; add 'budgets' to them in pyproject.toml, or "
        "move it into one of them"
    )
    refused_by_pytest_and_check(project, capsys, monkeypatch, problem)
    configure(project, 'budgets = ["perf", "budgets"]')  # the fix it names
    assert project.runpytest("--graph-budget").ret == pytest.ExitCode.OK


@pytest.mark.parametrize("name", ["heavy.tml", "heavy.TOML"])
def test_a_budget_file_named_nearly_toml_is_a_usage_error(project, capsys, monkeypatch, name):
    """User trial: budgets/heavy.tml (or .TOML) was never read, by pytest or by check,
    without a word: its model over budget, the run green."""
    write(project, f"budgets/{name}", TABLES.format(grows="doubled").replace("1M", "1k"))
    write(project, "budgets/notes.txt", "[models.x]\nflops_max = 1\n")  # .txt: not near
    problem = (
        f"budgets/{name} looks like a budget file, but only *.toml files are read: rename it "
        "heavy.toml"
    )
    refused_by_pytest_and_check(project, capsys, monkeypatch, problem)


def test_a_table_named_with_an_escape_keeps_its_lines(tmp_path):
    """User trial: ``[models."a\\"b"]``, a unicode escape and dotted keys under ``[models]``
    lost their key lines (a regular expression read the text, not the name), so every
    problem and annotation pointed at line 1, another table's header."""
    from pytest_graphbudget.gate import budget_files
    from pytest_graphbudget.gate.budgets import Budget

    path = tmp_path / "x.toml"
    path.write_text(
        '[models."a\\"b"]\n'  # 1
        'model = "resnet18"\n'  # 2
        'flops_max = "1k"\n'  # 3
        "\n"
        '[models."\\u00e9t\\u00e9"]\n'  # 5
        'flops_max = "2k"\n'  # 6
        "\n"
        "[models]\n"  # 8
        'dotted.model = "resnet18"\n'  # 9
        'dotted.flops_max = "3k"\n',  # 10
        encoding="utf-8",
    )
    tables = {t.name: t.lines for t in budget_files.read(path, "x.toml", Budget())}
    assert tables['a"b'] == {"": 1, "model": 2, "flops_max": 3}
    assert tables["été"] == {"": 5, "flops_max": 6}
    assert tables["dotted"]["flops_max"] == 10
