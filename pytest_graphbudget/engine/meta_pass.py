"""The cost pass on meta tensors: which FX graphs may take it, and its memoised kernels.

A graph whose Python code cannot see the device (``meta_safe``) computes the same ops on meta
tensors as on fake CPU ones, and plain meta tensors cost several times less per op than
``FakeTensorMode``.

On the meta device an op's outputs depend only on the op, its arguments' shapes, strides and
dtypes and its other arguments, yet many meta kernels are Python (batch norm's is a chain of
reference ops) and cost far more than the pricing around them. A model repeats a few
signatures many times (resnet50: 53 batch norms, 12 distinct), so ``MetaCache`` runs each
signature's kernel once and gives later calls fresh tensors with the same metadata. Only
functional ops are memoised (nothing aliased or mutated in the schema), and only when every
output is a fresh tensor that ``torch.empty_strided`` rebuilds exactly (same storage size,
offset 0, no storage shared with an input or another output); any other call runs its kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import fx, nn

from pytest_graphbudget.costs import base_name
from pytest_graphbudget.costs.channels_last import Strided, suggests_channels_last

SAFE_MODULES = (
    *(nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.Linear),
    *(nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm, nn.GroupNorm),
    *(nn.ReLU, nn.ReLU6, nn.GELU, nn.SiLU, nn.Hardswish, nn.Hardsigmoid, nn.Sigmoid, nn.Tanh),
    *(nn.LeakyReLU, nn.Softmax, nn.Dropout, nn.Identity, nn.Flatten, nn.Embedding),
    *(nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d),
    *(nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d),
)
"""Leaf modules whose forward never looks at the device (nn.MultiheadAttention does: its fused
path is for CPU and CUDA only), so they compute the same ops on meta tensors."""
SAFE_NAMESPACES = ("_operator", "operator", "torch", "torch.functional", "torch.nn.functional")
SAFE_NAMESPACES += ("torch._C._nn", "torch._C._VariableFunctions", "torch._C._linalg")
"""``torch._C._nn``: ``F.linear`` and ``F.gelu`` as FX records them, ATen ops with no Python."""
UNSAFE_FUNCTIONS = {"interpolate", "scaled_dot_product_attention", "multi_head_attention_forward"}
"""Functions that look at the device. SDPA's backend is chosen by device: on meta tensors the
math decomposition, where fake CPU tensors (and the tape) run the CPU's flash kernel."""
SHAPE_ATTRIBUTES = frozenset({"shape", "dtype", "ndim", "T", "mT", "layout", "requires_grad"})
"""Tensor attributes a graph may read (``getattr`` nodes: timm's ``x.shape``) that are the same
on meta and CPU tensors; ``device``, ``is_cuda`` and the like are not."""


def meta_safe(gm: fx.GraphModule) -> bool:
    """Whether an FX graph computes the same ops on meta tensors as on fake CPU ones: every
    module it calls is one of ``SAFE_MODULES`` (exactly), every function is torch's or
    Python's operators and none of ``UNSAFE_FUNCTIONS``; ``getattr`` reads only
    ``SHAPE_ATTRIBUTES``. Methods are left to fail loudly (``.cpu()`` on a meta tensor raises),
    and the caller then runs the fake pass."""
    unsafe = UNSAFE_FUNCTIONS
    modules = dict(gm.named_modules(remove_duplicate=False))  # one walk, not one per call
    for n in gm.graph.nodes:
        if n.op == "call_module" and type(modules.get(n.target)) not in SAFE_MODULES:
            return False
        if n.op == "call_function" and n.target is getattr:
            if len(n.args) != 2 or n.args[1] not in SHAPE_ATTRIBUTES:
                return False
        elif n.op == "call_function":
            namespace = getattr(n.target, "__module__", None) or "torch"
            name = getattr(n.target, "__name__", "")
            if namespace not in SAFE_NAMESPACES or name in unsafe:
                return False
    return True


