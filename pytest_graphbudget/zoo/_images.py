"""Example images for Hugging Face models (``huggingface.example_inputs``), from the
configuration: ``pixel_values`` at its ``image_size`` and a ``pixel_mask`` of ones. A video
model (VideoMAE, TimeSformer, ViViT: ``num_frames`` in its configuration) gets a clip,
``batch x num_frames x channels x H x W``, as its video processor stacks the frames, and a
keypoint matcher (SuperGlue, LightGlue, EfficientLoFTR) a pair, ``batch x 2 x channels x H x
W``, at the 480 x 640 its image processor resizes to. SigLIP 2's
NaFlex (``spatial_shapes`` in its forward) gets its patches flattened (``naflex_inputs``), and
so does a Qwen-VL-style vision tower (``grid_thw`` in its forward: ``grid_inputs``).

A model that takes its clip as ``pixel_values_videos`` (V-JEPA 2, VideoPrism: the frames
and size in its configuration or its ``vision_config``) gets ``batch x frames x channels x H x
W``, beside its text for VideoPrism's CLIP-style model.

A model that takes text and an image gets both where its forward reads the two apart (CLIP,
SigLIP: the image at its ``vision_config``'s size; ViLT at its own ``image_size``; Grounding
DINO, whose forward requires the image, at a detector's size). A DETR-style detector's image
is the side its image processor resizes to (``DETECTION_SIZES``); OneFormer's task
(``task_inputs``) is ``task_seq_len`` token ids, as its processor tokenizes "the task is
semantic". A vision-language model (LLaVA, Qwen-VL,
Gemma 3, PaliGemma: a configuration with ``image_token_id`` or ``image_token_index``) places
the image's features at placeholder tokens in its text, which example token ids do not hold:
given an image beside them its forward raises, so it gets the text alone, said in a note.
"""

from __future__ import annotations

import math
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.zoo.base import LoadOptions, written_shape

DETECTION_SIZES = {
    # DETR-style detectors and segmenters: the shortest edge their image processors resize to
    # (800, longest 1333), or the square they resize to (RT-DETR's and D-FINE's 640)
    **dict.fromkeys(
        ("detr", "conditional_detr", "table-transformer", "deformable_detr", "dab-detr"), 800
    ),
    **dict.fromkeys(("grounding-dino", "mm-grounding-dino", "maskformer", "mask2former"), 800),
    "oneformer": 800,
    **dict.fromkeys(("rt_detr", "rt_detr_v2", "d_fine"), 640),
}
DEFAULT_IMAGE_SIZE = 224
PAIR_IMAGE_SIZE = (480, 640)  # keypoint matchers: what their image processors resize to
IMAGE_TOKENS = ("image_token_id", "image_token_index")


def reads_image_tokens(config: Any) -> bool:
    """Whether the model's text carries its image, as placeholder tokens."""
    return any(getattr(config, key, None) is not None for key in IMAGE_TOKENS)


def takes_image(params: Any, config: Any) -> bool:
    """Whether the example inputs include an image (see the module's docstring)."""
    if "grid_thw" in params:
        return True
    if "pixel_values" not in params:
        return False
    if "input_ids" in params:  # an image beside text: one the forward reads apart from it
        needs = params["pixel_values"].default is params["pixel_values"].empty
        sized = any(getattr(config, k, None) is not None for k in ("vision_config", "image_size"))
        return (sized or needs) and not reads_image_tokens(config)
    return True


def takes_video(params: Any, config: Any) -> bool:
    """Whether the model takes a clip as ``pixel_values_videos`` alone (V-JEPA 2, VideoPrism:
    their configuration has the clip's frames), not at video tokens in its text."""
    if "pixel_values_videos" not in params or "pixel_values" in params:
        return False
    if reads_image_tokens(config) or getattr(config, "video_token_id", None) is not None:
        return False
    return _clip(config) is not None


