"""The model zoo: names resolve to models and example inputs, offline.

Nothing is profiled here (see ``test_zoo_profile.py``): these tests check what the loaders
build. Big models are built on the meta device so the suite stays fast; every test that resolves
a name runs under the ``no_network`` guard and checks that nothing tried to connect.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from pytest_graphbudget.case import ModelCase  # noqa: E402
from pytest_graphbudget.errors import GraphBudgetError, UnknownModelError  # noqa: E402
from pytest_graphbudget.zoo import list_models, resolve  # noqa: E402
from pytest_graphbudget.zoo.base import LoadOptions  # noqa: E402


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def shapes(case: ModelCase) -> dict[str, tuple[int, ...]]:
    return {key: tuple(value.shape) for key, value in case.kwargs.items()}


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


def test_list_models_has_every_family_and_name():
    import importlib.util

    import torchvision

    models = list_models()
    optional = {
        family for family in ("timm", "diffusers") if importlib.util.find_spec(family) is not None
    }
    assert set(models) == {"torchvision", "huggingface", "ultralytics", *optional}
    assert set(models["torchvision"]) == set(torchvision.models.list_models())
    assert {"bert-base-uncased", "gpt2", "t5-small", "facebook/bart-base"} <= set(
        models["huggingface"]
    )
    assert "facebook/detr-resnet-50" in models["huggingface"]
    assert len(models["huggingface"]) == 23
    assert len(models["ultralytics"]) == 25
    for family in ("yolov5", "yolov8", "yolo11", "yolo12", "yolo26"):
        tail = "u" if family == "yolov5" else ""
        assert {f"{family}{s}{tail}" for s in "nsmlx"} <= set(models["ultralytics"])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch": 0}, "batch must be a positive integer"),
        ({"seq_len": -5}, "seq_len must be a positive integer"),
        ({"input_shape": "1,3,x"}, "input_shape must be a list of positive integers"),
        ({"input_shape": (1, 0, 4)}, "input_shape must be a list of positive integers"),
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
# Hugging Face: built from configuration, offline, parameter counts as published

# Published parameter counts of the base architectures (AutoModel: BertModel with its pooler,
# GPT2Model without the LM head, T5Model with tied embeddings, ...).
HF_PUBLISHED = {
    "bert-base-uncased": ("BertModel", 109_482_240),
    "bert-base-cased": ("BertModel", 108_310_272),
    "bert-large-uncased": ("BertModel", 335_141_888),
    "distilbert-base-uncased": ("DistilBertModel", 66_362_880),
    "roberta-base": ("RobertaModel", 124_645_632),
    "roberta-large": ("RobertaModel", 355_359_744),
    "albert-base-v2": ("AlbertModel", 11_683_584),
    "xlm-roberta-base": ("XLMRobertaModel", 278_043_648),
    "gpt2": ("GPT2Model", 124_439_808),
    "gpt2-medium": ("GPT2Model", 354_823_168),
    "gpt2-large": ("GPT2Model", 774_030_080),
    "distilgpt2": ("GPT2Model", 81_912_576),
    "EleutherAI/gpt-neo-125m": ("GPTNeoModel", 125_198_592),
    "EleutherAI/gpt-neo-1.3B": ("GPTNeoModel", 1_315_575_808),
    "facebook/opt-125m": ("OPTModel", 125_239_296),
    "facebook/opt-350m": ("OPTModel", 331_196_416),
    "google/electra-base-discriminator": ("ElectraModel", 108_891_648),
    "microsoft/deberta-v3-base": ("DebertaV2Model", 183_831_552),
    "t5-small": ("T5Model", 60_506_624),
    "facebook/bart-base": ("BartModel", 139_420_416),
}


@pytest.fixture
def hub_allowed(monkeypatch):
    """The environment of a user who has not switched the hub off (unlike `make test`)."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("name", sorted(HF_PUBLISHED))
def test_hf_parameter_counts_equal_published(name, no_network, hub_allowed):
    class_name, expected = HF_PUBLISHED[name]
    case = resolve(name, meta=True)
    assert type(case.model).__name__ == class_name
    assert n_params(case.model) == expected
    assert no_network == []  # shipped configuration: the hub is not even asked


def test_hf_models_are_float32_and_in_eval_mode(no_network):
    # facebook/opt-125m's configuration says float16 (its weights' dtype): built in float32.
    case = resolve("facebook/opt-125m", meta=True)
    assert {p.dtype for p in case.model.parameters()} == {torch.float32}
    assert not case.model.training


def test_configurations_are_shipped_for_every_hf_name():
    from pytest_graphbudget.zoo import huggingface

    for name in huggingface.NAMES:
        data = json.loads(huggingface.config_path(name).read_text())
        assert data["model_type"]
        assert "auto_map" not in data


