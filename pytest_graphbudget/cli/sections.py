"""The sections of ``graph-budget profile``'s view of one profile, as rows: the summary, the
hierarchical per-layer table, the top kernels, the operation types and the bottleneck mix.
``cli/profile.py`` lays them out as text, markdown or CSV."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pytest_graphbudget.cli.views import (
    inputs_text,
    intensity,
    percent,
    shape,
    short_bound,
)
from pytest_graphbudget.reports.layers import LayerRow, layer_rows
from pytest_graphbudget.units import format_bytes, format_count, format_ratio, format_seconds


def summary(prof: Any) -> list[tuple[str, str]]:
    """The model's totals as (label, value) pairs."""
    cov = prof.coverage
    unsupported = sum(cov.unsupported_ops.values())
    coverage = f"{cov.costed}/{cov.nodes} nodes costed"
    if unsupported:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(cov.unsupported_ops.items()))
        coverage += f"; no formula for {ops}"
    return [
        ("inputs", inputs_text(prof.inputs)),
        ("dtype", f"{prof.dtype}, under autocast" if prof.autocast else prof.dtype),
        *_step_rows(prof),
        ("params", f"{format_count(prof.params)} ({prof.params:,})"),
        ("FLOPs", f"{format_count(prof.flops)} ({prof.flops:,})"),
        ("MACs", f"{format_count(prof.macs)} ({prof.macs:,})"),
        ("FLOPs of contractions", f"{format_count(prof.flops_contraction)} (2 x MACs)"),
        ("weights", format_bytes(prof.weights_bytes)),
        ("inputs size", format_bytes(prof.input_bytes)),
        ("activation peak", format_bytes(prof.activation_peak_bytes)),
        ("peak memory", _peak_text(prof)),
        ("traffic", f"{format_bytes(prof.traffic_bytes)} (bytes moved by the fused kernels)"),
        ("arithmetic intensity", f"{intensity(prof.arithmetic_intensity)} FLOPs/byte"),
        (
            "est. latency",
            f"{format_seconds(prof.est_latency_s)} on {prof.hardware.name}, {prof.execution}",
        ),
        ("trace", _trace_text(prof)),
        ("coverage", coverage),
    ]


def _peak_text(prof: Any) -> str:
    """The peak and what it is made of: on a CUDA GPU's profile, as its caching allocator
    holds it (``Profile.cuda_memory``), with the workspaces in it."""
    cuda = getattr(prof, "cuda_memory", None)
    if cuda:
        return (
            f"{format_bytes(prof.peak_memory_bytes)} (as the CUDA caching allocator of a compute "
            f"capability {cuda['compute_capability']} GPU holds it: every tensor's block, cuBLAS "
            f"workspace {format_bytes(cuda['cublas_workspace_bytes'])}, largest cuDNN workspace "
            f"{format_bytes(cuda['conv_workspace_bytes'])})"
        )
    state = "optimizer state + " if prof.optimizer_state_bytes else ""
    return f"{format_bytes(prof.peak_memory_bytes)} (weights + {state}inputs + activation peak)"


def _step_rows(prof: Any) -> list[tuple[str, str]]:
    """A training step says so, with its phases' FLOPs and the optimizer's state: without
    them its 3x-a-forward FLOPs read as an eval profile's."""
    if getattr(prof, "mode", "eval") != "train":
        return []
    phases = getattr(prof, "phases", {}) or {}
    has_step = bool(phases.get("optimizer", {}).get("flops"))
    rows = [("mode", f"train: forward + backward{' + optimizer step' if has_step else ''}")]
    split = ", ".join(
        f"{phase} {format_count(figures['flops'])}"
        for phase, figures in phases.items()
        if figures.get("flops")
    )
    if split:
        rows.append(("FLOPs by phase", split))
    if prof.optimizer_state_bytes:
        rows.append(("optimizer state", format_bytes(prof.optimizer_state_bytes)))
    return rows + rank_rows(getattr(prof, "parallel", None))


def _mixed(parallel: Mapping[str, Any]) -> str:
    """Mixed-precision state (fp32 master weights beside 16-bit parameters), said where held."""
    precision = parallel.get("precision", "")
    return f", {precision} (fp32 master weights)" if precision.startswith("mixed") else ""


