"""The tape: one forward recorded as it runs, every ATen op a ``NodeCost`` (``Tape``).

The eager tier runs a real forward under it (``run_taped``), and with ``hollow`` the same
forward without its heavy arithmetic (``hollow_run``); the graph-break tier runs Dynamo's
graphs and the eager code between them under a subclass of it (``breaks``). Each op's module
comes from the Python stack (``frames``), and when the forward frees each storage from the
weak references the tape keeps.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections import Counter
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from pytest_graphbudget.compat import grouped_mm
from pytest_graphbudget.engine import first, tree, walk
from pytest_graphbudget.engine.eager_kernels import (
    eager_cpu_max_pool1d,
    in_max_pool1d,
    max_pool1d_marked,
)
from pytest_graphbudget.engine.extents import extents
from pytest_graphbudget.engine.frames import ModuleStack
from pytest_graphbudget.engine.hollow import Hollow, values_mattered
from pytest_graphbudget.engine.measure import _Recorder, higher_order
from pytest_graphbudget.engine.nodes import (
    QUERIES,
    Measured,
    NodeCost,
    _op_name,
    _out_arguments,
    _storage,
    _views,
    note_input,
    record_output,
    record_reads,
)
from pytest_graphbudget.engine.quantized import stored_bytes, weight_ids
from pytest_graphbudget.engine.reads import reads_data, value_reads
from pytest_graphbudget.engine.replay import Memo
from pytest_graphbudget.engine.split import linear_bias_in_place
from pytest_graphbudget.engine.trace import (
    Example,
    collector_paused,
    model_state,
    tensor_leaves,
)


class Tape(_Recorder):
    """Records one real forward as a list of ``NodeCost``s, across graphs and eager code.

    Inside a captured graph, the cost interpreter sets ``self.node`` and every ATen op is charged
    to that FX node (as in ``measure``). Outside, each ATen op becomes a node of its own.
    Dataflow is followed by tensor identity: every tensor a node returns is registered as that
    node's product (and kept alive, so no identity is reused during the run).

    With ``frees`` (a dict, the eager tier) nothing is kept alive: the tape learns when the
    forward's own code let go of each storage it wrote (``sweep``), the frees a module's
    locals and rebinding make, and a tensor's product is matched through a weak reference.
    """

    def __init__(self, model: nn.Module, weights: dict[int, tuple[str, int]]):
        super().__init__(weights)
        self.nodes: list[NodeCost] = []
        self.producer: dict[int, tuple[str, Any]] = {}  # id -> (node, weak ref or None)
        self.keep: list[Any] = []
        self.frees: dict[Any, int] | None = None  # storage -> the last node it was live in
        self.live: dict[Any, None] = {}  # storages written and not yet freed (with ``frees``)
        self.taken: Counter = Counter()
        self.paths: dict[int, list[str]] = {}
        self.root = id(model)
        self.rnns = {path for path, m in walk.named_modules(model) if isinstance(m, nn.RNNBase)}
        for path, module in walk.named_modules(model):
            self.paths.setdefault(id(module), []).append(path)
        self.stack = ModuleStack(self.paths, self.root)
        self.segment = 0
        self.eager_segments = True
        self.memo: Memo | None = None  # every call and its result's layout (``replay``)
        # Its heavy ops not computed (``hollow``), or on fakes its known ops not dispatched
        # (``fake_ops.FakeOps``, of the same interface)
        self.hollow: Hollow | Any = None
        self.read_by_python: set = set()  # storages read by ``reads.VALUE_METHODS``
        # Each op's names and out= arguments, by the op's id: an ``OpOverload`` hashes in
        # Python, an id in C, and the op objects live as long as torch.
        self.ops: dict[int, tuple[str, str, frozenset[str]]] = {}
        self.kept: Any = None  # a real forward's ``kept.Kept``: what an op writes, copied first

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # Dynamo compiles with the mode switched off and switches it back on to run the compiled
        # graphs: we see every op that runs for real, once, and none of Dynamo's tracing.
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):  # the branch taken, op by op
            return higher_order(self, func, args)
        if self.node is not None:
            return super().__torch_dispatch__(func, types, args, kwargs)
        op = self.ops.get(id(func))
        if op is None:
            name = _op_name(func)
            qualified = name if "." in name else f"aten.{name}"
            op = self.ops[id(func)] = (name, qualified, _out_arguments(func))
        name, qualified, outs = op
        if name in QUERIES:  # asks about a tensor, computes nothing: not a node
            return func(*args, **kwargs)
        # First the module: reading the frames' locals renews their snapshot (``f_locals``
        # before PEP 667 is a copy the frame keeps), which let go of the values rebound since.
        module = self.module_here()
        if module in self.rnns:  # ATen's C++ linear: its bias added in place, as on plain tensors
            func = linear_bias_in_place(func, args, kwargs, self.nodes)
        self.sweep()
        tensors = tree.tensor_list((args, kwargs))  # walked once, for open and record
        node = self.open(name, qualified, module, tensors)
        if self.eager_segments:
            self.segment += 1
            node.segment = self.segment
        self.node = node
        call = None if self.memo is None else self.memo.key_of(func, args, kwargs)
        if self.kept is not None:
            self.kept.before(func, args, kwargs)
        try:
            hollow = self.hollow
            if func is self.grouped:
                out = grouped_mm(func, args, kwargs)
            elif hollow is None:
                out = func(*args, **kwargs)
            else:
                out = hollow.run(func, args, kwargs, node)
            # An out= argument is the op's output, not an input (as in the cost pass).
            inputs = {k: v for k, v in kwargs.items() if k not in outs} if outs else kwargs
            if outs:  # written through, not read (nor a new storage): as in the cost pass
                written = tree.tensor_list([v for k, v in kwargs.items() if k in outs])
                record_reads(node, tree.tensor_list((args, inputs)))
                node.overwrites = {_storage(t) for t in written} - node.reads
            self.record(name, args, inputs, out, tensors)
        finally:
            self.node = None
        self.close(node, out)
        if name == "max_pool2d_with_indices" and in_max_pool1d(sys._getframe(1)):
            indices = _storage(out[1])  # F.max_pool1d's, on the tape as in the FX pass
            eager_cpu_max_pool1d(node, {indices: node.writes.get(indices, 0)}, args[0])
        if hollow is not None:
            hollow.learn(func, node.macs + node.other, out, args, kwargs, node.reads, node.views)
        if call is not None:
            self.memo.add(call, node.index, args, kwargs, out)
        if self.eager_segments:
            self.segment += 1
        return out

    def unique(self, name: str) -> str:
        self.taken[name] += 1
        count = self.taken[name]
        return name if count == 1 else f"{name}_{count - 1}"

    def open(self, name: str, target: str, module: str, tensors: list) -> NodeCost:
        """A new node reading ``tensors`` (the tensors among the call's arguments)."""
        node = NodeCost(
            name=self.unique(name),
            op="call_function",
            target=target,
            module=module,
            index=len(self.nodes),
        )
        node.segment = self.segment
        producers = dict.fromkeys(self.made_by(t) for t in tensors)
        producers.pop(None, None)
        node.inputs = list(producers)
        record_reads(node, tensors)
        return node

    def close(self, node: NodeCost, out: Any) -> None:
        """Register what ``node`` returned and put it on the tape."""
        tensors = tree.tensor_list(out)
        record_output(node, out, tensors)
        if not node.kind:
            node.kind = node.target.rpartition(".")[2]
        held = self.frees is not None
        for t in tensors:
            if id(t) in self.weights:  # written in place, still a weight: read as one, as in FX
                continue
            self.producer[id(t)] = (node.name, weakref.ref(t) if held else None)
        if held:
            self.live.update(dict.fromkeys(node.writes))
        else:
            self.keep.append(out)
        self.nodes.append(node)

    def made_by(self, t: torch.Tensor) -> str | None:
        """The node that returned ``t`` (or the input's name), None for weights and constants:
        an id is matched only while its tensor is the one registered (ids of freed tensors are
        reused)."""
        name, ref = self.producer.get(id(t), (None, None))
        return name if ref is None or ref() is t else None

    def sweep(self) -> None:
        """With ``frees``: the storages freed since the last op died after the last node."""
        if self.frees is None:
            return
        expired = torch.UntypedStorage._expired  # a ``StorageKey`` is the address it asks of
        dead = [key for key in self.live if expired(key)]
        for key in dead:
            del self.live[key]
            self.frees[key] = len(self.nodes) - 1

    def module_here(self) -> str:
        """The module path of the code that called the tape (``frames.ModuleStack``), from
        the frame above the one that asks (the tape's own, or the graph runner's): no module
        of the model runs there."""
        return self.stack.module(sys._getframe(2))

    def __exit__(self, *exc: Any) -> Any:
        self.stack.forget()  # the last op's frames hold their locals, which the last sweep frees
        return super().__exit__(*exc)

    def add_input(self, name: str, tensor: torch.Tensor) -> None:
        self.producer[id(tensor)] = (name, None)
        self.keep.append(tensor)


def model_weights(model: nn.Module) -> dict[int, tuple[str, int]]:
    """Every weight an op may read, by id: its name and stored bytes. Those of modules the
    model keeps in a plain list (``walk.unregistered``) too: their kernels read them as any
    other's, and without them a stack of such Linears read as compute-bound at 6% of its
    traffic. So are tensors kept as plain attributes (``walk.plain_tensors``)."""
    weights: dict[int, tuple[str, int]] = {}
    state = model_state(model)
    for fqn, tensor in state.items():
        weights.setdefault(id(tensor), (fqn, stored_bytes(tensor)))
    for _, path, module in walk.unregistered(model):
        for table in (module._parameters, module._buffers):
            for key, tensor in table.items():
                if tensor is not None:
                    weights.setdefault(id(tensor), (f"{path}.{key}", stored_bytes(tensor)))
    for path, tensor in walk.plain_tensors(model):  # a rotary table kept as an attribute
        weights.setdefault(id(tensor), (path, stored_bytes(tensor)))
    return {**weight_ids(model, state), **weights}


def run_taped(
    model: nn.Module, example: Example, tape: Tape, call: Any, reads: bool = False
) -> Measured:
    """One real forward of ``call`` under ``tape``; the tape as a ``Measured``. ``reads``:
    also note whether the forward read values (``Measured.reads_values``): a tape that read
    none priced a path that shapes alone decide, as a graph's (the profile cache keys it so).
    """
    inputs: dict[str, dict[Any, int]] = {}
    masks = set()  # the boolean inputs
    dims: dict[str, int] = {}  # and each input's dim 1
    names = input_names(model, example)
    for i, t in enumerate(example.tensors):
        name = names.get(id(t), f"input_{i}")
        tape.add_input(name, t)
        inputs[name] = _views(t)
        note_input(name, t, masks, dims)
    watch = value_reads() if reads else contextlib.nullcontext([])
    with collector_paused(), torch.no_grad(), max_pool1d_marked(), tape, watch as seen:
        out = call(*example.args, **example.kwargs)
    tape.read_by_python = {storage for _, storage in seen}
    tape.sweep()  # what the forward's frames held to the end (the outputs stay live)
    outputs = {tape.made_by(t) for t in tensor_leaves(out)}
    measured = Measured(tape.nodes, outputs & {n.name for n in tape.nodes}, inputs, "real")
    measured.frees = tape.frees
    measured.input_extents = extents(list(example.tensors))
    measured.input_masks = frozenset(masks)
    measured.input_channels = dims
    measured.returned = {_storage(t) for t in tensor_leaves(out)}
    measured.returned_extents = extents(list(tensor_leaves(out)))
    if reads:
        measured.reads_values = bool(seen) or reads_data(tape.nodes)
    return measured


def input_names(model: nn.Module, example: Example) -> dict[int, str]:
    """Each input tensor's name in the forward's signature (``input_ids``), as export and FX
    name their placeholders; a container's tensors get ``name_0``, ``name_1``..."""
    import inspect

    try:
        bound = inspect.signature(model.forward).bind(*example.args, **example.kwargs)
    except (TypeError, ValueError):
        return {}
    names: dict[int, str] = {}
    for name, value in bound.arguments.items():
        tensors = [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]
        for j, t in enumerate(tensors):
            names.setdefault(id(t), name if len(tensors) == 1 else f"{name}_{j}")
    return names


def real_tape(model: nn.Module, example: Example, memo: bool) -> Tape:
    from pytest_graphbudget.engine import kept

    tape = Tape(model, model_weights(model))
    tape.eager_segments = False
    tape.frees = {}
    tape.kept = kept.current()
    if memo:
        tape.memo = Memo(set(tape.weights) | {id(t) for t in example.tensors})
    return tape


def hollow_run(model: nn.Module, example: Example, tape: Tape, watch: Any) -> Measured | None:
    """The tape of one real forward with its heavy ops hollow (``hollow``), or None when a
    value they did not compute mattered, whatever the forward assigned put back (``watch``, a
    ``watch.StateWatch`` around it): the forward then runs again in full. A model's own error
    is raised by that forward, in its words."""
    state = lambda: {_storage(t) for t in model_state(model).values()}  # noqa: E731
    tape.hollow = hollow = Hollow(state, first.elements(model, example))
    try:
        measured = run_taped(model, example, tape, model, reads=True)
    except Exception:
        measured = None
    finally:
        hollow.keep()
    if measured is not None and not hollow.stopped:
        read, tainted = tape.read_by_python, hollow.tainted
        if not tainted or not (None in read or not tainted.isdisjoint(read) or watch.look()):
            watch.final = bool(tainted)  # looked at just now: the caller assigns nothing after
            measured.hollow = hollow.hollowed
            return measured
    watch.look(restore=True)
    values_mattered(model)
    return None
