"""``graph-budget explore MODEL``: every graph node with its subgraph, kind, FLOPs, and the
subgraph's arithmetic intensity and bottleneck, in two columns."""

from __future__ import annotations

import argparse
from typing import Any

from pytest_graphbudget.cli import loading, options
from pytest_graphbudget.cli.console import EXIT_OK, Console, check_writable
from pytest_graphbudget.cli.sections import break_lines
from pytest_graphbudget.cli.views import headline, intensity, shape
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.reports.names import Abbreviator, truncate
from pytest_graphbudget.units import format_bytes, format_count

LEFT = 56  # width of the node column; the subgraph column starts after it


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "explore",
        parents=[options.quiet(), options.model()],
        formatter_class=options.Formatter,
        help="every graph node with its subgraph, kind, FLOPs and bottleneck",
        description="The node-by-node view: each graph node with its subgraph, kind, FLOPs, "
        "the subgraph's arithmetic intensity and bottleneck. Nodes are numbered from 0.",
    )
    options.model_argument(p)
    index = options.non_negative_int
    p.add_argument("--start", type=index, metavar="N", help="first node shown")
    p.add_argument("--end", type=index, metavar="N", help="last node shown")
    p.add_argument("--around", type=index, metavar="N", help="centre on node N")
    p.add_argument("--context", type=index, metavar="K", help="nodes on each side of --around (10)")
    p.add_argument(
        "--max-nodes", type=options.positive_int, metavar="M", help="show at most M nodes"
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the view to FILE")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, console: Console) -> int:
    if args.around is not None and (args.start is not None or args.end is not None):
        raise GraphBudgetError("--around cannot be combined with --start/--end")
    if args.context is not None and args.around is None:  # it had been ignored, every node shown
        raise GraphBudgetError("--context K goes with --around N: the K nodes on each side of N")
    if args.start is not None and args.end is not None and args.end < args.start:
        raise GraphBudgetError(f"--end {args.end} is before --start {args.start}")
    if args.output and args.output.lower().endswith((".json", ".html", ".htm")):
        raise GraphBudgetError(  # the text view under that name had read as a broken file
            f"-o {args.output}: explore writes its text view; for JSON or HTML, "
            f"graph-budget profile {args.model} --format json (or --html FILE)"
        )
    check_writable(args.output)
    hardware = loading.hardware(args)
    case = loading.load_case(args.model, args, console)
    prof = loading.profile_case(case, hardware, console, loading.variant(args))
    total = len(prof.node_info)
    first = args.around if args.around is not None else args.start
    if first is not None and first >= total:
        option = "--around" if args.around is not None else "--start"
        raise GraphBudgetError(
            f"{option} {first} is past the last node: {prof.model} has nodes 0 to {total - 1}"
        )
    context = 10 if args.context is None else args.context
    shown = node_range(total, args.start, args.end, args.around, context, args.max_nodes)
    console.emit(explore_text(prof, shown), args.output)
    return EXIT_OK


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
        left = _node_column(node, names, known)
        sub = subgraphs.get(node.subgraph)
        right = _subgraph_column(node, sub, names, first_of.get(node.subgraph) == node.name)
        for i in range(max(len(left), len(right))):
            a = truncate(left[i], LEFT - 1) if i < len(left) else ""
            b = right[i] if i < len(right) else ""
            lines.append(f"{a.ljust(LEFT)}{b}".rstrip())
        lines.append("")

    lines.append("Bottleneck distribution:")
    total = len(prof.subgraphs) or 1
    for label in ("compute_bound", "memory_bound"):
        n = prof.bottleneck[label]["subgraphs"]
        lines.append(f"  {label:<15}: {n:4d} ({n / total:6.1%})")
    return "\n".join(lines) + "\n"


def _node_column(node: Any, names: Abbreviator, known: set[str]) -> list[str]:
    """The left column: the node, its target, module, output shapes and inputs. A long
    node name is shortened, never its number and kind before it."""
    head = f"{node.index}. [{node.op}] "
    left = [
        head + truncate(node.name, LEFT - 1 - len(head)),
        f"   {node.target}",
        f"   module: {names(node.module) or '(model)'}",
        f"   out: {', '.join(shape(s) for s in node.shapes) or '-'}",
    ]
    inputs = [i if i in known else names.placeholder(i) for i in node.inputs]
    if inputs:
        left.append(f"   in: {', '.join(inputs)}")
    return left


def _subgraph_column(node: Any, sub: Any, names: Abbreviator, starts: bool) -> list[str]:
    """The right column: the node's subgraph, kind, FLOPs, intensity and bottleneck."""
    macs = f", MACs: {format_count(node.macs)}" if node.macs else ""
    if sub is None:
        right = [">> no subgraph", f"Kind: {node.kind}, FLOPs: {format_count(node.flops)}"]
    else:
        right = [
            f">> Subgraph #{sub.id}: {sub.kind} ({names(sub.module) or 'model'})",
            f"Kind: {node.kind}, FLOPs: {format_count(node.flops)}{macs}",
            f"Arithmetic Intensity: {intensity(sub.arithmetic_intensity)} FLOPs/byte "
            f"(subgraph: {format_count(sub.flops)} FLOPs, {format_bytes(sub.traffic_bytes)})",
            f"Bottleneck: {sub.bottleneck}",
        ]
        if starts:
            right.append(f"Starts subgraph: {sub.reason}")
    if node.unsupported:
        right.append("No formula: " + ", ".join(sorted(node.unsupported)))
    return right
