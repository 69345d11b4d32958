"""trace -> cost -> partition -> Profile: the engine's one entry point, ``profile_model``.

The result is a tree of plain dataclasses; ``Profile.to_dict()`` is the profile JSON (schema
``graphbudget.profile/1``, described in docs/cli.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_graphbudget import runtime
from pytest_graphbudget.case import ModelCase
from pytest_graphbudget.errors import GraphBudgetError

SCHEMA = "graphbudget.profile/1"


@dataclass
class InputInfo:
    name: str
    shape: list[int]
    dtype: str


@dataclass
class TraceInfo:
    method: str
    failures: dict[str, str]
    nodes: int
    seconds: float
    cost_pass: str = "fake"
    graphs: int = 1  # graphs captured: more than one when Dynamo broke the forward
    breaks: list[str] = field(default_factory=list)  # each graph break: "file:line: reason"

    def extra(self) -> dict[str, Any]:
        """The JSON keys only the graph-break tiers have: graphs stitched and breaks."""
        if self.method not in ("dynamo-breaks", "eager"):
            return {}
        return {"graphs": self.graphs, "breaks": list(self.breaks)}

    @property
    def note(self) -> str:
        """What a reader must know about how the graph was captured, or ``""``."""
        if self.method == "eager":
            return "the graph is the op sequence of one eager run on the example inputs"
        if self.method == "dynamo-breaks":
            breaks = len(self.breaks)
            return (
                f"{self.graphs} graphs and {breaks} graph break{'s' * (breaks != 1)} on the path "
                "one real forward took; ops between graphs were priced in eager"
            )
        return ""


@dataclass
class Coverage:
    nodes: int
    costed: int
    unsupported_ops: dict[str, int]
    unsupported_contractions: dict[str, int] | None = None
    """The unsupported calls that may be contractions (``measure.may_contract``), by op; None
    when not known (a profile saved before it was recorded): then every unsupported op may be."""


@dataclass
class ModuleCost:
    flops: int = 0
    macs: int = 0
    params: int = 0
    forward_flops: int | None = None  # the split of a training step (mode "train") only
    backward_flops: int | None = None
    optimizer_flops: int | None = None

    def to_dict(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if v is not None}


@dataclass
class NodeInfo:
    """One graph node as the explorer shows it."""

    index: int
    name: str
    op: str
    target: str
    module: str
    kind: str
    subgraph: int
    flops: int
    macs: int
    shapes: list[list[int]]
    inputs: list[str] = field(default_factory=list)  # producer nodes (graph inputs included)
    unsupported: dict[str, int] = field(default_factory=dict)


@dataclass
class Subgraph:
    id: int
    kind: str
    module: str
    nodes: list[str]
    flops: int
    macs: int
    bytes_in: int
    bytes_out: int
    bytes_weights: int
    arithmetic_intensity: float
    bottleneck: str
    reason: str
    est_latency_s: float = 0.0
    peak_bytes: int = 0  # the activations it allocated that are live at the memory peak

    @property
    def traffic_bytes(self) -> int:
        return self.bytes_in + self.bytes_out + self.bytes_weights

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "module": self.module,
            "nodes": list(self.nodes),
            "flops": self.flops,
            "macs": self.macs,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "bytes_weights": self.bytes_weights,
            "arithmetic_intensity": self.arithmetic_intensity,
            "bottleneck": self.bottleneck,
            "reason": self.reason,
            "est_latency_s": self.est_latency_s,
            "peak_bytes": self.peak_bytes,
        }


@dataclass
class Profile:
    """Everything measured about one forward pass of one model at its example inputs (or, in
    mode "train", one training step: forward, backward and optimizer, see ``train.py``)."""

    model: str
    inputs: list[InputInfo]
    trace: TraceInfo
    hardware: Any  # hardware.Hardware
    dtype: str
    flops: int
    macs: int
    params: int
    weights_bytes: int
    traffic_bytes: int
    activation_peak_bytes: int
    input_bytes: int
    est_latency_s: float
    coverage: Coverage
    subgraphs: list[Subgraph]
    modules: dict[str, ModuleCost]
    node_info: list[NodeInfo] = field(default_factory=list, repr=False)
    mode: str = "eval"  # "train": the figures are one training step's (train.py)
    optimizer_state_bytes: int = 0  # train: the optimizer's state, allocated before the step
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)  # train: by phase
    runtime: Any = None  # runtime.Runtime: measured on this machine (measure=True)

    def _train_totals(self) -> dict[str, Any]:
        """The training step's extra totals: its phases' figures and the optimizer state."""
        if self.mode != "train":
            return {}
        split = {f"{p}_{k}": v for p, figures in self.phases.items() for k, v in figures.items()}
        return {"optimizer_state_bytes": self.optimizer_state_bytes, **split}

    @property
    def flops_contraction(self) -> int:
        return 2 * self.macs

    @property
    def peak_memory_bytes(self) -> int:
        return (
            self.weights_bytes
            + self.optimizer_state_bytes
            + self.input_bytes
            + self.activation_peak_bytes
        )

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.traffic_bytes if self.traffic_bytes else 0.0

    @property
    def ridge_point(self) -> float:
        return self.hardware.ridge_point(self.dtype)

    @property
    def bottleneck(self) -> dict[str, dict[str, float]]:
        """The compute/memory mix by share of subgraphs, of FLOPs and of estimated time."""
        mix = {}
        total_flops = sum(s.flops for s in self.subgraphs) or 1
        total_time = sum(s.est_latency_s for s in self.subgraphs) or 1.0
        count = len(self.subgraphs) or 1
        for label in ("compute_bound", "memory_bound"):
            chosen = [s for s in self.subgraphs if s.bottleneck == label]
            mix[label] = {
                "subgraphs": len(chosen),
                "share": len(chosen) / count,
                "flops_share": sum(s.flops for s in chosen) / total_flops,
                "time_share": sum(s.est_latency_s for s in chosen) / total_time,
            }
        return mix

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "model": self.model,
            "mode": self.mode,
            "dtype": self.dtype,
            "inputs": [vars(i).copy() for i in self.inputs],
            "trace": {
                "method": self.trace.method,
                "failures": dict(self.trace.failures),
                "nodes": self.trace.nodes,
                "seconds": round(self.trace.seconds, 4),
                **self.trace.extra(),
            },
            "totals": {
                "flops": self.flops,
                "macs": self.macs,
                "flops_contraction": self.flops_contraction,
                "params": self.params,
                "weights_bytes": self.weights_bytes,
                "traffic_bytes": self.traffic_bytes,
                "activation_peak_bytes": self.activation_peak_bytes,
                "peak_memory_bytes": self.peak_memory_bytes,
                "arithmetic_intensity": self.arithmetic_intensity,
                "est_latency_s": self.est_latency_s,
                **self._train_totals(),
                **({"latency_measured_s": self.runtime.min_s} if self.runtime else {}),
            },
            "hardware": {"name": self.hardware.name, "ridge_point": self.ridge_point},
            "bottleneck": self.bottleneck,
            "coverage": {
                "nodes": self.coverage.nodes,
                "costed": self.coverage.costed,
                "unsupported_ops": dict(sorted(self.coverage.unsupported_ops.items())),
                "unsupported_contractions": _sorted_or_none(self.coverage.unsupported_contractions),
            },
            "subgraphs": [s.to_dict() for s in self.subgraphs],
            "modules": {path: m.to_dict() for path, m in sorted(self.modules.items())},
            **({"runtime": self.runtime.to_dict()} if self.runtime else {}),
        }


def _sorted_or_none(counts: dict[str, int] | None) -> dict[str, int] | None:
    return None if counts is None else dict(sorted(counts.items()))


def profile_from_dict(data: dict[str, Any], hardware_profiles: Any = None) -> Profile:
    """Rebuild a ``Profile`` from its JSON (a saved profile, or the cache): ``to_dict`` inverse.

    Per-node details (``node_info``) are not part of the JSON and come back empty.
    """
    from pytest_graphbudget import hardware as hw

    if data.get("schema") != SCHEMA:
        raise GraphBudgetError(f"not a graph-budget profile (schema {data.get('schema')!r})")
    totals = data["totals"]
    target = hw.get(data["hardware"]["name"], hardware_profiles)
    dtype = data.get("dtype") or _dtype_of_ridge(target, data["hardware"]["ridge_point"])
    trace = data["trace"]
    subgraphs = [
        Subgraph(**{k: s[k] for k in Subgraph.__dataclass_fields__ if k in s})
        for s in data["subgraphs"]
    ]
    for s in subgraphs:
        s.est_latency_s = target.time(s.flops, s.traffic_bytes, dtype)
    return Profile(
        model=data["model"],
        inputs=[InputInfo(**i) for i in data["inputs"]],
        trace=TraceInfo(
            trace["method"],
            dict(trace["failures"]),
            trace["nodes"],
            trace["seconds"],
            graphs=trace.get("graphs", 1),
            breaks=list(trace.get("breaks", [])),
        ),
        hardware=target,
        dtype=dtype,
        flops=totals["flops"],
        macs=totals["macs"],
        params=totals["params"],
        weights_bytes=totals["weights_bytes"],
        traffic_bytes=totals["traffic_bytes"],
        activation_peak_bytes=totals["activation_peak_bytes"],
        input_bytes=totals["peak_memory_bytes"]
        - totals["weights_bytes"]
        - totals.get("optimizer_state_bytes", 0)
        - totals["activation_peak_bytes"],
        est_latency_s=totals["est_latency_s"],
        coverage=Coverage(**data["coverage"]),
        subgraphs=subgraphs,
        modules={path: ModuleCost(**m) for path, m in data["modules"].items()},
        mode=data.get("mode", "eval"),
        optimizer_state_bytes=totals.get("optimizer_state_bytes", 0),
        phases=_phases_from(totals),
        runtime=runtime.Runtime.from_dict(data.get("runtime")),
    )


def _phases_from(totals: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A training step's ``{phase}_{figure}`` totals back as ``Profile.phases``."""
    phases: dict[str, dict[str, Any]] = {}
    for key, value in totals.items():
        phase, _, figure = key.partition("_")
        if phase in ("forward", "backward", "optimizer") and key != "optimizer_state_bytes":
            phases.setdefault(phase, {})[figure] = value
    return phases


