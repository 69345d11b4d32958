"""Issue 21, the smaller things a user meets on the command line: a fresh ``init`` budget that
passes without warnings, ``check -q``, one exit code for usage errors, and an
``--input-shape`` echoed as written. Every command runs in process through ``cli.main``.

The model is ``nn.Linear(64, 32)`` on a ``(4, 64)`` input: 2*4*64*32 + 4*32 = 16,512 FLOPs,
4*64*32 = 8,192 MACs, 64*32 + 32 = 2,080 params.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from pytest_graphbudget import cli

MODULE = "climistakes_models"
MODELS = """
import torch
from pytest_graphbudget import ModelCase

def linear():
    print("building the linear model")  # what a model library prints while it builds
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name="linear")
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user project, its root the current directory."""
    (tmp_path / "pyproject.toml").write_text("[tool.graph_budget]\ncache_dir = '.cache'\n")
    (tmp_path / f"{MODULE}.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    monkeypatch.chdir(tmp_path)
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_a_fresh_init_budget_passes_without_a_warning(project, capsys):
    """With 10% headroom the FLOPs limit was 16,512 x 1.1 = 18,163, rounded up to "18.2k":
    16,512 / 18,200 = 90.7% of it, above the 90% warning line, so a fresh project opened
    with a warning. The default headroom keeps every figure below that line."""
    torch.save(torch.nn.Linear(64, 32), project / "tiny.pt")
    init = ["init", "tiny.pt", "--input-shape", "4,64", "--trust-pickle"]
    assert cli.main([*init, "-o", "budgets/models.toml"]) == 0
    assert cli.main(["check", "--json", "r.json"]) == 0
    out = capsys.readouterr().out
    report = json.loads((project / "r.json").read_text())
    (model,) = report["models"]
    assert model["verdict"] == "pass" and model["findings"] == [], model["findings"]
    assert report["summary"]["warn"] == 0 and "warn" not in out
    # Each limit init writes stands above today's figure / 90%; peak memory by hand: 8,320 B
    # of weights + 1,024 B input + 512 B output, all live at once = 9,856 B.
    figures = {"flops_max": 16_512, "macs_max": 8_192, "params_max": 2_080, "memory_max": 9_856}
    assert set(model["budget"]["limits"]) == set(figures)
    for key, figure in figures.items():
        assert figure / model["budget"]["limits"][key] < 0.9, key


def test_check_takes_q_and_then_keeps_what_models_print_off_stderr(project, capsys):
    (project / "budgets").mkdir()
    (project / "budgets/nets.toml").write_text(
        f'[models.lin]\nfactory = "{MODULE}:linear"\nflops_max = "1M"\n'
    )
    assert cli.main(["check", "--no-cache"]) == 0
    assert "building the linear model" in capsys.readouterr().err
    assert cli.main(["check", "-q", "--no-cache"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "1 model within budget" in captured.out  # the result is still on stdout


def test_check_usage_errors_exit_2_as_every_command(project, capsys):
    assert cli.main(["check", "nowhere"]) == 2
    assert cli.main(["check", "--no-such-flag"]) == 2
    assert cli.main(["profile", "--no-such-flag"]) == 2


def test_an_input_shape_of_the_wrong_rank_is_echoed_as_written(capsys):
    """resnet18 takes (batch, channels, height, width); torch read 1,3,224 as one unbatched
    image and blamed an input [1, 1, 3, 224] the user never wrote."""
    assert cli.main(["profile", "resnet18", "--input-shape", "1,3,224"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line == (
        "graph-budget: error: input shape 1,3,224 has 3 dimensions; the model's input has 4, "
        "such as 1,3,224,224"
    )


def test_inputs_too_large_for_memory_are_named_not_the_model(capsys):
    """User trial: ``--meta`` builds no weights, yet "could not load the model" blamed the model
    for a 6 TB input (10,000,000 x 3 x 224 x 224 float32 is 6.02e12 bytes)."""
    argv = ["profile", "resnet18", "--meta", "--input-shape", "10000000,3,224,224", "-q"]
    assert cli.main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("graph-budget: error: resnet18: out of memory while building")
    assert "--input-shape 10000000,3,224,224 is 6.02TB in float32" in line


def test_execution_from_the_flag_or_the_project_and_a_bad_one_exits_2_in_one_line(project, capsys):
    """``--execution compiled`` reaches the profile; without it, ``[tool.graph_budget]
    execution``; ``--execution jit`` is one line and exit 2, before any model is built."""
    model = f"{MODULE}:linear"
    assert cli.main(["profile", model, "--execution", "compiled", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["execution"] == "compiled"
    assert cli.main(["profile", model, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["execution"] == "eager"
    (project / "pyproject.toml").write_text('[tool.graph_budget]\nexecution = "compiled"\n')
    assert cli.main(["profile", model, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["execution"] == "compiled"
    assert cli.main(["profile", model, "--execution", "jit"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "graph-budget: error: execution in the command line must be 'eager' or 'compiled', "
        "got 'jit'"
    )


KNOWN = "known profiles: a100, "  # hardware.get's list of the known profiles starts so


@pytest.mark.parametrize("name", ["", "h10"])
def test_an_unknown_or_empty_hardware_is_one_line_and_exit_2_before_any_model(
    project, capsys, name
):
    """``--hardware ""`` silently priced on the project's hardware, and ``check --hardware
    h10`` exited 1 with one error per model: both are one line and exit 2, and no model is
    built (the factory prints as it builds)."""
    (project / "pyproject.toml").write_text('[tool.graph_budget]\nhardware = "a100"\n')
    (project / "budgets").mkdir()
    table = f'factory = "{MODULE}:linear"\nflops_max = "1M"\n'
    (project / "budgets/nets.toml").write_text(f"[models.a]\n{table}[models.b]\n{table}")
    assert cli.main(["profile", f"{MODULE}:linear", "--hardware", name]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    hint = " (did you mean 'h100'?)" if name else ""  # a near miss is named
    assert line.startswith(f"graph-budget: error: unknown hardware {name!r}{hint}; {KNOWN}"), line
    assert cli.main(["check", "--no-cache", "--hardware", name]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(
        f"graph-budget check: error: --hardware: unknown hardware {name!r}{hint};"
    )
    assert KNOWN in line and captured.out == ""
    assert cli.main(["check", "--no-cache", "-q", "--hardware", "A100-80GB"]) == 0  # an alias


def test_a_budget_table_that_inherits_a_broken_default_is_an_error_never_a_pass(project, capsys):
    """``[defaults]`` with ``hardware = ["h100"]`` and ``execution = "eager "``: the file's
    ``<defaults>`` failed, but its models were still judged (pass) on generic, eager. Each
    table left on a broken default is an error naming it; one that sets both itself runs."""
    (project / "budgets").mkdir()
    table = f'factory = "{MODULE}:linear"\nflops_max = "1M"\n'
    (project / "budgets/nets.toml").write_text(
        '[defaults]\nhardware = ["h100"]\nexecution = "eager "\n\n'
        f"[models.inherits]\n{table}"
        f'[models.own]\n{table}hardware = "h100"\nexecution = "eager"\n'
        f'[models.half]\n{table}hardware = "h100"\n'
    )
    assert cli.main(["check", "-q", "--no-cache", "--json", "r.json"]) == 1
    out = capsys.readouterr().out
    report = json.loads((project / "r.json").read_text())
    verdicts = {m["label"]: (m["verdict"], m["error"] or "") for m in report["models"]}
    assert verdicts["own"] == ("pass", "")
    bad_hw = "hardware in [defaults] of budgets/nets.toml: a profile name, got ['h100']"
    bad_exec = "execution in [defaults] of budgets/nets.toml must be 'eager' or 'compiled'"
    assert verdicts["inherits"][0] == "error" and bad_hw in verdicts["inherits"][1]
    assert bad_exec in verdicts["inherits"][1]
    assert verdicts["half"][0] == "error" and bad_exec in verdicts["half"][1]
    assert bad_hw not in verdicts["half"][1]  # it names its own hardware
    assert f"error: inherits: inherits a broken [defaults] setting: {bad_hw}" in out


def test_init_refuses_a_profile_only_its_hardware_file_defines(project, capsys):
    """The budget init wrote said ``hardware = "edge"``, which check and pytest (without
    --hardware-file) could not read: the very next command failed. The same profile in
    pyproject.toml is written and checked."""
    profile = "peak_tflops = {float32 = 2, float16 = 8}\nbandwidth_gbs = 50\n"
    (project / "hw.toml").write_text(f"[hardware.edge]\n{profile}")
    model = [f"{MODULE}:linear", "--hardware", "edge"]
    assert cli.main(["init", *model, "--hardware-file", "hw.toml"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "graph-budget: error: hardware 'edge' comes from --hardware-file hw.toml, which check "
        "and pytest do not read: define it in pyproject.toml as "
        "[tool.graph_budget.hardware_profiles.edge] instead (init, check and pytest all read "
        "that)"
    )
    assert not (project / "budgets").exists()
    # a built-in profile beside the file is fine: the budget names what check can read
    beside = ["--hardware", "t4", "--hardware-file", "hw.toml", "-o", "budgets/t4.toml"]
    assert cli.main(["init", f"{MODULE}:linear", *beside]) == 0
    (project / "pyproject.toml").write_text(
        f"[tool.graph_budget]\n[tool.graph_budget.hardware_profiles.edge]\n{profile}"
    )
    assert cli.main(["init", *model, "-o", "budgets/models.toml"]) == 0
    assert 'hardware = "edge"' in (project / "budgets/models.toml").read_text()
    assert cli.main(["check", "-q", "--no-cache"]) == 0


def test_an_error_in_a_hardware_file_names_the_file(project, capsys):
    """``hardware 'x': must be a table, got 5`` did not say which file; pyproject.toml's
    profile errors already did."""
    (project / "hw.toml").write_text("[hardware]\nx = 5\n")
    for command in (["hardware"], ["profile", f"{MODULE}:linear", "--hardware", "x"]):
        assert cli.main([*command, "--hardware-file", "hw.toml"]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line == "graph-budget: error: hw.toml: hardware 'x': must be a table, got 5"


def test_init_refuses_the_baseline_file(project, capsys):
    """User trial: ``init -o budgets/baseline.toml`` wrote budget tables into the baseline,
    which no run reads as budgets and ``check --update`` rewrites."""
    assert cli.main(["init", f"{MODULE}:linear", "-o", "budgets/baseline.toml"]) == 2
    assert capsys.readouterr().err == (
        "graph-budget: error: -o budgets/baseline.toml is the baseline file, which holds the "
        "measured figures, not budgets: write the budgets to another file, e.g. -o "
        "budgets/models.toml\n"
    )
    assert not (project / "budgets").exists()
    # a baseline configured under another name, the same
    (project / "pyproject.toml").write_text(
        "[tool.graph_budget]\ncache_dir = '.cache'\nbaseline = 'budgets/figures.toml'\n"
    )
    assert cli.main(["init", f"{MODULE}:linear", "-o", "budgets/figures.toml"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "graph-budget: error: -o budgets/figures.toml is the baseline file, set in "
        f"[tool.graph_budget] of {project / 'pyproject.toml'}, "
    )
    assert not (project / "budgets").exists()


def test_init_refuses_a_file_no_run_collects(project, capsys):
    """User trial: ``init -o budget/new.toml`` (a typo of budgets/) wrote a budget that
    neither check nor pytest --graph-budget ever reads. Configured budget paths are where
    it may go, and where the default goes."""
    assert cli.main(["init", f"{MODULE}:linear", "-o", "budget/new.toml"]) == 2
    assert capsys.readouterr().err == (
        "graph-budget: error: -o budget/new.toml is outside budgets/, where check and pytest "
        "--graph-budget collect budget files, so no run would check it: write it there (e.g. "
        "-o budgets/models.toml), or add its folder to [tool.graph_budget] budgets in "
        "pyproject.toml (with 'budgets': the paths there replace budgets/)\n"
    )
    assert cli.main(["init", f"{MODULE}:linear", "-o", "budgets/new.txt"]) == 2
    assert "-o budgets/new.txt: a budget file is a *.toml file" in capsys.readouterr().err
    assert not (project / "budget").exists() and not (project / "budgets").exists()
    (project / "pyproject.toml").write_text(
        "[tool.graph_budget]\ncache_dir = '.cache'\nbudgets = ['budget']\n"
    )
    assert cli.main(["init", f"{MODULE}:linear", "-q", "-o", "budget/new.toml"]) == 0
    assert cli.main(["init", f"{MODULE}:linear", "-q", "-o", "budgets/models.toml"]) == 2
    assert "outside [tool.graph_budget] budgets (budget)," in capsys.readouterr().err
    (project / "budget/new.toml").unlink()
    assert cli.main(["init", f"{MODULE}:linear", "-q"]) == 0  # the default: budget/models.toml
    assert cli.main(["check", "-q", "--no-cache", "--json", "r.json"]) == 0
    (model,) = json.loads((project / "r.json").read_text())["models"]
    assert model["id"] == f"budget/models.toml::{MODULE}:linear"


def test_profiles_one_name_could_not_reach_are_refused_and_a_files_profile_wins_in_any_case(
    project, capsys
):
    """Names match in any case: ``edge`` and ``Edge``, or one alias of two profiles, left one
    profile unreachable (only Python refused them); a ``--hardware-file`` profile ``MyHop``
    lost to the project's ``myhop``. And ``--hardware`` is no prefix of ``--hardware-file``."""
    card = "peak_tflops = {{ float32 = {} }}\nbandwidth_gbs = {}\n"
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        "[tool.graph_budget.hardware_profiles.edge]\n" + card.format(4, 100)
        + "[tool.graph_budget.hardware_profiles.Edge]\n" + card.format(1, 30)
    )  # fmt: skip
    assert cli.main(["hardware"]) == 2
    assert "names are matched in any case" in capsys.readouterr().err
    pyproject.write_text(
        "[tool.graph_budget.hardware_profiles.fast]\naliases = ['prod']\n" + card.format(4, 100)
        + "[tool.graph_budget.hardware_profiles.slow]\naliases = ['PROD']\n" + card.format(1, 30)
    )  # fmt: skip
    assert cli.main(["hardware"]) == 2
    assert "both give the alias 'PROD'" in capsys.readouterr().err
    pyproject.write_text("[tool.graph_budget.hardware_profiles.myhop]\n" + card.format(60, 800))
    (project / "case.toml").write_text("[hardware.MyHop]\n" + card.format(6, 80))
    assert cli.main(["hardware", "--hardware-file", "case.toml", "--format", "json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert "myhop" not in rows and rows["MyHop"]["ridge_point"] == pytest.approx(6e12 / 80e9)
    aliased = "[hardware.other]\naliases = ['MYHOP']\n" + card.format(1, 9)
    (project / "alias.toml").write_text(aliased)
    assert cli.main(["hardware", "--hardware-file", "alias.toml"]) == 2
    assert "alias 'MYHOP' is the name of the profile 'myhop'" in capsys.readouterr().err
    assert cli.main(["hardware", "--hardware", "h100"]) == 2
    assert "unrecognized arguments: --hardware h100" in capsys.readouterr().err


def test_the_hardware_listing_names_each_profile_by_what_reaches_it(tmp_path, monkeypatch, capsys):
    """A user's ``4090`` takes the shipped rtx4090's alias, and a user's ``H100`` shadows the
    shipped h100 by name: the listing had still shown ``rtx4090 (4090)`` and dropped the
    shipped H100, which ``h100-sxm`` still reaches."""
    (tmp_path / "pyproject.toml").write_text(
        "[tool.graph_budget.hardware_profiles.4090]\n"  # the alias priced as the family is
        'peak_tflops = { float32 = 80, float16 = 160 }\nbandwidth_gbs = 1000\nfamily = "ada"\n'
        "[tool.graph_budget.hardware_profiles.H100]\n"
        "peak_tflops = { float32 = 60 }\nbandwidth_gbs = 3000\nlaunch_us = 4\n"
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["hardware", "--format", "json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["rtx4090"]["aliases"] == [] and rows["4090"]["bandwidth"] == 1000e9
    assert rows["H100"]["bandwidth"] == 3000e9 and "h100" not in rows
    # NVIDIA's H100 SXM5 datasheet: 3,350 GB/s, under the alias that still reaches it
    assert rows["h100-sxm"]["bandwidth"] == 3350e9 and rows["h100-sxm"]["aliases"] == []
    from pytest_graphbudget.hardware import get, project_profiles

    for name, row in rows.items():  # every listed name and alias reaches that profile
        for alias in (name, *row["aliases"]):
            found = get(alias, project_profiles(tmp_path))
            assert (found.description, found.bandwidth) == (row["description"], row["bandwidth"])


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('family = "ada"\n', "unknown top-level key 'family'; a hardware file holds"),
        ("[hardwre.x2]\nbandwidth_gbs = 1\n", "unknown top-level table 'hardwre' (did you mean"),
    ],
)
def test_a_hardware_file_key_outside_its_profile_is_refused(text, says, tmp_path, capsys):
    """User trial: ``family = "ada"`` above ``[hardware.x1]`` was dropped, and x1 priced as a
    bare roofline (126 us where the family gives 876 us); a misspelt ``[hardwre.x2]`` was
    dropped too, and ``--hardware x2`` was "unknown" with no word of the table."""
    good = "[hardware.x1]\npeak_tflops = { float32 = 80, float16 = 160 }\nbandwidth_gbs = 1000\n"
    (tmp_path / "hw.toml").write_text(text + good)
    argv = ["hardware", "--hardware-file", str(tmp_path / "hw.toml")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err


def test_a_hardware_file_that_is_not_utf8_is_one_line(tmp_path, capsys):
    """User trial: a byte 0xff in a hardware file ended in a UnicodeDecodeError traceback."""
    (tmp_path / "hw.toml").write_bytes(b"[hardware.x1]\ndescription = '\xff'\n")
    assert cli.main(["hardware", "--hardware-file", str(tmp_path / "hw.toml")]) == 2
    err = capsys.readouterr().err.strip()
    assert "not valid TOML (not UTF-8 text)" in err and len(err.splitlines()) == 1, err


def test_a_model_that_calls_sys_exit_is_an_error_of_that_model(project, capsys):
    """User trial: ``sys.exit(0)`` in a factory or a forward ended ``graph-budget check``
    with exit 0, no report and no row: the model over its budget beside it was lost too."""
    with (project / f"{MODULE}.py").open("a") as module:
        module.write(
            "\ndef exits():\n    raise SystemExit(0)\n"
            "\nclass Quits(torch.nn.Module):\n    def forward(self, x):\n"
            "        raise SystemExit(0)\n"
            "\ndef quits():\n    return Quits(), (torch.randn(1, 4),)\n"
        )
    (project / "budgets").mkdir()
    (project / "budgets" / "models.toml").write_text(
        f'[models.linear]\nfactory = "{MODULE}:linear"\nflops_max = "1k"\n\n'
        f'[models.exits]\nfactory = "{MODULE}:exits"\nflops_max = "1G"\n\n'
        f'[models.quits]\nfactory = "{MODULE}:quits"\nflops_max = "1G"\n'
    )
    assert cli.main(["check", "--json", "r.json"]) == 1
    verdicts = {m["label"]: m for m in json.loads((project / "r.json").read_text())["models"]}
    assert verdicts["linear"]["verdict"] == "fail"  # 16,512 FLOPs over 1k
    assert "raised SystemExit: 0" in verdicts["exits"]["error"]
    assert "the model's code called sys.exit(0)" in verdicts["quits"]["error"]
    capsys.readouterr()
    assert cli.main(["profile", f"{MODULE}:quits"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("called sys.exit(0)")


def test_a_report_never_replaces_a_file_the_command_reads(project, capsys):
    """User trial: ``check --json budgets/models.toml`` replaced the budget with its report,
    ``--history`` appended JSON lines to it, ``merge r.json --junit r.json`` overwrote the
    shard's report, ``history h.jsonl --html h.jsonl`` the history: each exit 0. And a report
    path that is a directory was said on stdout after every model had been profiled."""
    budget = project / "budgets" / "models.toml"
    budget.parent.mkdir()
    budget.write_text(f'[models.linear]\nfactory = "{MODULE}:linear"\nflops_max = "20k"\n')
    text = budget.read_text()
    assert cli.main(["check", "--json", "r.json", "--history", "h.jsonl"]) == 0
    (project / "folder").mkdir()
    capsys.readouterr()
    for argv, option in [
        (["check", "--json", "budgets/models.toml"], "--json budgets/models.toml"),
        (["check", "--history", "budgets/models.toml"], "--history budgets/models.toml"),
        (["merge", "r.json", "--junit", "r.json"], "--junit r.json"),
        (["history", "h.jsonl", "--html", "h.jsonl"], "--html h.jsonl"),
        (["compare", "r.json", "r.json", "-o", "r.json"], "--output r.json"),
    ]:
        assert cli.main(argv) == 2, argv
        captured = capsys.readouterr()
        assert f"{option} is a file this command reads" in captured.err, argv
        assert len(captured.err.strip().splitlines()) == 1 and not captured.out, argv
    assert budget.read_text() == text
    assert cli.main(["check", "--junit", "folder"]) == 2
    captured = capsys.readouterr()
    assert "is a directory" in captured.err and "building the linear" not in captured.err


def test_list_reads_its_format_from_the_output_like_every_command(project, capsys):
    """User trial: ``list resnet18 --format csv -o l.json`` wrote CSV into l.json, exit 0,
    where profile, compare and hardware refuse the contradiction; and ``-o l.json`` alone
    wrote a table."""
    assert cli.main(["list", "resnet18", "--format", "csv", "-o", "l.json"]) == 2
    assert "--format csv with -o l.json" in capsys.readouterr().err
    assert cli.main(["list", "resnet18", "-o", "l.json"]) == 0
    assert json.loads((project / "l.json").read_text())["torchvision"] == ["resnet18"]


def test_init_says_nothing_was_written_when_one_of_its_models_fails(project, capsys):
    """User trial: ``init resnet18 nets:Net`` where Net cannot load said only why Net failed;
    resnet18, profiled, was not written either."""
    argv = ["init", f"{MODULE}:linear", f"{MODULE}:missing", "-o", "budgets/new.toml"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{MODULE}:missing" in err, err
    assert err.endswith(f"; nothing written: fix {MODULE}:missing or leave it out"), err
    assert not (project / "budgets" / "new.toml").exists()


def test_an_output_that_names_a_folder_is_refused_before_any_model(project, capsys):
    """User trial: ``profile resnet18 -o out/`` and ``check --junit out/`` wrote a file named
    ``out``, and said so."""
    (project / "budgets").mkdir()
    (project / "budgets" / "nets.toml").write_text(
        f'[models.net]\nfactory = "{MODULE}:linear"\nflops_max = "1M"\n'
    )
    for argv in (["profile", "resnet18", "-o", "out/"], ["check", "budgets", "--junit", "out/"]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].endswith("out/ names a folder: give a file name in it"), err
        assert "loading" not in " ".join(err) and not (project / "out").exists(), argv


def test_a_python_file_alone_asks_which_of_its_names_builds_the_model(project, capsys):
    """User trial: ``profile models.py`` said the file was not a model the zoo can load (a .pt
    file, a YOLO .yaml ...expected), without the ``module:NAME`` form that loads one."""
    assert cli.main(["profile", f"{MODULE}.py"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(
        f"{MODULE}.py: which function or class builds the model? name the module, not its "
        f"file: '{MODULE}:NAME' (importable from the current folder, the project's root or "
        "its [tool.pytest.ini_options] pythonpath)"
    ), err
    assert cli.main(["profile", "missing.py"]) == 2  # no such file: the zoo's message
    assert "missing.py: no such file or directory" in capsys.readouterr().err


@pytest.mark.parametrize("written", [f"{MODULE}.py:linear", "ABSOLUTE", f"./{MODULE}.py:linear"])
def test_a_file_named_where_a_module_goes_says_the_module_to_write(project, capsys, written):
    """User trial: ``profile models.py:build`` failed as "No module named 'models.py'", and
    with an absolute path as "no such file or directory" for a file that exists."""
    spec = f"{project / MODULE}.py:linear" if written == "ABSOLUTE" else written
    assert cli.main(["profile", spec]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after "loading ..."
    assert err.endswith(
        f"{spec}: name the module, not its file: '{MODULE}:linear' (importable "
        "from the current folder, the project's root or its "
        "[tool.pytest.ini_options] pythonpath)"
    ), err
    # a budget table's factory says the same
    (project / "budgets").mkdir()
    (project / "budgets" / "nets.toml").write_text(
        f'[models.net]\nfactory = "{MODULE}.py:linear"\nflops_max = "1M"\n'
    )
    assert cli.main(["check", "budgets"]) != 0
    assert f"name the module, not its file: '{MODULE}:linear'" in capsys.readouterr().out
