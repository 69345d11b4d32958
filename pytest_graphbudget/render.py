"""The command line's views of a profile: text tables, markdown, CSV and JSON.

Every function here takes a ``Profile`` (or, for comparisons, profile dictionaries as
``Profile.to_dict()`` writes them) and returns text; nothing is printed and torch is never
imported, so the views can be tested and reused on saved profiles.

Views of one profile (``graph-budget profile``): ``summary``, ``layer_rows`` (the hierarchical
per-layer table), ``top_layers``, ``op_types`` and ``bottleneck_mix``, put together by
``profile_text``, ``profile_markdown`` and ``profile_csv``. ``explore_text`` is the node-by-node
view of ``graph-budget explore``; ``compare`` and its writers serve ``graph-budget compare``.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_graphbudget.names import Abbreviator, truncate
from pytest_graphbudget.units import format_bytes, format_count, format_ratio, format_seconds

MODULE_WIDTH = 56  # widest module path shown in text tables before it is shortened


# ---------------------------------------------------------------------------------------------
# Small formatting helpers


def count(value: float) -> str:
    """``3642974696`` -> ``3.64G``; ``0`` -> ``0``."""
    return format_count(value) if value else "0"


def nbytes(value: float) -> str:
    return format_bytes(value) if value else "0B"


def percent(value: float) -> str:
    """A share as a percentage that stays readable when tiny: ``0.97`` -> ``97.0%``,
    ``0.00077`` -> ``0.08%``, ``3e-8`` -> ``<0.01%``."""
    pct = value * 100
    if pct == 0:
        return "0.0%"
    if abs(pct) < 0.01:
        return "<0.01%"
    if abs(pct) < 0.1:
        return f"{pct:.2f}%"
    return f"{pct:.1f}%"


def intensity(value: float) -> str:
    return f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def shape(dims: Sequence[int] | None) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]" if dims is not None else ""


def short_bound(label: str) -> str:
    return {"compute_bound": "compute", "memory_bound": "memory"}.get(label, label)


def text_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str = "") -> list[str]:
    """A plain table: columns padded to their widest cell, ``align`` is ``l``/``r`` per column
    (left for the first column, right for the rest unless told)."""
    rows = [[str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    align = align or "l" + "r" * (len(headers) - 1)

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.ljust(width) if a == "l" else cell.rjust(width)
            for cell, width, a in zip(cells, widths, align, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(row) for row in rows)]


def markdown_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str = ""
) -> list[str]:
    """A GitHub-flavoured markdown table (``|`` in cells escaped)."""
    align = align or "l" + "r" * (len(headers) - 1)
    rule = ["---:" if a == "r" else "---" for a in align]

    def line(cells: Sequence[Any]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return [line(headers), line(rule), *(line(row) for row in rows)]


def csv_text(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(rows)
    return out.getvalue()


def json_text(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


def _inputs_text(inputs: Iterable[Any]) -> str:
    parts = []
    for info in inputs:
        name, dims, dtype = _get(info, "name"), _get(info, "shape"), _get(info, "dtype")
        parts.append(f"{name} {'x'.join(str(d) for d in dims) or 'scalar'} {dtype}")
    return ", ".join(parts) or "none"


def _get(obj: Any, key: str) -> Any:
    return obj[key] if isinstance(obj, Mapping) else getattr(obj, key)


# ---------------------------------------------------------------------------------------------
# One profile: the sections


def headline(prof: Any) -> str:
    nodes, subgraphs = prof.trace.nodes, len(prof.subgraphs)
    return (
        f"{prof.model}: {prof.trace.method} trace, {nodes} nodes in {subgraphs} subgraphs, "
        f"hardware {prof.hardware.name} (ridge point {prof.ridge_point:.1f} FLOPs/byte)"
    )


def summary(prof: Any) -> list[tuple[str, str]]:
    """The model's totals as (label, value) pairs."""
    cov = prof.coverage
    unsupported = sum(cov.unsupported_ops.values())
    coverage = f"{cov.costed}/{cov.nodes} nodes costed"
    if unsupported:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(cov.unsupported_ops.items()))
        coverage += f"; no formula for {ops}"
    rows = [
        ("inputs", _inputs_text(prof.inputs)),
        ("dtype", prof.dtype),
        ("params", f"{count(prof.params)} ({prof.params:,})"),
        ("FLOPs", f"{count(prof.flops)} ({prof.flops:,})"),
        ("MACs", f"{count(prof.macs)} ({prof.macs:,})"),
        ("FLOPs of contractions", f"{count(prof.flops_contraction)} (2 x MACs)"),
        ("weights", nbytes(prof.weights_bytes)),
        ("inputs size", nbytes(prof.input_bytes)),
        ("activation peak", nbytes(prof.activation_peak_bytes)),
        ("peak memory", f"{nbytes(prof.peak_memory_bytes)} (weights + inputs + activation peak)"),
        ("traffic", f"{nbytes(prof.traffic_bytes)} (bytes moved by the fused kernels)"),
        ("arithmetic intensity", f"{intensity(prof.arithmetic_intensity)} FLOPs/byte"),
        ("est. latency", f"{format_seconds(prof.est_latency_s)} on {prof.hardware.name}"),
        ("trace", _trace_text(prof)),
        ("coverage", coverage),
    ]
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


