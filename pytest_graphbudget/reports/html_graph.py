"""The HTML report's partitioned-graph drawing and measured-runtime facts, per model.

A budget run draws each model's graph where it profiled it (on the xdist worker, in parallel)
and only when an HTML report is asked: ``graph_svg`` renders ``visualize.to_dot`` with
Graphviz's ``dot`` and the SVG travels in ``ModelResult.graph_svg``. A profile from the cache
has its nodes too: ``profiler.Profiler`` stores them in the entry when the HTML report is asked
(and re-profiles an entry made without them once), so a warm run draws the same graph.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from html import escape
from typing import Any

NO_DOT = (
    "Graphviz's `dot` is not on PATH, so the partitioned graph is not drawn here; install "
    "Graphviz (apt-get install graphviz, brew install graphviz) and write the report again."
)
NO_NODES = (
    "This profile keeps no per-node graph (a saved JSON profile; a growth table's fit, whose "
    "points draw theirs); "
    "`graph-budget profile {model} --html FILE` draws it."
)

GRAPH_NODE = re.compile(r'class="node">\s*<title>(?!in:|__legend_)')
"""A drawn node of the profile's graph: not a graph input's ellipse, not the legend's boxes."""


def graph_svg(prof: Any) -> tuple[str, str]:
    """The partitioned graph of a ``Profile`` as inline SVG, or ``""`` and why not."""
    from pytest_graphbudget.errors import GraphBudgetError
    from pytest_graphbudget.reports import visualize

    if not prof.node_info:
        return "", NO_NODES.replace("{model}", prof.model)
    if visualize.dot_executable() is None:
        return "", NO_DOT
    try:
        svg = visualize.render(visualize.to_dot(prof), "svg").decode("utf-8")
    except GraphBudgetError as exc:
        return "", str(exc)
    start = svg.find("<svg")
    return re.sub(r"<!--.*?-->", "", svg[start:], flags=re.S), ""


def draw(result: Any, prof: Any) -> None:
    """Draw ``prof``'s graph into a ``ModelResult`` (an HTML report is asked): the SVG, or
    ``None`` and the note that says why not, and the order its layers run in."""
    svg, result.graph_note = graph_svg(prof)
    result.graph_svg = svg or None
    result.layer_order = execution_order(prof) or None


def execution_order(prof: Any) -> list[str]:
    """The profile's modules as the CLI's per-layer table lists them: parents before
    children, siblings in the order the graph first runs them; empty without its nodes."""
    if not prof.node_info:
        return []
    from pytest_graphbudget.reports.layers import layer_rows

    return [row.path for row in layer_rows(prof)[1:]]


def graph_block(svg: str, note: str, anchor: str) -> str:
    """The page's graph box: the drawing with its search and zoom, or the note saying why not."""
    if not svg:
        note = f'<p class="note">{escape(note)}</p>'
        return f'<div class="graph"><h3>Partitioned graph</h3>{note}</div>'
    # Graphviz names its elements node1, clust1...: made unique per model on a page of several.
    drawing = svg.replace(' id="', f' id="{anchor}-')
    nodes = len(GRAPH_NODE.findall(svg))
    return (
        f'<div class="graph" data-nodes="{nodes}"><h3>Partitioned graph</h3><p class="tools">'
        '<input type="search" class="graph-search" placeholder="find a node, module or kind">'
        ' <button type="button" data-zoom="0.8" title="zoom out">&minus;</button>'
        '<button type="button" data-zoom="1.25" title="zoom in">+</button>'
        '<button type="button" data-zoom="fit" title="fit the width">fit</button>'
        f' <span class="nodes">{nodes} nodes</span> <span class="count"></span></p>'
        f'<div class="graph-box">{drawing}</div></div>'
    )


def runtime_facts(profile: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The measured runtime's summary lines (absent unless the profile was timed)."""
    measured = profile.get("runtime")
    if not measured:
        return []
    runs = measured["runs"]
    timed = "run" if profile.get("execution", "eager") == "eager" else "eager run, not compiled"
    return [
        (
            "measured",
            f"min {measured['min_s'] * 1e3:.3g} ms, median {measured['median_s'] * 1e3:.3g} ms "
            f"over {runs} run{'s' if runs != 1 else ''} on {measured['device']} "
            f"({measured['threads']} threads)",
        ),
        ("throughput", f"{measured['throughput']:.4g} samples/s (batch {measured['batch']})"),
        ("roofline ratio", f"{measured['roofline_ratio']:.3g} (estimate / fastest {timed})"),
    ]
