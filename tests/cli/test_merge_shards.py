"""``graph-budget merge``: three shards' JSON reports give one unsharded run's verdict and
reports (issue 24, item 2).

Each shard is a real pytest run (a subset of the paths, or ``-k``); the reference is one real
run of them all. Models, ``nn.Linear(64, n)`` on a ``(4, 64)`` input, each under
``flops_max = "20k"``:
  narrow: 2*4*64*16 + 4*16 =  8,256 FLOPs  -> pass
  mid:    2*4*64*32 + 4*32 = 16,512 FLOPs  -> pass
  wide:   2*4*64*64 + 4*64 = 33,024 FLOPs  -> fail (over 20,000)
  the marked test ``tests/test_merge_marked.py::test_fits`` profiles narrow: 8,256 -> pass
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_graphbudget import cli

MODELS = """
import torch
from pytest_graphbudget import ModelCase

def linear(n):
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, n), (torch.randn(4, 64),), name=f"linear{n}")

def narrow():
    return linear(16)

def mid():
    return linear(32)

def wide():
    return linear(64)
"""

SHARDS = ("narrow", "mid", "wide")

MARKED = """
import pytest
from models import narrow

@pytest.fixture
def model():
    return narrow()

@pytest.mark.flops_max("20k")
def test_fits(model):
    pass

def test_plain():
    pass
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(models=MODELS)
    (pytester.path / "budgets").mkdir()
    for name in SHARDS:
        budget = f'[models.{name}]\nfactory = "models:{name}"\nflops_max = "20k"\n'
        (pytester.path / "budgets" / f"{name}.toml").write_text(budget)
    pytester.syspathinsert()
    return pytester


def run_shard(pytester: pytest.Pytester, out: str, *paths: str) -> pytest.RunResult:
    done = pytester.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", f"--graph-budget-json={out}", *paths
    )
    assert (pytester.path / out).exists()
    return done


def load(path: Path) -> dict:
    document = json.loads(path.read_text("utf-8"))
    del document["tool"]  # the same tool either way; nothing else is wall-clock
    return document


def without_time(text: str) -> str:
    """A JUnit file with its wall-clock attributes blanked (the only thing that may differ)."""
    return re.sub(r' (time|timestamp|hostname)="[^"]*"', "", text)


def test_three_shards_merge_into_the_unsharded_run(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project.path / "tests").mkdir()
    (project.path / "tests" / "test_merge_marked.py").write_text(MARKED)
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE", "GITHUB_SHA"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(project.path)
    reports = ("--graph-budget-junit=all.xml", "--graph-budget-markdown=all.md")
    run_shard(project, "all.json", "budgets", "tests", *reports, "--graph-budget-html=all.html")
    # three shards: two by paths, one by -k; each draws its graphs (an HTML report asked)
    run_shard(project, "s1.json", "budgets/narrow.toml", "tests", "--graph-budget-html=1.html")
    run_shard(project, "s2.json", "budgets/mid.toml", "--graph-budget-html=2.html")
    run_shard(project, "s3.json", "budgets", "-k", "wide", "--graph-budget-html=3.html")
    merged = ["--json", "m.json", "--junit", "m.xml", "--markdown", "m.md", "--html", "m.html"]
    expect = ["--expect", "budgets", "--expect", "tests"]
    assert cli.main(["merge", "s1.json", "s2.json", "s3.json", *expect, *merged]) == 1
    doc, unsharded = load(project.path / "m.json"), load(project.path / "all.json")
    ids = [m["id"] for m in doc["models"]]
    assert ids == sorted(ids) and len(ids) == 4
    assert [m["verdict"] for m in doc["models"]] == ["pass", "pass", "fail", "pass"]
    assert doc == unsharded  # every figure, finding, title and summary
    assert doc["summary"] | {"pass": 3, "fail": 1} == doc["summary"]
    text = {p: (project.path / p).read_text("utf-8") for p in ("m.md", "all.md")}
    assert text["m.md"] == text["all.md"] and doc["title"] in text["m.md"]
    xml = {p: without_time((project.path / p).read_text("utf-8")) for p in ("m.xml", "all.xml")}
    assert xml["m.xml"] == xml["all.xml"]
    suite = ET.parse(project.path / "m.xml").getroot()
    assert sum(int(s.get("failures", 0)) for s in suite.iter("testsuite")) == 1
    page, whole = ((project.path / p).read_text("utf-8") for p in ("m.html", "all.html"))
    assert page.count('class="graph" data-nodes=') == 4  # each model's graph drawn
    assert page.count("data-verdict=") == whole.count("data-verdict=") >= 4
    assert page == whole


