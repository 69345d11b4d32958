"""The cost pass of an exported graph on the fake tensors export left on it (``meta["val"]``).

``torch.export`` runs the model once on fake tensors and keeps each node's fake output. The
ordinary fake pass (``measure.measure``) builds fake twins of every weight and input and runs
every op again in a new ``FakeTensorMode``. Here the graph's own values are the inputs and each
node's recorded value is what its users see, so storage identities (views, in-place ops) are
those export saw. A node the recorder would see whole is priced from those values without
running it; any other is dispatched once, under export's mode, for the recorder to price what
it decomposes into. The counts are those of the ordinary fake pass (the test suite compares
them); ``None`` when the graph lacks the values, and the caller runs that pass.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import fx, nn

from pytest_graphbudget.compat import export_values_match_fresh
from pytest_graphbudget.costs import lookup
from pytest_graphbudget.engine.extents import extents
from pytest_graphbudget.engine.fakes import restride
from pytest_graphbudget.engine.measure import _CostInterpreter, _Recorder
from pytest_graphbudget.engine.nodes import (
    Measured,
    _nbytes,
    _op_name,
    _out_arguments,
    _storage,
    widened,
)
from pytest_graphbudget.engine.trace import Traced, graph_constants, held_constants, model_state


class _ExportedInterpreter(_CostInterpreter):
    """A node whose op reaches the recorder as itself (an ATen op with a formula that does not
    decompose on the way) is priced from the values export recorded, without running it: the
    recorder would see the same call. Every other node runs, under export's mode, for the
    recorder to price what it decomposes into (``conv2d`` into ``convolution``)."""

    mode: Any = None  # export's fake mode, for ``_as_eager``

    def run_node(self, n: fx.Node) -> Any:
        self.current, self.ran, self.widened = n, False, False
        return super().run_node(n)

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        value = self._priced(target, args, kwargs)
        if target in VIEWS and args and isinstance(value, torch.Tensor):
            laid = _as_eager(self.mode, args[0], value)
            self.widened = self.widened or laid is not value
            return laid
        return value

    def _priced(self, target: Any, args: tuple, kwargs: dict) -> Any:
        recorded = self.current.meta.get("val")
        if getattr(target, "is_view", False) and any(
            a.op == "get_attr" for a in self.current.all_input_nodes
        ):
            # a view of a constant (a slice of a rotary table kept as a plain attribute): run,
            # so that it views the constant's storage; the recorded value has a storage of its
            # own, which read as a fresh write of the whole table
            self.ran = True
            return super().call_function(target, args, kwargs)
        if recorded is None or not _reaches_recorder_whole(target):
            return super().call_function(target, args, kwargs)
        outs = _out_arguments(target)
        inputs = {k: v for k, v in kwargs.items() if k not in outs} if outs else kwargs
        value = widened(target, recorded, args, kwargs)  # on the storage its kernel leaves
        self.widened = value is not recorded
        self.recorder.record(_op_name(target), args, inputs, value)
        return value

    def result(self, n: fx.Node, value: Any) -> Any:
        recorded = n.meta.get("val")
        return value if recorded is None or self.ran or self.widened else recorded


VIEWS = (torch.ops.aten.view.default, torch.ops.aten.reshape.default)
"""Ops whose result, where it views its input, export strides otherwise than eager torch."""


def _as_eager(mode: Any, source: Any, out: Any) -> Any:
    """``out``, a view of ``source``, strided as eager's ``view`` strides it: export's fake
    mode gives a size-1 dimension another stride than ATen's ``computeStride``, and ATen's
    channels-last test, and so the next convolution's kernel, reads it (pvt_v2's
    ``x.transpose(1, 2).view(B, C, H, W)`` at batch 1: a depthwise convolution's 6.4 MB copy
    of its input read as none)."""
    if not isinstance(source, torch.Tensor) or _storage(source) != _storage(out):
        return out
    return restride(mode, torch.ops.aten.view.default, (source, list(out.shape)), None, out)


@functools.cache
def _reaches_recorder_whole(target: Any) -> bool:
    """Whether running ``target`` shows the recorder exactly one call, to ``target`` itself:
    an ATen op with a formula (so the recorder does not decompose it) and no
    CompositeImplicitAutograd kernel (which would decompose it before any mode sees it)."""
    if not isinstance(target, torch._ops.OpOverload) or target.namespace not in ("aten", "prim"):
        return False
    if lookup(_op_name(target)) is None:
        return False
    return not torch._C._dispatch_has_kernel_for_dispatch_key(
        target.name(), "CompositeImplicitAutograd"
    )


def _values(graph: fx.Graph, symbolic: bool = False) -> list[Any] | None:
    """The placeholders' fake values, or None when one is missing or two share a storage (an
    input passed twice, a tied weight): the ordinary pass gives each its own twin."""
    values = [n.meta.get("val") for n in graph.nodes if n.op == "placeholder"]
    if any(v is None for v in values):
        return None
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if len({_storage(t) for t in tensors}) != len(tensors):
        return None
    # A program exported with a dynamic dimension (torch.export.Dim) recorded symbolic shapes:
    # the ordinary pass prices it at the concrete inputs asked for; ``symbolic`` prices it as it
    # is, for figures that are formulas in its dimensions (``modes/symbolic.py``).
    if not symbolic and (
        any(isinstance(v, torch.SymInt) for v in values)
        or any(not isinstance(size, int) for t in tensors for size in t.shape)
    ):
        return None
    return values


def measure_exported(
    model: nn.Module,
    traced: Traced,
    interpreter: type = _ExportedInterpreter,
    symbolic: bool = False,
    owner: nn.Module | None = None,
) -> Measured | None:
    """Price ``traced`` (an export-tier graph) on its own fake values, or None (``_values``).
    ``interpreter``: a subclass that prices some nodes without running them (``modes/train.py``);
    ``symbolic``: keep symbolic shapes (``modes/symbolic.py``) instead of falling back."""
    if not symbolic and not export_values_match_fresh():
        return None  # compat.EXPORT_VALUES_AS_FRESH: the fresh pass, as the caller falls back
    gm = traced.graph_module
    values = _values(gm.graph, symbolic)
    mode = torch._guards.detect_fake_mode(values) if values else None
    if mode is None:
        return None
    state = model_state(model)
    first: dict[int, str] = {}
    for fqn, tensor in state.items():
        first.setdefault(id(tensor), fqn)
    held = [id(state[b.ref]) for b in traced.placeholders if b.kind == "state"]
    if len(set(held)) != len(held):
        return None  # two placeholders of one tied tensor: the ordinary pass gives them one twin
    weights: dict[int, tuple[str, int]] = {}
    for binding, value in zip(traced.placeholders, values, strict=True):
        if binding.kind == "state":
            weights[id(value)] = (first[id(state[binding.ref])], _nbytes(value))
    # a rotary table kept as a plain attribute of the model (``owner``: a training step's)
    weights.update(graph_constants(gm, weights, _nbytes, owner or model))
    weights.update(held_constants(traced, values, owner or model, _nbytes))
    recorder = _Recorder(weights)
    walk = interpreter(gm, recorder, traced)
    walk.splits = not symbolic  # symbolic figures are formulas of FLOPs, kernels aside
    walk.mode = mode
    with torch.no_grad(), mode, recorder:
        walk.run(*values)
    output_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    if walk.parts:  # a node ran as several kernels: its ops' tensors are not export's values
        return None
    outputs = {p.name for p in output_node.all_input_nodes}
    measured = Measured(walk.nodes, outputs, walk.inputs, "fake")
    measured.returned_extents = walk.returned_extents(output_node)
    measured.input_extents = extents(walk.input_tensors)
    measured.input_masks = frozenset(walk.input_masks)
    measured.input_channels = walk.input_channels
    return measured
