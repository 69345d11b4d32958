"""A profile's modules as rows, parents before children in the order its graph first runs
them: the per-layer table of ``graph-budget profile`` and the layer order of the HTML report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


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
    children = _children(prof.modules)
    last_node = next((n for n in reversed(prof.node_info) if n.shapes), None)
    top_shape = last_node.shapes[0] if last_node else None
    rows = [
        LayerRow(
            "",
            0,
            types.get("", ""),
            prof.params,
            prof.macs,
            prof.flops,
            prof.traffic_bytes,
            top_shape,
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


def _children(modules: Mapping[str, Any]) -> dict[str, list[str]]:
    """Each module path's nearest profiled descendants (``""`` is the model)."""
    children: dict[str, list[str]] = {}
    for path in modules:
        parent = path.rpartition(".")[0]
        while parent and parent not in modules:
            parent = parent.rpartition(".")[0]
        children.setdefault(parent, []).append(path)
    return children


def _ancestors(path: str) -> list[str]:
    parts = path.split(".") if path else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]
