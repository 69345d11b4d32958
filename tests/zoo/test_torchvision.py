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


@pytest.mark.parametrize(
    "name",
    ["fasterrcnn_mobilenet_v3_large_320_fpn", "maskrcnn_resnet50_fpn", "keypointrcnn_resnet50_fpn"],
)
def test_a_detector_trains_on_targets_torchvision_accepts(name, no_network):
    """A detector's step raised "targets should not be none when in training mode": the zoo
    gives it targets, checked here by torchvision's own transform and ROI heads."""
    case = resolve(name, batch=2, meta=True)  # the transform and the checks hold no weights
    images, targets = case.train_inputs
    assert images is case.inputs[0] and len(targets) == 2
    model = case.model
    with torch.no_grad():  # resizes the images, and their boxes, masks and keypoints
        batch, resized = model.transform(images, targets)
    model.roi_heads.check_targets(resized)
    for target, (height, width) in zip(resized, batch.image_sizes, strict=True):
        middle = [width / 4, height / 4, 3 * width / 4, 3 * height / 4]  # its middle quarter
        assert target["boxes"].tolist() == [pytest.approx(middle)]
        assert target["labels"].tolist() == [1]
        assert ("masks" in target, "keypoints" in target) == (
            name.startswith("maskrcnn"),
            name.startswith("keypointrcnn"),
        )
        if "masks" in target:
            assert tuple(target["masks"].shape) == (1, height, width)
        if "keypoints" in target:
            assert tuple(target["keypoints"].shape) == (1, 17, 3)
    assert resolve("resnet18").train_inputs is None  # a classifier trains on its inputs


@pytest.mark.slow
def test_a_detectors_training_step_holds_its_sampled_boxes_heads():
    """Hand count: in training the box head runs on 512 sampled proposals per image
    (``box_batch_size_per_image``), its two layers 256 x 7 x 7 -> 1024 -> 1024, forward and
    the two products of each layer's backward (the pooled features need a gradient too).
    The rest of the step (backbone, RPN, predictor) is at most three times its forward."""
    from pytest_graphbudget import profile_model

    name = "fasterrcnn_mobilenet_v3_large_320_fpn"
    step = profile_model(name, mode="train")
    head = 512 * (256 * 7 * 7 * 1024 + 1024 * 1024)
    assert step.macs > 3 * head
    assert step.macs < 3 * head + 3 * 2.5e9  # its eval forward: 0.72 GMACs published