@dataclass
class LayerRow:
    """One row of the hierarchical per-layer table (``path`` ``""`` is the whole model)."""

    path: str
    depth: int
    type: str
    params: int
    macs: int
    flops: int
    traffic: int
    shape: list[int] | None


def layer_rows(
    prof: Any, types: Mapping[str, str] | None = None, max_depth: int | None = None
) -> list[LayerRow]:
    """Every module level, parents before children, in the order the graph first runs them.

    ``traffic`` is the bytes moved by the fused kernels anchored in the module or below it
    (a batch norm fused into its convolution's kernel moves nothing of its own). ``shape`` is
    the output of the module's last node.
    """
    types = types or {}
    first: dict[str, int] = {}
    last_shape: dict[str, list[int]] = {}
    for node in prof.node_info:
        for path in _ancestors(node.module):
            first.setdefault(path, node.index)
            if node.shapes:
                last_shape[path] = node.shapes[0]
    traffic: dict[str, int] = {}
    for sub in prof.subgraphs:
        for path in _ancestors(sub.module):
            traffic[path] = traffic.get(path, 0) + sub.traffic_bytes

    children: dict[str, list[str]] = {}
    for path in prof.modules:
        parent = path.rpartition(".")[0]
        while parent and parent not in prof.modules:
            parent = parent.rpartition(".")[0]
        children.setdefault(parent, []).append(path)
    last_node = next((n for n in reversed(prof.node_info) if n.shapes), None)
    rows = [
        LayerRow(
            "",
            0,
            types.get("", ""),
            prof.params,
            prof.macs,
            prof.flops,
            prof.traffic_bytes,
            last_node.shapes[0] if last_node else None,
        )
    ]

    def visit(parent: str, depth: int) -> None:
        kids = sorted(children.get(parent, []), key=lambda p: (first.get(p, math.inf), p))
        for path in kids:
            cost = prof.modules[path]
            if max_depth is None or depth <= max_depth:
                rows.append(
                    LayerRow(
                        path,
                        depth,
                        types.get(path, ""),
                        cost.params,
                        cost.macs,
                        cost.flops,
                        traffic.get(path, 0),
                        last_shape.get(path),
                    )
                )
                visit(path, depth + 1)

    visit("", 1)
    return rows


def _ancestors(path: str) -> list[str]:
    parts = path.split(".") if path else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


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


# ---------------------------------------------------------------------------------------------
# One profile: the formats


def _layer_table(
    prof: Any, types: Any, depth: int | None, show_shapes: bool, label: Any
) -> tuple[list[str], list[list[str]], str]:
    """Headers, rows and alignment of the per-layer table (``label`` names each row)."""
    total = prof.flops or 1
    headers = ["module", "type", "params", *(["output shape"] if show_shapes else [])]
    headers += ["MACs", "FLOPs", "% FLOPs", "traffic"]
    rows = []
    for row in layer_rows(prof, types, depth):
        cells = [label(row), row.type, count(row.params)]
        cells += [shape(row.shape)] if show_shapes else []
        cells += [
            count(row.macs),
            count(row.flops),
            percent(row.flops / total),
            nbytes(row.traffic),
        ]
        rows.append(cells)
    return headers, rows, "llr" + ("l" if show_shapes else "") + "rrrr"


def _top_table(prof: Any, top: int, label: Any) -> tuple[list[str], list[list[str]], str]:
    """Headers, rows and alignment of the top-kernels table (``label`` names the module)."""
    total = prof.flops or 1
    rows = [
        [
            f"#{s.id}",
            s.kind,
            label(s),
            count(s.flops),
            percent(s.flops / total),
            intensity(s.arithmetic_intensity),
            short_bound(s.bottleneck),
            format_seconds(s.est_latency_s),
        ]
        for s in top_layers(prof, top)
    ]
    headers = ["subgraph", "kind", "module", "FLOPs", "share", "intensity", "bound", "est. time"]
    return headers, rows, "lllrrrlr"


