"""Which modules grew since a baseline entry, and a module's line deleted from the entry's
table by module, which is never read as growth.

Every table of a figure by module that the baseline writes adds up to at least the entry's
total (what no module holds is ``<root>``'s). A table short of its total that lacks a module
the profile has lost that module's line: compared as it is, the module would read as grown by
its whole value, and the entry is as untrustworthy as one whose total line was deleted. A
module new to the model leaves its table whole: it is new, and grew by all of it. A whole
table deleted is an error too: the figure is still compared, but its growth could no longer
name the layers that grew.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_graphbudget.gate import figures
from pytest_graphbudget.gate.toml_lines import key_lines


def lost(current: Mapping[str, float], before: Mapping[str, float], total: Any) -> list[str]:
    """The modules ``current`` has that ``before`` (an entry's table of one figure, whose
    total is ``total``) lacks though it falls short of that total: lines deleted by hand. A
    module is written as an integer, so a whole table may be short by under 1 a module."""
    if not total or total - sum(before.values()) <= len(before):
        return []
    return sorted(m for m, v in current.items() if v > 0 and m not in before)


def problems(model: str, current: Any, base: Any, path: Path, name: str, fix: str) -> list[str]:
    """One line per table of ``base`` (a baseline ``Entry``) that lost a module ``current``
    (this run's ``Entry``) has, at the table's line of the baseline file (``path``, shown as
    ``name``), as ``baseline.read`` writes an entry's problems; ``fix`` says what to do."""
    found = []
    for figure in ("flops", *current.by_module):  # every table the baseline writes
        before, total = base.layers(figure), base.figures.get(figure)
        missing = lost(current.layers(figure), before, total)
        if not missing:
            continue
        keys = ("modules",) if figure == "flops" else ("by_module", figure)
        shown = ".".join(k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else f'"{k}"' for k in keys)
        fig = figures.get(figure)
        if not before:  # the whole table: its layers would go unnamed when the figure grows
            gap = f"no modules, though the entry records {fig.format(total)} {fig.label}"
            found.append(
                f"{_where(path, name, model, keys)}: [{model}] {shown}: {gap}: the "
                f"table deleted?; {fix}"
            )
            continue
        found.append(
            f"{_where(path, name, model, keys)}: [{model}] {shown}: lacks "
            f"{', '.join(map(repr, missing))}, "
            f"which the model has, though its modules add up to {fig.format(sum(before.values()))} "
            f"of the entry's {fig.format(total)} {fig.label}: a module's line deleted?; {fix}"
        )
    return found


def _where(path: Path, name: str, model: str, keys: tuple[str, ...]) -> str:
    """``name:line`` of the entry's table, or ``name`` when the file cannot say."""
    try:
        lines = key_lines(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return name
    line = lines.get(("models", model, *keys)) or lines.get(("models", model))
    return f"{name}:{line}" if line else name


def grew_most(
    current: Mapping[str, int], base: Mapping[str, int], n: int = 3
) -> list[tuple[str, int]]:
    """The modules whose own FLOPs grew most, largest first."""
    deltas = [(m, current.get(m, 0) - base.get(m, 0)) for m in set(current) | set(base)]
    return sorted([d for d in deltas if d[1] > 0], key=lambda d: (-d[1], d[0]))[:n]
