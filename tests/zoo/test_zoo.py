"""The model zoo: names resolve to models and example inputs, offline.

Nothing is profiled here (see ``test_zoo_profile.py``): these tests check the package
(``resolve``, ``list_models``, ``LoadOptions``, the loaders' hook); each family's loader,
``zoo/<family>.py``, is tested in ``test_<family>.py``. Big models are built on the meta device
so the suite stays fast; every test that resolves a name runs under the ``no_network`` guard
and checks that nothing tried to connect.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from pytest_graphbudget.errors import GraphBudgetError, UnknownModelError  # noqa: E402
from pytest_graphbudget.zoo import list_models, resolve  # noqa: E402
from pytest_graphbudget.zoo.base import LoadOptions  # noqa: E402

# ---------------------------------------------------------------------------------------------
# The package itself


def test_importing_the_zoo_imports_no_model_library():
    code = (
        "import sys, pytest_graphbudget.zoo, pytest_graphbudget.hookspecs\n"
        "from pytest_graphbudget.zoo.diffusers import DiffusersLoader\n"
        "DiffusersLoader().names()  # listed from the shipped files, diffusers not imported\n"
        "heavy = [m for m in ('torch', 'torchvision', 'transformers', 'ultralytics', 'timm', "
        "'diffusers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def built_in_loaders() -> list:
    """The loaders ``zoo/builtin.py`` registers: the one list of the zoo's own families."""
    from pytest_graphbudget.zoo import builtin

    return builtin.graphbudget_model_loaders()


def test_list_models_has_every_built_in_family_and_name():
    models = list_models()
    for loader in built_in_loaders():
        names = loader.names()  # none for local paths, or for a library that is not installed
        assert set(names) == set(models.get(loader.family, [])), loader.family
    assert set(models) == {loader.family for loader in built_in_loaders() if loader.names()}


def test_every_built_in_family_has_its_test_file():
    """``zoo/<module>.py`` is tested in ``tests/zoo/test_<module>.py`` (CONTRIBUTING.md)."""
    here = Path(__file__).parent
    modules = [type(loader).__module__.rsplit(".", 1)[1] for loader in built_in_loaders()]
    missing = [f"tests/zoo/test_{m}.py" for m in modules if not (here / f"test_{m}.py").is_file()]
    assert not missing


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch": 0}, "batch must be a positive integer"),
        ({"seq_len": -5}, "seq_len must be a positive integer"),
        ({"input_shape": "1,3,x"}, "input_shape must be a list of positive integers"),
        ({"input_shape": (1, 0, 4)}, "input_shape must be a list of positive integers"),
        # TOML's [8, 3, 32.9, 224] had been truncated to 8x3x32x224 and profiled
        ({"input_shape": [8, 3, 32.9, 224]}, "input_shape must be a list of positive integers"),
        ({"input_shape": [1, True]}, "input_shape must be a list of positive integers"),
        # "false" built on the meta device, 0 left it to the zoo: only True, False or None
        ({"meta": "false"}, r"meta must be true or false \(or left out.*got 'false'"),
        ({"meta": 0}, "meta must be true or false .*got 0"),
        # one of the two was dropped without a word: 1x3x64x64 profiled for batch 4
        (
            {"batch": 4, "input_shape": (1, 3, 64, 64)},
            r"batch 4 disagrees with input_shape 1,3,64,64, whose first dimension is the batch: "
            r"give one or the other \(input_shape 4,3,64,64 alone, or batch without input_shape\)",
        ),
        (
            {"seq_len": 32, "input_shape": "1,16"},
            r"seq_len 32 disagrees with input_shape 1,16, which is \(batch, seq_len\): give one "
            r"or the other \(input_shape 1,32 alone, or seq_len without input_shape\)",
        ),
    ],
)
def test_bad_options_are_one_line_errors(kwargs, message):
    with pytest.raises(GraphBudgetError, match=message) as info:
        LoadOptions(**kwargs)
    assert "\n" not in str(info.value)


