"""The last two tracing tiers: Dynamo with graph breaks (``dynamo-breaks``), then one eager run.

Models with data-dependent Python control flow (``if x.sum() > 0:``, detectors' NMS and
per-image loops) cannot be captured whole by ``fx`` or ``export``. These tiers price the path
that one *real* forward takes instead:

- ``dynamo-breaks``: ``torch.compile(fullgraph=False)`` with a backend of ours that keeps every
  graph Dynamo captures and runs it through a cost interpreter (FX node names, module paths),
  while a ``TorchDispatchMode`` around the same forward prices the ATen ops that run in eager
  Python between the graphs. Graphs and eager ops land on one tape: one node list, one module
  tree, one liveness. A graph break ends a fused kernel, and an eager op is a kernel of its own.
- ``eager``: the same tape without Dynamo, for a model Dynamo cannot run: every ATen op of one
  real forward is a node, and the partitioner fuses the op sequence as a compiler would.

``dynamo-breaks`` needs real weights and inputs: a model on the ``meta`` device has no data to
branch on. The tape runs such a model on fake tensors instead (``capture_eager(fake=True)``).
"""

from __future__ import annotations

import contextlib
import sys
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn
from torch.utils import _pytree as pytree

from pytest_graphbudget.engine import tree, walk
from pytest_graphbudget.engine.extents import extents
from pytest_graphbudget.engine.frames import ModuleStack
from pytest_graphbudget.engine.measure import _Recorder
from pytest_graphbudget.engine.names import name_as_fx
from pytest_graphbudget.engine.nodes import (
    QUERIES,
    Measured,
    NodeCost,
    _op_name,
    _out_arguments,
    _storage,
    _views,
    record_output,
    record_reads,
)
from pytest_graphbudget.engine.quantized import stored_bytes, weight_ids
from pytest_graphbudget.engine.reads import reads_data, value_reads
from pytest_graphbudget.engine.reasons import Break, module_path, plain_breaks
from pytest_graphbudget.engine.replay import Memo
from pytest_graphbudget.engine.trace import (
    Example,
    collector_paused,
    is_meta,
    model_state,
    tensor_leaves,
)

_NEEDS_WEIGHTS = (
    "needs real weights to run the model: build it on the CPU (meta=False) to profile "
    "data-dependent control flow"
)


@dataclass
class Captured:
    """What a tier of this module produced: the measured tape and how it was captured."""

    method: str
    measured: Measured
    graphs: int = 0
    breaks: list[Break] = field(default_factory=list)
    seconds: float = 0.0
    memo: Memo | None = None  # the eager tape's calls, for replaying a second forward


class _Tape(_Recorder):
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
        for path, module in walk.named_modules(model):
            self.paths.setdefault(id(module), []).append(path)
        self.stack = ModuleStack(self.paths, self.root)
        self.segment = 0
        self.eager_segments = True
        self.memo: Memo | None = None  # every call and its result's layout (``replay``)
        # Each op's names and out= arguments, by the op's id: an ``OpOverload`` hashes in
        # Python, an id in C, and the op objects live as long as torch.
        self.ops: dict[int, tuple[str, str, frozenset[str]]] = {}

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # Dynamo compiles with the mode switched off and switches it back on to run the compiled
        # graphs: we see every op that runs for real, once, and none of Dynamo's tracing.
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
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
        self.sweep()
        tensors = tree.tensor_list((args, kwargs))  # walked once, for open and record
        node = self.open(name, qualified, module, tensors)
        if self.eager_segments:
            self.segment += 1
            node.segment = self.segment
        self.node = node
        call = None if self.memo is None else self.memo.key_of(func, args, kwargs)
        try:
            out = func(*args, **kwargs)
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


