"""The model's modules, walked once a profile.

A profile asks a dozen questions of every module before and after the forward (is it on the
meta device, lazy, quantized; its weights by name; its attributes, to watch them; its leaves,
to name the nodes), and each ``model.named_modules()`` walk costs a few hundred microseconds
on a timm model: a tenth of a small model's profile went there. Inside ``walking(model)``
(one profile, ``pipeline.profile_graph``) the walk is made once and shared; ``forget`` drops
it when a forward assigned module attributes (lazy state may hold new modules). Outside a
``walking`` block every call walks afresh, so nothing outlives the profile that made it.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import torch
from torch import nn

_WALK: ContextVar[list | None] = ContextVar("graph_budget_walk", default=None)
"""``[model, its named modules or None, each module once or None, its unregistered modules
or None]`` while a profile of ``model`` runs. Only which modules there are is kept: their
tensors are read afresh at each question (a fake pass swaps them for fakes while it runs)."""


@contextlib.contextmanager
def walking(model: nn.Module) -> Iterator[None]:
    """Share one walk of ``model``'s modules among the questions asked inside the block."""
    token = _WALK.set([model, None, None, None])
    try:
        yield
    finally:
        _WALK.reset(token)


def forget(model: nn.Module) -> None:
    """Walk ``model`` again at the next question: a forward assigned its modules' state."""
    held = _WALK.get()
    if held is not None and held[0] is model:
        held[1] = held[2] = held[3] = None


def named_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``model.named_modules(remove_duplicate=False)``: a shared module under each path."""
    held = _WALK.get()
    if held is None or held[0] is not model:
        return list(model.named_modules(remove_duplicate=False))
    if held[1] is None:
        held[1] = list(model.named_modules(remove_duplicate=False))
    return held[1]


def unique_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``model.named_modules()``: each module once, under its first path, in the same order (a
    module's first path comes first in a walk with duplicates, its whole subtree under it)."""
    held = _WALK.get()
    if held is not None and held[0] is model and held[2] is not None:
        return held[2]
    seen: dict[int, tuple[str, nn.Module]] = {}
    for path, module in named_modules(model):
        if id(module) not in seen:
            seen[id(module)] = (path, module)
    found = list(seen.values())
    if held is not None and held[0] is model:
        held[2] = found
    return found


def modules(model: nn.Module) -> list[nn.Module]:
    """``list(model.modules())``."""
    return [module for _, module in unique_modules(model)]


def named_tensors(model: nn.Module, table: str, unique: bool = False) -> list[tuple[str, Any]]:
    """``model.named_parameters(remove_duplicate=not unique)`` (``table`` "_parameters") or
    ``named_buffers`` ("_buffers"): the same names, in the same order. ``unique``: each module
    and each tensor once, under its first name (tied weights counted once)."""
    found = []
    seen: set[int] = set()
    for path, module in named_modules(model):
        if unique:
            if id(module) in seen:
                continue
            seen.add(id(module))
        for key, value in getattr(module, table).items():
            if value is None or (unique and id(value) in seen):
                continue
            if unique:
                seen.add(id(value))
            found.append((f"{path}.{key}" if path else key, value))
    return found


def unregistered(model: nn.Module) -> list[tuple[str, str, nn.Module]]:
    """Modules kept in a plain list, tuple or dict attribute (``self.layers = [nn.Linear()]``:
    ``nn.ModuleList`` registers them) and registered nowhere in the model: the attribute
    (``layers``), each module's path (``layers.0``, and the modules under it) and the module.
    The forward still runs them."""
    walked = _WALK.get()
    if walked is not None and walked[0] is model and walked[3] is not None:
        return walked[3]
    registered = {id(m) for m in modules(model)}
    found: list[tuple[str, str, nn.Module]] = []
    for path, module in named_modules(model):
        for name, value in vars(module).items():
            if name.startswith("_") or not isinstance(value, (list, tuple, dict)):
                continue
            kinds = set(map(type, value.values() if isinstance(value, dict) else value))
            if not any(issubclass(kind, nn.Module) for kind in kinds):
                continue  # no module in it, told in C: LeViT's 38,416 attention indices a layer
            attribute = f"{path}.{name}" if path else name
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, held in items:
                if isinstance(held, nn.Module) and id(held) not in registered:
                    where = f"{attribute}.{key}"
                    found += [
                        (attribute, f"{where}.{sub}" if sub else where, inner)
                        for sub, inner in held.named_modules()
                    ]
    if walked is not None and walked[0] is model:
        walked[3] = found
    return found


PACKED = ("torch.ao.nn.quantized", "torch.ao.nn.intrinsic.quantized", "torch.nn.quantized")
"""torch.ao's quantized modules: their weights are packed, and the float tensors they keep
beside (a dynamic cell's biases) are those the pack holds (``quantized.packed``)."""


def plain_tensors(model: nn.Module) -> list[tuple[str, Any]]:
    """Tensors kept as plain attributes (``self.cos_cached = ...``, neither parameter nor
    buffer), by path: the forward reads them as weights, and the model holds them (those a
    forward reads are weights, ``assemble``: the anchors YOLO builds once, read by every later
    forward; not a cache the priced forward rebuilds)."""
    found = []
    for path, module in named_modules(model):
        if type(module).__module__.startswith(PACKED):  # its state is packed (quantized.py)
            continue
        for name, value in vars(module).items():
            if isinstance(value, torch.Tensor):
                found.append((f"{path}.{name}" if path else name, value))
    return found