def profile_text(
    prof: Any,
    *,
    types: Mapping[str, str] | None = None,
    show_shapes: bool = False,
    depth: int | None = None,
    top: int = 10,
) -> str:
    """``graph-budget profile``'s table view: summary, per-layer table, top layers, operation
    types and bottleneck mix."""
    names = Abbreviator(prof.modules)
    lines = [headline(prof), ""]
    width = max(len(label) for label, _ in summary(prof))
    lines += [f"  {label.ljust(width)}  {value}" for label, value in summary(prof)]
    lines += break_lines(prof)

    lines += ["", "Per-layer profile", ""]
    total = prof.flops or 1
    headers, rows, align = _layer_table(
        prof,
        types,
        depth,
        show_shapes,
        lambda row: "  " * row.depth + names(row.path or f"{prof.model} (model)", MODULE_WIDTH),
    )
    lines += ["  " + line for line in text_table(headers, rows, align)]

    lines += ["", f"Top {top} layers by FLOPs (fused kernels)", ""]
    headers, rows, align = _top_table(
        prof, top, lambda s: names(s.module, MODULE_WIDTH) or "(model)"
    )
    lines += ["  " + line for line in text_table(headers, rows, align)]

    lines += ["", "Operation types", ""]
    rows = [
        [kind, nodes, count(flops), count(macs), percent(flops / total)]
        for kind, nodes, flops, macs in op_types(prof)
    ]
    lines += [
        "  " + line
        for line in text_table(["kind", "nodes", "FLOPs", "MACs", "share"], rows, "lrrrr")
    ]

    lines += [
        "",
        f"Bottleneck mix on {prof.hardware.name} (ridge point {prof.ridge_point:.1f} FLOPs/byte)",
        "",
    ]
    headers = ["bound", "subgraphs", "share", "FLOPs share", "time share"]
    lines += ["  " + line for line in text_table(headers, bottleneck_rows(prof))]
    return "\n".join(lines) + "\n"


def profile_markdown(
    prof: Any,
    *,
    types: Mapping[str, str] | None = None,
    show_shapes: bool = False,
    depth: int | None = None,
    top: int = 10,
) -> str:
    """The same sections as ``profile_text``, as GitHub-flavoured markdown."""
    names = Abbreviator(prof.modules)
    total = prof.flops or 1
    lines = [f"## {prof.model}", "", headline(prof), ""]
    lines += markdown_table(["metric", "value"], summary(prof), "ll")

    lines += ["", "### Per-layer profile", ""]
    headers, rows, align = _layer_table(
        prof,
        types,
        depth,
        show_shapes,
        lambda row: f"`{names(row.path)}`" if row.path else f"**{prof.model}** (model)",
    )
    lines += markdown_table(headers, rows, align)

    lines += ["", f"### Top {top} layers by FLOPs", ""]
    headers, rows, align = _top_table(
        prof, top, lambda s: f"`{names(s.module)}`" if s.module else "(model)"
    )
    lines += markdown_table(headers, rows, align)

    lines += ["", "### Operation types", ""]
    rows = [
        [kind, nodes, count(flops), count(macs), percent(flops / total)]
        for kind, nodes, flops, macs in op_types(prof)
    ]
    lines += markdown_table(["kind", "nodes", "FLOPs", "MACs", "share"], rows)

    lines += ["", f"### Bottleneck mix on {prof.hardware.name}", ""]
    headers = ["bound", "subgraphs", "share", "FLOPs share", "time share"]
    lines += markdown_table(headers, bottleneck_rows(prof))
    return "\n".join(lines) + "\n"


CSV_HEADERS = (
    "module",
    "depth",
    "type",
    "params",
    "macs",
    "flops",
    "flops_share",
    "traffic_bytes",
    "output_shape",
)


def profile_csv(
    prof: Any, *, types: Mapping[str, str] | None = None, depth: int | None = None
) -> str:
    """The per-layer table as CSV, plain numbers, one row per module level; the first row
    (module ``""``) is the whole model."""
    total = prof.flops or 1
    rows = [
        [
            row.path,
            row.depth,
            row.type,
            row.params,
            row.macs,
            row.flops,
            f"{row.flops / total:.6f}",
            row.traffic,
            "x".join(str(d) for d in row.shape) if row.shape is not None else "",
        ]
        for row in layer_rows(prof, types, depth)
    ]
    return csv_text(CSV_HEADERS, rows)


