"""The corpus's models: the names of each family, and each model built with its inputs.

- ``timm``: every name of ``timm.list_models()``, ``timm.create_model(name, pretrained=False)``,
  one image of the model's ``pretrained_cfg["input_size"]``, batch 1;
- ``hf``: every model type of transformers' ``CONFIG_MAPPING``, ``AutoConfig.for_model(type)``
  with its defaults, built and fed by the zoo's own ``huggingface.build_case`` (the base
  ``AutoModel``, inputs from ``forward``'s signature), the text no longer than the
  configuration's positions;
- ``diffusers``: the zoo's ``diffusers:`` names: each model class it knows inputs for, built
  from its default configuration (``CLASS()``), and the published pipelines' components whose
  configurations it ships; the inputs are the zoo's, made from the configuration
  (``sample_size``, ``in_channels``, ``cross_attention_dim``...).

A model of up to ``threshold`` parameters gets real weights; a larger one stays on the meta
device, where it was first built to count them (FlopCounterMode then runs it on fake twins of
its weights, ``corpus_measure.forward``). Nothing is downloaded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FAMILIES = ("timm", "hf", "diffusers")
TITLES = {"timm": "timm", "hf": "transformers", "diffusers": "diffusers"}
THRESHOLD = 100_000_000  # parameters above which a model stays on the meta device
TIMM_INPUT = (3, 224, 224)  # timm's own default when a configuration gives none


class Skip(Exception):
    """The model cannot be built or fed from its defaults: not a finding about the profiler."""


@dataclass
class Built:
    """A model ready to run: its inputs, whether it is on the meta device, how long it took."""

    model: Any
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    meta: bool = False
    build_s: float = 0.0


def names(family: str) -> list[str]:
    """Every name the corpus tries in ``family``, sorted; empty when its library is missing."""
    try:
        return sorted(LISTERS[family]())
    except ImportError:
        return []


def build(family: str, name: str, threshold: int = THRESHOLD) -> Built:
    """``name`` of ``family`` built with its inputs; ``Skip`` with the reason when it cannot be."""
    import torch

    start = time.perf_counter()
    torch.manual_seed(0)
    try:
        built = BUILDERS[family](name, threshold)
    except Skip:
        raise
    except Exception as exc:  # every failure to build is the model's, told in one line
        raise Skip(f"build: {one_line(exc)}") from exc
    built.build_s = time.perf_counter() - start
    return built


def count_params(model: Any) -> int:
    """Unique parameters: tied weights once (``parameters()`` yields a shared one once)."""
    return sum(p.numel() for p in model.parameters())


def on_meta(model: Any) -> bool:
    return any(p.is_meta for p in model.parameters())


def one_line(exc: BaseException, limit: int = 240) -> str:
    """``Type: message`` on one line, cut to ``limit`` characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# timm


def _timm_names() -> list[str]:
    import timm

    return timm.list_models()


def _timm(name: str, threshold: int) -> Built:
    import timm

    from pytest_graphbudget.zoo._build import build_module, image

    model = build_module(
        lambda: timm.create_model(name, pretrained=False), None, threshold=threshold
    )
    size = (getattr(model, "pretrained_cfg", None) or {}).get("input_size") or TIMM_INPUT
    return Built(model, (image((1, *(int(d) for d in size))),), {}, meta=on_meta(model))


# ---------------------------------------------------------------------------------------------
# transformers


def _hf_names() -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return list(CONFIG_MAPPING.keys())


def _hf(model_type: str, threshold: int) -> Built:
    """Built twice through the zoo's ``build_case``: on the meta device to count, then with
    real weights when small enough (each from a fresh default configuration)."""
    import transformers

    from pytest_graphbudget.zoo import huggingface
    from pytest_graphbudget.zoo.base import LoadOptions

    def case(meta: bool) -> Any:
        config = transformers.AutoConfig.for_model(model_type)
        # no seq_len: the zoo's own default, cut to the model's positions, as a user gets it
        return huggingface.build_case(config, model_type, LoadOptions(meta=meta))

    found = case(True)  # a configuration with no class to build: the zoo's one-line error
    if count_params(found.model) <= threshold:
        found = case(False)
    return Built(found.model, tuple(found.inputs), dict(found.kwargs), meta=on_meta(found.model))


# ---------------------------------------------------------------------------------------------
# diffusers


def _diffusers_names() -> list[str]:
    import diffusers  # noqa: F401  (no diffusers, no family)

    from pytest_graphbudget.zoo.diffusers import PREFIX, DiffusersLoader

    return [name[len(PREFIX) :] for name in DiffusersLoader().names()]


def _diffusers(name: str, threshold: int) -> Built:
    from pytest_graphbudget.zoo.base import LoadOptions
    from pytest_graphbudget.zoo.diffusers import PREFIX, DiffusersLoader

    found = DiffusersLoader().load(PREFIX + name, LoadOptions(meta=True))
    if count_params(found.model) <= threshold:
        found = DiffusersLoader().load(PREFIX + name, LoadOptions(meta=False))
    return Built(found.model, tuple(found.inputs), dict(found.kwargs), meta=on_meta(found.model))


LISTERS: dict[str, Callable[[], list[str]]] = {
    "timm": _timm_names,
    "hf": _hf_names,
    "diffusers": _diffusers_names,
}
BUILDERS: dict[str, Callable[[str, int], Built]] = {
    "timm": _timm,
    "hf": _hf,
    "diffusers": _diffusers,
}
