"""``graph-budget check``: the TOML budgets' check without pytest, with the plugin's verdicts.

The model is counted by hand: ``nn.Linear(64, 32)`` on a ``(4, 64)`` input does
2*4*64*32 + 4*32 = 16,512 FLOPs (a multiply and an add per MAC, plus the bias) and holds
64*32 + 32 = 2,080 parameters. ``flops_max = "1M"`` passes it, ``flops_max = "10k"`` fails it.
Where the plugin is the reference, both run on the same files and their JSON reports are
compared model by model.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ultralytics_safe_load

from pytest_graphbudget import cli

FLOPS, PARAMS = 2 * 4 * 64 * 32 + 4 * 32, 64 * 32 + 32
MODULE = "checkmod_models"
MODELS = """
import torch
from pytest_graphbudget import ModelCase

def linear():
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name="linear")
"""
BUDGETS = f"""
[models.fits]
factory = "{MODULE}:linear"
flops_max = "1M"

[models.over]
factory = "{MODULE}:linear"
flops_max = "10k"

[models.typo]
factory = "{MODULE}:linear"
flop_max = "1M"
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user project: the factory module, budgets/nets.toml, and the current directory."""
    (tmp_path / f"{MODULE}.py").write_text(MODELS)
    write(tmp_path / "budgets/nets.toml", BUDGETS)
    (tmp_path / "pyproject.toml").write_text("[tool.graph_budget]\ncache_dir = '.cache'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setenv("COLUMNS", "80")  # the width of the table, as in a CI log
    return tmp_path


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


def models(report: Path) -> dict[str, dict]:
    """The JSON report's models by id, with what a verdict is made of."""
    found = {}
    for entry in json.loads(report.read_text())["models"]:
        profile = entry["profile"] or {"totals": {}}
        found[entry["id"]] = {
            "verdict": entry["verdict"],
            "error": entry["error"],
            "failures": sorted(f["key"] for f in entry["findings"] if f["severity"] == "fail"),
            "flops": profile["totals"].get("flops"),
            "line": entry["line"],
            "path": entry["path"],
            "hardware": entry["budget"]["hardware"],
        }
    return found


def test_the_hand_counted_model_passes_and_fails_by_its_limits(project, capsys):
    code = cli.main(["check", "--json", "out.json"])
    out = capsys.readouterr().out
    assert code == 1, out
    found = models(project / "out.json")
    assert found["budgets/nets.toml::fits"]["flops"] == FLOPS
    assert found["budgets/nets.toml::fits"]["verdict"] == "pass"
    assert found["budgets/nets.toml::over"]["failures"] == ["flops_max"]
    assert "flop_max" in found["budgets/nets.toml::typo"]["error"]
    # Why each failed (as pytest's failure section), then the terminal section as pytest prints
    # it: the rule, the header, one row per model.
    assert "graph budget failed for over (budgets/nets.toml::over):" in out
    assert "FLOPs 16.5k exceeds flops_max 10k" in out
    assert "graph budget failed for fits" not in out
    assert "\n" + " graph budget ".center(80, "=") + "\n" in out
    assert "model" in out and "FLOPs/limit" in out and "verdict" in out
    assert "16.5k/1M" in out and "16.5k/10k" in out
    assert "error: typo: " in out and "did you mean 'flops_max'" in out
    assert "3 models: 1 could not be checked, 1 over budget" in out


@pytest.mark.parametrize(
    ("plugin_options", "command_options"),
    [([], []), (["--graph-budget-hardware=a100"], ["--hardware", "a100"])],
)
def test_the_verdicts_are_the_plugins_on_the_same_files(
    project, pytester, capsys, plugin_options, command_options
):
    """The reference is ``pytest --graph-budget`` itself, run on the same budget files."""
    pytester.chdir()
    for name in ("budgets/nets.toml", f"{MODULE}.py", "pyproject.toml"):
        write(pytester.path / name, (project / name).read_text())
    pytester.syspathinsert()
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--graph-budget",
        "--graph-budget-json=plugin.json",
        "budgets",
        *plugin_options,
    )
    assert result.ret == 1
    code = cli.main(["check", "budgets", "--json", "cli.json", *command_options])
    assert code == result.ret
    plugin, command = models(pytester.path / "plugin.json"), models(pytester.path / "cli.json")
    assert (
        sorted(command)
        == sorted(plugin)
        == [
            "budgets/nets.toml::fits",
            "budgets/nets.toml::over",
            "budgets/nets.toml::typo",
        ]
    )
    assert command == plugin
    checked = {m["hardware"] for m in command.values() if m["error"] is None}
    assert checked == {"a100" if command_options else "generic"}