def render_profile(prof: Any, fmt: str, **options: Any) -> str:
    if fmt == "json":
        return json_text(prof.to_dict())
    if fmt == "csv":
        return profile_csv(prof, types=options.get("types"), depth=options.get("depth"))
    if fmt == "markdown":
        return profile_markdown(prof, **options)
    return profile_text(prof, **options)


# ---------------------------------------------------------------------------------------------
# explore: the node-by-node view

LEFT = 56  # width of the node column; the subgraph column starts after it


def node_range(
    total: int,
    start: int | None = None,
    end: int | None = None,
    around: int | None = None,
    context: int = 10,
    max_nodes: int | None = None,
) -> range:
    """The node indices to show (``end`` inclusive), clipped to the graph."""
    if around is not None:
        start, end = around - context, around + context
    first = max(start or 0, 0)
    last = min(total - 1 if end is None else end, total - 1)
    if max_nodes is not None:
        last = min(last, first + max_nodes - 1)
    return range(first, last + 1)


def explore_text(prof: Any, shown: range) -> str:
    """Each node with its subgraph, kind, FLOPs, the subgraph's intensity and bottleneck.

    Node numbers are the graph's topological order (``--start``, ``--end`` and ``--around``
    use them). A subgraph's partition reason is printed at its first node.
    """
    names = Abbreviator(prof.modules)
    subgraphs = {s.id: s for s in prof.subgraphs}
    known = {n.name for n in prof.node_info}
    first_of: dict[int, str] = {}
    for node in prof.node_info:
        first_of.setdefault(node.subgraph, node.name)

    counts = prof.bottleneck
    lines = [
        headline(prof),
        f"Created {len(prof.subgraphs)} subgraphs from {len(prof.node_info)} graph nodes; "
        f"showing nodes {shown.start} to {shown.stop - 1}"
        if len(shown)
        else "no nodes in the requested range",
    ]
    if getattr(prof.trace, "note", ""):
        lines.append(f"Trace: {prof.trace.note}")
    lines += break_lines(prof)[1:] + [""]
    for node in (prof.node_info[i] for i in shown):
        sub = subgraphs.get(node.subgraph)
        left = [
            f"{node.index}. [{node.op}] {node.name}",
            f"   {node.target}",
            f"   module: {names(node.module) or '(model)'}",
            f"   out: {', '.join(shape(s) for s in node.shapes) or '-'}",
        ]
        inputs = [i if i in known else names.placeholder(i) for i in node.inputs]
        if inputs:
            left.append(f"   in: {', '.join(inputs)}")
        macs = f", MACs: {count(node.macs)}" if node.macs else ""
        if sub is None:
            right = [">> no subgraph", f"Kind: {node.kind}, FLOPs: {count(node.flops)}"]
        else:
            right = [
                f">> Subgraph #{sub.id}: {sub.kind} ({names(sub.module) or 'model'})",
                f"Kind: {node.kind}, FLOPs: {count(node.flops)}{macs}",
                f"Arithmetic Intensity: {intensity(sub.arithmetic_intensity)} FLOPs/byte "
                f"(subgraph: {count(sub.flops)} FLOPs, {nbytes(sub.traffic_bytes)})",
                f"Bottleneck: {sub.bottleneck}",
            ]
            if first_of.get(sub.id) == node.name:
                right.append(f"Starts subgraph: {sub.reason}")
        if node.unsupported:
            right.append("No formula: " + ", ".join(sorted(node.unsupported)))
        for i in range(max(len(left), len(right))):
            a = truncate(left[i], LEFT - 1) if i < len(left) else ""
            b = right[i] if i < len(right) else ""
            lines.append(f"{a.ljust(LEFT)}{b}".rstrip())
        lines.append("")

    lines.append("Bottleneck distribution:")
    total = len(prof.subgraphs) or 1
    for label in ("compute_bound", "memory_bound"):
        n = counts[label]["subgraphs"]
        lines.append(f"  {label:<15}: {n:4d} ({n / total:6.1%})")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# compare: two profile dictionaries side by side

COMPARED = (
    ("flops", "FLOPs", "count"),
    ("macs", "MACs", "count"),
    ("flops_contraction", "FLOPs of contractions", "count"),
    ("params", "params", "count"),
    ("weights_bytes", "weights", "bytes"),
    ("traffic_bytes", "traffic", "bytes"),
    ("activation_peak_bytes", "activation peak", "bytes"),
    ("peak_memory_bytes", "peak memory", "bytes"),
    ("arithmetic_intensity", "arithmetic intensity", "intensity"),
    ("est_latency_s", "est. latency", "seconds"),
)


