"""Whether a forward assigned module state, and putting it back: lazy state (YOLO's anchors)
is what a forward builds on its modules, and a trace or a hollow forward must not leave it
half-built or built from values it did not compute."""

from __future__ import annotations

import contextlib
import operator
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from pytest_graphbudget.engine import walk


@dataclass
class StateWatch:
    """What ``restored`` saw: whether the block assigned or mutated any module attribute, and
    the values it assigned (the containers it mutated among them)."""

    changed: bool = False
    values: list = field(default_factory=list)
    modules: set = field(default_factory=set)  # ids of the modules whose attributes changed
    saved: list = field(default_factory=list)  # ``_attributes`` before the block
    final: bool = False  # a ``look`` in the block found nothing, and nothing can change after

    def look(self, restore: bool = False) -> bool:
        """Whether the block so far assigned or mutated any module attribute (``changed``,
        ``values``, ``modules``); with ``restore``, each one put back as it was."""
        self.changed, self.values, self.modules = False, [], set()
        for module, attributes, contents in self.saved:
            now = vars(module)
            mutated = [
                k
                for k, v in contents.items()
                if (attributes[k] if v is None else not _same_items(v, attributes[k]))
            ]
            same_keys = now.keys() == attributes.keys()  # the common case, checked in C
            added = () if same_keys else now.keys() - attributes.keys()
            tracers = {k for k in added if FX_CONSTANT.fullmatch(k)}
            assigned = (not same_keys and now.keys() - tracers != attributes.keys()) or any(
                v is not now[k] and not _same_value(v, now[k]) for k, v in attributes.items()
            )
            if mutated or assigned:
                self.changed = True
                self.modules.add(id(module))
                self.values += [now[k] for k in mutated]
                self.values += [v for k, v in now.items() if not _same_value(attributes.get(k), v)]
            if (mutated or assigned or tracers) and restore:
                for key in mutated:
                    _refill(attributes[key], contents[key] or ())
                now.clear()
                now.update(attributes)
        if self.changed and self.saved:
            walk.forget(self.saved[0][0])  # the model: the first module walked
        return self.changed


def tensors_held(model: nn.Module) -> list[Any]:
    """The tensors the model's modules hold in plain attributes (``self.last = y``) and in the
    lists, tuples and dicts among them: not their parameters or buffers."""
    import torch

    found = []
    for module in walk.modules(model):
        for key, value in vars(module).items():
            if key in ("_parameters", "_buffers"):
                continue
            values = value.values() if isinstance(value, dict) else [value]
            values = value if isinstance(value, (list, tuple)) else values
            found += [v for v in values if isinstance(v, torch.Tensor)]
    return found


def _attributes(model: nn.Module) -> list[tuple[nn.Module, dict[str, Any], dict[str, Any]]]:
    """Every module's attributes, with a one-level copy of each list, dict and set among them
    (None for an empty one)."""
    saved = []
    for module in walk.modules(model):
        attributes = dict(vars(module))
        # An empty one (most of a module's hook dicts) is not copied: filled is mutated.
        contents = {
            k: v.copy() if v else None
            for k, v in attributes.items()
            if isinstance(v, (list, dict, set))
        }
        saved.append((module, attributes, contents))
    return saved


def _same_items(before: Any, after: Any) -> bool:
    """Whether a container holds the same objects as its copy ``before`` did."""
    # compared in C (``map(operator.is_, ...)``): LeViT keeps 38,416 attention indices a layer
    if isinstance(before, dict):
        return before.keys() == after.keys() and all(
            map(operator.is_, before.values(), map(after.__getitem__, before))
        )
    if isinstance(before, (list, tuple)):
        return len(before) == len(after) and all(map(operator.is_, before, after))
    return {id(v) for v in before} == {id(v) for v in after}


def _same_value(before: Any, after: Any) -> bool:
    """Whether an attribute still holds what it held: the same object, or a list, tuple or dict
    rebuilt around the same objects (torchvision's ``AnchorGenerator`` reassigns
    ``[a.to(dtype, device) for a in self.cell_anchors]`` every forward, and ``.to`` returns each
    anchor itself): the next forward starts from the same state, so it is no lazy state."""
    if before is after:
        return True
    if type(before) is not type(after) or not isinstance(before, (list, tuple, dict)):
        return False
    return _same_items(before, after)


def _refill(container: Any, items: Any) -> None:
    container.clear()
    if isinstance(container, list):
        container.extend(items)
    else:
        container.update(items)


@contextlib.contextmanager
def restored(model: nn.Module) -> Iterator[StateWatch]:
    """Run the block, then put back every module attribute as it was, and say whether any had
    changed: a forward that assigns its own state (YOLO's anchors) has lazy state, which a
    symbolic trace would otherwise fill with proxies. Identity is compared, so a value
    rebuilt equal counts as changed: the watch errs towards a warm-up, never away from one."""
    with _watch(model, restore=True) as watch:
        yield watch


@contextlib.contextmanager
def watched(model: nn.Module) -> Iterator[StateWatch]:
    """Run the block and say whether it assigned or mutated any module attribute, keeping what
    it did: a taped forward that built lazy state served as the warm-up."""
    with _watch(model, restore=False) as watch:
        yield watch


FX_CONSTANT = re.compile(r"_tensor_constant\d+")
"""The attributes ``symbolic_trace`` itself sets on the root for a tensor made in ``forward``
(``x + torch.tensor(...)``): the tracer's, not state the model builds."""


@contextlib.contextmanager
def _watch(model: nn.Module, restore: bool) -> Iterator[StateWatch]:
    watch = StateWatch(saved=_attributes(model))
    try:
        yield watch
    finally:
        if not watch.final:
            watch.look(restore)


def captured_tensors(fn: Any) -> list[Any]:
    """The tensors a callable holds, by identity: its closure's and defaults' values, a
    ``functools.partial``'s arguments, a bound method's object, a module's state and tensor
    attributes, the module-level names its code reads; one level into lists, tuples and dicts.
    A loss's target (``lambda out: F.mse_loss(out, y)``) is memory the step runs beside, as
    its inputs are, which a trace keeps as a constant and no figure had counted."""
    import functools

    import torch

    values: list[Any] = []
    while isinstance(fn, functools.partial):
        values += [*fn.args, *fn.keywords.values()]
        fn = fn.func
    if isinstance(fn, nn.Module):
        values += [*fn.parameters(), *fn.buffers(), *(t for _, t in walk.plain_tensors(fn))]
    target = getattr(fn, "__func__", fn)
    values += [getattr(fn, "__self__", None), *(getattr(target, "__defaults__", None) or ())]
    values += [cell.cell_contents for cell in getattr(target, "__closure__", None) or ()]
    code, names = getattr(target, "__code__", None), getattr(target, "__globals__", {})
    values += [names[n] for n in (code.co_names if code else ()) if n in names]
    found: dict[int, Any] = {}
    for value in values:
        items = value.values() if isinstance(value, dict) else value
        for item in items if isinstance(value, (list, tuple, dict)) else [value]:
            if isinstance(item, torch.Tensor):
                found.setdefault(id(item), item)
    return list(found.values())
