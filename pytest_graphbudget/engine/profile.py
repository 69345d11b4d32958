"""trace -> cost -> partition -> Profile: the engine's one entry point, ``profile_model``.

The result is a tree of plain dataclasses; ``Profile.to_dict()`` is the profile JSON (schema
``graphbudget.profile/1``, described in docs/cli.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.hardware import pricing_digest
from pytest_graphbudget.units import format_bytes, format_count, format_seconds

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
    seconds: float = field(compare=False)  # wall-clock: two profiles of one model differ in it
    cost_pass: str = "fake"
    graphs: int = 1  # graphs captured: more than one when Dynamo broke the forward
    breaks: list[str] = field(default_factory=list)  # each graph break: "file:line: reason"
    data_dependent: bool = False  # the path one real forward took, decided by values read

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
    """The unsupported calls that may be contractions (``costs.registry.may_contract``), by op; None
    when not known (a profile saved before it was recorded): then every unsupported op may be."""
    unregistered: dict[str, int] = field(default_factory=dict)
    """Parameters no figure counts, by attribute: modules kept in a plain list or dict, which
    ``nn.Module`` does not register (``assemble.unregistered``); their elements."""


@dataclass
class ModuleCost:
    flops: int = 0
    macs: int = 0
    params: int = 0
    weights_bytes: int | None = None  # its tensors' bytes (``Profile.weights_bytes``'s)
    forward_flops: int | None = None  # the split of a training step (mode "train") only
    backward_flops: int | None = None
    optimizer_flops: int | None = None
    type: str | None = None  # its class: reports name an index path by it (``layer_label``)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}


def layer_label(path: str, cls: str | None) -> str:
    """A module path as a report names it: with its class where the path ends in an index
    (``features.3 (Conv2d)``, a child of a ``Sequential`` or ``ModuleList``), which alone says
    nothing of what the layer is."""
    return f"{path} ({cls})" if cls and path.rpartition(".")[2].isdigit() else path


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
    mode "train", one training step: forward, backward and optimizer, see ``modes/train.py``)."""

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
    parallel: dict[str, Any] | None = None  # train, sharded: each rank's share (parallel.py)
    execution: str = "eager"
    """How ``est_latency_s`` has the model run: a kernel per op (``eager``) or per fused group
    (``compiled``), ``engine/latency.py``."""
    autocast: bool = False
    """Profiled under autocast (``dtype="amp_float16"``): ``dtype`` is the products' dtype,
    each op's bytes the dtype autocast gave it, the weights as stored."""
    notes: list[str] = field(default_factory=list)  # what was assumed or left out, in words
    cuda_memory: dict[str, Any] | None = None
    """How the peak was counted on a CUDA GPU's profile (``engine.allocator.set_peak``): its
    compute capability and the cuBLAS and cuDNN workspaces inside ``peak_memory_bytes``."""

    def _train_totals(self) -> dict[str, Any]:
        """The training step's extra totals: its phases' figures and the optimizer state."""
        if self.mode != "train":
            return {}
        split = {f"{p}_{k}": v for p, figures in self.phases.items() for k, v in figures.items()}
        found = {"optimizer_state_bytes": self.optimizer_state_bytes, **split}
        if self.parallel:
            found["peak_memory_per_rank_bytes"] = self.peak_memory_per_rank_bytes
        return found

    @property
    def peak_memory_per_rank_bytes(self) -> int | None:
        """The largest rank's peak of a sharded training step (None: not sharded)."""
        if not self.parallel:
            return None
        return max(rank["peak_bytes"] for rank in self.parallel["ranks"])

    def __repr__(self) -> str:
        """One line: the dataclass's own ran to 20-90k characters (every subgraph and module).
        The figures are ``to_dict()``'s, rounded."""
        return (
            f"<Profile {self.model!r} on {getattr(self.hardware, 'name', self.hardware)}, "
            f"{self.mode} {self.dtype}: {format_count(self.flops)} FLOPs, "
            f"{format_count(self.macs)} MACs, {format_count(self.params)} params, "
            f"peak memory {format_bytes(self.peak_memory_bytes)}, "
            f"est. latency {format_seconds(self.est_latency_s)}>"
        )

    def _repr_html_(self) -> str:
        """Jupyter's rich display. The engine may not import ``reports`` (imports go down), so
        the renderer is resolved through the package root, which is above every layer and is
        always loaded before its subpackages: it hands ``reports.notebook`` in lazily."""
        import sys

        return sys.modules["pytest_graphbudget"]._profile_html(self)

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
            **({"autocast": True} if self.autocast else {}),
            "execution": self.execution,
            **({"notes": list(self.notes)} if self.notes else {}),
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
            "hardware": {
                "name": self.hardware.name,
                "ridge_point": self.ridge_point,
                "peak_flops_per_s": self.hardware.peak(self.dtype),
                "bandwidth_bytes_per_s": self.hardware.bandwidth,
                "pricing": pricing_digest(self.hardware),
            },
            "bottleneck": self.bottleneck,
            "coverage": {
                "nodes": self.coverage.nodes,
                "costed": self.coverage.costed,
                "unsupported_ops": dict(sorted(self.coverage.unsupported_ops.items())),
                "unsupported_contractions": _sorted_or_none(self.coverage.unsupported_contractions),
                **(
                    {"unregistered": dict(self.coverage.unregistered)}
                    if self.coverage.unregistered
                    else {}
                ),
            },
            "subgraphs": [s.to_dict() for s in self.subgraphs],
            "modules": {path: m.to_dict() for path, m in sorted(self.modules.items())},
            **({"runtime": self.runtime.to_dict()} if self.runtime else {}),
            **({"parallel": self.parallel} if self.parallel else {}),
            **({"cuda_memory": dict(self.cuda_memory)} if self.cuda_memory else {}),
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
    # Each subgraph's time was priced per op or per kernel kind, which needs the graph's
    # nodes: kept as saved. A profile saved before ``execution`` was recorded priced fused
    # groups on the roofline (compiled) unless its hardware was calibrated.
    execution = data.get("execution", "eager" if target.kernels else "compiled")
    for s, saved in zip(subgraphs, data["subgraphs"], strict=True):
        if "est_latency_s" not in saved or not (target.kernels or "execution" in data):
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
        autocast=bool(data.get("autocast")),
        notes=list(data.get("notes", [])),
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
        runtime=Runtime.from_dict(data.get("runtime")),
        parallel=data.get("parallel"),
        execution=execution,
        cuda_memory=data.get("cuda_memory"),
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


