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

import time
from dataclasses import dataclass, field
from typing import Any

from torch import fx, nn

from pytest_graphbudget.engine import tree
from pytest_graphbudget.engine.names import name_as_fx
from pytest_graphbudget.engine.nodes import (
    Measured,
)
from pytest_graphbudget.engine.reasons import Break, plain_breaks
from pytest_graphbudget.engine.replay import Memo
from pytest_graphbudget.engine.tape import Tape, hollow_run, model_weights, real_tape, run_taped
from pytest_graphbudget.engine.trace import (
    Example,
    is_meta,
)
from pytest_graphbudget.engine.walk import module_path

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


class _DynamoTape(Tape):
    """The tape of the ``dynamo-breaks`` tier: it runs under ``torch.compile``, so Dynamo must
    not trace into the mode's own frames (torch's ``_disable_dynamo`` wrapper, kept here)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return super().__torch_dispatch__(func, types, args, kwargs)


class _GraphRunner(fx.Interpreter):
    """Runs one captured graph on real values, one ``NodeCost`` per FX node, onto the tape."""

    def __init__(self, gm: fx.GraphModule, tape: Tape, root: str):
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
    tape = _DynamoTape(model, model_weights(model))
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
        measured = run_taped(model, example, tape, compiled)
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
    hollow: Any = None,
) -> Captured:
    """Tier ``eager``: every ATen op of one real forward, fused as a compiler would.

    ``fake``: the same forward on fake twins of the weights and inputs (shapes, no data), for a
    model whose lazy state a real forward has built already, or a model on the meta device
    (which has no data to run on): the ops are those a real forward runs, without their
    arithmetic. A forward that needs data (a branch on a value, ``.item()``, ``nonzero``) raises
    on fakes; whatever it assigns is put back (``watch.restored``).

    ``memo`` (a real forward): the result keeps every call and how to rebuild its result
    (``Captured.memo``), for a second forward replayed without computing (``replay``).
    ``hollow`` (a real forward): the ``watch.StateWatch`` around it, for its heavy ops to be
    hollow where no value they compute matters, and what it assigned put back where one did."""
    if not fake and is_meta(model):
        raise RuntimeError(_NEEDS_WEIGHTS)
    start = time.perf_counter()
    if fake:
        measured = _fake_run(model, example, settle=is_meta(model))
    else:
        tape = real_tape(model, example, memo)
        measured = None if hollow is None else hollow_run(model, example, tape, hollow)
        if measured is None:
            tape = real_tape(model, example, memo)
            measured = run_taped(model, example, tape, model, reads=True)
        name_as_fx(measured, model)
        return Captured("eager", measured, seconds=time.perf_counter() - start, memo=tape.memo)
    name_as_fx(measured, model)
    return Captured("eager", measured, seconds=time.perf_counter() - start)


def _fake_run(model: nn.Module, example: Example, settle: bool = False) -> Measured:
    """The tape of one forward on fake weights and inputs, the model's attributes restored.

    ``settle`` (a model on the meta device, whose lazy state no real forward can build): when
    the taped forward assigned lazy state (YOLO's anchors), a second forward on the state it
    left is taped instead, as the other tiers price a forward after the first."""
    from pytest_graphbudget.compat import reparametrize
    from pytest_graphbudget.engine.fake_ops import FakeOps
    from pytest_graphbudget.engine.fakes import fake_mode
    from pytest_graphbudget.engine.trace import fake_like, fake_state
    from pytest_graphbudget.engine.watch import restored, watched

    mode = fake_mode()
    state = fake_state(model, mode)
    fakes = Example(*fake_like((example.args, example.kwargs), mode))

    def taped() -> Measured:
        tape = Tape(model, model_weights(model))
        tape.eager_segments = False
        tape.frees = {}
        tape.hollow = FakeOps(mode)  # ops whose signature ran before skip the mode's dispatch
        return run_taped(model, fakes, tape, model)

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
