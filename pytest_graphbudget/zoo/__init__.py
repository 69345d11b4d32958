"""The model zoo: names resolve to a model and example inputs, with no network access.

    from pytest_graphbudget.zoo import resolve, list_models
    case = resolve("bert-base-uncased", seq_len=256)     # a ModelCase
    list_models()                                          # {"torchvision": [...], ...}

Names are resolved by loaders, one per model family (``torchvision.py``, ``huggingface.py``,
``ultralytics.py``, ``timm.py``, ``diffusers.py``, ``local.py``), collected through the
``graphbudget_model_loaders`` pluggy hook so that other packages can add their own. Importing
this package does not import torch or any model library; a loader imports its framework when it
builds a model.
"""

from __future__ import annotations

import difflib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_graphbudget import hookspecs
from pytest_graphbudget.case import rss_bytes
from pytest_graphbudget.errors import UnknownModelError
from pytest_graphbudget.hookspecs import plugin_manager  # the process-wide one
from pytest_graphbudget.zoo.base import LoadOptions, ModelLoader, NotFound, check_loader

if TYPE_CHECKING:
    import pluggy

    from pytest_graphbudget.case import ModelCase

__all__ = [
    "LoadOptions",
    "ModelLoader",
    "at_root",
    "list_models",
    "loaders",
    "make_plugin_manager",
    "plugin_manager",
    "resolve",
]

_FILE_SUFFIXES = (".pt", ".pth", ".pt2", ".yaml", ".yml", ".json", ".safetensors")


def resolve(
    name: str | os.PathLike[str],
    *,
    seq_len: int | None = None,
    batch: int | None = None,
    input_shape: tuple[int, ...] | list[int] | str | None = None,
    meta: bool | None = None,
    trust_pickle: bool = False,
) -> ModelCase:
    """Build the model called ``name`` and its example inputs, in eval mode.

    ``name`` is a zoo name (``resnet50``, ``bert-base-uncased``, ``yolov8n``, ``timm:resnet50``,
    ``diffusers:stable-diffusion-v1-5/unet``), a ``.pt`` name or path, or a folder with a
    ``config.json``. ``seq_len``, ``batch`` and ``input_shape`` override the defaults;
    ``meta=True`` builds without allocating weights (``None``: only models above 300M
    parameters); ``trust_pickle`` allows full pickles (they run code).

    Raises ``UnknownModelError`` (with the closest known names) when no loader knows ``name``.
    """
    options = LoadOptions(
        seq_len=seq_len,
        batch=batch,
        input_shape=tuple(input_shape) if isinstance(input_shape, list) else input_shape,
        meta=meta,
        trust_pickle=trust_pickle,
    )
    name = os.fspath(name)
    if not isinstance(name, str) or not name.strip():
        raise UnknownModelError(f"a model name must be a non-empty string, got {name!r}")
    name = name.strip()
    found = find_loader(name)
    if found is None:
        raise UnknownModelError(_unknown_message(name))
    loader, canonical = found
    start = time.perf_counter()
    try:
        case = loader.load(canonical, options)
    except NotFound as exc:  # a loader took the name but found nothing: suggest close names
        raise UnknownModelError(_unknown_message(exc.name)) from None
    case.load_seconds = time.perf_counter() - start
    case.load_rss_bytes = rss_bytes()
    if case.name is None:
        case.name = canonical
    return case


def at_root(name: str, root: str | os.PathLike[str]) -> str:
    """``name`` as a budget file of the project at ``root`` means it, for ``resolve`` from
    the current directory: a file or folder relative to ``root`` (``cfg_llama``,
    ``weights/best.pt``), whichever directory the run started in; a zoo name as written.

    A name written as a path (a folder in it, ``./``) that ``root`` does not hold, or a file
    found only beside the current directory, is a one-line ``UnknownModelError`` naming it:
    never a zoo model of a similar name (``weights/yolov8n.pt`` is not ``yolov8n``), never
    another directory's file.
    """
    from pytest_graphbudget.zoo.local import LocalLoader

    written = name.strip()
    path = Path(written).expanduser()
    if not written or path.is_absolute():
        return written
    target = Path(root) / path
    if LocalLoader().can_load(str(target)) or (target.exists() and _written_as_path(written)):
        try:
            return os.path.relpath(target)  # as the loaders open it, and their messages say
        except ValueError:  # another drive
            return str(target)
    if _written_as_path(written) or LocalLoader().can_load(written):
        raise UnknownModelError(
            f"{written}: no such file or directory in the project's root {root} (a model "
            "path in a budget file is relative to the root, wherever the run starts)"
        )
    return written


