"""The cost pass: run the traced graph once on fake tensors and price every ATen op.

An ``fx.Interpreter`` walks the graph node by node while a ``TorchDispatchMode`` sees every
ATen op the node dispatches, whatever the node is (``call_module``, ``call_function`` or
``call_method``): the same formulas price them all. Fake tensors carry shapes, dtypes and
storage identity but no data, so a model of any size is measured without computing anything.
Models whose graphs need real values (``.item()`` on data) are measured on real tensors.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch
from torch import fx, nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from pytest_graphbudget.compat import below_autograd_undone, grouped_mm, grouped_mm_op
from pytest_graphbudget.costs import FormulaError, kind_of, lookup, price
from pytest_graphbudget.costs.registry import may_contract
from pytest_graphbudget.engine import trace, tree
from pytest_graphbudget.engine.eager_kernels import (
    check_dtypes,
    cpu_workspace,
    eager_cpu_max_pool1d,
    eager_extras,
    is_max_pool1d,
    lstm_workspace,
)
from pytest_graphbudget.engine.extents import extents
from pytest_graphbudget.engine.fakes import fake_constant, fake_mode, linear
from pytest_graphbudget.engine.fx_tracer import HELD, KEPT
from pytest_graphbudget.engine.lookups import add_lookups
from pytest_graphbudget.engine.nodes import (
    QUERIES,
    RANK,
    Measured,
    NodeCost,
    _nbytes,
    _op_name,
    _out_arguments,
    _storage,
    _views,
    in_place,
    note_input,
    record_output,
    record_reads,
    source_stack,
    widened,
)
from pytest_graphbudget.engine.quantized import packed_keys, rows_read, stored_bytes, weight_ids
from pytest_graphbudget.engine.split import Split
from pytest_graphbudget.engine.trace import Traced, fake_like, fake_state, model_state
from pytest_graphbudget.engine.walk import module_calls, module_path


class _Recorder(TorchDispatchMode):
    """Prices every ATen op and charges it to the FX node being interpreted."""

    supports_higher_order_operators = True  # ``torch.cond`` reaches the mode: ``higher_order``

    def __init__(self, weights: dict[int, tuple[str, int]]):
        super().__init__()
        self.weights = weights
        self.node: NodeCost | None = None
        self.call: Any = _call  # how an op runs: ``meta_pass.MetaCache`` on meta tensors
        self.kernels = 0  # ops of the current node that launch a kernel (``_launches``)
        self.fresh: dict[Any, int] = {}  # what multi-output ops and bare allocations made
        self.split: Split | None = None  # a node being recorded one node per op
        self.grouped = grouped_mm_op()  # run apart on fakes (``compat.grouped_mm``)

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Torch wraps a mode's ``__torch_dispatch__`` in ``torch._dynamo.disable`` unless this
        # says no, and that wrapper imports Dynamo at the first op (a second of a cold start).
        # The cost pass and the taped forward never run under ``torch.compile``: no Dynamo.
        # The graph-break tier's tape (``breaks._DynamoTape``) keeps the wrapper.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return higher_order(self, func, args)
        if _decomposable(func):
            # A composite op reaches the mode whole when autograd is off (inference_mode):
            # price what it decomposes into, as it would be priced with autograd on.
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        if self.split is not None:
            return self.split.op(func, args, kwargs)
        check_dtypes(func, args)
        call = grouped_mm if func is self.grouped else self.call
        out = lstm_workspace(func, widened(func, call(func, args, kwargs), args, kwargs), args)
        if self.node is not None:
            # An out= argument is the op's output, not an input: the formula sees it as ``out``.
            outs = _out_arguments(func)
            inputs = {k: v for k, v in kwargs.items() if k not in outs} if outs else kwargs
            self.record(_op_name(func), args, inputs, out)
            self.kernels += _launches(func) > 0
            if _launches(func) > 1 or _op_name(func) in ALLOCATES:
                self.fresh.update((_storage(t), _nbytes(t)) for t in tree.tensors(out))
        return out

    def record(
        self, name: str, args: tuple, kwargs: dict, out: Any, tensors: list | None = None
    ) -> None:
        """Price one call and charge it to the current node. ``name`` is an ATen op's base name
        (``addmm``) or ``namespace.name`` for any other op; ``tensors``: the tensors among
        ``args`` and ``kwargs`` when the caller has them already."""
        node = self.node
        entry = lookup(name)
        role = entry.role if entry is not None else None
        if tensors is None:
            tensors = tree.tensor_list((args, kwargs))
        for key in (*map(id, tensors), *packed_keys(args)):
            if key in self.weights:
                fqn, size = self.weights[key]
                if role == "gather":  # a lookup reads the rows it returns, not the table
                    size = min(size, rows_read(name, args, out))
                node.weights[fqn] = max(node.weights.get(fqn, 0), size)
        if entry is not None and entry.formula is None and entry.workspace is None:
            cost = price(name, (), {}, None)  # no formula (a view): free whatever the shapes
        else:
            shapes = tree.shapes(args), tree.shapes(kwargs), tree.shapes(out)
            try:
                cost = price(name, *shapes)
            except FormulaError:  # a custom formula's mistake: fail loudly, never "unsupported"
                raise
            except Exception:  # a formula that cannot read this call: report the op, don't guess
                cost = None
        if cost is None:
            qualified = name if "." in name else f"aten.{name}"
            node.unsupported[qualified] += 1
            if may_contract(qualified, args, kwargs):
                node.contractions[qualified] += 1
        else:
            node.macs += cost.macs
            node.other += cost.other
            add_lookups(node, name, args)
            if entry.workspace is not None:
                held = cpu_workspace(name, args, out, shapes)
                held += tree.strided_bytes(args, entry.contiguous)
                node.workspace = max(node.workspace, held)
            eager_extras(node, name, args, tensors, out)
            if cost.macs or role == "anchor":
                node.category, node.kind = "anchor", _anchor_kind(name, args, self.weights)
            elif role == "reduction" and RANK[node.category] < RANK["reduction"]:
                node.category, node.kind = "reduction", entry.kind
            elif RANK[node.category] < RANK["elementwise"] and cost.other:
                node.category, node.kind = "elementwise", entry.kind
        if not node.kind and role != "free":
            node.kind = kind_of(name)


def _call(func: Any, args: tuple, kwargs: dict) -> Any:
    return func(*args, **kwargs)


ALLOCATES = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})
"""Ops that allocate and run no kernel: a buffer, held while its node runs (``rrelu``'s noise)."""

UNMARKED_VIEWS = frozenset({"_unsafe_view"})
"""Views whose schema does not say so (``reshape``'s ``_unsafe_view``): no kernel (``split``)."""
LINEARS = (torch._C._nn.linear, torch.ops.aten.linear.default)  # ``fakes.linear`` runs them


@functools.cache
def _launches(func: Any) -> int:
    """Whether an op runs a kernel (0 if not): it returns new tensors (their count) or writes
    one (1). A view, a query of a tensor's metadata, an assert or a bare allocation does not."""
    if _op_name(func) in QUERIES | ALLOCATES | UNMARKED_VIEWS:
        return 0
    returns = getattr(getattr(func, "_schema", None), "returns", None)
    if returns is None:
        return 1
    tensors = [r for r in returns if "Tensor" in str(r.type)]
    fresh = sum(r.alias_info is None for r in tensors)
    return fresh or int(any(r.alias_info.is_write for r in tensors))


def higher_order(mode: TorchDispatchMode, func: Any, args: tuple) -> Any:
    """``torch.cond`` runs the branch its predicate picks with ``mode`` on, as its dense kernel
    would, so the branch's ops are priced (reading the predicate is an ``is_nonzero`` the tape
    sees: a path values decide). Another higher-order op is refused by name, not by torch."""
    name = func.name()
    if name != "cond":
        raise NotImplementedError(f"torch.{name} is a higher-order op the tape cannot follow")
    pred, true_fn, false_fn, operands = args
    with below_autograd_undone(), mode:
        return (true_fn if pred else false_fn)(*operands)


def _decomposable(func: Any) -> bool:
    """True for an op with no formula of its own, which may decompose into priced ops."""
    if not isinstance(func, torch._ops.OpOverload) or func.namespace == "prim":
        return False
    return lookup(_op_name(func)) is None


def _anchor_kind(name: str, args: tuple, weights: dict[int, tuple[str, int]]) -> str:
    kind = kind_of(name)
    if kind == "matmul" and any(isinstance(a, torch.Tensor) and id(a) in weights for a in args):
        return "linear"
    return kind


class _CostInterpreter(fx.Interpreter):
    splits = True  # a node that runs several kernels becomes one node per op (``Split``)

    def __init__(self, gm: fx.GraphModule, recorder: _Recorder, traced: Traced):
        # Values stay alive so that storage identities are never reused within the pass.
        super().__init__(gm, garbage_collect_values=False)
        self.recorder = recorder
        self.traced = traced
        self.nodes: list[NodeCost] = []
        self.storage_of: dict[str, set] = {}
        self.inputs: dict[str, dict[Any, int]] = {}
        self.input_tensors: list[Any] = []  # every input's, for ``Measured.input_extents``
        self.input_masks: set[str] = set()  # the inputs that are boolean tensors
        self.input_channels: dict[str, int] = {}  # and each one's dim 1
        self.written_by: dict[str, str] = {}
        self.parts: dict[str, list[str]] = {}  # a split node -> the nodes that made its value
        self.made_by: dict[int, str] = {}  # the ids of split nodes' tensors -> their makers
        self.position: dict[str, int] = {}  # FX node -> its (last) node's index
        self.freed: dict[Any, int] = {}  # storages split nodes' own code freed -> last node live
        self._placeholder = 0

    def run_node(self, n: fx.Node) -> Any:
        if n.op in ("placeholder", "get_attr", "output"):
            value = super().run_node(n)
            self.storage_of[n.name] = {_storage(t) for t in tree.tensors(value)}
            if n.op == "placeholder":
                binding = self.traced.placeholders[self._placeholder]
                self._placeholder += 1
                if binding.kind in ("input", "nested"):
                    self.inputs[n.name] = _views(value)
                    self.input_tensors += tree.tensor_list(value)
                    note_input(n.name, value, self.input_masks, self.input_channels)
            return value
        node = NodeCost(
            name=n.name, op=n.op, target=_target(n), module=self._module(n), index=len(self.nodes)
        )
        node.stack, node.calls = source_stack(n.meta), self._calls(n)
        self.recorder.node, self.recorder.kernels, self.recorder.fresh = node, 0, {}
        try:
            value = super().run_node(n)
        finally:
            self.recorder.node = None
        if self.splits and self.recorder.kernels > 1:
            return self.split(n)
        ran, value = value, self.result(n, value)
        producers = list(n.all_input_nodes)
        node.inputs = list(dict.fromkeys(m for p in producers for m in self.makers(p.name)))
        # what an op wrote through out= or in place is read from it, as on the tape (y.add_(1))
        outs = {k for k in ("out", "values", "indices") if k in n.kwargs}
        written = [*pytree.tree_leaves([n.kwargs[k] for k in outs]), *in_place(n, value, self)]
        self.written_by.update({t.name: n.name for t in written if isinstance(t, fx.Node)})
        sources = (n.args, {k: v for k, v in n.kwargs.items() if k not in outs})
        read = dict.fromkeys(a for a in pytree.tree_leaves(sources) if isinstance(a, fx.Node))
        record_reads(node, tree.tensor_list([self.env[a] for a in read]))
        storages = (self.storage_of.get(p.name, set()) for p in producers)
        node.overwrites = set().union(*storages) - node.reads
        tensors = tree.tensor_list(value)
        record_output(node, value, tensors)
        # fresh: made and let go here. What it ran returned is its value, though the graph
        # reads export's recorded twin of it (``measure_export``): not a second write.
        seen = node.writes.keys() | node.reads | node.overwrites
        seen |= {_storage(t) for t in tree.tensors(ran)} if ran is not value else set()
        held = {k: size for k, size in self.recorder.fresh.items() if k not in seen}
        node.writes.update(held)
        if held and is_max_pool1d(n, self.module):  # the indices it did not return
            eager_cpu_max_pool1d(node, held, self.env[(*n.args, *n.kwargs.values())[0]])
        if not node.kind:
            node.kind = kind_of(node.target)
        self.storage_of[n.name] = {_storage(t) for t in tensors}
        self.nodes.append(node)
        self.position[n.name] = len(self.nodes) - 1
        return value

    def get_attr(self, target: Any, args: tuple, kwargs: dict) -> Any:
        # a constant (a plain-attribute table) as the mode's fake, so its views share a storage
        return fake_constant(super().get_attr(target, args, kwargs), self.recorder.weights)

    def returned_extents(self, output: fx.Node) -> dict[Any, Any]:
        """The views of its storages the graph's ``output`` node returns."""
        return extents(tree.tensor_list([self.env[p] for p in output.all_input_nodes]))

    def makers(self, name: str) -> list[str]:
        """The nodes that made FX node ``name``'s value (its ops', when it was split)."""
        return self.parts.get(name) or [self.written_by.get(name, name)]

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        target = linear if target in LINEARS else target  # F.linear, as eager runs it
        # lists the function may mutate, as the graph's code passes them (``tree.mutable``)
        return super().call_function(target, *tree.mutable((args, kwargs)))

    def split(self, n: fx.Node) -> Any:
        """Run ``n`` again, one node per ATen op (``Split``), in place of one node for all."""
        made_by: dict[int, tuple[str, Any]] = {}
        for p in n.all_input_nodes:
            for t in tree.tensors(self.env[p]):
                name = self.made_by.get(id(t), self.makers(p.name)[0])
                made_by.setdefault(id(t), (name, None))
        split = Split(self.recorder, n, self._module(n), made_by, len(self.nodes))
        self.recorder.split = split
        try:
            value = self.result(n, super().run_node(n))
        finally:
            self.recorder.split = None
        split.sweep()
        makers = {id(t): m for t in tree.tensor_list(value) if (m := split.maker(t))}
        self.made_by.update(makers)
        self.parts[n.name] = list(dict.fromkeys(makers.values()))
        self.storage_of[n.name] = {_storage(t) for t in tree.tensors(value)}
        self.nodes.extend(split.nodes)
        for node in split.nodes:
            node.calls = self._calls(n)
        self.freed.update(split.freed)
        self.position[n.name] = len(self.nodes) - 1
        return value

    def result(self, n: fx.Node, value: Any) -> Any:
        """The value the rest of the graph sees for ``n``: what running it returned."""
        return value

    def _calls(self, n: fx.Node) -> tuple[str, ...]:
        return module_calls(n.meta, self.traced.module_prefix, source_stack(n.meta))

    def _module(self, n: fx.Node) -> str:
        if n.op == "call_module":
            path = str(n.target)
        else:
            stack = n.meta.get("nn_module_stack") or {}
            path = module_path(next(reversed(stack.values()))[0]) if stack else ""
        path = path.removeprefix(self.traced.module_prefix)
        return "" if path == self.traced.module_prefix.rstrip(".") else path


def _target(n: fx.Node) -> str:
    return n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))