def test_merge_github_writes_what_the_unsharded_run_writes_in_actions(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE", "GITHUB_SHA"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(project.path)
    for name in SHARDS:
        run_shard(project, f"{name}.json", f"budgets/{name}.toml")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(project.path / "unsharded-summary.md"))
    done = run_shard(project, "all.json", "budgets", "--graph-budget-markdown=all.md")
    unsharded = [line for line in done.outlines if line.startswith("::")]
    # no baseline file: one ::warning; wide is over its budget: one ::error at its limit's
    # line (line 3 of wide.toml)
    assert [a.split("::")[1] for a in unsharded] == [
        "warning title=Graph budget%3A no baseline",
        "error file=budgets/wide.toml,line=3,title=Graph budget%3A wide over budget",
    ]
    monkeypatch.delenv("GITHUB_ACTIONS")  # --github alone asks for it
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(project.path / "merged-summary.md"))
    capsys.readouterr()
    shards = [f"{name}.json" for name in SHARDS]
    assert cli.main(["merge", *shards, "--github", "--markdown", "m.md"]) == 1
    merged = [line for line in capsys.readouterr().out.splitlines() if line.startswith("::")]
    assert merged == unsharded
    summary = (project.path / "merged-summary.md").read_text("utf-8")
    assert summary == (project.path / "unsharded-summary.md").read_text("utf-8")
    assert summary.rstrip("\n") == (project.path / "m.md").read_text("utf-8").rstrip("\n")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert cli.main(["merge", *shards, "--github"]) == 2
    assert "GITHUB_STEP_SUMMARY" in capsys.readouterr().err
    # User trial: the project a folder of the checkout, merged from another folder: the
    # annotations named files from the merge's folder. The shards say where their root is.
    monkeypatch.setenv("GITHUB_WORKSPACE", str(project.path.parent))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(project.path / "elsewhere.md"))
    for shard in shards:
        moved = load(project.path / shard) | {"root": project.path.name}
        (project.path / shard).write_text(json.dumps(moved))
    (project.path / "out").mkdir()
    monkeypatch.chdir(project.path / "out")
    assert cli.main(["merge", *(f"../{s}" for s in shards), "--github"]) == 1
    (error,) = [a for a in capsys.readouterr().out.splitlines() if a.startswith("::error")]
    at = f"file={project.path.name}/budgets/wide.toml,line=3,title=Graph budget%3A wide over"
    assert error.startswith(f"::error {at} budget::"), error