def plain_layouts(model: nn.Module, tensors: Any) -> bool:
    """Whether no weight, buffer or input suggests channels-last (``costs/channels_last.py``):
    the CPU's convolutions then write channels-last results where the meta kernel writes
    contiguous ones (a contiguous model fed a channels-last image), and the layouts, which
    decide the convolutions' copies, would be the meta kernel's. Such a model takes fakes."""
    for t in (*model.parameters(), *model.buffers(), *tensors):
        if isinstance(t, torch.Tensor) and t.dim() in (4, 5) and t.layout == torch.strided:
            if suggests_channels_last(Strided(t.shape, t.stride())):
                return False
    return True


PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout)
PLAIN += (torch.memory_format,)
"""Argument types that are part of a signature as they are (with their type: 1, 1.0, True)."""

UNCACHEABLE = object()
"""The memo of a signature whose outputs cannot be rebuilt: its kernel always runs."""


class Uncacheable(Exception):
    """An argument that cannot be part of a signature (a real tensor, a symbolic size)."""


@functools.cache
def functional(func: Any) -> bool:
    """Whether ``func`` is an ATen op whose schema aliases and mutates nothing, and whose
    output shapes do not depend on data."""
    if not isinstance(func, torch._ops.OpOverload):
        return False
    schema = func._schema
    if any(a.alias_info is not None for a in (*schema.arguments, *schema.returns)):
        return False
    tags = set(func.tags)
    return not tags & {torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output}


def _describe(value: Any) -> Any:
    """A hashable description of one argument; raises ``Uncacheable``."""
    if isinstance(value, torch.Tensor):
        if type(value) not in (torch.Tensor, nn.Parameter) or not value.is_meta:
            raise Uncacheable
        return (tuple(value.shape), value.stride(), value.storage_offset(), value.dtype)
    if isinstance(value, (list, tuple)):
        return (type(value), *(_describe(v) for v in value))
    if isinstance(value, PLAIN):
        return (type(value), value)
    raise Uncacheable


def _storages(value: Any) -> list[Any]:
    leaves = value if isinstance(value, (list, tuple)) else (value,)
    found = []
    for leaf in leaves:
        if isinstance(leaf, (list, tuple)):
            found += _storages(leaf)
        elif isinstance(leaf, torch.Tensor):
            found.append(leaf.untyped_storage()._cdata)
    return found


def _recipe(out: Any, args: tuple, kwargs: dict) -> Any:
    """How to rebuild ``out`` (``(shape, stride, dtype)`` per tensor, and whether it was a
    tuple), or ``UNCACHEABLE``."""
    tensors = out if isinstance(out, tuple) else (out,)
    if not tensors or not all(type(t) is torch.Tensor and t.is_meta for t in tensors):
        return UNCACHEABLE
    storages = [t.untyped_storage()._cdata for t in tensors]
    if len(set(storages)) < len(storages) or set(storages) & set(
        _storages((args, tuple(kwargs.values())))
    ):
        return UNCACHEABLE
    specs = []
    for t in tensors:
        spec = (tuple(t.shape), t.stride(), t.dtype)
        rebuilt = torch.empty_strided(spec[0], spec[1], dtype=spec[2], device="meta")
        nbytes = t.untyped_storage().nbytes()
        if t.storage_offset() or t.dtype.is_complex or rebuilt.untyped_storage().nbytes() != nbytes:
            return UNCACHEABLE
        specs.append(spec)
    return isinstance(out, tuple), specs