def _dtype_of_ridge(target: Any, ridge: float) -> str:
    """The dtype of a profile saved before its JSON said it: the first whose ridge point on
    its hardware is the one recorded."""
    return next((d for d in target.peak_flops if target.ridge_point(d) == ridge), "float32")


def profile_model(
    model: Any,
    inputs: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    hardware: Any = "generic",
    name: str | None = None,
    mode: str = "eval",
    loss: Callable | None = None,
    optimizer: str | None = None,
    dtype: str | None = None,
    measure: bool | int = False,
    **zoo_options: Any,
) -> Profile:
    """Profile one forward pass of ``model`` at ``inputs`` (and keyword ``kwargs``).

    ``model`` is an ``nn.Module``, a ``ModelCase``, or a zoo name such as ``"resnet50"`` (then
    ``seq_len``, ``batch``, ``input_shape`` and the other zoo options may be given).
    ``mode="train"`` profiles one training step instead: forward, ``loss`` (a callable of the
    outputs; default their sum), backward and, when ``optimizer`` ("adam" or "sgd") is named,
    its update (``train.py``).
    ``dtype`` ("float32", "bfloat16", "float16"; None: the model's own) profiles a cast copy
    of the model and of its floating inputs (``cast.py``): bytes and peak are that dtype's.
    ``decode=True, context=N`` profiles one generated token of a causal LM instead
    (``decode.step_profile``; ``profile_decode`` gives the prefill beside it).
    ``measure`` (True: 20 runs, or a number of runs) also times it here (``runtime.py``).
    """
    from pytest_graphbudget.cast import cast, check_dtype
    from pytest_graphbudget.train import check_mode

    check_mode(mode, loss, optimizer)
    check_dtype(dtype)
    runs = runtime.runs_asked(measure, mode, zoo_options, isinstance(model, str))
    if zoo_options.get("decode") or "context" in zoo_options:
        from pytest_graphbudget.decode import step_profile

        if mode != "eval" or dtype is not None:
            raise GraphBudgetError(
                "decode profiles one generated token in eval mode, in the "
                "model's own dtype: drop mode/dtype"
            )
        return step_profile(model, hardware, name, zoo_options)
    zoo_options.pop("decode", None)
    if isinstance(model, str):
        from pytest_graphbudget import zoo

        model = zoo.resolve(model, **zoo_options)
    elif zoo_options:
        unknown = ", ".join(sorted(zoo_options))
        raise GraphBudgetError(f"options {unknown} only apply to zoo model names")
    load = runtime.loaded(model) if runs else None
    if isinstance(model, ModelCase):
        name = name or model.name
        inputs = model.inputs if inputs is None else inputs
        kwargs = model.kwargs if kwargs is None else kwargs
        model = model.model
    if _is_program(model):
        inputs, kwargs = _saved_inputs(model, inputs, kwargs)
    name = name or type(model).__name__
    model, args, kwargs = cast(model, _as_tuple(inputs), dict(kwargs or {}), dtype)
    if mode == "train":
        from pytest_graphbudget.train import profile_step

        return profile_step(model, args, kwargs, hardware, name, loss, optimizer)
    prof = _profile(model, args, kwargs, hardware, name)
    return runtime.attach(prof, model, args, kwargs, runs, load) if runs else prof


