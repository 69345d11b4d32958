"""Which transformers class a configuration builds (``huggingface.build_case``).

``AutoModel`` knows the base class of most architectures, but not of about 200 configurations
transformers ships: the parts of a larger model a user may ship alone (CLAP's audio tower,
Kosmos-2's vision model, BLIP-2's vision model) and the architectures published only as task
models (UperNet, ViTPose, ZoeDepth, TrOCR). For those, the class comes from the configuration's
own modeling module, as a user who ships one imports it: the base class (``<Name>Model`` or
``<Name>``) where there is one, else the module's only class for that configuration (one it
does not export, where it exports none: Qwen2-VL's vision tower). Where the module has several
(a backbone and a classifier), none is guessed: the error names them.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError


def model_class(transformers: Any, config: Any, *, name: str) -> tuple[Any | None, str | None]:
    """``(class, note)``: None where ``AutoModel`` builds it; else the class and a note."""
    config_class = type(config)
    if config_class in transformers.MODEL_MAPPING:
        return None, None
    exported, internal = _module_classes(transformers, config_class)
    candidates = exported or internal
    stem = config_class.__name__.removesuffix("Config")
    base = [c for c in candidates if c.__name__ in (stem + "Model", stem)]
    chosen = candidates if len(candidates) == 1 else []
    if base:
        return base[0], None
    if chosen:
        built = chosen[0]
        return built, (
            f"built as {built.__name__}: transformers' AutoModel has no class for "
            f"{config_class.__name__}"
        )
    if candidates:
        names = ", ".join(sorted(c.__name__ for c in candidates))
        raise GraphBudgetError(
            f"cannot choose a model class for {name}: transformers' AutoModel has none for "
            f"{config_class.__name__} and its module has several ({names}); build the one you "
            "ship in a fixture"
        )
    raise GraphBudgetError(
        f"cannot build {name}: transformers has no model class for {config_class.__name__} "
        "(it configures part of a larger model); build the model that holds it, or the part, "
        "in a fixture"
    )


def _module_classes(transformers: Any, config_class: type) -> tuple[list[type], list[type]]:
    """The model classes of the configuration's modeling module that take that configuration:
    those the module exports, and those it does not (Qwen2-VL's vision tower,
    ``Qwen2VisionTransformerPretrainedModel``, is built only inside the model that holds it),
    which count only where it exports none: an exported decoder's inner stack is not another
    choice."""
    module_name = config_class.__module__.replace(".configuration_", ".modeling_")
    if module_name == config_class.__module__:
        return [], []
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return [], []
    exported = set(getattr(module, "__all__", ()))
    found: tuple[list[type], list[type]] = ([], [])
    for attribute in sorted(set(dir(module)) | exported):
        cls = getattr(module, attribute, None)
        if (
            inspect.isclass(cls)
            and issubclass(cls, transformers.PreTrainedModel)
            and getattr(cls, "config_class", None) is config_class
            and "PreTrainedModel" not in cls.__name__  # a base, not a model
            and cls not in found[0] + found[1]  # a class exported under two names counts once
        ):
            found[0 if attribute in exported else 1].append(cls)
    return found