class _Runner(nn.Module):
    """Holds the graph so that ``functional_call`` can swap its parameters for fakes."""

    def __init__(self, gm: fx.GraphModule, interpret):
        super().__init__()
        self.gm = gm
        self._interpret = interpret

    def forward(self, *values: Any) -> Any:
        return self._interpret(self.gm, *values)


def measure(
    model: nn.Module,
    traced: Traced,
    tensors: list[torch.Tensor],
    *,
    fake: bool = True,
    meta: bool = False,
    owner: nn.Module | None = None,
) -> Measured:
    """Interpret ``traced`` once, pricing every op, on fake tensors (or real ones).

    ``meta``: the fake tensors are plain tensors on the meta device, with no FakeTensorMode,
    whose per-op cost is several times lower cold; only for graphs whose Python code cannot
    see the device (``meta_pass.meta_safe``), since the figures must be those of the fake pass."""
    mode = fake_mode() if fake and not meta else None
    state = fake_state(model, mode) if fake else model_state(model)
    inputs = [fake_like(t, mode) for t in tensors] if fake else list(tensors)
    weights = {}
    for fqn, tensor in state.items():
        weights.setdefault(id(tensor), (fqn, stored_bytes(tensor)))
    weights = {**weight_ids(model, state), **weights}
    values = []
    for binding in traced.placeholders:
        if binding.kind == "input":
            values.append(inputs[binding.ref])
        elif binding.kind == "state":
            values.append(state[binding.ref])
        else:
            values.append(fake_like(binding.ref, mode) if fake else binding.ref)
    owner = owner or model  # the tensors it keeps as plain attributes are weights too
    weights.update(trace.graph_constants(traced.graph_module, weights, stored_bytes, owner))
    weights.update(trace.held_constants(traced, values, owner, stored_bytes))
    recorder = _Recorder(weights)
    if meta:
        from pytest_graphbudget.engine.meta_pass import MetaCache

        recorder.call = MetaCache()
    runs: list[_CostInterpreter] = []

    def interpret(gm: fx.GraphModule, *args: Any) -> Any:
        runs.append(_CostInterpreter(gm, recorder, traced))
        return runs[-1].run(*args)

    gm = traced.graph_module
    module_state = {}
    if traced.state_in_module:
        every = {"remove_duplicate": False}
        named = [*gm.named_parameters(**every), *gm.named_buffers(**every)]
        # Constants (fake if traced under a meta model's fakes) get this pass's twins
        twin = {n: fake_like(t, mode) if fake else t for n, t in named if n not in state}
        module_state = {f"gm.{n}": state[n] if n in state else twin[n] for n, _ in named}
    with torch.no_grad(), mode or contextlib.nullcontext(), recorder:
        torch.func.functional_call(
            _Runner(gm, interpret), module_state, tuple(values), strict=False, tie_weights=True
        )
    output_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    run = runs[-1]  # what an output placeholder holds was written through out= by an op
    names = [p.name for p in output_node.all_input_nodes] + sorted(output_node.meta.get(KEPT, ()))
    outputs = {m for name in names for m in run.makers(name)}  # and what modules kept
    frees = _held_until(gm.graph, run)
    measured = Measured(run.nodes, outputs, run.inputs, "fake" if fake else "real", frees)
    measured.returned = set().union(*(run.storage_of.get(name, ()) for name in names))
    measured.returned_extents = run.returned_extents(output_node)
    measured.input_extents = extents(run.input_tensors)
    measured.input_masks = frozenset(run.input_masks)
    measured.input_channels = run.input_channels
    return measured


