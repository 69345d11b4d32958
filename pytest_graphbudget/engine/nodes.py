"""What the cost pass and the tape record: one ``NodeCost`` per op, the ``Measured`` run.

Shared by every tier (the FX cost pass of ``measure``, the taped forward of ``breaks``, the
exported graphs of ``measure_export``), so that a node means the same in all of them.
"""

from __future__ import annotations

import functools
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from pytest_graphbudget.costs import base_name
from pytest_graphbudget.costs.registry import REGISTRY, FormulaError, storage_elements
from pytest_graphbudget.engine import tree
from pytest_graphbudget.engine.extents import Extent, StorageKey, add, extents, form

QUERIES = frozenset(
    {"cudnn_is_acceptable", "is_same_size", "_has_compatible_shallow_copy_type", "device"}
)
"""Ops that answer a question about a tensor's metadata. A composite op that reaches the tape
whole (an inference tensor's LSTM) asks them while it decomposes; the same op decomposed below
autograd never shows them; a fake tensor answers ``.device`` through the dispatcher
(``prim.device``), a real one without it: they are no kernel, so no node either way."""

_counter = functools.partial(Counter.__new__, Counter)
"""An empty ``Counter`` without its Python ``__init__``: two a node, thousands a forward."""

# Fusion roles come from the op registry (``costs.registry``); RANK orders the categories a
# node takes as its ops run: the strongest one an op gives it wins.
RANK = {"view": 0, "movement": 1, "elementwise": 2, "reduction": 3, "anchor": 4}


@dataclass
class NodeCost:
    """What one FX node computes, reads and writes."""

    name: str
    op: str
    target: str
    module: str
    index: int
    kind: str = ""
    category: str = "view"
    macs: int = 0
    other: int = 0
    unsupported: Counter = field(default_factory=_counter)
    contractions: Counter = field(default_factory=_counter)  # unsupported calls that may contract
    weights: dict[str, int] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    input_bytes: dict[str, int] = field(default_factory=dict)
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    dtype: str = ""
    writes: dict[Any, int] = field(default_factory=dict)  # new storages: key -> bytes
    reads: set = field(default_factory=set)  # storages read (keys)
    overwrites: set = field(default_factory=set)  # storages written through out=, not read
    views: dict[Any, int] = field(default_factory=dict)  # storages of the output -> bytes viewed
    # The views themselves (``extents``): of the tensors it takes and of those it returns
    read_extents: dict[Any, Extent] = field(default_factory=dict)
    view_extents: dict[Any, Extent] = field(default_factory=dict)
    segment: int = 0  # nodes of different segments never fuse (a graph break ends a kernel)
    workspace: int = 0  # the most bytes one of its ops holds besides its inputs and outputs
    cuda_workspace: int = 0  # bytes its CUDA kernel holds while it runs, the CPU's not
    lookups: int = 0  # offsets its indexing kernel computes (``lookups.index_lookups``)
    lookup_bytes: int = 0  # and the bytes it copies from or to them
    extra_kernels: int = 0  # eager kernels its ops run beyond one each (a roll over k dims)
    channels_last: bool = False  # a convolution on a channels-last input (``eager_kernels``)
    in_call: bool = True  # runs inside its module's call (not backward or the optimizer's)
    stack: tuple = ()  # the code that called it, ("file:function", line) outermost first,
    # where the graph records it (``liveness``)
    calls: tuple = ()  # the module calls it runs in, where recorded (``walk.module_calls``)

    @property
    def flops(self) -> int:
        return 2 * self.macs + self.other


def source_stack(meta: dict) -> tuple[tuple[str, int], ...]:
    """The frames of an FX node's ``stack_trace`` (export records one: the code that called
    the op), ``("file:function", line)`` outermost first; ``()`` without one. The names are
    interned: a large graph's nodes share a few hundred functions."""
    trace = meta.get("stack_trace") or ""
    return tuple((sys.intern(f"{f}:{name}"), int(line)) for f, line, name in _FRAME.findall(trace))


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


@dataclass
class Measured:
    """The cost pass's result: one ``NodeCost`` per op node, in topological order."""

    nodes: list[NodeCost]
    graph_outputs: set[str]
    inputs: dict[str, dict[Any, int]]  # user-input placeholders -> storages -> bytes
    mode: str  # "fake" or "real"
    frees: dict[Any, int] | None = None  # storage -> last node live (the tape, FX's frames)
    returned: set | None = None  # the returned tensors' storages (None: graph_outputs' views)
    returned_extents: dict[Any, Extent] | None = None  # and the views of them it returns
    input_extents: dict[Any, Extent] = field(default_factory=dict)  # every input's views
    reads_values: bool = True  # whether the path priced may depend on values (``breaks``)
    hollow: int = 0  # ops of a real forward not computed, their results rebuilt (``hollow``)
    input_masks: frozenset[str] = frozenset()  # inputs that are boolean tensors (``latency``)
    input_channels: dict[str, int] = field(default_factory=dict)  # and their dim 1 (``latency``)
    placed: frozenset[str] = frozenset()  # helpers whose lines ``placed`` put in the stacks

    def outputs(self) -> set:
        """The storages the graph returns: not the other outputs of the op that made them (the
        logsumexp of a flash attention kernel whose output is returned)."""
        if self.returned is not None:
            return self.returned
        by_name = {n.name: n for n in self.nodes}
        return {k for name in self.graph_outputs if name in by_name for k in by_name[name].views}

    @property
    def input_bytes(self) -> int:
        """The inputs' storages, each once: one tensor passed as two arguments (``(q, q, q)``
        to an attention) is one storage, and two halves of one tensor passed apart cover it
        whole (``input_extents``: every input's views together)."""
        found: dict[Any, int] = {}
        for views in self.inputs.values():
            for key, size in views.items():
                found[key] = max(found.get(key, 0), size)
        for key, extent in self.input_extents.items():
            found[key] = max(found.get(key, 0), extent.bytes)
        return sum(found.values())