def _clip(config: Any) -> tuple[int, int, int] | None:
    """A video model's ``(frames, channels, side)``: ``num_frames`` or ``frames_per_clip``, at
    ``image_size`` or ``crop_size`` (its own configuration's or its ``vision_config``'s)."""
    seen = getattr(config, "vision_config", None) or config
    frames = getattr(seen, "num_frames", None) or getattr(seen, "frames_per_clip", None)
    side = getattr(seen, "image_size", None) or getattr(seen, "crop_size", None)
    if not (isinstance(frames, int) and isinstance(side, int)):
        return None
    return frames, getattr(seen, "num_channels", 3) or 3, side


def image_inputs(params: Any, config: Any, options: LoadOptions) -> dict:
    """``pixel_values`` (and ``pixel_mask``) for a model ``takes_image`` accepts, or the
    ``pixel_values_videos`` of one ``takes_video`` accepts."""
    import torch

    from pytest_graphbudget.zoo._build import image, token_ids

    if takes_video(params, config):
        frames, channels, side = _clip(config)  # type: ignore[misc]
        shape = options.image_shape((options.batch or 1, frames, channels, side, side))
        return {"pixel_values_videos": image(shape)}
    if "grid_thw" in params:
        return grid_inputs(params, config, options)
    seen = getattr(config, "vision_config", None) if "input_ids" in params else None
    seen = seen if seen is not None else sized(config)
    patches = getattr(seen, "num_patches", None)
    if "spatial_shapes" in params and isinstance(patches, int):
        return naflex_inputs(seen, options, patches)
    channels = getattr(seen, "num_channels", 3) or 3
    height, width = image_size(seen, detection=DETECTION_SIZES.get(config.model_type))
    frames = getattr(seen, "num_frames", None)  # a video model: a clip of its frames
    clip = (frames,) if isinstance(frames, int) else ()
    if matches_pairs(config):  # two images whose keypoints it matches
        clip = (2,)
        if getattr(seen, "image_size", None) is None:
            height, width = PAIR_IMAGE_SIZE
    shape = options.image_shape((options.batch or 1, *clip, channels, height, width))
    kwargs = {"pixel_values": image(shape)}
    if "pixel_mask" in params:
        kwargs["pixel_mask"] = torch.ones(shape[0], *shape[-2:], dtype=torch.long)
    length = getattr(config, "task_seq_len", None)
    if "task_inputs" in params and isinstance(length, int):  # OneFormer: its task, as text
        vocab = config.text_encoder_vocab_size
        kwargs["task_inputs"] = token_ids(shape[0], length, vocab, low=3)
    return kwargs


def matches_pairs(config: Any) -> bool:
    """Whether the model matches keypoints across two images (transformers' keypoint-matching
    models: ``pixel_values`` of ``batch x 2 x channels x H x W``)."""
    from transformers.models.auto import modeling_auto

    pairs = getattr(modeling_auto, "MODEL_FOR_KEYPOINT_MATCHING_MAPPING_NAMES", {})
    return getattr(config, "model_type", None) in pairs


def sized(config: Any) -> Any:
    """The configuration that sizes an image-only model's input: its own, else that of the
    part that reads the image (SAM's ``vision_config``: 1024 x 1024; ViTPose's
    ``backbone_config``: 256 x 192), which the model checks the image against."""
    if getattr(config, "image_size", None) is not None:
        return config
    for part in ("vision_config", "backbone_config"):
        inner = getattr(config, part, None)
        if getattr(inner, "image_size", None) is not None:
            return inner
    return config


