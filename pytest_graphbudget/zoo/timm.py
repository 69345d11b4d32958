"""timm (PyTorch Image Models): every name in ``timm.list_models()``, built without weights.

Names are ``timm:NAME`` (``timm:resnet50``); the hub's spelling ``timm/NAME`` is the same model,
and either may carry one of the model's pretrained tags after a dot
(``timm/vit_base_patch16_224.augreg_in21k``). The model is
``timm.create_model(NAME[.TAG], pretrained=False)``: timm reads the tag's pretrained
configuration from its own registry (the number of classes, and the image size of models built
for one size), so the architecture is the one that checkpoint has; without a tag it is the
model's default tag, as ``timm.create_model(NAME)`` gives. No weights are requested and nothing
touches the hub: names with a ``hf-hub:`` prefix or a local checkpoint are never passed on.

The input is one image at the pretrained configuration's ``input_size`` (``resnet50`` 3x224x224,
``vit_base_patch16_384`` 3x384x384, ``eva02_large_patch14_448`` 3x448x448), batch 1.

Every ``timm:`` or ``timm/`` name is this loader's (a ``timm/NAME`` is never taken for a Hugging
Face hub id): a name timm does not list is reported with the closest ones it does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.zoo.base import LoadOptions, ModelLoader, NotFound

if TYPE_CHECKING:
    from pytest_graphbudget.case import ModelCase

PREFIXES = ("timm:", "timm/")
# The input when a model's pretrained configuration gives none (timm's own default).
DEFAULT_INPUT_SIZE = (3, 224, 224)


def split(name: str) -> tuple[str, str | None]:
    """``(architecture, tag)`` of ``timm:NAME[.TAG]`` or ``timm/NAME[.TAG]``."""
    rest = name[len(PREFIXES[0]) :]
    arch, _, tag = rest.partition(".")
    return arch, tag or None


class TimmLoader(ModelLoader):
    family = "timm"

    def names(self) -> list[str]:
        try:
            import timm
        except ImportError:
            return []
        return [PREFIXES[0] + name for name in timm.list_models()]

    def can_load(self, name: str) -> bool:
        # Cheap: the prefix alone, no import. An unlisted name is NotFound in ``load``.
        return name.casefold().startswith(PREFIXES) and len(name) > len(PREFIXES[0])

    def load(self, name: str, options: LoadOptions) -> ModelCase:
        from pytest_graphbudget.case import ModelCase
        from pytest_graphbudget.zoo._build import build_module, image

        timm = _import_timm()
        arch, tag = split(name)
        known = {known.casefold(): known for known in timm.list_models()}
        if arch.casefold() not in known:
            raise NotFound(PREFIXES[0] + arch)
        arch = known[arch.casefold()]
        full = arch if tag is None else f"{arch}.{_checked_tag(timm, arch, tag)}"

        def factory():
            import torch

            # Seeded weights, as every zoo model: the same name builds the same model (the
            # caller's random state is left as it was).
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                return timm.create_model(full, pretrained=False)

        model = build_module(factory, options.meta)
        channels, height, width = _input_size(model)
        shape = options.image_shape((1, channels, height, width))
        note = f"seq_len ignored: {full} takes images" if options.seq_len is not None else None
        return ModelCase(model, (image(shape),), {}, name=PREFIXES[0] + full, note=note)


def _checked_tag(timm: Any, arch: str, tag: str) -> str:
    """``tag`` as timm spells it, or a one-line error listing the tags ``arch`` has."""
    tags = [pretrained.partition(".")[2] for pretrained in timm.list_pretrained(f"{arch}.*")]
    by_fold = {known.casefold(): known for known in tags}
    if tag.casefold() in by_fold:
        return by_fold[tag.casefold()]
    listed = ", ".join(tags) if tags else "none"
    raise GraphBudgetError(
        f"timm has no pretrained tag {tag!r} for {arch}; its tags: {listed} "
        f"(or timm:{arch} for its default)"
    )


def _input_size(model: Any) -> tuple[int, int, int]:
    cfg = getattr(model, "pretrained_cfg", None) or {}
    size = cfg.get("input_size") or DEFAULT_INPUT_SIZE
    channels, height, width = (int(dim) for dim in size)
    return channels, height, width


def _import_timm() -> Any:
    try:
        import timm
    except ImportError as exc:
        raise GraphBudgetError(
            "timm models need timm: pip install 'pytest-graphbudget[timm]'"
        ) from exc
    return timm
