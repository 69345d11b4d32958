"""``graph-budget profile``'s view of one profile as text, markdown or CSV, laid out from
the rows of ``reports/layers.py``: shared by ``profile`` and ``profile --decode`` (``decode.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_graphbudget.cli.sections import (
    BOTTLENECK_HEADERS,
    OP_TYPE_HEADERS,
    bottleneck_rows,
    break_lines,
    layer_table,
    op_type_rows,
    summary,
    top_table,
)
from pytest_graphbudget.cli.views import headline
from pytest_graphbudget.modes.runtime import rows as runtime_rows
from pytest_graphbudget.reports.layers import layer_rows
from pytest_graphbudget.reports.names import Abbreviator
from pytest_graphbudget.reports.tables import csv_text, json_text, markdown_table, text_table

MODULE_WIDTH = 56  # widest module path shown in text tables before it is shortened
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


def render_profile(prof: Any, fmt: str, **view: Any) -> str:
    if fmt == "json":
        return json_text(prof.to_dict())
    if fmt == "csv":
        return profile_csv(prof, types=view.get("types"), depth=view.get("depth"))
    if fmt == "markdown":
        return profile_markdown(prof, **view)
    return profile_text(prof, **view)


def profile_text(
    prof: Any,
    *,
    types: Mapping[str, str] | None = None,
    show_shapes: bool = False,
    depth: int | None = None,
    top: int = 10,
) -> str:
    """The table view: summary, per-layer table, top layers, operation types and bottleneck
    mix."""
    names = Abbreviator(prof.modules)
    lines = [headline(prof), ""]
    width = max(len(label) for label, _ in summary(prof))
    lines += [f"  {label.ljust(width)}  {value}" for label, value in summary(prof)]
    lines += break_lines(prof)
    if prof.runtime is not None:
        measured = runtime_rows(prof.runtime, prof.hardware.name, prof.execution)
        width = max(len(label) for label, _ in measured)
        lines += ["", "Measured on this machine", ""]
        lines += [f"  {label.ljust(width)}  {value}" for label, value in measured]

    def model_label(row: Any) -> str:
        return "  " * row.depth + names(row.path or f"{prof.model} (model)", MODULE_WIDTH)

    lines += ["", "Per-layer profile", ""]
    headers, rows, align = layer_table(prof, types, depth, show_shapes, model_label)
    lines += ["  " + line for line in text_table(headers, rows, align)]

    lines += ["", f"Top {top} layers by FLOPs (fused kernels)", ""]
    headers, rows, align = top_table(
        prof, top, lambda s: names(s.module, MODULE_WIDTH) or "(model)"
    )
    lines += ["  " + line for line in text_table(headers, rows, align)]

    lines += ["", "Operation types", ""]
    lines += ["  " + line for line in text_table(OP_TYPE_HEADERS, op_type_rows(prof), "lrrrr")]

    lines += [
        "",
        f"Bottleneck mix on {prof.hardware.name} (ridge point {prof.ridge_point:.1f} FLOPs/byte)",
        "",
    ]
    lines += ["  " + line for line in text_table(BOTTLENECK_HEADERS, bottleneck_rows(prof))]
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
    lines = [f"## {prof.model}", "", headline(prof), ""]
    lines += markdown_table(["metric", "value"], summary(prof), "ll")
    if prof.runtime is not None:
        lines += ["", "### Measured on this machine", ""]
        lines += markdown_table(
            ["metric", "value"],
            runtime_rows(prof.runtime, prof.hardware.name, prof.execution),
            "ll",
        )

    def model_label(row: Any) -> str:
        return f"`{names(row.path)}`" if row.path else f"**{prof.model}** (model)"

    lines += ["", "### Per-layer profile", ""]
    lines += markdown_table(*layer_table(prof, types, depth, show_shapes, model_label))

    lines += ["", f"### Top {top} layers by FLOPs", ""]
    lines += markdown_table(
        *top_table(prof, top, lambda s: f"`{names(s.module)}`" if s.module else "(model)")
    )

    lines += ["", "### Operation types", ""]
    lines += markdown_table(OP_TYPE_HEADERS, op_type_rows(prof))

    lines += ["", f"### Bottleneck mix on {prof.hardware.name}", ""]
    lines += markdown_table(BOTTLENECK_HEADERS, bottleneck_rows(prof))
    return "\n".join(lines) + "\n"


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
