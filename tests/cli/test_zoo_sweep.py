"""The zoo sweep (``make zoo``): one worker process at a time, a row per model whatever happens.

Models come from a throwaway plugin package (on ``PYTHONPATH``, so the worker processes see it
too): one that profiles, one that hangs and one that kills its process.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

pytest.importorskip("torch")

from pytest_graphbudget.cli import zoo_sweep as sweep

PLUGIN = textwrap.dedent(
    """
    import os
    import time

    import torch
    from pytest_graphbudget.case import ModelCase
    from pytest_graphbudget.hookspecs import hookimpl
    from pytest_graphbudget.zoo.base import ModelLoader


    class Odd(ModelLoader):
        family = "odd"

        def names(self):
            return ["odd-mlp", "odd-hang", "odd-crash", "odd-broken"]

        def load(self, name, options):
            if name == "odd-hang":
                time.sleep(600)
            if name == "odd-crash":
                os._exit(3)
            if name == "odd-broken":
                raise RuntimeError("the forward needs a GPU")
            model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU()).eval()
            return ModelCase(model, (torch.randn(2, 16),))


    @hookimpl
    def graphbudget_model_loaders():
        return [Odd()]
    """
)


@pytest.fixture
def odd_plugin(tmp_path, monkeypatch):
    from pytest_graphbudget import zoo

    (tmp_path / "odd_models.py").write_text(PLUGIN)
    dist = tmp_path / "odd_models-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: odd-models\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[graphbudget]\nodd = odd_models\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    zoo.plugin_manager.cache_clear()
    yield
    zoo.plugin_manager.cache_clear()
    sys.modules.pop("odd_models", None)


@pytest.mark.slow
def test_a_hang_or_a_crash_is_a_row_and_the_sweep_goes_on(odd_plugin, tmp_path, capsys):
    out = tmp_path / "zoo.md"
    data = tmp_path / "zoo.json"
    code = sweep.main(
        ["odd-mlp", "odd-hang", "odd-crash", "odd-broken", "odd-mlp"]
        + ["--timeout", "5", "--output", str(out), "--json", str(data)]
    )
    assert code == 0
    rows = {r["name"]: r for r in json.loads(data.read_text())}
    assert rows["odd-mlp"]["ok"] and rows["odd-mlp"]["tier"] == "fx"
    assert rows["odd-mlp"]["macs"] == 2 * 16 * 32
    assert rows["odd-hang"]["error"] == "timed out after 5 s"
    assert "worker process died (exit code 3)" in rows["odd-crash"]["error"]
    assert rows["odd-broken"]["error"] == "RuntimeError: the forward needs a GPU"
    text = out.read_text()
    assert "| odd | 5 | 2 | 0 | 0 | 0 | 3 | 0 |" in text  # fx, dynamo, dynamo-breaks, eager
    assert "- `odd-hang` (odd): timed out after 5 s" in text
    progress = capsys.readouterr().err
    assert "[5/5] odd-mlp: fx" in progress


def test_render_from_json_profiles_nothing(tmp_path):
    rows = [
        sweep.Result("resnet18", "torchvision", group="torchvision classification", ok=True,
                     tier="fx", flops=3_643_000_000, macs=1_814_000_000, params=11_689_512,
                     peak_memory_bytes=53_800_000, compute_bound_share=0.83, seconds=2.0,
                     reference="1.814 GMACs"),
        sweep.Result("ssd300_vgg16", "torchvision", group="torchvision detection",
                     tier_failures={"fx": "Proxy object cannot be iterated. This can be ...",
                                    "dynamo": "Could not guard on data-dependent expression"},
                     error="fx: ...; dynamo: ..."),
    ]  # fmt: skip
    data = tmp_path / "zoo.json"
    data.write_text(json.dumps([r.__dict__ for r in rows]))
    out = tmp_path / "zoo.md"
    assert sweep.main(["--from-json", str(data), "--output", str(out)]) == 0
    text = out.read_text()
    assert (
        "| `resnet18` | fx | 3.643 | 1.814 | 11.69M | 53.8 MB | 83% | 2.0 | 1.814 GMACs |  |"
        in text
    )
    assert (
        "- `ssd300_vgg16` (torchvision): fx: Proxy object cannot be iterated.; "
        "dynamo: Could not guard on data-dependent expression" in text
    )


def test_unknown_name_is_a_usage_error(capsys):
    assert sweep.main(["resnet5"]) == 2
    assert "did you mean: resnet50" in capsys.readouterr().err


@pytest.fixture
def selection(monkeypatch, tmp_path):
    """What ``main`` hands the sweep, which profiles nothing; the table goes under tmp_path."""
    chosen: list[list[tuple[str, str, str]]] = []

    def record(names, **_):
        chosen.append(names)
        return []

    monkeypatch.setattr(sweep, "sweep", record)
    monkeypatch.chdir(tmp_path)
    return chosen


def test_the_default_sweep_leaves_timm_and_diffusers_to_the_corpus(selection, tmp_path, capsys):
    pytest.importorskip("timm")
    assert sweep.main([]) == 0
    (default,) = selection
    families = {family for _, family, _ in default}
    assert {"torchvision", "huggingface", "ultralytics"} <= families
    assert not families & {"timm", "diffusers"}
    assert not [name for name, *_ in default if name.startswith(("timm:", "diffusers:"))]
    assert (tmp_path / "docs" / "zoo.md").is_file()  # the full sweep still rewrites docs/zoo.md

    assert sweep.main(["--family", "timm"]) == 0  # asked for by name, timm is swept
    timm_models = {name for name, family, _ in selection[1] if family == "timm"}
    assert "timm:resnet50" in timm_models and len(timm_models) == len(selection[1]) > 1000
    assert sweep.main(["timm:resnet18", "resnet18"]) == 0  # and so is one of its names
    assert [name for name, *_ in selection[2]] == ["resnet18", "timm:resnet18"]
    capsys.readouterr()