def test_input_shape_accepts_the_cli_forms():
    assert LoadOptions(input_shape="1,3,224,224").input_shape == (1, 3, 224, 224)
    assert LoadOptions(input_shape="1x3x64x64").input_shape == (1, 3, 64, 64)
    assert LoadOptions(input_shape=[2, 3, 32, 32]).input_shape == (2, 3, 32, 32)


def test_batch_and_seq_len_that_agree_with_input_shape_are_taken():
    both = LoadOptions(batch=2, input_shape=[2, 3, 64, 64], meta=False)
    assert both.image_shape((1, 3, 224, 224)) == (2, 3, 64, 64)
    assert LoadOptions(batch=3, seq_len=16, input_shape="3,16").input_shape == (3, 16)
    # A diffusers model's seq_len is its text, beside the latent image that input_shape shapes.
    latent = LoadOptions(seq_len=77, input_shape=(1, 4, 64, 64), meta=True)
    assert latent.image_shape((1, 4, 64, 64)) == (1, 4, 64, 64)


def test_batch_beside_an_input_shape_that_disagrees_is_refused_by_name(no_network):
    with pytest.raises(GraphBudgetError, match="batch 4 disagrees with input_shape 1,3,64,64"):
        resolve("resnet18", batch=4, input_shape=[1, 3, 64, 64])
    with pytest.raises(GraphBudgetError, match="seq_len 32 disagrees with input_shape 1,16"):
        resolve("bert-base-uncased", seq_len=32, input_shape=(1, 16), meta=True)
    with pytest.raises(GraphBudgetError, match="meta must be true or false"):
        resolve("yolov8n", meta="false")
    (image,) = resolve("resnet18", batch=2, input_shape="2,3,64,64").inputs
    assert tuple(image.shape) == (2, 3, 64, 64)
    assert no_network == []


# ---------------------------------------------------------------------------------------------
# Unknown names


@pytest.mark.parametrize(
    "name, expected",
    [
        ("resnet5", "resnet50"),
        ("bert-base", "bert-base-uncased"),
        ("gpt-neo-125m", "EleutherAI/gpt-neo-125m"),
        ("yolov8q", "yolov8n"),
        ("efficientnet-b0", "efficientnet_b0"),
    ],
)
def test_unknown_name_is_one_line_with_close_matches(name, expected, no_network):
    with pytest.raises(UnknownModelError) as info:
        resolve(name)
    message = str(info.value)
    assert "\n" not in message
    assert f"unknown model {name!r}" in message
    assert expected in message.split("did you mean:")[1]
    assert isinstance(info.value, GraphBudgetError)
    assert no_network == []


def test_missing_file_is_named_as_such(tmp_path):
    with pytest.raises(UnknownModelError, match="no such file or directory"):
        resolve(str(tmp_path / "model.pth"))


def test_names_are_case_insensitive_and_accept_hub_ids(no_network):
    assert resolve("ResNet18").name == "resnet18"
    assert resolve("YOLOv8n", meta=True).name == "yolov8n"
    case = resolve("google-bert/bert-base-uncased", meta=True)
    assert case.name == "bert-base-uncased"
    assert no_network == []


# ---------------------------------------------------------------------------------------------
# Meta device: big models allocate no weights


def test_large_model_is_built_on_meta_automatically(no_network):
    case = resolve("EleutherAI/gpt-neo-1.3B")
    params = list(case.model.parameters())
    assert all(p.is_meta for p in params)  # meta tensors have no storage at all
    assert all(b.is_meta for b in case.model.buffers())
    assert sum(p.numel() for p in params) == 1_315_575_808
    # The inputs are ordinary (small) tensors.
    assert not case.kwargs["input_ids"].is_meta


def test_meta_can_be_forced_either_way(no_network):
    assert all(p.is_meta for p in resolve("resnet18", meta=True).model.parameters())
    assert not any(p.is_meta for p in resolve("resnet18").model.parameters())
    assert not any(p.is_meta for p in resolve("distilgpt2", meta=False).model.parameters())