class _DynamoTape(_Tape):
    """The tape of the ``dynamo-breaks`` tier: it runs under ``torch.compile``, so Dynamo must
    not trace into the mode's own frames (torch's ``_disable_dynamo`` wrapper, kept here)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return super().__torch_dispatch__(func, types, args, kwargs)


class _GraphRunner(fx.Interpreter):
    """Runs one captured graph on real values, one ``NodeCost`` per FX node, onto the tape."""

    def __init__(self, gm: fx.GraphModule, tape: _Tape, root: str):
        super().__init__(gm, garbage_collect_values=False)
        self.tape = tape
        self.root = root

    def run_node(self, n: fx.Node) -> Any:
        if n.op in ("placeholder", "get_attr", "output"):
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        tape = self.tape
        node = tape.open(n.name, _target(n), self.path_of(n), tree.tensor_list((args, kwargs)))
        node.op = n.op
        tape.node = node
        try:
            value = super().run_node(n)
        finally:
            tape.node = None
        tape.close(node, value)
        return value

    def path_of(self, n: fx.Node) -> str:
        stack = n.meta.get("nn_module_stack") or {}
        if not stack:
            return self.root
        relative = module_path(next(reversed(stack.values()))[0])
        return ".".join(p for p in (self.root, relative) if p)


def _target(n: fx.Node) -> str:
    if isinstance(n.target, str):
        return n.target
    return getattr(n.target, "__name__", str(n.target))


def _weights(model: nn.Module) -> dict[int, tuple[str, int]]:
    weights: dict[int, tuple[str, int]] = {}
    state = model_state(model)
    for fqn, tensor in state.items():
        weights.setdefault(id(tensor), (fqn, stored_bytes(tensor)))
    return {**weight_ids(model, state), **weights}


def _run(
    model: nn.Module, example: Example, tape: _Tape, call: Any, reads: bool = False
) -> Measured:
    """One real forward of ``call`` under ``tape``; the tape as a ``Measured``. ``reads``:
    also note whether the forward read values (``Measured.reads_values``): a tape that read
    none priced a path that shapes alone decide, as a graph's (the profile cache keys it so).
    """
    inputs: dict[str, dict[Any, int]] = {}
    names = _input_names(model, example)
    for i, t in enumerate(example.tensors):
        name = names.get(id(t), f"input_{i}")
        tape.add_input(name, t)
        inputs[name] = _views(t)
    watch = value_reads() if reads else contextlib.nullcontext([])
    with collector_paused(), torch.no_grad(), tape, watch as seen:
        out = call(*example.args, **example.kwargs)
    tape.sweep()  # what the forward's frames held to the end (the outputs stay live)
    outputs = {tape.made_by(t) for t in tensor_leaves(out)}
    measured = Measured(tape.nodes, outputs & {n.name for n in tape.nodes}, inputs, "real")
    measured.frees = tape.frees
    measured.returned = {_storage(t) for t in tensor_leaves(out)}
    measured.returned_extents = extents(list(tensor_leaves(out)))
    if reads:
        measured.reads_values = bool(seen) or reads_data(tape.nodes)
    return measured


def _input_names(model: nn.Module, example: Example) -> dict[int, str]:
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


def capture_breaks(model: nn.Module, example: Example) -> Captured:
    """Tier ``dynamo-breaks``: Dynamo with graph breaks, every graph and eager op priced."""
    import torch._dynamo
    from torch._dynamo import output_graph

    from pytest_graphbudget.compat import dynamo_breaks_unavailable

    unavailable = dynamo_breaks_unavailable()
    if unavailable:
        raise RuntimeError(unavailable)
    if is_meta(model):
        raise RuntimeError(_NEEDS_WEIGHTS)
    start = time.perf_counter()
    tape = _DynamoTape(model, _weights(model))
    graphs: list[fx.GraphModule] = []

    def backend(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
        graphs.append(gm)

        def run(*args: Any) -> Any:
            # A graph is one fused region: its nodes share a segment, apart from eager ops.
            tape.segment += 1
            runner = _GraphRunner(gm, tape, tape.module_here())
            out = runner.run(*args)
            tape.segment += 1
            return out

        return run

    torch._dynamo.reset()  # a model's code seen before would be guarded on another instance
    reasons = output_graph.graph_break_reasons
    seen = len(reasons)
    compiled = torch.compile(model, backend=backend, fullgraph=False, dynamic=False)
    try:
        measured = _run(model, example, tape, compiled)
    finally:
        found = list(reasons[seen:])
        torch._dynamo.reset()
    if not graphs:
        raise RuntimeError("Dynamo captured no graph (the whole forward ran eagerly)")
    return Captured(
        "dynamo-breaks",
        measured,
        graphs=len(graphs),
        breaks=plain_breaks(found),
        seconds=time.perf_counter() - start,
    )


def capture_eager(
    model: nn.Module,
    example: Example,
    fake: bool = False,
    memo: bool = False,
) -> Captured:
    """Tier ``eager``: every ATen op of one real forward, fused as a compiler would.

    ``fake``: the same forward on fake twins of the weights and inputs (shapes, no data), for a
    model whose lazy state a real forward has built already, or a model on the meta device
    (which has no data to run on): the ops are those a real forward runs, without their
    arithmetic. A forward that needs data (a branch on a value, ``.item()``, ``nonzero``) raises
    on fakes; whatever it assigns is put back (``trace.restored``).

    ``memo`` (a real forward): the result keeps every call and how to rebuild its result
    (``Captured.memo``), for a second forward replayed without computing (``replay``)."""
    if not fake and is_meta(model):
        raise RuntimeError(_NEEDS_WEIGHTS)
    start = time.perf_counter()
    if fake:
        measured = _fake_run(model, example, settle=is_meta(model))
    else:
        tape = _Tape(model, _weights(model))
        tape.eager_segments = False
        tape.frees = {}
        if memo:
            tape.memo = Memo(set(tape.weights) | {id(t) for t in example.tensors})
        measured = _run(model, example, tape, model, reads=True)
        name_as_fx(measured, model)
        return Captured("eager", measured, seconds=time.perf_counter() - start, memo=tape.memo)
    name_as_fx(measured, model)
    return Captured("eager", measured, seconds=time.perf_counter() - start)


def _fake_run(model: nn.Module, example: Example, settle: bool = False) -> Measured:
    """The tape of one forward on fake weights and inputs, the model's attributes restored.

    ``settle`` (a model on the meta device, whose lazy state no real forward can build): when
    the taped forward assigned lazy state (YOLO's anchors), a second forward on the state it
    left is taped instead, as the other tiers price a forward after the first."""
    from pytest_graphbudget.compat import fake_mode, reparametrize
    from pytest_graphbudget.engine.trace import fake_like, fake_state, restored, watched

    mode = fake_mode()
    state = fake_state(model, mode)
    fakes = Example(*fake_like((example.args, example.kwargs), mode))

    def taped() -> Measured:
        tape = _Tape(model, _weights(model))
        tape.eager_segments = False
        tape.frees = {}
        return _run(model, fakes, tape, model)

    with restored(model), reparametrize(model, state), mode:
        with watched(model) as watch:
            measured = taped()
        if settle and watch.changed:
            measured = taped()
    measured.mode = "fake"
    measured.reads_values = False  # a fake forward that reads a value raises
    return measured


TIERS = (("dynamo-breaks", capture_breaks), ("eager", capture_eager))
"""The tiers after ``fx`` and ``dynamo``, in the order they are tried."""