def test_unknown_hub_id_fails_fast_and_offline(no_network, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UnknownModelError, match="unknown model 'someorg/no-such-model'"):
        resolve("someorg/no-such-model")
    assert no_network == []


def test_unknown_hub_id_with_the_hub_unreachable(no_network, hub_allowed):
    # The hub may be asked for ids the zoo does not ship; when it cannot be reached the answer
    # is the ordinary unknown-name error, quickly, with no traceback from the HTTP stack.
    with pytest.raises(UnknownModelError, match="did you mean: facebook/opt-125m"):
        resolve("facebook/opt-126m")


# Inputs are chosen from forward's signature and the configuration, never from the name.
@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "bert-base-uncased",
            {"input_ids": (1, 128), "attention_mask": (1, 128), "token_type_ids": (1, 128)},
        ),
        ("roberta-base", {"input_ids": (1, 128), "attention_mask": (1, 128)}),
        ("microsoft/deberta-v3-base", {"input_ids": (1, 128), "attention_mask": (1, 128)}),
        ("distilbert-base-uncased", {"input_ids": (1, 128), "attention_mask": (1, 128)}),
        ("gpt2", {"input_ids": (1, 128), "attention_mask": (1, 128)}),
        (
            "t5-small",
            {"input_ids": (1, 128), "attention_mask": (1, 128), "decoder_input_ids": (1, 128)},
        ),
        (
            "facebook/bart-base",
            {"input_ids": (1, 128), "attention_mask": (1, 128), "decoder_input_ids": (1, 128)},
        ),
        (
            "facebook/detr-resnet-50",
            {"pixel_values": (1, 3, 800, 800), "pixel_mask": (1, 800, 800)},
        ),
    ],
)
def test_hf_inputs_come_from_the_forward_signature(name, expected, no_network):
    case = resolve(name, meta=True)
    assert case.inputs == ()
    assert shapes(case) == expected
    vocab = case.model.config.vocab_size if "input_ids" in expected else None
    if vocab is not None:
        ids = case.kwargs["input_ids"]
        assert ids.dtype == torch.long and 0 <= int(ids.min()) and int(ids.max()) < vocab


def test_hf_overrides_seq_len_batch_and_input_shape(no_network):
    case = resolve("bert-base-uncased", seq_len=64, batch=2, meta=True)
    assert set(shapes(case).values()) == {(2, 64)}
    case = resolve("t5-small", input_shape=(3, 32), meta=True)
    assert shapes(case)["decoder_input_ids"] == (3, 32)
    case = resolve("facebook/detr-resnet-50", input_shape="1,3,640,480", meta=True)
    assert shapes(case) == {"pixel_values": (1, 3, 640, 480), "pixel_mask": (1, 640, 480)}


def test_hf_seq_len_beyond_the_model_is_a_clear_error():
    with pytest.raises(GraphBudgetError, match="seq_len 1024 is longer than roberta-base"):
        resolve("roberta-base", seq_len=1024, meta=True)


def test_detr_needs_neither_timm_nor_a_download(no_network, hub_allowed):
    case = resolve("facebook/detr-resnet-50", meta=True)
    assert type(case.model).__name__ == "DetrForObjectDetection"
    assert case.model.config.num_queries == 100
    assert n_params(case.model) == 41_524_768
    assert "timm resnet50" in case.note
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
# TorchVision


@pytest.mark.parametrize(
    "name, shape",
    [
        ("resnet50", (1, 3, 224, 224)),
        ("inception_v3", (1, 3, 299, 299)),
        ("efficientnet_b7", (1, 3, 600, 600)),
        ("swin_v2_t", (1, 3, 256, 256)),
        ("vit_h_14", (1, 3, 224, 224)),  # built without weights it is a 224 model
        ("quantized_mobilenet_v2", (1, 3, 224, 224)),
        ("fcn_resnet50", (1, 3, 520, 520)),
        ("r3d_18", (1, 3, 16, 112, 112)),
        ("swin3d_t", (1, 3, 16, 224, 224)),
        ("s3d", (1, 3, 16, 224, 224)),
        ("mvit_v2_s", (1, 3, 16, 224, 224)),
        ("fasterrcnn_resnet50_fpn", (3, 800, 800)),  # detectors: a list of CxHxW images
        ("ssd300_vgg16", (3, 300, 300)),
    ],
)
def test_torchvision_default_input_is_the_models_own_size(name, shape, no_network):
    from torch.utils import _pytree as pytree

    case = resolve(name, meta=True)
    assert [tuple(x.shape) for x in pytree.tree_leaves(case.inputs)] == [shape]
    assert case.kwargs == {}
    assert not case.model.training
    assert no_network == []


