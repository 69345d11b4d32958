"""``graph-budget merge``: three shards' JSON reports give one unsharded run's verdict (issue 24,
item 2).

Each shard is a real pytest run of one budget file; the reference is one real run of all three.
Models, ``nn.Linear(64, n)`` on a ``(4, 64)`` input, each under ``flops_max = "20k"``:
  narrow: 2*4*64*16 + 4*16 =  8,256 FLOPs  -> pass
  mid:    2*4*64*32 + 4*32 = 16,512 FLOPs  -> pass
  wide:   2*4*64*64 + 4*64 = 33,024 FLOPs  -> fail (over 20,000)
"""

from __future__ import annotations

import json
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


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(models=MODELS)
    (pytester.path / "budgets").mkdir()
    for name in SHARDS:
        budget = f'[models.{name}]\nfactory = "models:{name}"\nflops_max = "20k"\n'
        (pytester.path / "budgets" / f"{name}.toml").write_text(budget)
    pytester.syspathinsert()
    return pytester


def run_shard(pytester: pytest.Pytester, out: str, *paths: str) -> None:
    pytester.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", f"--graph-budget-json={out}", *paths
    )
    assert (pytester.path / out).exists()


def load(path: Path) -> dict:
    document = json.loads(path.read_text("utf-8"))
    del document["tool"]  # the same tool either way; nothing else is wall-clock
    return document


def test_three_shards_merge_into_the_unsharded_run(project: pytest.Pytester) -> None:
    for name in SHARDS:
        run_shard(project, f"{name}.json", f"budgets/{name}.toml")
    run_shard(project, "all.json", "budgets")
    shards = [str(project.path / f"{name}.json") for name in SHARDS]
    out = project.path / "merged"
    code = cli.main(
        ["merge", *shards, "--json", str(out / "m.json"), "--junit", str(out / "m.xml")]
        + ["--markdown", str(out / "m.md")]
    )
    assert code == 1  # wide is over its budget
    merged, unsharded = load(out / "m.json"), load(project.path / "all.json")
    assert [m["id"] for m in merged["models"]] == sorted(m["id"] for m in merged["models"])
    assert [m["verdict"] for m in merged["models"]] == ["pass", "pass", "fail"]  # mid narrow wide
    assert merged == unsharded
    assert merged["summary"] == {
        "models": 3,
        "pass": 2,
        "warn": 0,
        "fail": 1,
        "error": 0,
        "unchecked": 0,
    }
    suite = ET.parse(out / "m.xml").getroot()
    failures = sum(int(s.get("failures", 0)) for s in suite.iter("testsuite"))
    assert failures == 1
    assert merged["title"] in (out / "m.md").read_text("utf-8")


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


def test_not_a_report_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"schema": "other/1"}')
    assert cli.main(["merge", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "schema 'other/1'" in err, err
    assert cli.main(["merge", str(tmp_path / "missing.json")]) == 2


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
