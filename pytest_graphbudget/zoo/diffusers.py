"""diffusers models, built from configuration, never from weights.

Two kinds of names, both with the ``diffusers:`` prefix:

- ``diffusers:PIPELINE/COMPONENT`` (``diffusers:stable-diffusion-v1-5/unet``): one component of
  a published pipeline, built from its public ``config.json``, shipped with this package as
  ``configs/diffusers/<PIPELINE>--<COMPONENT>.json``. The hub's ids of the pipeline work too
  (``diffusers:runwayml/stable-diffusion-v1-5/unet``);
- ``diffusers:CLASS`` (``diffusers:UNet2DConditionModel``): a model class of ``diffusers.models``
  with its default configuration, ``CLASS()``. Only the classes of ``INPUTS`` are listed: those
  whose example inputs the zoo knows how to make.

The class is the configuration's ``_class_name`` (``Transformer2DModel`` configurations of DiT
and PixArt become ``DiTTransformer2DModel`` and ``PixArtTransformer2DModel``, as diffusers'
own ``from_config`` remaps them). Weights are seeded, in float32; models above 300M parameters
are built on the meta device (``_build.build_module``). Nothing touches the hub.

Example inputs come from ``INPUTS``, one row per class (see ``Inputs``): the main input (the
latent ``sample`` or ``hidden_states``) at the configuration's ``sample_size``, a timestep, and
the text conditioning the pipeline gives it (CLIP's 77 tokens for the UNets; ``seq_len``
changes the text length).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.zoo.base import LoadOptions, ModelLoader, NotFound

if TYPE_CHECKING:
    from pytest_graphbudget.case import ModelCase

PREFIX = "diffusers:"
CONFIG_DIR = Path(__file__).with_name("configs") / "diffusers"

# The pipelines whose components ship (configs/diffusers/<name>--<component>.json), and the hub
# ids that name them.
PIPELINES: dict[str, tuple[str, ...]] = {
    "stable-diffusion-v1-5": (
        "stable-diffusion-v1-5/stable-diffusion-v1-5",
        "runwayml/stable-diffusion-v1-5",
    ),
    "stable-diffusion-xl-base-1.0": ("stabilityai/stable-diffusion-xl-base-1.0",),
    "stable-diffusion-3-medium": ("stabilityai/stable-diffusion-3-medium-diffusers",),
    "DiT-XL-2-256": ("facebook/DiT-XL-2-256",),
    "FLUX.1-dev": ("black-forest-labs/FLUX.1-dev",),
}

CLIP_TOKENS = 77
# FLUX's latent image: a 1024x1024 image is 128x128 latents, packed 2x2 into 64x64 tokens.
FLUX_TOKENS = 64 * 64


@dataclass(frozen=True)
class Inputs:
    """How to make one class's example inputs.

    ``main`` names the input that ``input_shape`` and ``batch`` shape, ``shape(config)`` is its
    default shape at batch 1; ``extra(model, shape, text)`` makes the others from the main
    input's shape (its first dimension is the batch) and the text length; ``text`` is the
    default length of the text conditioning (``seq_len`` replaces it), ``None`` when the model
    takes no text.
    """

    main: str
    shape: Callable[[Mapping[str, Any]], tuple[int, ...]]
    extra: Callable[[Any, tuple[int, ...], int], dict[str, Any]]
    text: int | None = None


def _square(default: int) -> Callable[[Mapping[str, Any]], tuple[int, ...]]:
    """``(1, in_channels, S, S)``, S the configuration's ``sample_size`` (``default`` if none)."""

    def shape(config: Mapping[str, Any]) -> tuple[int, ...]:
        size = config.get("sample_size") or default
        height, width = (size, size) if isinstance(size, int) else tuple(size)
        return (1, int(config.get("in_channels") or 3), int(height), int(width))

    return shape


def _steps(batch: int, value: float = 500, *, floating: bool = False) -> Any:
    import torch

    return torch.full((batch,), value, dtype=torch.float32 if floating else torch.long)


def _states(batch: int, length: int, dim: int) -> Any:
    from pytest_graphbudget.zoo._build import image

    return image((batch, length, int(dim)))


def _nothing(model: Any, shape: tuple[int, ...], text: int) -> dict[str, Any]:
    return {}


def _timestep(model: Any, shape: tuple[int, ...], text: int) -> dict[str, Any]:
    return {"timestep": _steps(shape[0])}


