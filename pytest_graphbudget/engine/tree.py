"""The tensors and shapes inside an op's arguments and outputs, for the cost pass.

The same walks as ``torch.utils._pytree`` (same leaves, same order, same containers rebuilt),
done here for the plain tuples, lists and dicts that ATen ops take and return, which is
several times faster than pytree: the cost pass makes a few of these walks for every op, and
they were a third of its time on resnet50. Any other container is left to pytree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import torch
from torch.fx.immutable_collections import immutable_dict, immutable_list
from torch.utils import _pytree as pytree

from pytest_graphbudget.costs import Shape
from pytest_graphbudget.costs.channels_last import Strided

LEAVES = {int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format}
"""Types that are leaves for pytree and hold no tensor."""


def _shape(value: Any) -> Any:
    return Shape(value.shape) if isinstance(value, torch.Tensor) else value


def shapes(value: Any) -> Any:
    """``value`` with every tensor replaced by its ``Shape``: ``pytree.tree_map(_shape, value)``."""
    kind = type(value)
    if kind is tuple or kind is list:
        return kind([_item(v) for v in value])
    if kind is dict:
        return {k: _item(v) for k, v in value.items()}
    if isinstance(value, torch.Tensor):
        return Shape(value.shape)
    return value if kind in LEAVES else pytree.tree_map(_shape, value)


def _item(value: Any) -> Any:
    """``shapes`` of a container's item, with no call for the usual ones: tensors and leaves."""
    if isinstance(value, torch.Tensor):
        return Shape(value.shape)
    return value if type(value) in LEAVES else shapes(value)


def _strided(value: Any) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    if value.layout != torch.strided:
        return Shape(value.shape)
    return Strided(value.shape, value.stride(), value.is_complex())


def strided_shapes(value: Any) -> Any:
    """``shapes`` with each tensor's strides kept (``Strided``): for the few ops with a
    workspace, whose kernels copy or reorder by memory format (a channels-last convolution).
    ``pytree.tree_map(_strided, value)``, with no pytree for plain containers (it took 60 us
    a matmul)."""
    kind = type(value)
    if kind is tuple or kind is list:
        return kind([strided_shapes(v) for v in value])
    if kind is dict:
        return {k: strided_shapes(v) for k, v in value.items()}
    if isinstance(value, torch.Tensor) or kind in LEAVES:
        return _strided(value)
    return pytree.tree_map(_strided, value)


def mutable(value: Any) -> Any:
    """``value`` with FX's immutable lists and dicts (a node's arguments) as plain ones, as
    the graph's generated code passes them: a function FX wraps may mutate its arguments
    (torchvision swin3d's ``_get_window_and_shift_size`` sets ``window_size[i]``), which
    ``fx.Interpreter`` refuses."""
    kind = type(value)
    if kind is immutable_list or kind is list or kind is tuple:
        items = [mutable(item) for item in value]
        return items if kind is not tuple else tuple(items)
    if kind is immutable_dict or kind is dict:
        return {key: mutable(item) for key, item in value.items()}
    return value


def tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors among ``pytree.tree_leaves(value)``, in order."""
    kind = type(value)
    if kind is tuple or kind is list:
        for item in value:
            yield from tensors(item)
    elif kind is dict:
        for item in value.values():
            yield from tensors(item)
    elif isinstance(value, torch.Tensor):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        # a model's own output class (not a pytree node, so one opaque leaf to pytree)
        for field in dataclasses.fields(value):
            yield from tensors(getattr(value, field.name))
    elif kind not in LEAVES:
        yield from (t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor))


def tensor_list(value: Any) -> list[torch.Tensor]:
    """``list(tensors(value))``, with no generator per container: the eager tape takes every
    op's arguments and outputs apart, a thousand times a forward on a detector."""
    kind = type(value)
    if kind is tuple or kind is list or kind is dict:
        found: list[torch.Tensor] = []
        for item in value.values() if kind is dict else value:
            if type(item) in LEAVES:
                continue
            if isinstance(item, torch.Tensor):
                found.append(item)
            else:
                found += tensor_list(item)
        return found
    return list(tensors(value))


def strided_bytes(args: tuple, positions: tuple[int, ...]) -> int:
    """Bytes of the tensors at ``positions`` of ``args`` that are dense in no memory format
    (the expanded gradient of a sum loss, whose strides are 0): what a kernel that makes those
    arguments contiguous copies."""
    total = 0
    for i in positions:
        value = args[i] if i < len(args) else None
        try:
            if isinstance(value, torch.Tensor) and not _dense(value):
                total += int(value.numel()) * value.element_size()
        except Exception:  # symbolic sizes or strides: no copy known, as for workspaces
            continue
    return total


def _dense(t: torch.Tensor) -> bool:
    if t.is_contiguous():
        return True
    formats = {4: torch.channels_last, 5: torch.channels_last_3d}
    return t.dim() in formats and t.is_contiguous(memory_format=formats[t.dim()])