def test_meta_for_a_model_that_cannot_be_built_there(no_network):
    # ultralytics' heads read their own weights while they are built: the zoo builds them on the
    # CPU and moves them to the meta device.
    case = resolve("yolo11n", meta=True)
    assert all(p.is_meta for p in case.model.parameters())


# ---------------------------------------------------------------------------------------------
# Third-party loaders through the pluggy hook

PLUGIN_MODULE = textwrap.dedent(
    """
    import torch
    from pytest_graphbudget.case import ModelCase
    from pytest_graphbudget.hookspecs import hookimpl
    from pytest_graphbudget.zoo.base import ModelLoader


    class ToyLoader(ModelLoader):
        family = "toys"

        def names(self):
            return ["toy-mlp", "resnet18"]

        def load(self, name, options):
            width = 8 if name == "toy-mlp" else 4
            model = torch.nn.Sequential(torch.nn.Linear(width, width)).eval()
            batch = options.batch or 1
            return ModelCase(model, (torch.randn(batch, width),), note=f"from toys: {name}")


    @hookimpl
    def graphbudget_model_loaders():
        return [ToyLoader()]
    """
)


@pytest.fixture
def toy_plugin(tmp_path, monkeypatch):
    """An installed distribution that declares a loader under the ``graphbudget`` group."""
    from pytest_graphbudget import zoo

    (tmp_path / "toy_models.py").write_text(PLUGIN_MODULE)
    dist = tmp_path / "toy_models-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-models\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[graphbudget]\ntoys = toy_models\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    zoo.plugin_manager.cache_clear()
    yield
    zoo.plugin_manager.cache_clear()
    sys.modules.pop("toy_models", None)


def test_third_party_loader_through_entry_points(toy_plugin):
    case = resolve("toy-mlp", batch=3)
    assert case.note == "from toys: toy-mlp"
    assert case.name == "toy-mlp"
    assert tuple(case.inputs[0].shape) == (3, 8)
    assert "toy-mlp" in list_models()["toys"]
    # Plugins are asked before the built-in loaders, so a plugin can take over a name.
    assert resolve("resnet18").note == "from toys: resnet18"


def test_built_in_loaders_are_registered_through_the_same_hook():
    from pytest_graphbudget.zoo import make_plugin_manager

    pm = make_plugin_manager(entry_points=False)
    families = [
        loader.family for result in pm.hook.graphbudget_model_loaders() for loader in result
    ]
    assert families == [loader.family for loader in built_in_loaders()]
    # Paths on disk first; the prefixed families last: `graph-budget list` ends with timm's
    # thousand names.
    assert families[0] == "local" and families[-1] == "timm"


def test_a_broken_loader_is_named(monkeypatch):
    from pytest_graphbudget import zoo
    from pytest_graphbudget.hookspecs import hookimpl

    class NotALoader:
        @hookimpl
        def graphbudget_model_loaders(self):
            return [object()]

    pm = zoo.make_plugin_manager(entry_points=False)
    pm.register(NotALoader())
    monkeypatch.setattr(zoo, "plugin_manager", lambda: pm)
    with pytest.raises(GraphBudgetError, match="lacks family, names, can_load, load"):
        resolve("resnet18")


def test_the_loader_example_in_the_docs_runs(tmp_path, monkeypatch, capsys):
    """Run as a script (``__main__``), on a plugin manager of its own so that the family it
    registers leaves with the test."""
    import runpy

    from pytest_graphbudget import zoo

    text = (Path(__file__).parents[2] / "docs" / "models.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    loader = next(b for b in blocks if b.startswith("# my_models/graphbudget.py"))
    usage = next(b for b in blocks if "plugin_manager()" in b and ".register(" in b)
    script = tmp_path / "example.py"
    script.write_text(loader + "\n" + usage)
    own = zoo.make_plugin_manager()
    monkeypatch.setattr(zoo, "plugin_manager", lambda: own)
    runpy.run_path(str(script), run_name="__main__")
    assert capsys.readouterr().out.split() == ["131072"]
    assert "tinynets" in {type(loader).family for loader in zoo.loaders()}