def rank_rows(parallel: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """A sharded step's share of each rank, one row per run of ranks that hold the same
    (uneven shards make the last ranks differ), and what each step moves between ranks."""
    from pytest_graphbudget.reports.tables import rank_groups, rank_sum

    if not parallel:
        return []
    rows = [
        (
            "parallel",
            f"{parallel['parallel']}: {parallel['world']} ranks, ZeRO stage "
            f"{parallel['stage']}, figures of the {parallel['backend']} backend" + _mixed(parallel),
        )
    ]
    for label, r in rank_groups(parallel["ranks"]):
        shares = " + ".join(
            f"{p.replace('_', ' ')} {format_bytes(r.get(p + '_bytes', 0))}" for p in rank_sum(r)
        )
        rows.append((label, f"peak {format_bytes(r['peak_bytes'])} = {shares}"))
    first = parallel["ranks"][0]
    moved = ", ".join(
        f"{kind.replace('_', '-')} {format_bytes(first[kind + '_bytes'])}"
        for kind in ("all_gather", "reduce_scatter", "all_reduce")
    )
    rows.append(("moved per rank", f"{moved} per step (ring volumes)"))
    return rows


def _trace_text(prof: Any) -> str:
    text = f"{prof.trace.method} in {prof.trace.seconds:.2f}s"
    if getattr(prof.trace, "note", ""):
        text += f" ({prof.trace.note})"
    for tier, reason in prof.trace.failures.items():
        text += f"; {tier} failed: {reason if len(reason) <= 90 else reason[:87] + '...'}"
    return text


def break_lines(prof: Any) -> list[str]:
    """The graph breaks of a ``dynamo-breaks`` trace, one per line (none for other tiers)."""
    breaks = list(getattr(prof.trace, "breaks", []) or [])
    if not breaks:
        return []
    graphs = getattr(prof.trace, "graphs", 0)
    lines = ["", f"Graph breaks ({len(breaks)}, {graphs} graphs stitched into one profile)", ""]
    return lines + [f"  {i}. {text}" for i, text in enumerate(breaks, 1)]


def top_layers(prof: Any, n: int = 10) -> list[Any]:
    """The ``n`` fused subgraphs with the most FLOPs."""
    ranked = sorted(prof.subgraphs, key=lambda s: (-s.flops, s.id))
    return [s for s in ranked[:n] if s.flops]


def op_types(prof: Any) -> list[tuple[str, int, int, int]]:
    """(kind, nodes, FLOPs, MACs) per operation kind with FLOPs, most FLOPs first, then one
    row for every node that computes nothing (views, copies, shape ops)."""
    table: dict[str, list[int]] = {}
    idle = 0
    for node in prof.node_info:
        if not node.flops:
            idle += 1
            continue
        entry = table.setdefault(node.kind or node.target, [0, 0, 0])
        entry[0] += 1
        entry[1] += node.flops
        entry[2] += node.macs
    rows = sorted(((k, *v) for k, v in table.items()), key=lambda r: (-r[2], r[0]))
    if idle:
        rows.append(("(no FLOPs: views, copies, shapes)", idle, 0, 0))
    return rows


def op_type_rows(prof: Any) -> list[list[Any]]:
    """The operation types with formatted figures and their share of the model's FLOPs."""
    total = prof.flops or 1
    return [
        [kind, nodes, format_count(flops), format_count(macs), percent(flops / total)]
        for kind, nodes, flops, macs in op_types(prof)
    ]


OP_TYPE_HEADERS = ["kind", "nodes", "FLOPs", "MACs", "share"]
BOTTLENECK_HEADERS = ["bound", "subgraphs", "share", "FLOPs share", "time share"]


def bottleneck_rows(prof: Any) -> list[tuple[str, int, str, str, str]]:
    mix = prof.bottleneck
    return [
        (
            label,
            mix[label]["subgraphs"],
            format_ratio(mix[label]["share"]),
            format_ratio(mix[label]["flops_share"]),
            format_ratio(mix[label]["time_share"]),
        )
        for label in ("compute_bound", "memory_bound")
    ]


Table = tuple[list[str], list[list[str]], str]


def layer_table(
    prof: Any,
    types: Mapping[str, str] | None,
    depth: int | None,
    show_shapes: bool,
    label: Callable[[LayerRow], str],
) -> Table:
    """Headers, rows and alignment of the per-layer table (``label`` names each row)."""
    total = prof.flops or 1
    headers = ["module", "type", "params", *(["output shape"] if show_shapes else [])]
    headers += ["MACs", "FLOPs", "% FLOPs", "traffic"]
    rows = []
    for row in layer_rows(prof, types, depth):
        cells = [label(row), row.type, format_count(row.params)]
        cells += [shape(row.shape)] if show_shapes else []
        cells += [
            format_count(row.macs),
            format_count(row.flops),
            percent(row.flops / total),
            format_bytes(row.traffic),
        ]
        rows.append(cells)
    return headers, rows, "llr" + ("l" if show_shapes else "") + "rrrr"


def top_table(prof: Any, top: int, label: Callable[[Any], str]) -> Table:
    """Headers, rows and alignment of the top-kernels table (``label`` names the module)."""
    total = prof.flops or 1
    rows = [
        [
            f"#{s.id}",
            s.kind,
            label(s),
            format_count(s.flops),
            percent(s.flops / total),
            intensity(s.arithmetic_intensity),
            short_bound(s.bottleneck),
            format_seconds(s.est_latency_s),
        ]
        for s in top_layers(prof, top)
    ]
    headers = ["subgraph", "kind", "module", "FLOPs", "share", "intensity", "bound", "est. time"]
    return headers, rows, "lllrrrlr"