def show(value: float, kind: str) -> str:
    if kind == "bytes":
        return nbytes(value)
    if kind == "seconds":
        return format_seconds(value)
    if kind == "intensity":
        return intensity(value)
    return count(value)


def _delta(a: float, b: float, kind: str) -> str:
    diff = b - a
    if not diff:
        return "="
    sign = "+" if diff > 0 else "-"
    text = sign + show(abs(diff), kind)
    if a:
        text += f" ({diff / a:+.1%})"
    return text


def compare(a: Mapping[str, Any], b: Mapping[str, Any], top: int | None = 20) -> dict[str, Any]:
    """The comparison of two profiles (``to_dict()`` form) as a dictionary: totals with their
    change, the bottleneck mix, and the modules whose figures differ, largest FLOPs change
    first (``top`` of them, ``None`` for all)."""
    totals = {}
    for key, _, _ in COMPARED:
        x, y = a["totals"][key], b["totals"][key]
        totals[key] = {"a": x, "b": y, "delta": y - x, "ratio": (y / x) if x else None}
    for label in ("compute_bound", "memory_bound"):
        x = a["bottleneck"][label]["share"]
        y = b["bottleneck"][label]["share"]
        totals[f"{label}_share"] = {"a": x, "b": y, "delta": y - x, "ratio": (y / x) if x else None}
    modules = []
    zero = {"flops": 0, "macs": 0, "params": 0}
    for path in sorted(set(a["modules"]) | set(b["modules"])):
        x, y = a["modules"].get(path), b["modules"].get(path)
        if x == y:
            continue
        xs, ys = x or zero, y or zero
        delta = {key: ys[key] - xs[key] for key in ("flops", "macs", "params")}
        status = "added" if x is None else "removed" if y is None else "changed"
        modules.append({"module": path, "status": status, "a": x, "b": y, "delta": delta})
    modules.sort(key=lambda m: (-abs(m["delta"]["flops"]), -abs(m["delta"]["params"]), m["module"]))
    changed = len(modules)
    return {
        "schema": "graphbudget.compare/1",
        "a": {"model": a["model"], "inputs": a["inputs"], "hardware": a["hardware"]["name"]},
        "b": {"model": b["model"], "inputs": b["inputs"], "hardware": b["hardware"]["name"]},
        "totals": totals,
        "modules_changed": changed,
        "modules": modules if top is None else modules[:top],
    }


def _label(side: Mapping[str, Any]) -> str:
    return f"{side['model']} ({_inputs_text(side['inputs'])})"


