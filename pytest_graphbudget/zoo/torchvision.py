"""TorchVision: every name in ``torchvision.models.list_models()``, built without weights.

Each model gets the input size it is published at, read from its default weights (never
downloaded): the crop size of the classification transforms (``inception_v3`` 299,
``efficientnet_b7`` 600, ...), the resize size of the segmentation transforms (520), the crop
size of the video transforms with 16-frame clips (``r3d_18`` 16x112x112, ``s3d`` 16x224x224),
and the ``min_size`` of a detector's own transform (800, ``*_320_fpn`` and ``ssdlite320`` 320,
``ssd300_vgg16`` 300), given as the list of images detectors take. A model built
for one size only keeps it (``vit_h_14`` without weights is a 224 model, although its default
weights are 518). Backbone weights are never requested either (``weights_backbone=None``).
FCN and DeepLabV3 keep the auxiliary classifier their published weights have, GoogLeNet drops
its training-only ones, and detectors get the frozen batch norm of their published backbones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_graphbudget.zoo.base import LoadOptions, ModelLoader

if TYPE_CHECKING:
    from pytest_graphbudget.case import ModelCase

# Optical flow has no published input size in its weights; this is the FlyingChairs training
# crop RAFT was trained on, a multiple of 8 as RAFT requires.
OPTICAL_FLOW_SIZE = (368, 496)
# Video clips: 16 frames, the clip torchvision's published GMACs (``_ops``) are computed at for
# every video model (their accuracy is measured on longer clips for some: 32 for Video Swin,
# 128 for S3D).
CLIP_LEN = 16

# Models whose own weight init (scipy's truncated normal) is slow and warns when left implicit;
# the values of the weights do not change any figure.
SCIPY_INIT = {"googlenet", "inception_v3", "quantized_googlenet", "quantized_inception_v3"}

# Detectors whose published weights come with a frozen batch norm in the backbone (torchvision
# picks FrozenBatchNorm2d whenever weights are given): built the same way, so that parameters
# (its affine terms are buffers) and the per-element cost match the published model.
FROZEN_BN_DETECTION = {
    "fasterrcnn_mobilenet_v3_large_320_fpn",
    "fasterrcnn_mobilenet_v3_large_fpn",
    "fasterrcnn_resnet50_fpn",
    "fcos_resnet50_fpn",
    "keypointrcnn_resnet50_fpn",
    "maskrcnn_resnet50_fpn",
    "retinanet_resnet50_fpn",
}

# Segmentation models whose published weights include the auxiliary classifier (torchvision
# builds them with ``aux_loss=True`` whenever weights are given, and the head runs in eval).
AUX_SEGMENTATION = {
    "fcn_resnet50",
    "fcn_resnet101",
    "deeplabv3_resnet50",
    "deeplabv3_resnet101",
    "deeplabv3_mobilenet_v3_large",
}


# Builder keywords, beyond ``weights=None``, that make the architecture the published one.
AS_PUBLISHED: tuple[tuple[frozenset[str], dict], ...] = (
    (frozenset(AUX_SEGMENTATION), {"aux_loss": True}),  # the aux head runs in eval too
    (frozenset(SCIPY_INIT), {"init_weights": False}),  # PyTorch's init: no scipy, no warning
    # torchvision drops GoogLeNet's training-only classifiers whenever weights are given
    (frozenset({"googlenet", "quantized_googlenet"}), {"aux_logits": False}),
)


class TorchVisionLoader(ModelLoader):
    family = "torchvision"

    def names(self) -> list[str]:
        try:
            from torchvision import models
        except ImportError:
            return []
        return list(models.list_models())

    def can_load(self, name: str) -> bool:
        return name in self.names()

    def load(self, name: str, options: LoadOptions) -> ModelCase:
        from pytest_graphbudget.case import ModelCase
        from pytest_graphbudget.zoo._build import build_module

        kwargs = builder_kwargs(name)
        model = build_module(lambda: seeded_model(name, kwargs), options.meta)
        note = f"seq_len ignored: {name} takes images" if options.seq_len is not None else None
        inputs = example_inputs(name, model, options)
        trains = (inputs[0], targets(name, inputs[0])) if task_of(name) == "detection" else None
        return ModelCase(model, inputs, {}, name=name, note=note, train_inputs=trains)


def builder_kwargs(name: str) -> dict:
    """The keywords ``models.get_model(name, ...)`` builds the published architecture with,
    without weights: no backbone weights either, the float model of a quantizable one (quant
    stubs, no quantized engine), and the rows of ``AS_PUBLISHED`` that name it."""
    task = task_of(name)
    kwargs: dict = {"weights": None}
    if task in ("segmentation", "detection"):
        kwargs["weights_backbone"] = None
    if task == "quantization":
        kwargs["quantize"] = False
    for names, extra in AS_PUBLISHED:
        if name in names:
            kwargs.update(extra)
    return kwargs


def seeded_model(name: str, kwargs: dict):
    """``models.get_model(name, **kwargs)`` with seeded weights, as published: a detector's cost
    depends on how many boxes survive its thresholds, so the same name must always build the
    same model (the caller's random state is left as it was); detectors get the frozen batch
    norm of their published backbones."""
    import torch
    from torchvision import models

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = models.get_model(name, **kwargs)
    if name in FROZEN_BN_DETECTION:
        _freeze_batch_norm(model.backbone)
    return model


def example_inputs(name: str, model, options: LoadOptions) -> tuple:
    """The positional inputs at the published size (``default_input_shape``) or the options':
    two frames for optical flow, a list of CxHxW images for a detector (its transform resizes
    and batches them, one per batch element), one tensor otherwise."""
    from pytest_graphbudget.zoo._build import image

    task = task_of(name)
    if task == "optical_flow":
        shape = options.image_shape((1, 3, *OPTICAL_FLOW_SIZE))
        return (image(shape), image(shape))
    shape = options.image_shape(default_input_shape(name, model))
    if task == "detection":
        batch, *chw = shape
        return ([image(tuple(chw)) for _ in range(batch)],)
    return (image(shape),)


def targets(name: str, images: list) -> list[dict]:
    """A detector's training targets, which it needs to train ("targets should not be none
    when in training mode"): one object per image, a box over its middle quarter, of class 1,
    with the mask (Mask R-CNN) and the 17 visible keypoints (Keypoint R-CNN) inside it. The box
    heads train on a fixed number of sampled boxes; the mask and keypoint heads on those that
    overlap a target."""
    import torch

    found = []
    for img in images:
        height, width = img.shape[-2:]
        box = torch.tensor([[width / 4, height / 4, 3 * width / 4, 3 * height / 4]])
        target = {"boxes": box, "labels": torch.tensor([1])}
        if name.startswith("maskrcnn"):
            target["masks"] = torch.zeros(1, height, width, dtype=torch.uint8)
            target["masks"][:, height // 4 : 3 * height // 4, width // 4 : 3 * width // 4] = 1
        if name.startswith("keypointrcnn"):
            x = torch.linspace(width / 4, 3 * width / 4, 17)
            y = torch.linspace(height / 4, 3 * height / 4, 17)
            target["keypoints"] = torch.stack([x, y, torch.ones(17)], dim=-1)[None]
        found.append(target)
    return found


def task_of(name: str) -> str:
    """The task of a TorchVision model name (the submodule that registers it)."""
    from torchvision import models

    submodules = {
        "segmentation": models.segmentation,
        "video": models.video,
        "detection": models.detection,
        "optical_flow": models.optical_flow,
        "quantization": models.quantization,
    }
    for task, module in submodules.items():
        if name in models.list_models(module=module):
            return task
    return "classification"


def default_input_shape(name: str, model=None) -> tuple[int, ...]:
    """The input shape ``name`` is published at (batch 1), read from its default weights' meta
    and transforms (nothing is downloaded). For optical flow, the shape of each of the two
    frames."""
    from torchvision import models

    task = task_of(name)
    if task == "optical_flow":
        return (1, 3, *OPTICAL_FLOW_SIZE)
    if task == "detection":
        transform = getattr(model, "transform", None)
        size = int(getattr(transform, "min_size", (800,))[-1])  # the size eval resizes to
        return (1, 3, size, size)

    weights = models.get_model_weights(name).DEFAULT
    transforms = weights.transforms()
    if task == "segmentation":
        size = _first(getattr(transforms, "resize_size", None), 520)
        return (1, 3, size, size)
    crop = list(getattr(transforms, "crop_size", None) or [224])
    height, width = (crop[0], crop[-1])
    if model is not None and isinstance(getattr(model, "image_size", None), int):
        height = width = model.image_size  # ViTs are built for one size
    if task == "video":
        frames = max(CLIP_LEN, int(weights.meta.get("min_temporal_size", 1)))
        return (1, 3, frames, height, width)
    return (1, 3, height, width)


def published(name: str) -> dict:
    """TorchVision's published figures for ``name``'s default weights: ``gmacs`` (its ``_ops``,
    at the weights' own input size) and ``params``. Empty when torchvision publishes none."""
    from torchvision import models

    try:
        meta = models.get_model_weights(name).DEFAULT.meta
    except (ValueError, AttributeError):
        return {}
    out = {}
    if "_ops" in meta:
        out["gmacs"] = float(meta["_ops"])
    if "num_params" in meta:
        out["params"] = int(meta["num_params"])
    return out


def _freeze_batch_norm(module) -> None:
    """Replace every ``BatchNorm2d`` under ``module`` by torchvision's ``FrozenBatchNorm2d``."""
    from torch import nn
    from torchvision.ops import FrozenBatchNorm2d

    for parent in list(module.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, nn.BatchNorm2d):
                frozen = FrozenBatchNorm2d(child.num_features, eps=child.eps)
                setattr(parent, child_name, frozen.to(child.weight.device))


def _first(value, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, (list, tuple)):
        return int(value[0]) if value else default
    return int(value)