def _held_until(graph: fx.Graph, run: _CostInterpreter) -> dict[Any, int] | None:
    """Each storage's last node live, as the tape's real frees say it: its last reader, or a
    later node while the forward's frames still referred to it (``fx_tracer.held``, recorded
    at trace time). None for a graph traced without those records (the rule then guesses)."""
    marked = [(run.position[n.name], n.meta[HELD]) for n in graph.nodes if HELD in n.meta]
    if not marked:
        return None
    frees = {key: i for i, node in enumerate(run.nodes) for key in node.writes} | run.freed
    last: dict[str, int] = {}  # each name's last node held; a run of one held set counts once
    for (i, names), after in zip(marked, [*marked[1:], (None, None)], strict=True):
        if names is not after[1]:
            last.update(dict.fromkeys(names, i))
    for name, i in last.items():
        for key in run.storage_of.get(name, ()):
            if key in frees:
                frees[key] = max(frees[key], i)
    for n in graph.nodes:  # a leaf module run op by op (an nn.RNN) holds its arguments to the
        if n.name in run.parts:  # end of its call, past the first op that reads them
            for key in (k for p in n.all_input_nodes for k in run.storage_of.get(p.name, ())):
                if key in frees:
                    frees[key] = max(frees[key], run.position[n.name])
    return frees