def _storage(t: torch.Tensor) -> Any:
    return StorageKey(t.untyped_storage())


def note_input(name: str, value: Any, masks: set[str], channels: dict[str, int]) -> None:
    """What ``latency`` asks of an input: whether it is a boolean tensor (an ``index`` reading
    it selects), and its dim 1 when known (the channels a convolution reading it takes)."""
    if not isinstance(value, torch.Tensor):
        return
    if value.dtype == torch.bool:
        masks.add(name)
    if value.dim() > 1 and isinstance(value.shape[1], int):
        channels[name] = value.shape[1]


def widened(func: Any, out: Any, args: tuple, kwargs: dict) -> Any:
    """``out`` on a storage as large as the op's CPU kernel leaves it (``output_storage``: a
    reduced MSE is a view of its per-element losses), where a fake or meta kernel made it to
    the output's size; a real one is left as it is."""
    entry = REGISTRY.get(_op_name(func))
    if entry is None or entry.storage is None or not isinstance(out, torch.Tensor):
        return out
    shapes = tree.shapes(args), tree.shapes(kwargs), tree.shapes(out)
    elements = storage_elements(entry.name, shapes[0], shapes[1], shapes[2])
    if out.device.type not in ("cpu", "meta") or elements * out.element_size() <= _stored(out):
        return out
    return out.new_empty(elements).as_strided(out.shape, out.stride(), out.storage_offset())


def _stored(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def strided(what: str, tensors: list[Any]) -> None:
    """Refuse, for every tier at once, a sparse or other non-strided tensor: its bytes are its
    indices' and values', which no figure here counts (the tiers had each failed on its
    storage: "Cannot access storage of SparseTensorImpl")."""
    for t in tensors:
        if t.layout != torch.strided:
            layout = str(t.layout).removeprefix("torch.")
            raise FormulaError(
                f"{what} is a {layout} tensor: sparse and other non-strided layouts are not "
                "priced; profile the model with dense tensors (to_dense()) or leave that part out"
            )


def record_output(node: NodeCost, value: Any, tensors: list[Any]) -> None:
    """What ``node`` returned (``tensors``: the tensors in ``value``, in order): its shapes and
    dtype, the storages it wrote (not those it only read: a view or an in-place op writes
    none) and the views it returns. Shared by the graph interpreter and the eager tape of
    ``breaks``, so a node means the same in every tier."""
    strided(f"{node.target}'s output", tensors)
    node.shapes = [tuple(t.shape) for t in tensors]
    node.dtype = str(tensors[0].dtype).removeprefix("torch.") if tensors else ""
    writes: dict[Any, int] = {}
    views: dict[Any, int] = {}
    shown: dict[Any, Extent] = {}
    reads = node.reads
    for t in tensors:  # each storage's key made once, for its write and its view
        storage = t.untyped_storage()
        key = StorageKey(storage)
        views[key] = max(views.get(key, 0), t.numel() * t.element_size())
        add(shown, key, storage, t)
        if key not in reads and key not in node.overwrites:  # a new storage
            writes[key] = max(writes.get(key, 0), storage.nbytes())
    node.writes = writes
    node.views = views
    node.view_extents = shown
    if node.writes and node.category == "view":
        node.category = "movement"


def record_reads(node: NodeCost, tensors: list[Any]) -> None:
    """The storages ``node`` reads, and the views of them (``tensors``: those it takes)."""
    node.read_extents = extents(tensors)
    node.reads = set(node.read_extents)


def _views(value: Any) -> dict[Any, int]:
    """Each storage of an input and the bytes its views there cover (``extents``): an input
    expanded from one row (``arange(n).expand(b, n)``, a mask broadcast over a batch) holds
    the row, not ``b`` of them, as eager torch holds it. A view without a form (symbolic
    sizes) counts its elements' bytes."""
    tensors = tree.tensor_list(value)
    views = {key: extent.bytes for key, extent in extents(tensors).items()}
    for t in tensors:
        if form(t) is None:
            key = _storage(t)
            views[key] = max(views.get(key, 0), _nbytes(t))
    return views


@functools.cache
def _out_arguments(func: Any) -> frozenset[str]:
    """The names of an op's out= arguments (``out``, ``values``, ``indices``...)."""
    schema = getattr(func, "_schema", None)
    return frozenset(a.name for a in schema.arguments if a.is_out) if schema else frozenset()


@functools.cache
def _op_name(func: Any) -> str:
    """``addmm`` for ``aten.addmm.default``; ``mylib.fused`` for a custom op ``mylib::fused``."""
    name = base_name(func.name())
    namespace = getattr(func, "namespace", "aten")
    return name if namespace in ("aten", "prim") else f"{namespace}.{name}"


def in_place(n: Any, value: Any, run: Any) -> list:
    """The FX node whose tensor ``n`` wrote in place and returned (``pos.add_(y)``: torch's
    ``x.add_`` returns x): what reads that node after reads ``n``'s write, as the tape's
    readers read the in-place op's, which FX's graph names by the node before it (torchvision
    MViT v1's ``pos_embedding.add_(...)``, then ``torch.cat((..., pos_embedding))``). Not a
    weight or buffer written in place: read as a weight after, as on the tape. ``run``: the
    cost pass's interpreter (its ``env`` and its recorder's ``weights``)."""
    first = n.args[0] if n.args else None
    name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
    if not (name.endswith("_") and not name.endswith("__") and hasattr(first, "name")):
        return []
    kept = run.env.get(first) is value and id(value) not in run.recorder.weights
    return [first] if kept else []
