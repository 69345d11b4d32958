"""The environment figures were measured in: recorded in the baseline, and a move of the
counter (torch, pytest-graphbudget) said before a layer is blamed for a figure that moved.

The model is hand-counted: ``nn.Linear(64, hidden)`` then ``nn.Linear(hidden, 8)`` on a
``(4, 64)`` input, a ReLU between, 2*4*64*h + 4*h + 4*h + 2*4*h*8 + 4*8 FLOPs.
"""

from __future__ import annotations

import json
import sys
from html import unescape

import pytest

MODELS = """
import torch
from pytest_graphbudget import ModelCase

HIDDEN = {hidden}

class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Linear(64, HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, 8)

    def forward(self, x):
        return self.head(torch.relu(self.encoder(x)))

def mlp():
    torch.manual_seed(0)
    return ModelCase(MLP(), (torch.randn(4, 64),), name="mlp")
"""
BUDGET = '[models.mlp]\nfactory = "models:mlp"\n'


def mlp_flops(h: int) -> int:
    return (2 * 4 * 64 * h + 4 * h) + 4 * h + (2 * 4 * h * 8 + 4 * 8)


def test_counter_moved_names_each_counting_version_that_changed():
    from pytest_graphbudget.gate.environment import counter_moved

    then = {"python": "3.11.0", "torch": "2.14.1", "pytest-graphbudget": "0.1.0"}
    now = {"python": "3.12.0", "torch": "2.15.0", "pytest-graphbudget": "0.1.0"}
    assert counter_moved(then, now) == "counter may have changed: torch 2.14.1 -> 2.15.0"
    both = now | {"pytest-graphbudget": "0.2.0"}
    assert counter_moved(then, both) == (
        "counter may have changed: torch 2.14.1 -> 2.15.0, pytest-graphbudget 0.1.0 -> 0.2.0"
    )
    assert counter_moved(then, then | {"python": "3.13.0"}) == ""  # python does not count
    assert counter_moved({}, now) == ""  # an old baseline says nothing


def test_every_library_the_zoo_builds_models_with_is_recorded_imported_or_not(monkeypatch):
    """A new timm, diffusers or ultralytics may build another model from the same name: the
    baseline says which one built it, as it does for torchvision and transformers. User
    trial: a run whose timm model came from the profile cache never imported timm, and the
    committed baseline's ``[environment]`` lost its ``timm`` line, to regain it on the next
    cold run; torchvision's line read 0.29.1+cu130 imported (its module's version) and 0.29.1
    not (its wheel's). Each is recorded at its installed distribution's version."""
    from importlib import metadata

    from pytest_graphbudget.gate.environment import current

    for name in ("torchvision", "transformers", "timm", "diffusers", "ultralytics"):
        pytest.importorskip(name)
        imported = current()[name]
        monkeypatch.delitem(sys.modules, name)  # as in a process that never imported it
        assert current()[name] == imported == metadata.version(name), name


def test_a_project_with_a_dynamic_version_is_recorded_at_its_installed_version(tmp_path):
    """setuptools-scm, hatch-vcs or an attribute: pyproject says only ``dynamic``; the version
    is the installed distribution's (this package is one such project, installed here)."""
    from importlib.metadata import version

    from pytest_graphbudget.gate.environment import project_version

    dynamic = '[project]\nname = "{}"\ndynamic = ["version"]\n'
    (tmp_path / "pyproject.toml").write_text(dynamic.format("pytest-graphbudget"))
    assert project_version(tmp_path) == f"pytest-graphbudget {version('pytest-graphbudget')}"
    (tmp_path / "pyproject.toml").write_text(dynamic.format("not-installed-anywhere"))
    assert project_version(tmp_path) is None
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "team"\nversion = "1.2"\n')
    assert project_version(tmp_path) == "team 1.2"