def classes(model: Any) -> dict[str, str]:
    """The class name of every module path: reports name an index path by it (``features.3
    (Conv2d)``). An exported program keeps its modules' classes only in its nodes' module
    stacks; a model whose ``named_modules()`` fails has none."""
    graph_module = getattr(model, "graph_module", None)
    if graph_module is not None and hasattr(model, "graph_signature"):
        found: dict[str, str] = {}
        for node in graph_module.graph.nodes:
            for path, cls in (node.meta.get("nn_module_stack") or {}).values():
                name = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
                found.setdefault(module_path(path), name.rpartition(".")[2])
        return found
    try:
        return {path: type(module).__name__ for path, module in named_modules(model)}
    except Exception:  # a model whose walk fails still profiles: no classes to name
        return {}


_ROOT = re.compile(r"^[LG]\['[^']*'\]")
_ITEM = re.compile(r"\._modules\['([^']*)'\]|\[['\"]?([^'\"\]]*)['\"]?\]")
_GETATTR = re.compile(r"getattr\(([^()]*), '([^']*)'\)")


def module_path(expr: str) -> str:
    """Dynamo's source expression of a module as a module path, relative to the compiled frame:
    ``L['self'].backbone.body._modules['0'][1]`` -> ``backbone.body.0.1``, and torch 2.4's
    strict export's ``getattr(L['fn'], '0')`` -> ``0``. A plain path is returned as it is."""
    while (unwrapped := _GETATTR.sub(r"\1.\2", expr)) != expr:
        expr = unwrapped
    rest = _ROOT.sub("", expr)
    rest = _ITEM.sub(lambda m: "." + (m.group(1) or m.group(2) or ""), rest)
    return rest.strip(".").replace("..", ".")


def module_calls(meta: dict, prefix: str = "", stack: tuple = ()) -> tuple[str, ...]:
    """The module calls an FX node runs in, outermost first, from an export's module stack:
    each a module path, with ``@k`` for the module's k-th call after its first (albert's one
    layer, called in turn: ``encoder.albert_layer_groups.0@3``). ``()`` where the graph
    records none, or names only the node's own module (a training step's joint graph).
    ``stack``: the node's frames (``nodes.source_stack``), where a module whose ``forward`` was
    called directly is a call too (``_forwarded``)."""
    found, entries = [], []
    for key, (path, cls, *_) in (meta.get("nn_module_stack") or {}).items():
        if cls is None:
            return ()
        path = module_path(path).removeprefix(prefix)
        if path and path != prefix.rstrip("."):
            again = str(key).rpartition("@")[2] if "@" in str(key) else ""
            found.append(f"{path}@{again}" if again.isdigit() else path)
        entries.append((path if path != prefix.rstrip(".") else "", cls))
    if sum(where.endswith(":forward") for where, _ in stack) <= len(entries) or not found:
        return tuple(found)  # a forward frame each: none ran without its call
    return _forwarded(tuple(found), entries, stack)


def _forwarded(calls: tuple, entries: list, stack: tuple) -> tuple[str, ...]:
    """``calls`` with the module whose ``forward`` ran without its ``__call__`` (timm HRNet's
    ``down.forward(y)``, a ``Sequential``'s): the export records no call of it, but its frame
    is on the stack, and its blocks run in it as in any call, not in a loop of the caller's.
    Each call's frame is its class's ``forward``, matched from the innermost out; a
    ``forward`` frame between two matched is the call of the deepest module between their
    two that the graph records no call of (a forward calls its children). ``calls`` as they
    are where a class's frame is not found."""
    at, placed = len(stack), []
    for path, cls in reversed(entries):
        code = _forward_code(cls)
        at = next((j for j in range(at - 1, -1, -1) if stack[j][0] == code), -1)
        if at < 0:  # not found (None: a class no longer imported)
            return calls
        placed.append((at, path))
    placed.reverse()
    called = {c.partition("@")[0] for c in calls}
    added: list[tuple[str, str]] = []  # (the call it runs just outside, the module)
    for (low, outer), (high, inner) in zip(placed, placed[1:], strict=False):
        extra = [j for j in range(low + 1, high) if stack[j][0].endswith(":forward")]
        parts = inner.split(".")
        start = len(outer.split(".")) if outer else 0
        between = [".".join(parts[:i]) for i in range(start + 1, len(parts))]
        between = [p for p in between if p not in called][::-1]  # the deepest first
        added += [(inner, p) for p in reversed(between[: len(extra)])]
    if not added:
        return calls
    out: list[str] = []
    for call in calls:
        out += [p for before, p in added if before == call.partition("@")[0]] + [call]
    return tuple(out)


def _forward_code(cls: Any) -> str | None:
    """``"file:function"`` of the ``forward`` of a module class, as an export's stack names its
    frame; ``cls`` a class or its qualified name (``torch.nn.modules.conv.Conv2d``). None
    where it cannot be found (a class no longer imported)."""
    found = cls
    if isinstance(cls, str):
        parts, found = cls.split("."), None
        for i in range(len(parts) - 1, 0, -1):
            module = sys.modules.get(".".join(parts[:i]))
            if module is not None:
                found = module
                for name in parts[i:]:
                    found = getattr(found, name, None)
                break
    try:
        code = inspect.unwrap(found.forward).__code__
    except (AttributeError, ValueError):
        return None
    return f"{code.co_filename}:{code.co_name}"
