"""``graph-budget profile MODEL``: summary, per-layer table, top layers, operation types and
bottleneck mix, as a text table, markdown, CSV (the per-layer table) or JSON (the profile)."""

from __future__ import annotations

import argparse
from typing import Any

from pytest_graphbudget.cli import decode, loading, options
from pytest_graphbudget.cli.console import (
    EXIT_OK,
    Console,
    check_writable,
    format_of,
    refuse_reading_into,
)
from pytest_graphbudget.cli.profile_view import render_profile
from pytest_graphbudget.errors import GraphBudgetError


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
        "--device",
        metavar="DEVICE",
        help="where --measure runs a copy of the model: cpu (default), cuda or cuda:N "
        "(CUDA events time it, max_memory_allocated gives its peak)",
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
    p.add_argument(
        "--breaks",
        action="store_true",
        help="price a model FX cannot trace through Dynamo with graph breaks, and list each "
        "break (default: one taped forward, no Dynamo)",
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
    shown = {"--output": args.output, "--html": args.html, "--visualize": args.visualize}
    refuse_reading_into(shown, [args.model])
    if args.visualize:
        from pytest_graphbudget.reports import visualize

        visualize.check_target(args.visualize)
        check_writable(args.visualize, "--visualize")
    if decode.wanted(args):  # one generated token beside the prefill (cli/decode.py)
        return decode.run(args, console)
    hardware = loading.hardware(args)
    how = {**loading.variant(args), **({"measure": runs} if runs else {})}
    if args.device:
        how["device"] = args.device
    if args.breaks and how.get("mode", "eval") != "eval":  # the API's "drop tier" is no flag
        raise GraphBudgetError("--breaks captures one eval forward, not a training step")
    if args.breaks:
        how["tier"] = "dynamo-breaks"
    case = loading.load_case(args.model, args, console)
    prof = loading.profile_case(case, hardware, console, how)
    if runs:
        from pytest_graphbudget.modes.runtime import eager_note

        if note := eager_note(prof.execution, "--measure"):
            console.note(note)
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
        from pytest_graphbudget.reports import visualize

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
    from pytest_graphbudget.modes.runtime import check_where, runs_asked

    asked = args.measure_runs or args.measure
    label = f"--device {args.device}"
    if not asked:
        check_where(args.device, 0, label, "--measure")
        return None
    if elsewhere:
        raise GraphBudgetError("--measure times one forward of MODEL: not a sweep or --decode")
    if args.meta:
        raise GraphBudgetError("--measure runs the model, which --meta builds without weights")
    runs = runs_asked(asked, getattr(args, "mode", None) or "eval")
    check_where(args.device, runs, label)
    return runs