def test_baseline_keeps_its_environment_and_old_files_still_load(tmp_path):
    from pytest_graphbudget.gate import baseline
    from pytest_graphbudget.gate.budgets import REGRESSION_FIGURES

    entry = baseline.Entry(dict.fromkeys(REGRESSION_FIGURES, 100.0), {"fc": 100})
    path = tmp_path / "baseline.toml"
    baseline.update(path, {"m": entry}, environment={"torch": "2.14.1", "python": "3.12.0"})
    text = path.read_text()
    assert '[environment]\npython = "3.12.0"\ntorch = "2.14.1"' in text
    found = baseline.read(path)
    assert found.environment == {"python": "3.12.0", "torch": "2.14.1"}
    assert found.entries["m"] == entry and not found.error
    # a baseline written before environments were recorded: the models alone
    old_text = text.split("[models", 1)[1]
    path.write_text("[models" + old_text)
    old = baseline.read(path)
    assert old.environment == {} and old.entries["m"] == entry
    assert not old.error and not old.problems


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(models=MODELS.format(hidden=32))
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets" / "mlp.toml").write_text(BUDGET)
    pytester.syspathinsert()
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "--graph-budget-no-cache", *args
    )


def widen(pytester: pytest.Pytester, torch_then: str | None) -> None:
    """Record the baseline at hidden 32 (its torch rewritten to ``torch_then``), then widen."""
    import torch

    assert run(pytester, "--graph-budget-update").ret == 0
    path = pytester.path / "budgets" / "baseline.toml"
    text = path.read_text()
    # --update records this process's environment
    assert f'torch = "{torch.__version__}"' in text
    assert f'python = "{sys.version.split()[0]}"' in text
    if torch_then:
        path.write_text(text.replace(f'torch = "{torch.__version__}"', f'torch = "{torch_then}"'))
    pytester.makepyfile(models=MODELS.format(hidden=64))
    sys.modules.pop("models", None)


def reports(pytester: pytest.Pytester) -> dict[str, str]:
    result = run(
        pytester,
        "--graph-budget-json=r.json",
        "--graph-budget-junit=r.xml",
        "--graph-budget-markdown=r.md",
        "--graph-budget-html=r.html",
    )
    assert result.ret == 1  # FLOPs grew 2x: a regression either way
    names = ("r.json", "r.xml", "r.md", "r.html")
    found = {name: unescape((pytester.path / name).read_text()) for name in names}  # &gt;
    found["terminal"] = result.stdout.str()
    return found


def test_a_widened_model_measured_under_another_torch_says_the_counter_may_have_changed(project):
    import torch

    widen(project, "2.0.0")
    said = f"counter may have changed: torch 2.0.0 -> {torch.__version__}"
    found = reports(project)
    for name, text in found.items():
        assert said in text, name
    document = json.loads(found["r.json"])
    flops = next(f for f in document["models"][0]["findings"] if f["key"] == "baseline.flops")
    # said in the first clause, before the layer is blamed: 37,408 / 18,720 = 1.998 -> +99.8%
    first = "FLOPs regressed +99.8% (18.7k -> 37.4k, tolerance 1.0%)"
    assert flops["message"].startswith(f"{first}: {said} since the baseline; grew most: encoder")
    assert (flops["limit"], flops["value"]) == (mlp_flops(32), mlp_flops(64))
    assert document["environment"]["torch"] == torch.__version__
    # the comment's footer names what these figures were measured in (not the baseline's)
    footer = found["r.md"].splitlines()[-1]
    assert f"python {sys.version.split()[0]}, torch {torch.__version__}," in footer


def test_the_same_environment_blames_the_layer_alone(project):
    widen(project, None)
    found = reports(project)
    for name, text in found.items():
        assert "counter may have changed" not in text, name
    document = json.loads(found["r.json"])
    flops = next(f for f in document["models"][0]["findings"] if f["key"] == "baseline.flops")
    # encoder grew 2*4*64*32 + 4*32 = 16,512 FLOPs, more than any other module
    assert flops["message"].startswith("FLOPs regressed +")
    assert "grew most: encoder +16.5k" in flops["message"]
