"""``graph-budget profile MODEL``: summary, per-layer table, top layers, operation types and
bottleneck mix, as a text table, markdown, CSV (the per-layer table) or JSON (the profile)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from pytest_graphbudget.cli import decode, loading, options
from pytest_graphbudget.cli.console import EXIT_OK, Console, check_writable, format_of
from pytest_graphbudget.cli.sections import (
    BOTTLENECK_HEADERS,
    OP_TYPE_HEADERS,
    bottleneck_rows,
    break_lines,
    layer_rows,
    layer_table,
    op_type_rows,
    summary,
    top_table,
)
from pytest_graphbudget.cli.views import headline
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.names import Abbreviator
from pytest_graphbudget.runtime import rows as runtime_rows
from pytest_graphbudget.tables import csv_text, json_text, markdown_table, text_table

MODULE_WIDTH = 56  # widest module path shown in text tables before it is shortened


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "profile",
        parents=[options.quiet(), options.model(sweep=True)],
        formatter_class=options.Formatter,
        help="profile a model: summary, per-layer table, top layers, bottleneck mix",
        description="Profile one forward pass of MODEL: summary, hierarchical per-layer table, "
        "top layers by FLOPs, operation types and bottleneck mix. Several --seq-len or --batch "
        "values (128,256,512) sweep them: one row per point and each figure's exact formula.",
    )
    options.model_argument(p)
    options.output_options(p)
    p.add_argument("--showshape", action="store_true", help="add output shapes to the table")
    p.add_argument(
        "--depth", type=options.non_negative_int, metavar="N", help="module levels shown"
    )
    p.add_argument(
        "--top", type=options.positive_int, default=10, metavar="N", help="top layers shown (10)"
    )
    p.add_argument(
        "--measure",
        action="store_true",
        help="also run the model here: load time, RSS, latency of timed runs, throughput",
    )
    p.add_argument(
        "--measure-runs",
        type=options.positive_int,
        metavar="N",
        help="timed runs of --measure, after 3 warm-up runs (default 20; implies --measure)",
    )
    p.add_argument(
        "--visualize",
        metavar="FILE",
        help="draw the partitioned graph: FILE.dot, .svg, .png or .pdf (images need `dot`)",
    )
    p.add_argument(
        "--symbolic",
        action="store_true",
        help="with several --seq-len/--batch values: derive FLOPs and MACs from one export at "
        "symbolic shapes (used where they reproduce every point)",
    )
    decode.add_options(p)
    options.html_option(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, console: Console) -> int:
    from pytest_graphbudget.cli import sweep_view

    axes = sweep_view.swept(args)
    runs = measure_runs(args, bool(axes) or decode.wanted(args))
    if axes:  # --seq-len 128,256,512: one row per point and the fitted formulas
        return sweep_view.run(args, console, axes)
    if args.symbolic:
        raise GraphBudgetError("--symbolic derives formulas over a sweep: give --seq-len 8,16,32")
    fmt = format_of(args)
    check_writable(args.output)
    check_writable(args.html, "--html")
    if args.visualize:
        from pytest_graphbudget import visualize

        visualize.check_target(args.visualize)
        check_writable(args.visualize, "--visualize")
    if decode.wanted(args):  # one generated token beside the prefill (cli/decode.py)
        return decode.run(args, console)
    hardware = loading.hardware(args)
    case = loading.load_case(args.model, args, console)
    how = {**loading.variant(args), **({"measure": runs} if runs else {})}
    prof = loading.profile_case(case, hardware, console, how)
    view = {
        "types": loading.module_types(case),
        "show_shapes": args.showshape,
        "depth": args.depth,
        "top": args.top,
    }
    if fmt == "csv":
        view = {"types": view["types"], "depth": args.depth}
        if runs:
            console.note(
                "the CSV is the per-layer table: the measured runtime is in the other formats"
            )
    text = render_profile(prof, fmt, **view)
    if args.visualize:
        from pytest_graphbudget import visualize

        console.progress(f"drawing {args.visualize} ...")
        visualize.write(prof, args.visualize)
        console.progress(f"wrote {args.visualize}")
    if args.html:
        from pytest_graphbudget.reports import html

        console.emit(html.profile_page(prof), args.html)
    console.emit(text, args.output)
    return EXIT_OK


def measure_runs(args: argparse.Namespace, elsewhere: bool) -> int | None:
    """The timed runs ``--measure``/``--measure-runs`` ask for (None: not measured);
    ``elsewhere``: the command profiles a sweep or a decode step, which are not timed."""
    from pytest_graphbudget.runtime import runs_asked

    asked = args.measure_runs or args.measure
    if not asked:
        return None
    if elsewhere:
        raise GraphBudgetError("--measure times one forward of MODEL: not a sweep or --decode")
    if args.meta:
        raise GraphBudgetError("--measure runs the model, which --meta builds without weights")
    return runs_asked(asked, getattr(args, "mode", None) or "eval")


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
        measured = runtime_rows(prof.runtime, prof.hardware.name)
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
            ["metric", "value"], runtime_rows(prof.runtime, prof.hardware.name), "ll"
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