def _unet_condition(model: Any, shape: tuple[int, ...], text: int) -> dict[str, Any]:
    """SD 1.x/2.x: the text's hidden states; SDXL (``text_time``): also the pooled text
    embedding and the six size and crop conditions."""
    import torch

    config, batch = model.config, shape[0]
    unsupported = {
        key: config.get(key)
        for key in ("class_embed_type", "num_class_embeds", "encoder_hid_dim_type")
        if config.get(key) is not None
    }
    if config.get("addition_embed_type") not in (None, "text_time"):
        unsupported["addition_embed_type"] = config.get("addition_embed_type")
    if not isinstance(config["cross_attention_dim"], int):  # one per block
        unsupported["cross_attention_dim"] = config["cross_attention_dim"]
    if unsupported:
        raise GraphBudgetError(
            f"no example inputs for a UNet2DConditionModel with {unsupported}; build the "
            "ModelCase yourself in a fixture"
        )
    kwargs = {
        "timestep": _steps(batch),
        "encoder_hidden_states": _states(batch, text, config["cross_attention_dim"]),
    }
    if config.get("addition_embed_type") == "text_time":
        time_dim = config["addition_time_embed_dim"]
        pooled = config["projection_class_embeddings_input_dim"] - 6 * time_dim
        kwargs["added_cond_kwargs"] = {
            "text_embeds": _states(batch, 1, pooled)[:, 0],
            "time_ids": torch.tensor([[1024.0, 1024.0, 0.0, 0.0, 1024.0, 1024.0]] * batch),
        }
    return kwargs


def _dit(model: Any, shape: tuple[int, ...], text: int) -> dict[str, Any]:
    return {"timestep": _steps(shape[0]), "class_labels": _steps(shape[0], 0)}


def _pixart(model: Any, shape: tuple[int, ...], text: int) -> dict[str, Any]:
    import torch

    config, batch = model.config, shape[0]
    # The T5 features, projected when the model has a caption projection (the published ones).
    text_dim = config.get("caption_channels") or config["cross_attention_dim"]
    conditions: dict[str, Any] = {"resolution": None, "aspect_ratio": None}
    if model.use_additional_conditions:  # the 1024 models: image size and aspect ratio
        height, width = 8.0 * shape[2], 8.0 * shape[3]  # the VAE's 8x
        conditions = {
            "resolution": torch.tensor([[height, width]] * batch),
            "aspect_ratio": torch.ones(batch, 1),
        }
    return {
        "encoder_hidden_states": _states(batch, text, text_dim),
        "timestep": _steps(batch),
        "added_cond_kwargs": conditions,
    }


def _sd3(model: Any, shape: tuple[int, ...], text: int) -> dict[str, Any]:
    config, batch = model.config, shape[0]
    return {
        "encoder_hidden_states": _states(batch, text, config["joint_attention_dim"]),
        "pooled_projections": _states(batch, 1, config["pooled_projection_dim"])[:, 0],
        "timestep": _steps(batch, 500.0, floating=True),
    }