def test_all_within_budget_exits_0_and_update_writes_the_baseline(project, capsys):
    write(project / "budgets/nets.toml", BUDGETS.split("[models.over]")[0])
    assert cli.main(["check", "--update"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "baseline written: " in out
    baseline = (project / "budgets/baseline.toml").read_text()
    assert '[models."budgets/nets.toml::fits"]' in baseline
    assert f"flops = {FLOPS}" in baseline and f"params = {PARAMS}" in baseline
    # Against that baseline: the same model passes; a grown one fails as a regression.
    assert cli.main(["check"]) == 0
    text = (project / "budgets/baseline.toml").read_text()
    (project / "budgets/baseline.toml").write_text(text.replace(f"flops = {FLOPS}", "flops = 1000"))
    assert cli.main(["check", "--json", "r.json", "--markdown", "r.md", "--no-cache"]) == 1
    assert models(project / "r.json")["budgets/nets.toml::fits"]["failures"] == ["baseline.flops"]
    # The hint names this command's flag, not the plugin's.
    out = capsys.readouterr().out
    assert "run graph-budget check --update and commit budgets/baseline.toml" in out
    assert "--graph-budget-update" not in out
    assert "run `graph-budget check --update` and commit" in (project / "r.md").read_text()


def test_usage_errors_exit_2_in_one_line(project, capsys):
    """The command line's convention, as every other command (it was pytest's 4)."""
    assert cli.main(["check", "nowhere"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nowhere: no such file or directory" in err[0]
    (project / "empty").mkdir()
    assert cli.main(["check", "empty"]) == 2
    assert "no budget files" in capsys.readouterr().err
    (project / "pyproject.toml").write_text("[tool.graph_budget]\ntolerence = '2%'\n")
    assert cli.main(["check"]) == 2
    assert "did you mean 'tolerance'" in capsys.readouterr().err


def test_a_path_that_is_no_budget_file_is_a_usage_error(project, capsys):
    """User trial: ``check models.py`` read the Python module as TOML, reported a parse
    error as a model that could not be checked, and exited 1, as if a budget had failed."""
    for given in ("checkmod_models.py", "notes.json"):
        (project / "notes.json").write_text("{}")
        assert cli.main(["check", given]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""  # no table: nothing was checked
        assert captured.err == (
            f"graph-budget check: error: {project / given}: not a budget file (*.toml); check "
            "reads TOML budget files and directories of them (tests with budget markers run "
            "under pytest --graph-budget)\n"
        )
    # a baseline configured under another name is no budget file either
    (project / "pyproject.toml").write_text(
        "[tool.graph_budget]\ncache_dir = '.cache'\nbaseline = 'budgets/figures.toml'\n"
    )
    write(project / "budgets/figures.toml", "")
    assert cli.main(["check", "budgets/figures.toml"]) == 2
    assert capsys.readouterr().err == (
        f"graph-budget check: error: {project / 'budgets/figures.toml'} is the baseline file, "
        "not a budget file\n"
    )


def test_a_report_that_cannot_be_written_is_exit_2_before_any_model(project, capsys):
    """User trial: said on stdout, without "error", once every model had been profiled."""
    write(project / "budgets/nets.toml", BUDGETS.split("[models.over]")[0])
    (project / "taken").write_text("a file, not a directory")
    assert cli.main(["check", "--junit", "taken/junit.xml"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        f"graph-budget check: error: --junit taken/junit.xml: {project / 'taken'} is a file, "
        "not a folder\n"
    )


def test_run_from_a_subdirectory_checks_the_projects_configured_budgets(
    project, capsys, monkeypatch
):
    write(project / "perf/edge.toml", BUDGETS.split("[models.over]")[0])
    (project / "pyproject.toml").write_text("[tool.graph_budget]\nbudgets = ['perf']\n")
    (project / "budgets/nets.toml").unlink()  # moved to perf/: a budgets/ left out is refused
    (project / "src").mkdir()
    monkeypatch.chdir(project / "src")  # the root is found upward, as pytest finds its rootdir
    code = cli.main(["check", "--json", "r.json"])  # reports are relative to where it runs
    assert code == 0, capsys.readouterr()
    assert list(models(project / "src/r.json")) == ["perf/edge.toml::fits"]


def test_factories_import_from_the_project_root_and_pytests_pythonpath(
    tmp_path, monkeypatch, capsys
):
    """As under pytest: a factory module at the project's root, or in a ``pythonpath`` entry of
    ``[tool.pytest.ini_options]``, imports without the user touching ``sys.path``."""
    (tmp_path / "gbroot_models.py").write_text(MODELS)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "gbsrc_models.py").write_text(MODELS)
    write(
        tmp_path / "budgets/nets.toml",
        """
        [models.root]
        factory = "gbroot_models:linear"
        flops_max = "1M"

        [models.src]
        factory = "gbsrc_models:linear"
        flops_max = "1M"
        """,
    )
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\npythonpath = ["src"]\n'
        "[tool.graph_budget]\ncache_dir = '.cache'\n"
    )
    for name in ("gbroot_models", "gbsrc_models"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.chdir(tmp_path / "budgets")  # from a subdirectory, with the console script's path
    before = list(sys.path)
    assert cli.main(["check", "--json", "out.json"]) == 0, capsys.readouterr()
    found = models(tmp_path / "budgets" / "out.json")
    assert found["budgets/nets.toml::root"]["flops"] == FLOPS
    assert found["budgets/nets.toml::src"]["flops"] == FLOPS
    assert sys.path == before


def test_factories_import_alike_under_pytest_and_graph_budget_check(pytester, monkeypatch):
    """Parity, both ways: a package at the project's root (no conftest.py to put the root on
    ``sys.path``) and a module of a ``pythonpath`` entry import under ``pytest --graph-budget``
    exactly as under ``graph-budget check``; a module that exists nowhere fails in both."""
    package = pytester.path / "gbparity_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(MODELS)
    (pytester.path / "src").mkdir()
    (pytester.path / "src" / "gbparity_src.py").write_text(MODELS)
    write(
        pytester.path / "budgets/nets.toml",
        """
        [models.package]
        factory = "gbparity_pkg.models:linear"
        flops_max = "1M"

        [models.src]
        factory = "gbparity_src:linear"
        flops_max = "1M"

        [models.missing]
        factory = "gbparity_nowhere:linear"
        flops_max = "1M"
        """,
    )
    (pytester.path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\npythonpath = ["src"]\n'
        "[tool.graph_budget]\ncache_dir = '.cache'\n"
    )
    for name in ("gbparity_pkg", "gbparity_pkg.models", "gbparity_src"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    before = list(sys.path)
    result = pytester.runpytest("--graph-budget", "budgets/", "--graph-budget-json", "p.json")
    result.assert_outcomes(passed=2, failed=1)
    assert sys.path == before
    for name in ("gbparity_pkg", "gbparity_pkg.models", "gbparity_src"):
        sys.modules.pop(name, None)
    monkeypatch.chdir(pytester.path)
    assert cli.main(["check", "--json", "c.json"]) == 1
    assert sys.path == before
    under_pytest, under_check = models(pytester.path / "p.json"), models(pytester.path / "c.json")
    for node in ("budgets/nets.toml::package", "budgets/nets.toml::src"):
        assert under_pytest[node]["flops"] == under_check[node]["flops"] == FLOPS
    assert "gbparity_nowhere" in result.stdout.str()


def test_check_names_the_marker_tests_it_does_not_run(project, capsys):
    """User trial: ``check`` read "within budget" in a project whose marked tests it never
    ran, without a word. It names them, on stderr, and says what runs them."""
    write(project / "budgets/nets.toml", BUDGETS.split("[models.typo]")[0])
    write(project / "tests/test_marked.py", 'import pytest\n\n@pytest.mark.flops_max("1G")\n')
    write(project / "tests/test_plain.py", "def test_plain():\n    pass\n")
    write(project / "tests/.hidden/test_x.py", '@pytest.mark.flops_max("1G")\n')
    cli.main(["check"])
    err = capsys.readouterr().err
    assert (
        "graph-budget: note: 1 test file holds budget markers, which check does not run "
        "(tests/test_marked.py): run pytest --graph-budget for them"
    ) in err
    cli.main(["check", "budgets/nets.toml"])  # a path named: the user chose what to check
    assert "budget markers" not in capsys.readouterr().err


def test_check_names_the_budget_files_pytest_collects_and_it_does_not(project, capsys):
    """User trial: a budget file in ``tests/budgets/`` failed under ``pytest --graph-budget``
    (testpaths walks it) while ``check`` read "1 model within budget" without a word."""
    write(project / "budgets/nets.toml", BUDGETS.split("[models.typo]")[0])
    write(project / "tests/budgets/extra.toml", BUDGETS.split("[models.typo]")[0])
    write(project / "tests/data/other.toml", "[tool]\nname = 1\n")  # not under budgets/
    cli.main(["check"])
    assert (
        "graph-budget: note: 1 budget file under testpaths, which pytest --graph-budget "
        "checks, is outside check's budget paths (tests/budgets/extra.toml): name it, or add "
        "its folder to [tool.graph_budget] budgets"
    ) in capsys.readouterr().err
    cli.main(["check", "budgets/nets.toml"])  # a path named: the user chose what to check
    assert "outside check's budget paths" not in capsys.readouterr().err


def test_model_paths_are_the_roots_under_pytest_and_check_from_any_directory(pytester, monkeypatch):
    """User trial: a budget file's ``model`` path was looked for in the shell's directory.
    From ``tests/``, a folder at the root was an unknown model and ``yolov8n.pt`` silently
    became ultralytics' yolov8n (another model). Both read the root's files, as a ``factory``
    imports from the root, and a path that is not there is one line naming it."""
    import torch

    from pytest_graphbudget.zoo.ultralytics import import_ultralytics

    (pytester.path / "models").mkdir()
    torch.save(torch.nn.Linear(64, 32), pytester.path / "models/linear.pt")
    yolo = import_ultralytics().nn.tasks.DetectionModel(cfg="yolov8n.yaml", nc=3, verbose=False)
    torch.save({"ema": yolo}, pytester.path / "yolov8n.pt")
    yolo_params = sum(p.numel() for p in yolo.parameters())
    assert yolo_params != 3_157_200  # the zoo's yolov8n (80 classes), which it must not become
    write(
        pytester.path / "budgets/local.toml",
        """
        [models.linear]
        model = "models/linear.pt"
        trust_pickle = true
        input_shape = [4, 64]
        flops_max = "1M"

        [models.yolo]
        model = "yolov8n.pt"
        input_shape = [1, 3, 64, 64]
        params_max = "10M"
        trust_pickle = TRUST

        [models.gone]
        model = "weights/yolov8n.pt"
        params_max = "10M"
        """.replace("TRUST", "false" if ultralytics_safe_load() else "true"),  # torch 2.4: trusted
    )
    (pytester.path / "pyproject.toml").write_text(
        "[tool.pytest.ini_options]\n[tool.graph_budget]\ncache_dir = '.cache'\n"
    )
    (pytester.path / "tests").mkdir()
    monkeypatch.chdir(pytester.path / "tests")
    result = pytester.runpytest(
        "--graph-budget", "../budgets/local.toml", "--graph-budget-json", "p.json"
    )
    result.assert_outcomes(passed=2, failed=1)
    assert cli.main(["check", "../budgets/local.toml", "--json", "c.json"]) == 1
    for report in ("p.json", "c.json"):
        found = {
            entry["id"]: entry
            for entry in json.loads((pytester.path / "tests" / report).read_text())["models"]
        }
        linear = found["budgets/local.toml::linear"]["profile"]["totals"]
        assert (linear["flops"], linear["params"]) == (FLOPS, PARAMS), report
        assert found["budgets/local.toml::yolo"]["profile"]["totals"]["params"] == yolo_params
        assert found["budgets/local.toml::gone"]["error"] == (
            f"weights/yolov8n.pt: no such file or directory in the project's root "
            f"{pytester.path} (a model path in a budget file is relative to the root, wherever "
            "the run starts)"
        )


def test_a_factory_that_cannot_build_is_annotated_at_its_factory_line(project, monkeypatch, capsys):
    """User trial: the error of a factory naming a function its module lacks was annotated
    at the table's ``flops_max`` line (19 of their file), where the line to fix is ``factory``."""
    write(
        project / "budgets/gone.toml",
        '[models.gone]\nfactory = "checkmod_models:nope"\n\nflops_max = "1M"\n',
    )
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert cli.main(["check", "budgets/gone.toml"]) == 1
    (error,) = [a for a in capsys.readouterr().out.splitlines() if a.startswith("::error")]
    assert error.startswith("::error file=budgets/gone.toml,line=2,"), error