@dataclass
class Runtime:
    """One model's measured runtime on this machine (``Profile.to_dict()["runtime"]``)."""

    device: str  # where it ran: "cpu", "cuda:0"
    threads: int  # torch's intra-op threads (CPU timings depend on them)
    batch: int  # samples per forward: the leading dimension of the first batched input
    runs: int
    warmup: int
    mean_s: float
    std_s: float  # sample standard deviation (0 for one run)
    min_s: float  # what latency_measured_max checks: the least noisy estimate
    median_s: float
    max_s: float
    throughput: float  # samples/s over the timed runs: batch / mean_s
    roofline_ratio: float  # the profile's est_latency_s / min_s (1.0: the roofline was reached)
    load_s: float | None = None  # zoo build/load seconds; None for a module given directly
    rss_bytes: int | None = None  # resident memory after load; None where it cannot be read
    # CUDA only: max_memory_allocated over the timed runs less memory_allocated before them
    peak_measured_bytes: int | None = None
    # CUDA only: the workspaces inside the allocator's estimated ``peak_memory_bytes``,
    # cuBLAS's and cuBLASLt's (held once allocated) and the largest cuDNN convolution's
    cublas_workspace_bytes: int | None = None
    conv_workspace_bytes: int | None = None
    # how the timed forwards ran: always "eager" (torch.compile is not run), whatever the
    # profile's ``execution`` prices, so a JSON reader sees it beside the timings
    execution: str = "eager"
    # what timed the runs: "cpu" (the process's CPU time, on one thread), "wall" (several
    # threads), "cuda events" (the GPU's own clock)
    clock: str = "wall"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Runtime | None:
        if not data:
            return None
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