def image_size(config: Any, *, detection: int | None = None) -> tuple[int, int]:
    """A DETR-style detector's side (``DETECTION_SIZES``: what its processor resizes to,
    whatever its backbone's nominal size, such as Grounding DINO's Swin at 224); else the
    configuration's ``image_size``; else, for a model that cuts its image into patches at
    several scales (Depth Pro: ``patch_size`` and ``scaled_images_ratios``), the side whose
    smallest scale is one patch (1,536, what its processor resizes to); else 224."""
    if detection:
        return detection, detection
    size = getattr(config, "image_size", None)
    ratios, patch = getattr(config, "scaled_images_ratios", None), getattr(config, "patch_size", 0)
    if size is None and ratios and isinstance(patch, int) and patch > 0:
        size = math.ceil(patch / min(ratios))
    if isinstance(size, int):
        return size, size
    if isinstance(size, (list, tuple)) and len(size) == 2:
        return int(size[0]), int(size[1])
    return DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE


def naflex_inputs(config: Any, options: LoadOptions, patches: int) -> dict:
    """SigLIP 2's NaFlex: the image as ``num_patches`` flattened patches of a square grid, a
    ``pixel_attention_mask`` of ones over them and the grid's ``spatial_shapes``, as its
    processor gives a square image."""
    import torch

    from pytest_graphbudget.zoo._build import image

    flat = config.num_channels * config.patch_size**2
    shape = options.image_shape((options.batch or 1, patches, flat))
    side = math.isqrt(shape[1])
    if side * side != shape[1] or shape[2] != flat:
        raise GraphBudgetError(
            f"input shape {written_shape(shape)}: a NaFlex model takes (batch, patches, {flat}), "
            "its patches a square grid such as 256 (16 x 16)"
        )
    return {
        "pixel_values": image(shape),
        "pixel_attention_mask": torch.ones(shape[:2], dtype=torch.long),
        "spatial_shapes": torch.tensor([[side, side]] * shape[0], dtype=torch.long),
    }


def grid_inputs(params: Any, config: Any, options: LoadOptions) -> dict:
    """A Qwen-VL-style vision tower (Qwen2.5-VL's, Qwen3-VL's, GLM-4V's: ``grid_thw`` in its
    forward, ``temporal_patch_size`` in its configuration) takes an image as its processor
    gives it: ``t x h x w`` patches of ``channels x temporal_patch_size x patch x patch``
    values (the image repeated over the temporal patch), the images' patches one after the
    other, and ``(t, h, w)`` in ``grid_thw``, one row an image. The default image is 224 x 224
    rounded up to a multiple of ``patch_size x spatial_merge_size``, as the processor resizes
    one; ``batch`` images, one after the other. ``input_shape``, like the tensor's shape, is
    ``(patches, values)``: one square image of that many patches (a 256 x 256 image in 16-pixel
    patches: 16 x 16 = 256).
    A tower of another layout gets nothing here, and the caller's error names what its forward
    requires."""
    import torch

    from pytest_graphbudget.zoo._build import image

    patch = getattr(config, "patch_size", None)
    frames = getattr(config, "temporal_patch_size", None)
    merge = getattr(config, "spatial_merge_size", 1)
    if not all(isinstance(value, int) for value in (patch, frames, merge)):
        return {}
    channels = getattr(config, "in_channels", None) or getattr(config, "num_channels", 3)
    flat, batch = channels * frames * patch * patch, options.batch or 1
    usual = -(-DEFAULT_IMAGE_SIZE // (patch * merge)) * merge  # an image's side, in patches
    shape = tuple(options.input_shape or (batch * usual * usual, flat))
    side = math.isqrt(shape[0] // batch)
    if len(shape) != 2 or shape[1] != flat or batch * side * side != shape[0] or side % merge:
        raise GraphBudgetError(
            f"input shape {written_shape(options.input_shape)}: this vision tower takes "
            f"(patches, {flat}), the patches of a square image a multiple of {merge} patches "
            f"wide, such as {written_shape((usual * usual, flat))} (one image, "
            f"{usual} x {usual})"
        )
    grid = (1, side, side)
    key = "hidden_states" if "hidden_states" in params else "pixel_values"
    return {
        key: image(shape),
        "grid_thw": torch.tensor([grid] * batch, dtype=torch.long),
    }
