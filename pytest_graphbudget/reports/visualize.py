"""Draw a profile's partitioned graph: Graphviz DOT, rendered by ``dot`` for images.

The picture comes from the profile itself, not from the model: one node per graph node, one
cluster per fused subgraph (coloured by its bottleneck, labelled with its kind, module, FLOPs and
arithmetic intensity), and the edges ``NodeInfo.inputs`` record. So it works for every model the
engine profiles, multi-input Dynamo graphs such as BERT included.

``.dot``/``.gv`` files are written directly; ``.svg``, ``.png`` and ``.pdf`` are rendered by
Graphviz's ``dot``, and its absence is a one-line ``GraphBudgetError``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.reports.names import Abbreviator, truncate
from pytest_graphbudget.units import format_count

TEXT_SUFFIXES = (".dot", ".gv")
IMAGE_SUFFIXES = (".svg", ".png", ".pdf")
SUFFIXES = TEXT_SUFFIXES + IMAGE_SUFFIXES

COLORS = {
    "compute_bound": ("#fde0c5", "#d9822b"),  # fill, border
    "memory_bound": ("#d6e6f5", "#3b78b5"),
}
NO_SUBGRAPH = ("#f2f2f2", "#999999")
LABEL_WIDTH = 40


def check_target(path: str | os.PathLike[str]) -> str:
    """Validate an output path before any work is done; return the format (``dot``, ``svg``,
    ``png`` or ``pdf``). Unknown suffixes and a missing ``dot`` are ``GraphBudgetError``s."""
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        raise GraphBudgetError(
            f"--visualize {os.fspath(path)}: unknown format {suffix or '(no suffix)'}; "
            f"use one of {', '.join(SUFFIXES)}"
        )
    if suffix in IMAGE_SUFFIXES and dot_executable() is None:
        raise GraphBudgetError(
            f"--visualize {os.fspath(path)}: rendering {suffix} needs Graphviz's `dot`, which is "
            "not on PATH; install Graphviz (apt-get install graphviz, brew install graphviz) or "
            "write a .dot file instead"
        )
    return "dot" if suffix in TEXT_SUFFIXES else suffix[1:]


def dot_executable() -> str | None:
    return shutil.which("dot")


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _shape(dims: list[int]) -> str:
    return "x".join(str(d) for d in dims) or "scalar"


def graph_input(prof: Any, name: str) -> Any | None:
    """The ``InputInfo`` of the graph input that a producer named ``name`` stands for, or
    ``None`` when it is a weight, buffer or constant (those are not drawn).

    FX names a placeholder after the ``forward`` argument (``x``; ``input_1`` when the name
    shadows a builtin) and reads weights through ``get_attr`` nodes; export names user inputs
    ``tensors_<i>`` (in the order of ``prof.inputs``) and state ``p_``/``b_``/``c_...``.
    """
    by_name = {info.name: info for info in prof.inputs}
    if name in by_name:
        return by_name[name]
    base = re.sub(r"_\d+$", "", name)
    if prof.trace.method == "fx":
        return by_name.get(base)
    match = re.fullmatch(r"tensors_(\d+)", name)
    if match and int(match.group(1)) < len(prof.inputs):
        return prof.inputs[int(match.group(1))]
    return by_name.get(base)


def to_dot(prof: Any) -> str:
    """The DOT source of ``prof``'s partitioned graph."""
    nodes = {n.name: n for n in prof.node_info}
    externals = _externals(prof, nodes)
    lines = [
        f"digraph {_quote(prof.model)} {{",
        "  rankdir=TB;",
        "  newrank=true;",
        f'  graph [fontname="Helvetica", fontsize=10, labelloc=t, label={_quote(_title(prof))}];',
        '  node [shape=box, style="rounded,filled", fillcolor=white, fontname="Helvetica", '
        "fontsize=9];",
        '  edge [color="#666666", arrowsize=0.6];',
        "",
    ]
    # Graph inputs, then one cluster per subgraph (nodes in topological order within it).
    for name, info in externals.items():
        label = f"input {info.name}\n{_shape(info.shape)} {info.dtype}"
        lines.append(
            f'  {_quote("in:" + name)} [shape=ellipse, fillcolor="#eeeeee", label={_quote(label)}];'
        )
    if externals:
        lines.append("")
    lines += _clusters(prof)
    lines.append("")
    for node in prof.node_info:
        for producer in node.inputs:
            if producer in nodes:
                lines.append(f"  {_quote(producer)} -> {_quote(node.name)};")
            elif producer in externals:
                lines.append(f"  {_quote('in:' + producer)} -> {_quote(node.name)};")
    compute_fill, memory_fill = COLORS["compute_bound"][0], COLORS["memory_bound"][0]
    lines += [
        "",
        "  subgraph cluster_legend {",
        '    label="legend"; style=dashed; color="#999999";',
        f'    "__legend_compute" [label="compute-bound subgraph", fillcolor="{compute_fill}"];',
        f'    "__legend_memory" [label="memory-bound subgraph", fillcolor="{memory_fill}"];',
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _externals(prof: Any, nodes: dict[str, Any]) -> dict[str, Any]:
    """The graph inputs the nodes read, by producer name, in the order first read."""
    externals: dict[str, Any] = {}
    for node in prof.node_info:
        for producer in node.inputs:
            if producer in nodes or producer in externals:
                continue
            info = graph_input(prof, producer)
            if info is not None:
                externals[producer] = info
    return externals


def _clusters(prof: Any) -> list[str]:
    """One cluster per fused subgraph, its nodes inside; nodes outside any subgraph bare."""
    names = Abbreviator(prof.modules)
    members: dict[int, list[Any]] = {}
    for node in prof.node_info:
        members.setdefault(node.subgraph, []).append(node)
    subgraphs = {s.id: s for s in prof.subgraphs}
    lines: list[str] = []
    for sub_id, group in members.items():
        sub = subgraphs.get(sub_id)
        indent = "  "
        if sub is not None:
            fill, border = COLORS.get(sub.bottleneck, NO_SUBGRAPH)
            label = (
                f"#{sub.id} {sub.kind}\n{truncate(names(sub.module) or 'model', LABEL_WIDTH)}\n"
                f"{format_count(sub.flops)} FLOPs, AI {sub.arithmetic_intensity:.1f}, "
                f"{sub.bottleneck.replace('_', '-')}"
            )
            lines += [
                f"  subgraph cluster_{sub.id} {{",
                f"    label={_quote(label)};",
                f'    style="rounded,filled"; fillcolor="{fill}"; color="{border}";',
                "    fontsize=9;",
            ]
            indent = "    "
        lines += [f"{indent}{_node(node)}" for node in group]
        if sub is not None:
            lines.append("  }")
    return lines


def _node(node: Any) -> str:
    label = f"{node.name}\n{node.kind}"
    if node.shapes:
        label += "\n" + ", ".join(_shape(s) for s in node.shapes[:2])
    if node.flops:
        label += f"\n{format_count(node.flops)} FLOPs"
    extra = ', color="#cc0000", penwidth=2' if node.unsupported else ""
    return f"{_quote(node.name)} [label={_quote(label)}{extra}];"


def _title(prof: Any) -> str:
    return (
        f"{prof.model}: {format_count(prof.flops)} FLOPs, {len(prof.subgraphs)} subgraphs "
        f"({prof.trace.method} trace), {prof.hardware.name} ridge point "
        f"{prof.ridge_point:.1f} FLOPs/byte"
    )


def write(prof: Any, path: str | os.PathLike[str]) -> Path:
    """Write ``prof``'s graph to ``path``: DOT as text, or an image rendered by ``dot``."""
    fmt = check_target(path)
    target = Path(path)
    source = to_dot(prof)
    if fmt == "dot":
        try:
            target.write_text(source, encoding="utf-8")
        except OSError as exc:
            raise GraphBudgetError(f"cannot write {target}: {exc.strerror or exc}") from None
        return target
    image = render(source, fmt, str(target))
    try:
        target.write_bytes(image)
    except OSError as exc:
        raise GraphBudgetError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target


def render(source: str, fmt: str, shown: str = "the graph") -> bytes:
    """DOT source rendered by Graphviz's ``dot`` as ``fmt`` (``svg``, ``png``, ``pdf``); a
    missing ``dot`` or a failed render is a one-line ``GraphBudgetError`` naming ``shown``."""
    dot = dot_executable()
    if dot is None:
        raise GraphBudgetError(f"rendering {shown} needs Graphviz's `dot`, which is not on PATH")
    try:
        done = subprocess.run(
            [dot, f"-T{fmt}"],
            input=source.encode("utf-8"),
            capture_output=True,
            timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GraphBudgetError(f"Graphviz `dot` could not render {shown}: {exc}") from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        first = message[0] if message else f"exit status {done.returncode}"
        raise GraphBudgetError(f"Graphviz `dot` could not render {shown}: {first}")
    return done.stdout