def test_torchvision_optical_flow_takes_two_frames(no_network):
    case = resolve("raft_small", meta=True)
    assert [tuple(x.shape) for x in case.inputs] == [(1, 3, 368, 496)] * 2


def test_torchvision_params_equal_published(torchvision_reference, no_network):
    for name in ("resnet50", "mobilenet_v3_large", "vit_b_16", "fcn_resnet50", "r3d_18"):
        case = resolve(name, meta=True)
        assert n_params(case.model) == torchvision_reference(name).num_params, name


def test_torchvision_overrides(no_network):
    case = resolve("resnet18", batch=4)
    assert tuple(case.inputs[0].shape) == (4, 3, 224, 224)
    case = resolve("resnet18", input_shape=[2, 3, 128, 160])
    assert tuple(case.inputs[0].shape) == (2, 3, 128, 160)
    case = resolve("resnet18", seq_len=64)
    assert "seq_len ignored" in case.note


@pytest.mark.slow
def test_every_torchvision_name_builds_offline_as_published(torchvision_reference, no_network):
    import torchvision

    for name in torchvision.models.list_models():
        case = resolve(name, meta=True)
        assert case.inputs, name
        if name == "vit_h_14":  # published at 518 (larger position embeddings); built at 224
            continue
        assert n_params(case.model) == torchvision_reference(name).num_params, name
    assert no_network == []


# ---------------------------------------------------------------------------------------------
# Ultralytics


@pytest.mark.parametrize(
    "name, family, scale",
    [
        ("yolov8n", "yolov8", "n"),
        ("yolov8s", "yolov8", "s"),
        ("yolo11n", "yolo11", "n"),
        ("yolo12n", "yolo12", "n"),
        ("yolo26n", "yolo26", "n"),
    ],
)
def test_yolo_params_equal_the_yaml_comment(name, family, scale, no_network):
    from pytest_graphbudget.zoo.ultralytics import published_params

    # e.g. "n: [0.50, 0.25, 1024] # summary: 272 layers, 2,602,288 parameters, ..."
    expected = published_params(family, scale)
    assert expected is not None
    case = resolve(name, meta=True)
    assert n_params(case.model) == expected
    assert [tuple(x.shape) for x in case.inputs] == [(1, 3, 640, 640)]
    assert no_network == []


def test_yolov5u_names(no_network):
    # yolov5.yaml has no summary comments; ultralytics publishes 2.6M for YOLOv5nu.
    assert n_params(resolve("yolov5nu", meta=True).model) == 2_654_816
    assert resolve("yolov5n", meta=True).name == "yolov5nu"  # ultralytics' own renaming


def test_missing_pt_name_falls_back_to_its_yaml(tmp_path, monkeypatch, no_network):
    monkeypatch.chdir(tmp_path)
    case = resolve("yolov8n.pt", meta=True)
    assert case.name == "yolov8n"
    assert case.note == (
        "yolov8n.pt not found; built from yolov8n.yaml (FLOPs do not depend on weights)"
    )
    assert n_params(case.model) == 3_157_200
    assert list(tmp_path.iterdir()) == []  # nothing downloaded or written
    assert no_network == []


# ---------------------------------------------------------------------------------------------
# Local files


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return self.conv(x).relu()


def test_full_pickle_is_refused_without_trust(tmp_path):
    path = tmp_path / "tiny.pt"
    torch.save(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()), path)
    with pytest.raises(GraphBudgetError) as info:
        resolve(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert "full pickle" in message and "trust_pickle=True" in message
    case = resolve(str(path), trust_pickle=True, input_shape=(1, 3, 32, 32))
    assert isinstance(case.model, torch.nn.Sequential)
    assert tuple(case.inputs[0].shape) == (1, 3, 32, 32)


def test_full_pickle_names_the_projects_classes_first_in_every_process(tmp_path):
    # torch's finder returns the globals in a set's order (string hashes differ between
    # processes): the message must not, and the user's class is the one that matters
    path = tmp_path / "tiny.pt"
    torch.save(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()), path)
    code = (
        "from pytest_graphbudget.zoo import resolve\n"
        f"try:\n    resolve({str(path)!r})\nexcept Exception as exc:\n    print(exc)"
    )
    lines = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert lines == {
        f"{path} is a full pickle (torch.nn.modules.activation.ReLU, "  # the first two by name
        "torch.nn.modules.container.Sequential); loading it runs code from the file. "
        "Pass trust_pickle=True (--trust-pickle) if you trust it"
    }


