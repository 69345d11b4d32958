"""The environment a figure was measured in: python, torch, the libraries that build models,
this package and the project being measured.

Our counts are exact, but the counter is torch's graph and our formulas: a new torch (another
decomposition) or a new pytest-graphbudget (another formula) can move a figure with no change
to the model. A baseline, a history line and a report carry the environment, so that such a
move is said to be the counter's, not blamed on a layer.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping
from pathlib import Path

COUNTERS = ("torch", "pytest-graphbudget")
"""The versions that change how figures are counted; the others are context."""
LIBRARIES = ("torchvision", "transformers", "timm", "diffusers", "ultralytics")
"""Recorded when installed: they build models (the zoo's families), and a new one may build
another model. Installed, not imported: a run whose models all came from the profile cache
imports none of them, and the baseline's ``[environment]`` lost and regained ``timm`` with
the cache's state."""


def project_version(root: Path | None) -> str | None:
    """``name version`` of the project at ``root`` from its ``pyproject.toml``, if it says."""
    if root is None:
        return None
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text("utf-8")).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    name, version = project.get("name"), project.get("version")
    if isinstance(name, str) and version is None and "version" in project.get("dynamic", []):
        version = _installed(name)  # setuptools-scm, hatch-vcs, an attr: as installed
    if not isinstance(name, str) or not isinstance(version, str):
        return None
    return f"{name} {version}"


def _installed(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def current(root: Path | None = None) -> dict[str, str]:
    """This process's environment, as strings: python, torch, the model libraries installed,
    pytest-graphbudget and (when its pyproject.toml says) the project."""
    from pytest_graphbudget.compat import torch_build

    torch = sys.modules.get("torch")
    version = torch.__version__ if torch else (torch_build() or ("absent",))[0]
    found = {"python": platform.python_version(), "torch": str(version)}
    for name in LIBRARIES:
        # the distribution's version first: torchvision's module says 0.29.1+cu130 where its
        # wheel says 0.29.1, and the line would flip with whether this run imported it
        version = _installed(name) or getattr(sys.modules.get(name), "__version__", None)
        if version:
            found[name] = str(version)
    # Read, not imported: the root package is imported before this module, and sits above
    # every layer (``pytest_graphbudget.__version__``, the version's one source).
    found["pytest-graphbudget"] = sys.modules["pytest_graphbudget"].__version__
    project = project_version(root)
    if project:
        found["project"] = project
    return found


def counter_moved(then: Mapping[str, str], now: Mapping[str, str]) -> str:
    """``counter may have changed: torch 2.14.1 -> 2.15.0`` when a counting version differs
    between the environment figures were recorded in and this one; "" when it does not (or
    the record does not say: an old baseline has no environment)."""
    moved = [
        f"{name} {then[name]} -> {now[name]}"
        for name in COUNTERS
        if then.get(name) and now.get(name) and then[name] != now[name]
    ]
    return f"counter may have changed: {', '.join(moved)}" if moved else ""


RECORDED = ("python", "torch", *LIBRARIES, "pytest-graphbudget", "project")
"""The keys ``current`` writes to a baseline's ``[environment]``."""


def recorded(table: object) -> tuple[dict[str, str], tuple[tuple[str, ...], str] | None]:
    """A baseline's ``[environment]`` as written, and its first problem (the key path and
    what is wrong) when hand-edited: an unknown or misspelt key, a version that is not a
    string. Either would drop the "counter may have changed" note from a regression."""
    import difflib

    if not isinstance(table, Mapping):
        return {}, ((), f"environment must be a table of versions, got {table!r}")
    for key, value in table.items():
        if key not in RECORDED:  # a near miss only: "tolerance" is not a misspelt "torch"
            near = difflib.get_close_matches(str(key), RECORDED, 1, 0.75)
            hint = f" (did you mean {near[0]!r}?)" if near else f"; keys: {', '.join(RECORDED)}"
            return {}, ((key,), f"unknown key {key!r} in [environment]{hint}")
        if not isinstance(value, str):
            return {}, ((key,), f"[environment] {key} must be a version string, got {value!r}")
    return dict(table), None
