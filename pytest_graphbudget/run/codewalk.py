"""What Python code reaches without running it, for the fingerprint (``fingerprint.py``).

Two questions, answered from code objects and file paths alone: which names and imports a
function's code uses (its globals, attributes and ``import`` statements, nested code included),
and which files are library code (the standard library, installed packages, this package),
named in the key by the environment's versions rather than walked.
"""

from __future__ import annotations

import dis
import functools
import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any


class ImportFailed(Exception):
    """A project module the code imports fails to import; the message says which and why."""


# -- what counts as library code ----------------------------------------------------------------


@functools.cache
def _library_roots() -> tuple[str, ...]:
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    roots = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    roots.update(getattr(site, "getsitepackages", list)())
    roots.add(str(Path(__file__).parents[1]))  # this package: its bytes are in the key already
    return tuple(os.path.realpath(root).rstrip(os.sep) + os.sep for root in roots)


@functools.lru_cache(maxsize=4096)
def is_library_file(filename: str) -> bool:
    """True for a file of the standard library, an installed package or this package."""
    if not filename or filename.startswith("<"):
        return filename.startswith("<frozen")  # exec'd code ("<string>") is walked
    return os.path.realpath(filename).startswith(_library_roots())


def is_library_module(module: types.ModuleType) -> bool:
    filename = getattr(module, "__file__", None)
    if filename:
        return is_library_file(filename)
    spec = getattr(module, "__spec__", None)
    if module.__name__ in sys.builtin_module_names or getattr(spec, "origin", None) in (
        "built-in",
        "frozen",
    ):
        return True
    paths = list(getattr(module, "__path__", ()) or ())  # a namespace package
    return bool(paths) and all(is_library_file(os.path.join(p, "x")) for p in paths)


def is_library_class(cls: type) -> bool:
    module = sys.modules.get(cls.__module__)
    if module is not None:
        return is_library_module(module)
    for value in vars(cls).values():
        if isinstance(value, types.FunctionType):
            return is_library_file(value.__code__.co_filename)
    return cls.__module__ == "builtins"


# -- what a code object names and imports -------------------------------------------------------


def imported(fn: types.FunctionType) -> list[tuple[str, Any]]:
    """Modules the function imports in its body (``from helpers import scale`` inside
    ``forward``), relative ones included. One not imported yet is imported now when it is
    project code (the forward would import it anyway), so that its code is walked too;
    raises ``ImportFailed`` when that import fails."""
    package = fn.__globals__.get("__package__") or None
    found = []
    for name, level, fromlist in sorted(imports(fn.__code__), key=repr):
        try:
            absolute = importlib.util.resolve_name("." * level + name, package) if level else name
        except (ImportError, ValueError):
            continue
        targets = [absolute] + [f"{absolute}.{item}" for item in fromlist if item != "*"]
        for target in targets:
            module = sys.modules.get(target) or _import_project_module(target, fn)
            if module is not None:
                found.append((target, module))
    return found


def _import_project_module(name: str, fn: types.FunctionType) -> types.ModuleType | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a missing parent, an optional dependency
        spec = None
    if spec is None or is_library_file(spec.origin or "<frozen>"):
        return None  # absent (the forward fails the same way), or covered by the versions
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise ImportFailed(f"{fn.__qualname__} imports {name}, which fails: {exc}") from None


def imports(code: types.CodeType) -> set[tuple[str, int, tuple[str, ...]]]:
    """Every ``import`` in a code object and the code nested in it: (name, level, fromlist)."""
    found = set()
    consts: list[Any] = []
    for instruction in dis.get_instructions(code):
        if instruction.opname == "LOAD_CONST":
            consts = [*consts[-1:], instruction.argval]
        elif instruction.opname == "IMPORT_NAME":
            level, fromlist = ([None, None] + consts)[-2:]
            level = level if isinstance(level, int) else 0
            fromlist = fromlist if isinstance(fromlist, tuple) else ()
            found.add((instruction.argval, level, fromlist))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= imports(const)
    return found


def names(code: types.CodeType) -> set[str]:
    """The global and attribute names a code object (and the code nested in it) uses."""
    found = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= names(const)
    return found