def test_a_variant_tables_model_is_its_items_in_a_merge(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table with a dtype reports its model as ``narrow@bfloat16`` under the item
    ``narrow``: merging its run alone said it kept that item and never ran it (not run)."""
    monkeypatch.chdir(project.path)
    table = (project.path / "budgets" / "narrow.toml").read_text()
    (project.path / "budgets" / "narrow.toml").write_text(table + 'dtype = "bfloat16"\n')
    run_shard(project, "v.json", "budgets/narrow.toml").assert_outcomes(passed=1)
    assert [m["id"] for m in load(project.path / "v.json")["models"]] == [
        "budgets/narrow.toml::narrow@bfloat16"
    ]
    assert cli.main(["merge", "v.json"]) == 0


def test_two_different_copies_of_a_model_are_an_error(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(project.path)
    run_shard(project, "a.json", "budgets/narrow.toml")
    # the same model under a tighter limit: 8,256 FLOPs over 5k, a different verdict
    budget = project.path / "budgets" / "narrow.toml"
    budget.write_text(budget.read_text().replace('"20k"', '"5k"'))
    run_shard(project, "b.json", "budgets/narrow.toml")
    capsys.readouterr()
    assert cli.main(["merge", "a.json", "b.json", "--json", "m.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "budgets/narrow.toml::narrow differs" in err, err
    assert not (project.path / "m.json").exists()


def test_a_model_in_two_shards_is_one_row(project: pytest.Pytester) -> None:
    run_shard(project, "a.json", "budgets/narrow.toml", "budgets/mid.toml")
    run_shard(project, "b.json", "budgets/mid.toml")
    out = project.path / "m.json"
    paths = [str(project.path / "a.json"), str(project.path / "b.json")]
    assert cli.main(["merge", *paths, "--json", str(out)]) == 0
    assert [m["id"] for m in load(out)["models"]] == sorted(
        m["id"] for m in load(project.path / "a.json")["models"]
    )
    assert load(out)["summary"]["models"] == 2


def test_one_model_from_two_runners_is_one_row_with_its_graph(project: pytest.Pytester) -> None:
    """Two shards that both profiled narrow: their traces took different wall-clock times (as
    on two runners) and only one drew the graph; the figures agree, so it is one row."""
    run_shard(project, "a.json", "budgets/narrow.toml")
    run_shard(project, "b.json", "budgets/narrow.toml", "--graph-budget-html=b.html")
    b = json.loads((project.path / "b.json").read_text("utf-8"))
    b["models"][0]["profile"]["trace"]["seconds"] += 1.5  # another runner's clock
    (project.path / "b.json").write_text(json.dumps(b))
    out = project.path / "m.json"
    paths = [str(project.path / "a.json"), str(project.path / "b.json")]
    assert cli.main(["merge", *paths, "--json", str(out)]) == 0
    (row,) = load(out)["models"]
    assert row["graph_svg"] == b["models"][0]["graph_svg"] and row["graph_svg"].startswith("<svg")


def test_not_a_report_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"schema": "other/1"}')
    assert cli.main(["merge", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "schema 'other/1'" in err, err
    assert cli.main(["merge", str(tmp_path / "missing.json")]) == 2


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ({}, "no models list"),
        ({"models": None}, "no models list"),
        ({"models": [{}]}, "no models list"),
        ({"models": [{"id": "a.toml::a"}]}, "model 'a.toml::a' is not a whole report entry"),
        # user trial: a hand-edited figure was a ValueError or TypeError traceback
        (
            {"models": [{"id": "a.toml::a", "profile": {"totals": {"flops": float("nan")}}}]},
            "model 'a.toml::a': profile's totals.flops is NaN, not a number",
        ),
        (
            {"models": [{"id": "a.toml::a", "profile": {"totals": {"flops": "x"}}}]},
            "model 'a.toml::a': profile's totals.flops is \"x\", not a number",
        ),
    ],
)
def test_a_truncated_report_is_one_line(tmp_path, capsys, document, says) -> None:
    """A report cut short (a shard killed while writing, a hand edit) had been a traceback
    (KeyError: 'models') and exit 1, which reads as "over budget"."""
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"schema": "graphbudget.report/1", **document}))
    assert cli.main(["merge", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err and str(bad) in err, err


def test_a_merge_that_cannot_write_says_so_once_and_exits_2(project, monkeypatch, capsys):
    run_shard(project, "a.json", "budgets/narrow.toml")
    monkeypatch.chdir(project.path)
    (project.path / "taken").write_text("a file, not a folder")
    capsys.readouterr()
    assert cli.main(["merge", "a.json", "--json", "taken/m.json"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("graph-budget: cannot write taken/m.json: "), err


def test_a_merge_output_that_names_a_folder_is_refused(tmp_path, monkeypatch, capsys):
    """``merge --json out/`` would write a file named ``out``, as the plugin's reports had."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["merge", "a.json", "--html", "out/"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("--html out/ names a folder: give a file name in it")
    )
    assert not (tmp_path / "out").exists()


def test_shards_that_checked_nothing_merge_to_a_failure(tmp_path, monkeypatch, capsys):
    """Every shard ran without a budgeted test (budget files in a folder nobody passed):
    the merge had said "no model was checked" in a note, and exited 0."""
    monkeypatch.chdir(tmp_path)
    empty = {"schema": "graphbudget.report/1", "models": [], "stale_baseline": []}
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(empty))
    assert cli.main(["merge", "a.json", "b.json", "--json", "m.json"]) == 1
    assert "error: no model was checked in a.json, b.json" in capsys.readouterr().err
    merged = load(tmp_path / "m.json")
    assert merged["passed"] is None and merged["title"] == "no model was checked"


