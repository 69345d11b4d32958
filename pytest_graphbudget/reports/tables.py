"""Table writers shared by the command line (``cli/``) and the reports (``reports/``).

Plain text (columns padded to their widest cell), GitHub-flavoured markdown and CSV. Each
writer takes header cells, rows of cells and an alignment string (``l``/``r`` per column) and
returns lines or text; nothing is printed and torch is never imported. The callers decide what
goes in the cells: the figures are formatted before they get here.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

GAP = "  "


def default_align(columns: int) -> str:
    """The first column left (a name), the rest right (figures)."""
    return "l" + "r" * (columns - 1)


def widths_of(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[int]:
    """The widest cell of each column, headers included."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    return widths


def pad_line(cells: Sequence[str], widths: Sequence[int], align: str, gap: str = GAP) -> str:
    """One text row: each cell padded to its column's width, trailing blanks dropped."""
    parts = [
        cell.ljust(width) if a == "l" else cell.rjust(width)
        for cell, width, a in zip(cells, widths, align, strict=True)
    ]
    return gap.join(parts).rstrip()


def text_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str = "") -> list[str]:
    """A plain table under a rule of dashes: columns padded to their widest cell, ``align`` is
    ``l``/``r`` per column (left for the first column, right for the rest unless told)."""
    cells = [[str(cell) for cell in row] for row in rows]
    widths = widths_of(headers, cells)
    align = align or default_align(len(headers))
    rule = ["-" * w for w in widths]
    return [pad_line(line, widths, align) for line in (headers, rule, *cells)]


def markdown_row(cells: Sequence[Any], escape: Callable[[str], str] | None = None) -> str:
    """``| a | b |``; ``escape`` makes each cell safe (default: ``|`` escaped)."""
    safe = escape or _escape_pipes
    return "| " + " | ".join(safe(str(c)) for c in cells) + " |"


def _escape_pipes(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_rule(align: str, left: str = "---", right: str = "---:") -> str:
    """The separator row under a markdown header: ``left``/``right`` spelling per column."""
    return "| " + " | ".join(right if a == "r" else left for a in align) + " |"


def markdown_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str = ""
) -> list[str]:
    """A GitHub-flavoured markdown table (``|`` in cells escaped)."""
    align = align or default_align(len(headers))
    return [markdown_row(headers), markdown_rule(align), *(markdown_row(row) for row in rows)]


def csv_text(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """CSV with ``\\n`` line ends, plain values (numbers unformatted)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(rows)
    return out.getvalue()


def json_text(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


HELD_PARTS = ("params", "buffers", "grads", "optimizer_state", "input")
RUNNING_PARTS = ("activation", "transient")
RANK_PARTS = (*HELD_PARTS[:4], "activation", "input", "transient", "update")
"""The parts of one rank's peak of a sharded step (``Profile.to_dict()["parallel"]``): what
it holds throughout, then the larger of the forward and backward's activations and all-gathers
and the optimizer's update after them. A JSON written before ``buffers_bytes`` or
``update_bytes`` were has none (read as 0)."""


def rank_sum(r: dict) -> list[str]:
    """The parts that add up to rank ``r``'s peak: the update's or the running ones'."""
    running = sum(r.get(f"{p}_bytes", 0) for p in RUNNING_PARTS)
    later = ("update",) if r.get("update_bytes", 0) > running else RUNNING_PARTS
    return [*HELD_PARTS, *later]


def rank_groups(ranks: list[dict]) -> list[tuple[str, dict]]:
    """A sharded step's ranks as runs of equal ranks: ("ranks 0-1", share), ("rank 2", ...);
    "each rank" when every rank holds the same (replicated, or evenly sharded)."""
    groups: list[tuple[str, dict]] = []
    start = 0
    for end in range(1, len(ranks) + 1):
        if end < len(ranks) and ranks[end] == ranks[start]:
            continue
        label = f"rank {start}" if end - start == 1 else f"ranks {start}-{end - 1}"
        groups.append((label, ranks[start]))
        start = end
    return [("each rank", groups[0][1])] if len(groups) == 1 else groups