def _written_as_path(name: str) -> bool:
    """``./x``, ``../x``, or a folder and a file suffix (``weights/best.pt``); an ``org/name``
    hub id is a name."""
    slashed = name.replace("\\", "/")
    if slashed.startswith(("./", "../")):
        return True
    return "/" in slashed and slashed.casefold().endswith(_FILE_SUFFIXES)


def find_loader(name: str) -> tuple[ModelLoader, str] | None:
    """The loader that takes ``name`` and the name it knows it by, or ``None``.

    Loaders are asked in hook order (plugins first). A name no loader accepts as written is
    retried, case-insensitively, against the names the loaders list.
    """
    all_loaders = loaders()
    for loader in all_loaders:
        if loader.can_load(name):
            return loader, name
    folded = name.casefold()
    for loader in all_loaders:
        for known in loader.names():
            if known.casefold() == folded:
                return loader, known
    return None


def list_models() -> dict[str, list[str]]:
    """Every named model, by family (families without names, such as local paths, are left
    out). Listing imports the model libraries that are installed."""
    families: dict[str, list[str]] = {}
    for loader in loaders():
        names = loader.names()
        if names:
            families.setdefault(loader.family, []).extend(names)
    return {family: sorted(set(names), key=str.casefold) for family, names in families.items()}


def loaders() -> list[ModelLoader]:
    """The loaders of every registered plugin, in the order names are offered to them."""
    pm = with_builtins(plugin_manager())
    found: list[ModelLoader] = []
    for result in pm.hook.graphbudget_model_loaders():
        for loader in result or ():
            check_loader(loader, "a graphbudget_model_loaders hook")
            found.append(loader)
    return found


BUILTIN = "graphbudget-builtin-loaders"


def make_plugin_manager(*, entry_points: bool = True) -> pluggy.PluginManager:
    """A fresh plugin manager with the built-in loaders and, unless ``entry_points`` is false,
    the plugins of every installed package under the ``graphbudget`` entry-point group."""
    return with_builtins(hookspecs.make_plugin_manager(entry_points=entry_points))


def with_builtins(pm: pluggy.PluginManager) -> pluggy.PluginManager:
    """``pm`` with the built-in loaders registered (once; ``trylast``, so after every plugin)."""
    from pytest_graphbudget.zoo import builtin

    if not pm.has_plugin(BUILTIN):
        pm.register(builtin, name=BUILTIN)
    return pm


def _looks_like_path(name: str) -> bool:
    """A file name or path rather than a model name (``org/name`` hub ids are names)."""
    if name.casefold().endswith((*_FILE_SUFFIXES, ".py")) or os.path.exists(name):
        return True
    if name.startswith((".", "~")) or os.path.isabs(name):
        return True
    separators = name.count(os.sep) + (name.count(os.altsep) if os.altsep else 0)
    return separators > 1


def _unknown_message(name: str) -> str:
    if _looks_like_path(name):
        if not os.path.exists(name):
            return f"{name}: no such file or directory, and not a model name the zoo knows"
        return (
            f"{name}: not a model the zoo can load (a .pt/.pth/.pt2 file, a YOLO .yaml or a "
            f"folder with config.json is expected)"
        )
    known = [known for names in list_models().values() for known in names]
    by_fold = {}
    for known_name in known:
        by_fold.setdefault(known_name.casefold(), known_name)
    folded = name.casefold()
    close = [key for key in sorted(by_fold) if key.startswith(folded)][:3]
    for key in difflib.get_close_matches(folded, list(by_fold), n=5, cutoff=0.6):
        if key not in close:
            close.append(key)
    # Also match the part after an organisation prefix ("gpt-neo-125m" -> EleutherAI/...).
    if len(close) < 5:
        tails = {key.rsplit("/", 1)[-1]: key for key in by_fold if "/" in key}
        for tail in difflib.get_close_matches(folded, list(tails), n=5, cutoff=0.6):
            if tails[tail] not in close:
                close.append(tails[tail])
    hint = "`graph-budget list` shows every name"
    if close:
        suggestions = ", ".join(by_fold[key] for key in close[:5])
        return f"unknown model {name!r}; did you mean: {suggestions}? ({hint})"
    return f"unknown model {name!r} ({hint}; a .pt file or a folder with config.json also works)"