def test_expect_names_the_module_it_cannot_collect(project, monkeypatch, capsys) -> None:
    """A test module that does not import: the line had been pytest's count ("12 tests
    collected, 1 error in 3.73s"), naming neither the module nor why."""
    (project.path / "tests").mkdir()
    (project.path / "tests" / "test_broken.py").write_text("import no_such_module\n")
    (project.path / "a.json").write_text(
        json.dumps({"schema": "graphbudget.report/1", "models": [], "stale_baseline": []})
    )
    monkeypatch.chdir(project.path)
    assert cli.main(["merge", "a.json", "--expect", "tests"]) == 2
    assert capsys.readouterr().err.strip() == (
        "graph-budget: error: --expect tests: cannot collect: tests/test_broken.py: "
        "ModuleNotFoundError: No module named 'no_such_module'"
    )
    # user trial: a misspelt path was pytest's own ERROR line, a blank, then ours
    assert cli.main(["merge", "a.json", "--expect", "tets/"]) == 2
    assert capsys.readouterr().err == (
        "graph-budget: error: --expect tets/: no such file or directory\n"
    )


def test_a_missing_shard_is_an_error(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_shard(project, "a.json", "budgets/narrow.toml")
    run_shard(project, "b.json", "budgets/mid.toml")  # the shard with wide never ran
    monkeypatch.chdir(project.path)
    paths = ["a.json", "b.json"]
    assert cli.main(["merge", *paths, "--json", "m.json"]) == 0  # nothing listed: nothing missed
    assert cli.main(["merge", *paths, "--expect", "budgets", "--json", "m.json"]) == 1
    rows = {m["id"]: m for m in load(project.path / "m.json")["models"]}
    assert rows["budgets/wide.toml::wide"]["verdict"] == "error"
    assert rows["budgets/wide.toml::wide"]["error"].startswith("not run")
    assert rows["budgets/narrow.toml::narrow"]["verdict"] == "pass"


def test_expect_collects_the_tests_with_budget_markers(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project.path / "tests").mkdir()
    (project.path / "tests" / "test_merge_marked.py").write_text(MARKED)
    monkeypatch.chdir(project.path)
    run_shard(project, "a.json", "budgets")  # the shard with the marked test never ran
    paths = ["a.json", "--expect", "budgets", "--expect", "tests", "--json", "m.json"]
    assert cli.main(["merge", *paths]) == 1
    rows = {m["id"]: m for m in load(project.path / "m.json")["models"]}
    marked = rows["tests/test_merge_marked.py::test_fits"]
    assert marked["verdict"] == "error" and marked["error"].startswith("not run")
    assert "tests/test_merge_marked.py::test_plain" not in rows  # no budget: not a model
    assert len(rows) == 4
    run_shard(project, "b.json", "tests")
    assert cli.main(["merge", "a.json", "b.json", *paths[1:]]) == 1  # wide fails, none missing
    assert load(project.path / "m.json")["summary"]["error"] == 0


def test_expect_collects_in_this_process_under_addopts_n_auto(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project whose addopts start xdist workers: --expect still sees every model."""
    pytest.importorskip("xdist")
    project.makepyprojecttoml('[tool.pytest.ini_options]\naddopts = "-n 2"\n')
    monkeypatch.chdir(project.path)
    (project.path / "a.json").write_text(
        json.dumps({"schema": "graphbudget.report/1", "models": [], "stale_baseline": []})
    )
    assert cli.main(["merge", "a.json", "--expect", "budgets", "--json", "m.json"]) == 1
    assert load(project.path / "m.json")["summary"]["error"] == 3  # narrow, mid, wide: not run


def test_the_merged_reports_say_what_the_shards_were_measured_in(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Shards ran on runners, not on the machine that merges: the merged JSON and comment
    carry the shards' environment and commit; shards with different counters, or of two
    commits, are no one report (a user trial: a re-run's shard beside the last push's merged
    green, a model made heavier judged on the old figures)."""
    import subprocess

    monkeypatch.chdir(project.path)
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "models"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *command], check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    run_shard(project, "a.json", "budgets/narrow.toml")
    run_shard(project, "b.json", "budgets/mid.toml")
    assert load(project.path / "a.json")["commit"] == head.strip()
    for name in ("a.json", "b.json"):  # a runner's Python, not this one's
        shard = json.loads((project.path / name).read_text("utf-8"))
        shard["environment"]["python"] = "3.99.1"
        (project.path / name).write_text(json.dumps(shard))
    assert cli.main(["merge", "a.json", "b.json", "--json", "m.json", "--markdown", "m.md"]) == 0
    assert load(project.path / "m.json")["environment"]["python"] == "3.99.1"
    assert load(project.path / "m.json")["commit"] == head.strip()
    assert "3.99.1" in (project.path / "m.md").read_text("utf-8")
    older = json.loads((project.path / "b.json").read_text("utf-8")) | {"commit": "f" * 40}
    (project.path / "old.json").write_text(json.dumps(older))
    capsys.readouterr()
    assert cli.main(["merge", "a.json", "old.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("old.json at ffffffffffff: shards must run at one commit"), err
    shard = json.loads((project.path / "b.json").read_text("utf-8"))
    shard["environment"]["torch"] = "2.0.0"
    (project.path / "b.json").write_text(json.dumps(shard))
    capsys.readouterr()
    assert cli.main(["merge", "a.json", "b.json", "--json", "m2.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "b.json with 2.0.0" in err, err
    assert not (project.path / "m2.json").exists()


def test_shards_run_with_different_settings_are_no_one_report(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """One shard's job given ``--graph-budget-hardware a100`` prices its models on that card,
    the other's on generic: merged, every latency verdict was another rule's, and it merged
    green. A shard given ``--graph-budget-strict`` beside a loose one is refused the same way."""
    monkeypatch.chdir(project.path)
    run_shard(project, "a.json", "budgets/narrow.toml")
    run_shard(project, "b.json", "budgets/mid.toml", "--graph-budget-hardware", "a100")
    assert load(project.path / "a.json")["settings"] == {
        "strict": False, "hardware": None, "breaks": False, "base": None
    }  # fmt: skip
    capsys.readouterr()
    assert cli.main(["merge", "a.json", "b.json", "--json", "m.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err], err
    assert err.endswith(
        "a.json ran with --graph-budget-hardware None and b.json with 'a100': shards must run "
        "with the same settings"
    ), err
    assert not (project.path / "m.json").exists()
    run_shard(project, "b.json", "budgets/mid.toml", "--graph-budget-strict")
    assert cli.main(["merge", "a.json", "b.json"]) == 2
    assert "--graph-budget-strict False and b.json with True" in capsys.readouterr().err
    run_shard(project, "b.json", "budgets/mid.toml")
    assert cli.main(["merge", "a.json", "b.json", "--json", "m.json"]) == 0
    assert load(project.path / "m.json")["settings"]["hardware"] is None


# A splitter as pytest-split's: after every other plugin's modifyitems (trylast), it keeps the
# group's items (round robin here) and deselects the rest through pytest_deselected.
SPLITTER = """
import pytest

def pytest_addoption(parser):
    parser.addoption("--splits", type=int)
    parser.addoption("--group", type=int)

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    splits, group = config.getoption("splits"), config.getoption("group")
    if not splits:
        return
    kept = [item for i, item in enumerate(items) if i % splits == group - 1]
    gone = [item for item in items if item not in kept]
    items[:] = kept
    config.hook.pytest_deselected(items=gone)
"""

SPLIT_TESTS = """
import pytest
from models import narrow

@pytest.fixture
def model():
    return narrow()

@pytest.mark.flops_max("20k")
def test_fits(model):
    pass

@pytest.mark.flops_max("20k")
def test_skipped(model):
    pytest.skip("needs a GPU")

def test_plain():
    pass
"""

# Collected in this order: the budget files (sorted), then the tests. Round robin over three
# groups: 1 mid, test_fits; 2 narrow, test_skipped; 3 wide, test_plain (no budget).
MID, NARROW, WIDE = (f"budgets/{n}.toml::{n}" for n in ("mid", "narrow", "wide"))
FITS, SKIPPED = "tests/test_split_models.py::test_fits", "tests/test_split_models.py::test_skipped"
BUDGETED = sorted([MID, NARROW, WIDE, FITS, SKIPPED])


@pytest.fixture
def split(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    project.makeconftest(SPLITTER)
    (project.path / "tests").mkdir()
    (project.path / "tests" / "test_split_models.py").write_text(SPLIT_TESTS)
    wide = project.path / "budgets" / "wide.toml"  # 33,024 FLOPs: under 40k, every model passes
    wide.write_text(wide.read_text().replace('"20k"', '"40k"'))
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(project.path)
    return project


def test_each_shard_lists_what_it_collected_and_merge_needs_every_shard(
    split: pytest.Pytester, capsys: pytest.CaptureFixture
) -> None:
    """Issue 35: two of three shards merged without --expect were green, the third's model
    absent. Each shard's JSON lists every budgeted item it collected before the splitter
    deselected the others', so merge knows what the missing shard had to run."""
    for group in (1, 2, 3):
        run_shard(split, f"s{group}.json", "budgets", "tests", "--splits=3", f"--group={group}")
    deselected = {1: [NARROW, WIDE, SKIPPED], 2: [MID, WIDE, FITS], 3: [MID, NARROW, FITS, SKIPPED]}
    for group, gone in deselected.items():
        shard = load(split.path / f"s{group}.json")
        assert shard["collected_budget_nodeids"] == BUDGETED
        assert shard["deselected_budget_nodeids"] == gone
    capsys.readouterr()
    # All three: green; the skipped test ran in its shard (a skip is no missing shard).
    assert cli.main(["merge", "s1.json", "s2.json", "s3.json", "--json", "m.json"]) == 0
    assert capsys.readouterr().err.count("error") == 0
    merged = load(split.path / "m.json")
    assert [m["id"] for m in merged["models"]] == [MID, NARROW, WIDE, f"{FITS}::model"]
    assert (merged["collected_budget_nodeids"], merged["deselected_budget_nodeids"]) == (
        BUDGETED,
        [],
    )
    # Shard 3's report left out: wide is not run, an error, and one line names it.
    assert cli.main(["merge", "s1.json", "s2.json", "--json", "m.json"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == (
        "graph-budget: error: 1 budgeted model collected by the shards ran in none of "
        f"s1.json, s2.json: {WIDE} (not run); pass every shard's --graph-budget-json report "
        "(a shard that failed or was not uploaded?), or --expect PATH to name what must run"
    )
    rows = {m["id"]: m for m in load(split.path / "m.json")["models"]}
    assert rows[WIDE]["verdict"] == "error" and rows[WIDE]["error"].startswith("not run")
    assert load(split.path / "m.json")["deselected_budget_nodeids"] == [WIDE]
    # Only shard 1: shard 2's and 3's, the skipped test's too, named in the line.
    assert cli.main(["merge", "s1.json"]) == 1
    line = f"3 budgeted models collected by the shards ran in none of s1.json: {NARROW}, {WIDE}, "
    assert f"{line}{SKIPPED} (not run)" in capsys.readouterr().err
    # --expect as before: what it collects must be reported (the skipped test is not).
    expect = ["--expect", "budgets", "--expect", "tests", "--json", "m.json"]
    assert cli.main(["merge", "s1.json", "s2.json", *expect]) == 1
    assert capsys.readouterr().err.startswith(  # one line names it, as without --expect
        "graph-budget: error: 1 budgeted model that --expect budgets tests collects ran in "
        f"none of s1.json, s2.json: {WIDE} (not run)"
    )
    rows = {m["id"]: m for m in load(split.path / "m.json")["models"]}
    # the test shard 2 skipped is no model lost: it had been "not run", red
    assert {i for i, m in rows.items() if m["verdict"] == "error"} == {WIDE}
    assert cli.main(["merge", "s1.json", "s2.json", "s3.json", *expect]) == 0
    assert "error" not in capsys.readouterr().err


def test_a_run_without_shards_merges_alone(split: pytest.Pytester) -> None:
    run_shard(split, "all.json", "budgets", "tests")
    whole = load(split.path / "all.json")
    assert (whole["collected_budget_nodeids"], whole["deselected_budget_nodeids"]) == (
        BUDGETED,
        [],
    )
    assert cli.main(["merge", "all.json", "--json", "m.json"]) == 0
    merged = load(split.path / "m.json")
    assert merged == whole


def test_an_xdist_shard_lists_what_its_workers_collected(split: pytest.Pytester) -> None:
    """Under xdist the controller collects nothing: the workers' lists reach it."""
    pytest.importorskip("xdist")
    args = ("budgets", "tests", "--splits=3", "--group=3", "-p", "xdist", "-n", "1")
    run_shard(split, "xdist.json", *args)
    shard = load(split.path / "xdist.json")
    assert shard["collected_budget_nodeids"] == BUDGETED
    assert shard["deselected_budget_nodeids"] == [MID, NARROW, FITS, SKIPPED]
    assert [m["id"] for m in shard["models"]] == [WIDE]


FITS_MARKED = "tests/test_merge_marked.py::test_fits"


def test_a_shard_whose_collection_was_interrupted_is_not_a_pass(
    project: pytest.Pytester, capsys: pytest.CaptureFixture
) -> None:
    """User trial: a shard whose collection failed (one test module's import error) lists the
    marked test it collected and runs nothing (pytest stops a run whose collection failed);
    merged alone or beside a green shard, without --expect, that was a pass with the test
    never run. Its model is ``not run``, and one line says why."""
    (project.path / "tests").mkdir()
    (project.path / "tests" / "test_merge_marked.py").write_text(MARKED)
    (project.path / "tests" / "test_merge_import.py").write_text("import no_such_module_here\n")
    run_shard(project, "s1.json", "tests").assert_outcomes(errors=1)
    shard = load(project.path / "s1.json")
    # its report counts the module it could not collect, and the marked test it never ran
    assert [m["id"] for m in shard["models"]] == ["tests/test_merge_import.py", FITS_MARKED]
    assert shard["models"][1]["error"].startswith("not run: its test reported nothing")
    assert shard["passed"] is False
    assert (shard["collected_budget_nodeids"], shard["deselected_budget_nodeids"]) == (
        [FITS_MARKED],
        [],
    )
    assert shard["skipped_budget_nodeids"] == []
    # merge finds it too where a shard's report has no row for it (an earlier version's)
    shard["models"] = shard["models"][:1]
    (project.path / "s1.json").write_text(json.dumps(shard))
    run_shard(project, "s2.json", "budgets/narrow.toml").assert_outcomes(passed=1)
    capsys.readouterr()
    for reports in (["s1.json"], ["s1.json", "s2.json"]):
        assert cli.main(["merge", *reports, "--json", "m.json"]) == 1
        err = capsys.readouterr().err.splitlines()
        assert err[0] == (
            f"graph-budget: error: s1.json kept 1 budgeted model it neither ran nor skipped: "
            f"{FITS_MARKED} (not run); its run stopped before them (a collection error, -x, "
            "a crashed worker?): fix it and run that shard again"
        )
        merged = load(project.path / "m.json")
        rows = {m["id"]: m for m in merged["models"]}
        assert rows[FITS_MARKED]["verdict"] == "error" and merged["passed"] is False
        assert rows[FITS_MARKED]["error"].startswith("not run")
        assert merged["deselected_budget_nodeids"] == [FITS_MARKED]  # no shard ran it
    # The shard run again without the broken module: the merge is green.
    (project.path / "tests" / "test_merge_import.py").unlink()
    run_shard(project, "s1.json", "tests").assert_outcomes(passed=2)
    assert cli.main(["merge", "s1.json", "s2.json"]) == 0


def test_a_shard_stopped_by_x_fails_its_unrun_models_and_a_skip_stays_green(
    project: pytest.Pytester, capsys: pytest.CaptureFixture
) -> None:
    """A shard whose run stopped part-way (``-x`` after a plain test failed) merged green:
    its kept, unrun model was nowhere. A model whose test skipped (a GPU-only test on a CPU
    shard) is listed as skipped, and is no error."""
    (project.path / "tests").mkdir()
    (project.path / "tests" / "test_stops.py").write_text(
        """
import pytest
from models import narrow

@pytest.fixture
def model():
    return narrow()

@pytest.mark.flops_max("20k")
def test_a_skips(model):
    pytest.skip("needs a GPU")

def test_b_fails():
    assert False

@pytest.mark.flops_max("20k")
def test_c_never_runs(model):
    pass
"""
    )
    run_shard(project, "x.json", "tests", "-x").assert_outcomes(failed=1, skipped=1)
    shard = load(project.path / "x.json")
    skipped, unrun = "tests/test_stops.py::test_a_skips", "tests/test_stops.py::test_c_never_runs"
    assert shard["skipped_budget_nodeids"] == [skipped]
    # the shard's own reports say it was not run (they had been green, exit status 1)
    assert shard["passed"] is False and [m["id"] for m in shard["models"]] == [unrun]
    capsys.readouterr()
    assert cli.main(["merge", "x.json", "--json", "m.json"]) == 1
    rows = {m["id"]: m for m in load(project.path / "m.json")["models"]}
    assert rows[unrun]["error"].startswith("not run") and skipped not in rows
    run_shard(project, "all.json", "tests").assert_outcomes(passed=1, failed=1, skipped=1)
    assert cli.main(["merge", "all.json"]) == 0  # the skip alone is no error


OLD_TEST = """
import pytest
from models import narrow

@pytest.fixture
def model():
    return narrow()

@pytest.mark.flops_max("20k")
def test_old(model):
    pass

def test_plain():
    pass
"""


def test_a_model_renamed_across_shards_is_compared_as_one_run_compares_it(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """User trial: a test's model moved to a budget table, its copy in the baseline found
    stale by the ``tests`` shard and the model run as new by the ``budgets`` shard. One run
    matches the two (same modules, same parameters) and fails the growth; the merged shards
    read "new" and exited 0. The table's model is ``Linear(64, 16)`` on ``(8, 64)``:
    2*8*64*16 + 8*16 = 16,512 FLOPs (within its 20k limit), against the old entry's 8,256 on
    ``(4, 64)``: +100%."""
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(project.path)
    (project.path / "tests").mkdir()
    (project.path / "tests" / "test_old.py").write_text(OLD_TEST)
    update = ("--graph-budget-update", "-p", "no:cacheprovider", "--graph-budget")
    project.runpytest(*update, "budgets", "tests").assert_outcomes(passed=4, failed=1)
    # the branch: test_old's model moves to a table, where it runs on a bigger batch
    (project.path / "tests" / "test_old.py").write_text("def test_plain():\n    pass\n")
    (project.path / "models.py").write_text(
        MODELS + "\ndef moved():\n    m = linear(16)\n    return type(m)(m.model, "
        "(torch.randn(8, 64),), name='linear16')\n"
    )
    moved = '[models.moved]\nfactory = "models:moved"\nflops_max = "20k"\n'
    (project.path / "budgets" / "moved.toml").write_text(moved)
    run_shard(project, "all.json", "budgets", "tests", "--graph-budget-markdown=all.md")
    run_shard(project, "s1.json", "budgets")
    run_shard(project, "s2.json", "tests")
    expect = ["--expect", "budgets", "--expect", "tests"]
    merged = ["--json", "m.json", "--markdown", "m.md"]
    assert cli.main(["merge", "s1.json", "s2.json", *expect, *merged]) == 1
    doc, unsharded = load(project.path / "m.json"), load(project.path / "all.json")
    row = {m["id"]: m for m in doc["models"]}["budgets/moved.toml::moved"]
    assert row["verdict"] == "fail" and row["changes"]["flops"] == pytest.approx(1.0)
    assert row["baseline_entry"] == "tests/test_old.py::test_old::model"
    assert doc == unsharded  # every figure, finding, title and summary
    text = {p: (project.path / p).read_text("utf-8") for p in ("m.md", "all.md")}
    assert text["m.md"] == text["all.md"] and "renamed?" in text["m.md"]