def test_trusted_pickle_without_a_shape_asks_for_one(tmp_path):
    path = tmp_path / "tiny.pt"
    torch.save(torch.nn.Sequential(torch.nn.Linear(4, 4)), path)
    with pytest.raises(GraphBudgetError, match="pass input_shape"):
        resolve(str(path), trust_pickle=True)


def test_state_dict_is_refused(tmp_path):
    path = tmp_path / "weights.pth"
    torch.save(torch.nn.Linear(4, 4).state_dict(), path)
    with pytest.raises(GraphBudgetError, match="holds a state dict"):
        resolve(str(path))


def test_garbage_pt_file_is_a_clear_error(tmp_path):
    path = tmp_path / "broken.pt"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(GraphBudgetError) as info:
        resolve(str(path))
    assert "\n" not in str(info.value)


def test_ultralytics_checkpoint_loads_with_weights_only_safety(tmp_path, no_network):
    from pytest_graphbudget.zoo.ultralytics import import_ultralytics

    tasks = import_ultralytics().nn.tasks
    model = tasks.DetectionModel(cfg="yolov8n.yaml", verbose=False)
    path = tmp_path / "best.pt"
    torch.save({"model": model, "epoch": 3}, path)

    # The file references ultralytics classes, so a plain weights_only load refuses it...
    with pytest.raises(Exception, match="ultralytics"):
        torch.load(path, weights_only=True)
    # ...but the zoo loads it with weights_only=True against ultralytics' class allow-list.
    case = resolve(str(path))
    assert type(case.model).__name__ == "DetectionModel"
    assert n_params(case.model) == 3_157_200
    assert [tuple(x.shape) for x in case.inputs] == [(1, 3, 640, 640)]
    assert no_network == []


def write_bert_folder(folder, **overrides):
    config = {
        "model_type": "bert",
        "vocab_size": 1000,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "max_position_embeddings": 128,
        "type_vocab_size": 2,
        **overrides,
    }
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_folder_with_config_json(tmp_path, no_network):
    # The folder's name says "gpt2": the inputs still come from BERT's forward.
    folder = write_bert_folder(tmp_path / "gpt2-like")
    case = resolve(str(folder), seq_len=16)
    assert type(case.model).__name__ == "BertModel"
    embeddings = 1000 * 64 + 128 * 64 + 2 * 64 + 2 * 64
    layer = 4 * (64 * 64 + 64) + 2 * 64 + (64 * 128 + 128) + (128 * 64 + 64) + 2 * 64
    assert n_params(case.model) == embeddings + 2 * layer + (64 * 64 + 64)
    assert shapes(case) == {
        "input_ids": (1, 16),
        "attention_mask": (1, 16),
        "token_type_ids": (1, 16),
    }
    assert no_network == []


def test_folder_needing_remote_code_is_refused(tmp_path):
    folder = write_bert_folder(tmp_path / "custom", auto_map={"AutoModel": "modeling.Custom"})
    with pytest.raises(GraphBudgetError, match="trust_remote_code"):
        resolve(str(folder))


def test_yaml_file_builds_an_ultralytics_model(tmp_path, no_network):
    from pytest_graphbudget.zoo.ultralytics import yaml_file

    path = tmp_path / "mynet.yaml"
    path.write_text(yaml_file("yolov8").read_text().replace("nc: 80", "nc: 3"))
    case = resolve(str(path), meta=True)
    assert type(case.model).__name__ == "DetectionModel"
    assert case.model.yaml["nc"] == 3


def test_exported_program_carries_its_inputs(tmp_path):
    program = torch.export.export(Tiny().eval(), (torch.randn(1, 3, 16, 16),))
    path = tmp_path / "tiny.pt2"
    torch.export.save(program, path)
    case = resolve(str(path))
    assert [tuple(x.shape) for x in case.inputs] == [(1, 3, 16, 16)]


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
    # The prefixed families last: `graph-budget list` ends with timm's thousand names.
    assert families == [
        "local",
        "ultralytics",
        "huggingface",
        "torchvision",
        "diffusers",
        "timm",
    ]


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
    from pathlib import Path

    from pytest_graphbudget import zoo

    text = (Path(__file__).parents[2] / "docs" / "models.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    loader = next(b for b in blocks if b.startswith("# my_models/graphbudget.py"))
    usage = next(b for b in blocks if "plugin_manager().register" in b)
    script = tmp_path / "example.py"
    script.write_text(loader + "\n" + usage)
    own = zoo.make_plugin_manager()
    monkeypatch.setattr(zoo, "plugin_manager", lambda: own)
    runpy.run_path(str(script), run_name="__main__")
    assert capsys.readouterr().out.split() == ["131072"]
    assert "tinynets" in {type(loader).family for loader in zoo.loaders()}