def _total_rows(result: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for key, label, kind in COMPARED:
        t = result["totals"][key]
        rows.append([label, show(t["a"], kind), show(t["b"], kind), _delta(t["a"], t["b"], kind)])
    for label in ("compute_bound", "memory_bound"):
        t = result["totals"][f"{label}_share"]
        diff = t["b"] - t["a"]
        change = "=" if abs(diff) < 5e-4 else f"{diff * 100:+.1f} points"
        rows.append([f"{label} share", format_ratio(t["a"]), format_ratio(t["b"]), change])
    return rows


def _module_rows(result: Mapping[str, Any], code: bool = False) -> list[list[str]]:
    rows = []
    for m in result["modules"]:
        x, y = m["a"] or {}, m["b"] or {}
        name = m["module"] or "(model)"
        rows.append(
            [
                f"`{name}`" if code else name,
                m["status"],
                count(x["flops"]) if x else "-",
                count(y["flops"]) if y else "-",
                _delta(x.get("flops", 0), y.get("flops", 0), "count"),
                count(x["params"]) if x else "-",
                count(y["params"]) if y else "-",
                _delta(x.get("params", 0), y.get("params", 0), "count"),
            ]
        )
    return rows


MODULE_HEADERS = [
    "module",
    "status",
    "A FLOPs",
    "B FLOPs",
    "change",
    "A params",
    "B params",
    "change",
]


def compare_text(result: Mapping[str, Any]) -> str:
    lines = [f"A: {_label(result['a'])}", f"B: {_label(result['b'])}", ""]
    lines += text_table(["metric", "A", "B", "change (B - A)"], _total_rows(result), "lrrr")
    lines += [""]
    shown, changed = len(result["modules"]), result["modules_changed"]
    if not changed:
        lines.append("Per-module figures are identical.")
    else:
        more = f" (the {shown} largest FLOPs changes)" if shown < changed else ""
        lines += [f"Modules that differ: {changed}{more}", ""]
        lines += text_table(MODULE_HEADERS, _module_rows(result), "llrrrrrr")
    return "\n".join(lines) + "\n"


def compare_markdown(result: Mapping[str, Any]) -> str:
    lines = [
        f"## {result['a']['model']} vs {result['b']['model']}",
        "",
        f"- A: {_label(result['a'])}",
        f"- B: {_label(result['b'])}",
        "",
    ]
    lines += markdown_table(["metric", "A", "B", "change (B - A)"], _total_rows(result))
    lines += ["", f"### Modules that differ: {result['modules_changed']}", ""]
    if result["modules"]:
        lines += markdown_table(MODULE_HEADERS, _module_rows(result, code=True), "llrrrrrr")
    return "\n".join(lines) + "\n"


def compare_csv(result: Mapping[str, Any]) -> str:
    """One row per total and per differing module: ``section,name,a,b,delta``."""
    rows = []
    for key, t in result["totals"].items():
        rows.append(["total", key, t["a"], t["b"], t["delta"]])
    for m in result["modules"]:
        x, y = m["a"] or {}, m["b"] or {}
        for key in ("flops", "macs", "params"):
            rows.append(
                [f"module.{key}", m["module"], x.get(key, ""), y.get(key, ""), m["delta"][key]]
            )
    return csv_text(["section", "name", "a", "b", "delta"], rows)


def render_compare(result: Mapping[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json_text(result)
    if fmt == "csv":
        return compare_csv(result)
    if fmt == "markdown":
        return compare_markdown(result)
    return compare_text(result)


# ---------------------------------------------------------------------------------------------
# hardware


def hardware_rows(profiles: Iterable[Any]) -> list[dict[str, Any]]:
    rows = []
    for hw in profiles:
        half = hw.peak_flops.get("bfloat16") or hw.peak_flops.get("float16")
        rows.append(
            {
                "name": hw.name,
                "aliases": list(hw.aliases),
                "description": hw.description,
                "peak_flops": dict(hw.peak_flops),
                "bandwidth": hw.bandwidth,
                "ridge_point": hw.ridge_point("float32"),
                "ridge_point_16bit": (half / hw.bandwidth) if half else None,
                "source": hw.source,
            }
        )
    return rows


def render_hardware(profiles: Iterable[Any], fmt: str) -> str:
    rows = hardware_rows(profiles)
    if fmt == "json":
        return json_text(rows)
    headers = [
        "name",
        "fp32 TFLOP/s",
        "16-bit TFLOP/s",
        "bandwidth GB/s",
        "ridge fp32",
        "ridge 16-bit",
        "description",
    ]
    table = [
        [
            r["name"] + (f" ({', '.join(r['aliases'])})" if r["aliases"] else ""),
            _tera(r["peak_flops"]["float32"]),
            _tera(r["peak_flops"].get("bfloat16") or r["peak_flops"].get("float16")),
            f"{r['bandwidth'] / 1e9:g}",
            f"{r['ridge_point']:.1f}",
            f"{r['ridge_point_16bit']:.1f}" if r["ridge_point_16bit"] else "-",
            r["description"],
        ]
        for r in rows
    ]
    if fmt == "csv":
        plain = [
            [
                r["name"],
                r["peak_flops"]["float32"],
                r["peak_flops"].get("bfloat16") or r["peak_flops"].get("float16") or "",
                r["bandwidth"],
                r["ridge_point"],
                r["ridge_point_16bit"] or "",
                r["description"],
            ]
            for r in rows
        ]
        return csv_text(
            [
                "name",
                "peak_flops_fp32",
                "peak_flops_16bit",
                "bandwidth_bytes_s",
                "ridge_point",
                "ridge_point_16bit",
                "description",
            ],
            plain,
        )
    if fmt == "markdown":
        return "\n".join(markdown_table(headers, table, "lrrrrrl")) + "\n"
    lines = text_table(headers, table, "lrrrrrl")
    lines += [
        "",
        "ridge point = peak FLOP/s / bandwidth, in FLOPs per byte: a subgraph whose "
        "arithmetic intensity reaches it is compute-bound.",
    ]
    return "\n".join(lines) + "\n"


def _tera(value: float | None) -> str:
    return f"{value / 1e12:.4g}" if value else "-"
