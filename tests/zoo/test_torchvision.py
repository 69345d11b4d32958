"""TorchVision by name (``zoo/torchvision.py``): every name builds offline, at the size it is
published at, with the parameter count torchvision publishes (its weights' metadata, which
ships inside torchvision: nothing is downloaded)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_graphbudget.zoo import list_models, resolve  # noqa: E402


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_every_torchvision_name_is_listed():
    import torchvision

    assert set(list_models()["torchvision"]) == set(torchvision.models.list_models())


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


@pytest.mark.sweep
def test_every_torchvision_name_builds_offline_as_published(torchvision_reference, no_network):
    import torchvision

    for name in torchvision.models.list_models():
        case = resolve(name, meta=True)
        assert case.inputs, name
        if name == "vit_h_14":  # published at 518 (larger position embeddings); built at 224
            continue
        assert n_params(case.model) == torchvision_reference(name).num_params, name
    assert no_network == []