def _saved_inputs(program: Any, inputs: Any, kwargs: Any) -> tuple[Any, Any]:
    """The example inputs an exported program was saved with, when none are given."""
    if kwargs or (inputs is not None and not (isinstance(inputs, (tuple, list)) and not inputs)):
        return inputs, kwargs
    example = getattr(program, "example_inputs", None)
    return example if example is not None else (inputs, kwargs)


def _is_program(model: Any) -> bool:
    """An ``ExportedProgram``, checked without importing torch for other models."""
    return type(model).__name__ == "ExportedProgram" and hasattr(model, "graph_signature")


def _as_tuple(inputs: Any) -> tuple:
    if inputs is None:
        return ()
    if isinstance(inputs, tuple):
        return inputs
    if isinstance(inputs, list):
        return tuple(inputs)
    return (inputs,)


def _profile(model: Any, args: tuple, kwargs: dict[str, Any], hardware: Any, name: str) -> Profile:
    import torch

    from pytest_graphbudget import hardware as hw
    from pytest_graphbudget.assemble import assemble
    from pytest_graphbudget.engine import trace_and_measure
    from pytest_graphbudget.quiet import held
    from pytest_graphbudget.trace import Example

    program = model if _is_program(model) else None
    if program is not None:  # its module holds the state under the names its graph uses
        model = program.module()
    if not isinstance(model, torch.nn.Module):
        raise GraphBudgetError(f"expected a torch.nn.Module, got {type(model).__name__}")
    target = hw.get(hardware)
    example = Example(args, kwargs)
    start = time.perf_counter()
    # Profiling runs the model in eval mode; the caller's model keeps the mode it had.
    modes = {module: module.training for module in model.modules()}
    try:
        with held(f"tracing {name}"):
            # Tracing speaks to torch developers (export's notes on attribute assignment, FX's
            # on leaf modules, the generated code of a graph that failed); users see our
            # summary of what worked and why the rest failed, and the rest only when they ask.
            # Under the caller's inference_mode, export would keep composite ops (aten.linear)
            # whole: the graph and its subgraphs would differ from the same model's outside it.
            with torch.inference_mode(False):
                traced, measured, failures = trace_and_measure(model, example, program)
    finally:
        for module, training in modes.items():
            module.training = training
    seconds = time.perf_counter() - start
    return assemble(model, args, kwargs, name, target, traced, measured, failures, seconds)
