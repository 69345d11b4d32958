"""The profile cache, ``.graph_budget_cache/``: one JSON profile per key.

A key hashes everything the figures depend on, so that a stale profile is never reused:

- the installed versions of torch and the model libraries, and the bytes of this package
  (its formulas, tracer and shipped model configurations);
- for a module: every submodule's class, the source of that class and its ``extra_repr``
  (layer hyper-parameters), a Hugging Face ``config``, and every parameter's and buffer's
  name, shape and dtype; for a zoo name: the name and its options;
- the inputs' shapes, dtypes and non-tensor values, and the hardware profile.

A corrupt entry is ignored (and rebuilt by the caller).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

DIRECTORY = ".graph_budget_cache"
LIBRARIES = ("torch", "torchvision", "transformers", "ultralytics", "timm")


@functools.cache
def _package_digest() -> str:
    """Hash of this package's files: a change to a formula invalidates every profile."""
    digest = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".json", ".yaml", ".toml"):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def _versions() -> tuple[str, ...]:
    """Installed versions of torch and the model libraries (imported or not, so that a key
    never depends on what happened to be imported first)."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in LIBRARIES:
        try:
            found.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            found.append(f"{name}: absent")
    return tuple(found)


@functools.cache
def _class_source(cls: type) -> str:
    try:
        return hashlib.sha256(inspect.getsource(cls).encode()).hexdigest()
    except (OSError, TypeError):
        return f"{cls.__module__}.{cls.__qualname__}"


def _describe(value: Any) -> Any:
    torch = sys.modules.get("torch")  # a zoo name's options hold no tensor: don't import torch
    if torch is not None and isinstance(value, torch.Tensor):
        return ["tensor", list(value.shape), str(value.dtype)]
    if isinstance(value, dict):
        return {str(k): _describe(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    return repr(value)


def module_key(model: Any, args: tuple, kwargs: dict[str, Any], hardware: str) -> str:
    """The cache key of a module profiled at these inputs on this hardware."""
    parts: list[Any] = ["module", _package_digest(), _versions(), hardware]
    for name, module in model.named_modules():
        cls = type(module)
        parts.append(
            [name, f"{cls.__module__}.{cls.__qualname__}", _class_source(cls), module.extra_repr()]
        )
    config = getattr(model, "config", None)
    if hasattr(config, "to_json_string"):
        parts.append(config.to_json_string())
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        parts.append([name, list(tensor.shape), str(tensor.dtype)])
    parts.append(_describe([list(args), kwargs]))
    return _hash(parts)


DATA_DEPENDENT = ("dynamo-breaks", "eager")
"""Tiers whose profile is the path one real forward took: it depends on values, not only
shapes, so their cache entries also record a digest of the values they were measured on."""


def values_digest(model: Any, args: tuple, kwargs: dict[str, Any]) -> str:
    """A digest of the values of every input tensor, parameter and buffer."""
    from torch.utils import _pytree as pytree

    digest = hashlib.sha256()
    state = list(model.parameters()) + list(model.buffers())
    for leaf in pytree.tree_leaves((args, kwargs)) + state:
        torch = sys.modules["torch"]
        if not isinstance(leaf, torch.Tensor):
            digest.update(repr(leaf).encode())
        elif leaf.is_meta:
            digest.update(b"meta")
        else:
            flat = leaf.detach().cpu().contiguous().reshape(-1)
            digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:32]


def name_key(name: str, options: dict[str, Any], hardware: str) -> str:
    """The cache key of a zoo model built by name with these options."""
    return _hash(["zoo", _package_digest(), _versions(), name, _describe(options), hardware])


def _hash(parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


class ProfileCache:
    """Profiles as JSON files under ``root``; ``None`` on a miss or a corrupt entry."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        path = self._path(key)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            path.unlink(missing_ok=True)  # corrupt: ignore it, the caller rebuilds it
            return None
        return data if isinstance(data, dict) and "totals" in data else None

    def put(self, key: str, data: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        (self.root / ".gitignore").write_text("*\n")
        handle, temp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(handle, "w") as out:
            json.dump(data, out)
        os.replace(temp, path)

    def clear(self) -> None:
        import shutil

        shutil.rmtree(self.root, ignore_errors=True)