@functools.cache
def in_place(func: Any) -> bool:
    """Whether ``func`` is an in-place ATen op that writes its first argument and returns it
    (``hardswish_``, ``add_``, ``copy_``): its output is that argument, whose metadata only the
    ``inplace_view`` ops (``t_``, ``resize_``) change."""
    if not isinstance(func, torch._ops.OpOverload) or torch.Tag.inplace_view in func.tags:
        return False
    tag = getattr(torch.Tag, "inplace", None)  # torch 2.4 has no such tag: its naming rule
    if (tag not in func.tags) if tag is not None else not func._schema.name.endswith("_"):
        return False
    schema = func._schema
    args, returns = schema.arguments, schema.returns
    if not args or len(returns) != 1 or args[0].alias_info is None:
        return False
    if not args[0].alias_info.is_write or any(a.alias_info is not None for a in args[1:]):
        return False
    return returns[0].alias_info is not None and (
        returns[0].alias_info.before_set == args[0].alias_info.before_set
    )


IN_PLACE = object()
"""The memo of an in-place signature whose kernel returned its first argument
unchanged in shape: later calls return that argument without running the kernel (many meta
kernels of in-place ops are Python decompositions, milliseconds each)."""


SIGNATURES = 65_536
"""How many signatures ``SHARED`` keeps before it starts again (a few hundred per model)."""

SHARED: dict[Any, Any] = {}
"""The signatures of every cost pass in this process: an op's meta outputs depend only on its
signature and on torch, which cannot change within a process, and the first call of a
signature costs milliseconds where its kernel is a Python decomposition (batch norm,
hardswish: a tenth of a second per profile of a small timm model). Only time depends on it."""


EMPTY_ON_CPU = {"native_batch_norm": 5, "_native_batch_norm_legit_no_training": -1}
"""Batch norm in inference: the CPU kernel returns its saved statistics empty (0 elements),
the meta kernel C elements each. (The argument index of ``training``; -1: always inference.)"""


def _as_on_cpu(func: Callable, args: tuple, out: Any) -> Any:
    """``out`` as the CPU kernel shapes it, where the meta kernel differs (``EMPTY_ON_CPU``)."""
    at = EMPTY_ON_CPU.get(base_name(func.name()))
    if at is None or (at >= 0 and len(args) > at and args[at]):
        return out
    empty = torch.empty(0, dtype=out[1].dtype, device="meta")
    return (out[0], empty, empty.clone(), *out[3:])


class MetaCache:
    """Runs ATen ops on meta tensors, each signature's kernel once (see the module's doc)."""

    def __init__(self, memo: dict[Any, Any] | None = None) -> None:
        self.memo: dict[Any, Any] = SHARED if memo is None else memo
        if len(self.memo) > SIGNATURES:
            self.memo.clear()
        self.hits = 0

    def __call__(self, func: Callable, args: tuple, kwargs: dict) -> Any:
        if in_place(func):
            return self._in_place(func, args, kwargs)
        if not functional(func):
            return func(*args, **kwargs)
        try:
            key = (func, _describe(args), _describe(tuple(sorted(kwargs.items()))))
        except Uncacheable:
            return func(*args, **kwargs)
        recipe = self.memo.get(key)
        if recipe is None:
            out = _as_on_cpu(func, args, func(*args, **kwargs))
            self.memo[key] = _recipe(out, args, kwargs)
            return out
        if recipe is UNCACHEABLE:
            return func(*args, **kwargs)
        self.hits += 1
        many, specs = recipe
        outs = tuple(torch.empty_strided(s, st, dtype=d, device="meta") for s, st, d in specs)
        return outs if many else outs[0]

    def _in_place(self, func: Callable, args: tuple, kwargs: dict) -> Any:
        try:
            key = (func, _describe(args), _describe(tuple(sorted(kwargs.items()))))
        except Uncacheable:
            return func(*args, **kwargs)
        if self.memo.get(key) is IN_PLACE:
            self.hits += 1
            return args[0]
        before = (tuple(args[0].shape), args[0].stride(), args[0].dtype)
        out = func(*args, **kwargs)
        if out is args[0] and (tuple(out.shape), out.stride(), out.dtype) == before:
            self.memo[key] = IN_PLACE
        return out