def _flux_ids(tokens: int) -> Any:
    """FLUX's image position ids: ``(0, row, column)`` of each packed latent token, on the
    squarest grid of ``tokens``."""
    import torch

    rows = max(r for r in range(1, int(tokens**0.5) + 1) if tokens % r == 0)
    grid = torch.zeros(rows, tokens // rows, 3)
    grid[..., 1] = torch.arange(rows)[:, None]
    grid[..., 2] = torch.arange(tokens // rows)[None, :]
    return grid.reshape(tokens, 3)


def _flux(model: Any, shape: tuple[int, ...], text: int) -> dict[str, Any]:
    import torch

    config, batch = model.config, shape[0]
    kwargs = {
        "encoder_hidden_states": _states(batch, text, config["joint_attention_dim"]),
        "pooled_projections": _states(batch, 1, config["pooled_projection_dim"])[:, 0],
        "timestep": _steps(batch, 0.5, floating=True),  # the pipeline's t / 1000
        "img_ids": _flux_ids(shape[1]),
        "txt_ids": torch.zeros(text, 3),
    }
    if config.get("guidance_embeds"):
        kwargs["guidance"] = _steps(batch, 3.5, floating=True)
    return kwargs


# One row per class: the inputs its pipeline gives it. Also the classes `diffusers:CLASS` builds
# from their defaults.
INPUTS: dict[str, Inputs] = {
    "UNet2DModel": Inputs("sample", _square(64), _timestep),
    "UNet2DConditionModel": Inputs("sample", _square(64), _unet_condition, text=CLIP_TOKENS),
    "AutoencoderKL": Inputs("sample", _square(512), _nothing),
    "AutoencoderTiny": Inputs("sample", _square(512), _nothing),
    "VQModel": Inputs("sample", _square(256), _nothing),
    "DiTTransformer2DModel": Inputs("hidden_states", _square(32), _dit),
    # PixArt-alpha's T5 prompt: 120 tokens.
    "PixArtTransformer2DModel": Inputs("hidden_states", _square(128), _pixart, text=120),
    # SD3's prompt: CLIP's 77 tokens and T5's 256, concatenated.
    "SD3Transformer2DModel": Inputs("hidden_states", _square(128), _sd3, text=CLIP_TOKENS + 256),
    # FLUX.1-dev's T5 prompt: 512 tokens; the latents come packed as tokens of in_channels.
    "FluxTransformer2DModel": Inputs(
        "hidden_states", lambda c: (1, FLUX_TOKENS, c["in_channels"]), _flux, text=512
    ),
}


def shipped() -> dict[str, Path]:
    """``PIPELINE/COMPONENT`` -> its shipped configuration file."""
    return {path.stem.replace("--", "/"): path for path in sorted(CONFIG_DIR.glob("*--*.json"))}


def _aliases() -> dict[str, str]:
    """Every accepted spelling after the prefix (case-folded) -> the name it stands for."""
    table = {cls.casefold(): cls for cls in INPUTS}
    for name in shipped():
        pipeline, component = name.split("/")
        for spelling in (pipeline, *PIPELINES.get(pipeline, ())):
            table[f"{spelling}/{component}".casefold()] = name
    return table


class DiffusersLoader(ModelLoader):
    family = "diffusers"

    def names(self) -> list[str]:
        if importlib.util.find_spec("diffusers") is None:
            return []
        return [PREFIX + name for name in (*shipped(), *INPUTS)]

    def can_load(self, name: str) -> bool:
        # Cheap: the prefix alone, no import. An unknown name is NotFound in ``load``.
        return name.casefold().startswith(PREFIX) and len(name) > len(PREFIX)

    def load(self, name: str, options: LoadOptions) -> ModelCase:
        from pytest_graphbudget.case import ModelCase
        from pytest_graphbudget.zoo._build import build_module, image

        known = _aliases().get(name[len(PREFIX) :].casefold())
        if known is None:
            raise NotFound(name)
        config = None if known in INPUTS else json.loads(shipped()[known].read_text())
        model_class = _model_class(known if config is None else config["_class_name"])

        def factory():
            import torch

            from pytest_graphbudget.quiet import held

            with torch.random.fork_rng(devices=[]), held(f"building {known}"):
                torch.manual_seed(0)
                return model_class() if config is None else model_class.from_config(config)

        model = build_module(factory, options.meta)
        kind = INPUTS.get(type(model).__name__)
        if kind is None:
            raise GraphBudgetError(
                f"no example inputs for {type(model).__name__} ({name}); build the ModelCase "
                "yourself in a fixture"
            )
        shape = options.image_shape(kind.shape(model.config))
        text = options.seq_len or kind.text or 0
        kwargs = {kind.main: image(shape), **kind.extra(model, shape, text)}
        note = None
        if options.seq_len is not None and kind.text is None:
            note = f"seq_len ignored: {known} takes no text"
        return ModelCase(model, (), kwargs, name=PREFIX + known, note=note)


def _model_class(class_name: str) -> Any:
    """``diffusers.<class_name>``, imported under ``held``: diffusers imports its model modules
    on first use, and with them torchao, whose import logs torch's deprecation notes."""
    from pytest_graphbudget.quiet import held

    try:
        with held(f"importing diffusers.{class_name}"):
            import diffusers

            found = getattr(diffusers, class_name, None)
    except ImportError as exc:
        raise GraphBudgetError(
            "diffusers models need diffusers: pip install 'pytest-graphbudget[diffusers]'"
        ) from exc
    if found is None:
        raise GraphBudgetError(f"diffusers {diffusers.__version__} has no model {class_name}")
    return found
