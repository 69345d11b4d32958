"""The profile cache, ``.graph_budget_cache/``: one JSON profile per key.

A key hashes everything the figures depend on, so that a stale profile is never reused:

- ``environment()``: the cache format, Python's version, torch's version and git commit, every
  installed distribution's version, this package's bytes (its formulas, tracer and shipped
  model configurations), and the switches that change what a trace captures (torch's default
  dtype, the attention fast paths, the hub's offline settings);
- for a module: ``fingerprint.fingerprint`` of it, which covers every piece of project code and
  data its forward can reach (helpers in any file, constants, config dicts, hooks,
  hyper-parameters, small integer buffers); for a zoo name: the name, its options and the bytes
  of the local file or folder it names;
- the inputs' shapes, dtypes and non-tensor values, the hardware profile, and how the model is
  profiled (``variant.Variant.options()``: mode, optimizer, dtype).

A model that reaches something with no sound description gets no key (``Unfingerprintable``):
it is profiled every time instead of risking a stale profile. A corrupt entry is ignored (and
rebuilt by the caller).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytest_graphbudget.run.fingerprint import Unfingerprintable, describe, fingerprint

__all__ = ["DIRECTORY", "ProfileCache", "Unfingerprintable", "environment", "module_key"]

DIRECTORY = ".graph_budget_cache"
FORMAT = 2
"""Bumped whenever what a key covers changes, so older entries are never read."""

SWITCH_VARIABLES = (
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_ENDPOINT",
    "HF_HOME",
    "HF_HUB_CACHE",
    "YOLO_OFFLINE",
)
"""Environment variables that change which configuration a zoo name is built from."""

WHOLE_FILE_BYTES = 1 << 20
"""Files of a local model up to this size are hashed whole; bigger ones (weights) by size and
modification time."""


@functools.cache
def _package_digest() -> str:
    """Hash of this package's files: a change to a formula invalidates every profile."""
    digest = hashlib.sha256()
    root = Path(__file__).parents[1]
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".json", ".yaml", ".toml"):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def _distributions() -> str:
    """Every installed distribution and its version (imported or not, so that a key never
    depends on what happened to be imported first), hashed: library code is not walked."""
    from importlib.metadata import distributions

    found = sorted({f"{d.metadata['Name']}=={d.version}" for d in distributions()})
    return hashlib.sha256("\n".join(found).encode()).hexdigest()


def _torch_build() -> list[str]:
    """torch's version and the commit it was built from, read without importing torch
    (``compat.torch_build``): the key is the same whether or not something imported it first."""
    from pytest_graphbudget.compat import torch_build

    found = torch_build()
    return list(found) if found else ["torch: absent"]


def default_switches() -> dict[str, Any]:
    """torch's own settings as the installed release starts (checked in a fresh process by
    ``tests/test_compat.py`` on each torch of the compat matrix), from its version. A key
    names only the settings that differ (asked once torch is imported), so that it is the
    same before torch is imported, when nothing can have set them, as after."""
    from pytest_graphbudget.compat import torch_at_least

    return {
        "default_dtype": "torch.float32",
        "mha_fastpath": True,
        "flash_sdp": True,
        "mem_efficient_sdp": True,
        "math_sdp": True,
        "cudnn_sdp": torch_at_least(2, 5),  # on by default since 2.5 (pytorch#125343)
    }


def _switches() -> dict[str, Any]:
    """Runtime settings that change the captured graph (read each time: tests flip them):
    the environment's, and torch's where they differ from ``default_switches``."""
    found: dict[str, Any] = {v: os.environ.get(v) for v in SWITCH_VARIABLES}
    torch = sys.modules.get("torch")
    if torch is not None:
        defaults = default_switches()
        for key, value in torch_switches(torch).items():
            if value is not None and value != defaults.get(key):  # None: no such switch
                found[key] = value
    return found


def torch_switches(torch: Any) -> dict[str, Any]:
    """The settings of ``torch`` (imported) that change what a trace captures."""
    found: dict[str, Any] = {"default_dtype": str(torch.get_default_dtype())}
    backends = torch.backends
    fastpath = getattr(getattr(backends, "mha", None), "get_fastpath_enabled", None)
    found["mha_fastpath"] = fastpath() if fastpath else None
    for name in ("flash", "mem_efficient", "math", "cudnn"):
        getter = getattr(backends.cuda, f"{name}_sdp_enabled", None)
        found[f"{name}_sdp"] = getter() if getter else None
    return found


def environment() -> list[Any]:
    """What every key shares: versions, this package's bytes and the switches."""
    return [
        FORMAT,
        [*sys.version_info[:3], sys.implementation.name, sys.flags.optimize],
        _torch_build(),
        _distributions(),
        _package_digest(),
        _switches(),
    ]


def module_key(
    model: Any, args: tuple, kwargs: dict[str, Any], hardware: str, variant: Any = None
) -> str:
    """The cache key of a module profiled at these inputs on this hardware (and ``variant``,
    ``profile_model``'s mode/optimizer/dtype keywords); raises ``Unfingerprintable`` when the
    module reaches something with no sound description."""
    inputs = describe([list(args), kwargs])
    return _hash(["module", environment(), hardware, fingerprint(model), inputs, variant or {}])


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


def name_key(name: str, options: dict[str, Any], hardware: str, variant: Any = None) -> str | None:
    """The cache key of a zoo model built by name, or ``None`` when the name says too little
    and the model must be keyed by what it builds (a pickled module, whose classes live in the
    project; a model of another package's loader, whose code is not walked)."""
    from pytest_graphbudget import zoo
    from pytest_graphbudget.zoo.local import LocalLoader

    files, family = None, None
    if all(_builtin(loader) for loader in zoo.loaders()):
        # The built-in loaders alone: the local one, asked first, takes files and folders.
        # Which other one takes a name is not asked (asking imports torchvision, seconds of
        # a warm run): the environment in the key covers their libraries.
        family = "local" if LocalLoader().can_load(name) else None
    else:  # a plugin's loader, asked first, may take it: its code is not walked
        found = zoo.find_loader(name)
        if found is not None:
            if not _builtin(found[0]):
                return None
            family, name = found[0].family, found[1]
    if family == "local":
        path = Path(name).expanduser()
        if path.suffix.lower() in (".pt", ".pth"):
            return None
        files = _files_digest(path)
    return _hash(["zoo", environment(), name, files, describe(options), hardware, variant or {}])


def _builtin(loader: Any) -> bool:
    return type(loader).__module__.startswith("pytest_graphbudget.")


def _files_digest(path: Path) -> str:
    """The bytes of a local model file, or of every file in a model folder (big files, the
    weights, by size and modification time)."""
    digest = hashlib.sha256()
    paths = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for item in paths:
        stat = item.stat()
        digest.update(str(item.relative_to(path) if path.is_dir() else item.name).encode())
        if stat.st_size <= WHOLE_FILE_BYTES:
            digest.update(item.read_bytes())
        else:
            digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


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
            with contextlib.suppress(OSError):  # a read-only cache keeps it, unused
                path.unlink(missing_ok=True)  # corrupt: ignore it, the caller rebuilds it
            return None
        return data if isinstance(data, dict) and "totals" in data else None

    def put(self, key: str, data: dict[str, Any]) -> None:
        """Store ``data`` under ``key``; raises ``OSError`` when the cache cannot be written
        (read-only, a file where a directory goes), which the caller says and goes on past:
        the profile itself is good."""
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
