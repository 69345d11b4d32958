"""The ``graph budget`` section of pytest's terminal summary: one row per profiled model.

::

    ================================ graph budget =================================
    model               FLOPs/limit  memory/limit  params  vs base  verdict
    resnet18            1.82G/1.80G  46.8MB/120MB  11.7M   +4.1%    FAIL
    test_mlp::encoder   16.5k/20k    9.86kB        2.08k   =        warn
    typo                -            -             -                 ERROR
    error: typo: unknown budget key 'flop_max' in perf/vision.toml::typo (did you mean 'flops_max'?)
    warn: test_mlp::encoder: FLOPs 16.5k is at 92.0% of flops_max 18k
    3 models: 1 could not be checked, 1 over budget, 1 near a limit

A rename that may have skipped a regression check (``gate/renames.py``) is said above the table
(``renamed? ...``) and in the title. ``vs base`` is the change in FLOPs from the baseline
(``new`` when the model has none); a
budget that could not be checked is an ``ERROR`` row with its reason below the table; the
figures a row leaves out but the budget bounds follow on an indented line. The table fits the
terminal (80 columns, or less): model names are shortened from the left when they must be.
``render`` is a pure function of the results and the width; ``terminal`` writes it, and, in
GitHub Actions, the workflow annotations.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

from pytest_graphbudget.reports import common, tables

HEADER = ["model", "FLOPs/limit", "memory/limit", "params", "vs base", "verdict"]
SHOWN = ("flops", "peak_memory_bytes", "params")
VERDICTS = {
    common.PASS: "ok",
    common.WARN: "warn",
    common.FAIL: "FAIL",
    common.ERROR: "ERROR",
    common.UNCHECKED: "unchecked",
}
MIN_NAME = 12
GAP = "  "


def row(result: Any, name: str) -> list[str]:
    if result.profile is None:
        return [name, "-", "-", "-", "", VERDICTS[common.ERROR]]
    return [
        name,
        common.figure_with_limit(result, "flops"),
        common.figure_with_limit(result, "peak_memory_bytes"),
        common.figure_with_limit(result, "params"),
        common.format_change(result, "flops"),
        VERDICTS[common.verdict(result)],
    ]


def shorten(name: str, width: int) -> str:
    """Keep the end of a long name (the model), marking the cut: ``...t_fits::resnet18``."""
    return name if len(name) <= width else "..." + name[len(name) - width + 3 :]


def render(
    results: list[Any],
    stale: set[str] = frozenset(),
    updated: Any = None,
    width: int = 80,
) -> list[str]:
    """The section's lines. The table fits ``width`` down to about 65 columns, where model
    names keep their last 12 characters; the messages below it are one line each, as pytest
    writes its own, so that a search of the log finds them whole."""
    ordered = common.ordered(results)
    names = common.names(results)
    # First, what may have skipped a regression check: a renamed test, fixture or table.
    lines = common.rename_notes(ordered, stale, names)
    if ordered:
        body = [row(r, names[r.id]) for r in ordered]
        widths = tables.widths_of(HEADER, body)
        room = width - sum(widths[1:]) - len(GAP) * (len(HEADER) - 1)
        widths[0] = max(min(widths[0], room), MIN_NAME)
        for cells in body:
            cells[0] = shorten(cells[0], widths[0])
        align = "l" * len(HEADER)
        lines.append(tables.pad_line(HEADER, widths, align, GAP))
        indent = " " * (widths[0] + len(GAP))
        for result, cells in zip(ordered, body, strict=True):
            lines.append(tables.pad_line(cells, widths, align, GAP))
            extra = ", ".join(common.extra_limits(result, SHOWN))
            if extra:
                lines += textwrap.wrap(
                    extra, width, initial_indent=indent, subsequent_indent=indent
                )
    for result in ordered:
        name = names[result.id]
        for problem in (result.error or "").splitlines():
            if problem.strip():
                lines.append(f"error: {name}: {problem.strip()}")
        for finding in common.findings(result, "warn", "notice"):
            lines.append(f"{finding['severity']}: {name}: {finding['message']}")
    for key in sorted(stale):
        lines.append(f"stale baseline entry (its model is gone): {common.one_line(key)}")
    if updated:
        lines.append(f"baseline written: {updated}")
    lines += title_lines(common.title(ordered, stale), width)
    return lines


def title_lines(title: str, width: int = 80) -> list[str]:
    """The title, broken after a ``; `` clause where it would pass ``width``: each clause
    (``no baseline: regressions not checked``) stays whole, for a search of the log."""
    lines = [title.split("; ")[0]]
    for clause in title.split("; ")[1:]:
        if len(lines[-1]) + 2 + len(clause) <= width:
            lines[-1] += f"; {clause}"
        else:
            lines[-1] += ";"
            lines.append(clause)
    return lines


def terminal(
    reporter: Any,
    results: list[Any],
    stale: set[str],
    updated: Any,
    written: Any = None,
) -> None:
    """Write the section after pytest's summary; in GitHub Actions, also the annotations.

    ``written`` (``reports.Written``) names the report files written and the ones that could
    not be: each of those is one ``graph-budget: cannot write ...`` line, never a traceback.
    """
    problems = list(written.problems) if written is not None else []
    empty = not results and not stale
    if empty and not updated and not problems and written is None:
        return
    width = getattr(getattr(reporter, "_tw", None), "fullwidth", 80)
    reporter.write_sep("=", "graph budget")
    for text in render(results, stale, updated, width):
        reporter.write_line(text)
    if written is not None and written.files:
        reporter.write_line(
            "reports written: " + ", ".join(f"{kind} {path}" for kind, path in written.files)
        )
    for problem in problems:
        reporter.write_line(problem, red=True, bold=True)
    if empty:  # the gate was on and gated nothing: never a quiet green
        reporter.write_line(f"warning: {common.NOTHING_CHECKED}", yellow=True, bold=True)
    config = getattr(reporter, "config", None)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        from pytest_graphbudget.reports import github

        root = Path(config.rootpath) if config is not None else None
        for command in github.annotations(results, root):
            reporter.write_line(command)
