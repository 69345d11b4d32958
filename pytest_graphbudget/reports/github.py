"""GitHub Actions: workflow annotations and the job summary.

Under ``GITHUB_ACTIONS=true`` every model over budget gets an ``::error`` annotation on the
line that set its first failing limit (the key in the budget's TOML table, or the test
function and its markers) with every failing figure in its message; figures above 90% of
their limit give a ``::warning``, and drops below the baseline a ``::notice``. The terminal
reporter prints them, so Actions reads them from the job's log. The pull-request comment
(``markdown.py``) is appended to ``$GITHUB_STEP_SUMMARY``.

Escaping follows GitHub's workflow-command rules (as ``@actions/core`` does): in the message
``%``, CR and LF become ``%25``, ``%0D``, ``%0A``; in a property ``:`` and ``,`` also become
``%3A`` and ``%2C``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pytest_graphbudget.gate.check import NOT_COMPARED_KEY, UNCHECKED_KEY
from pytest_graphbudget.gate.renames import RENAMED, UNMATCHED
from pytest_graphbudget.reports import common, places


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, message: str, file: str = "", line: int = 0, title: str = "") -> str:
    """``::error file=F,line=L,title=T::message``, escaped."""
    properties = [
        f"{name}={escape_property(str(value))}"
        for name, value in (("file", file), ("line", line), ("title", title))
        if value
    ]
    joined = (" " + ",".join(properties)) if properties else ""
    return f"::{kind}{joined}::{escape_data(message)}"


def annotations(results: list[Any], root: Path | None = None) -> list[str]:
    """Workflow commands, failures first: per model, one ``::error`` carrying every failing
    figure (at the line of the first), one ``::warning`` for the figures near a limit and one
    ``::notice`` for the drops below the baseline.

    One per model, not per figure: GitHub shows ten errors and ten warnings of a step, and a
    model that grew regresses several figures at once.
    """
    out = []
    if not results:
        out.append(command("warning", common.NOTHING_CHECKED, title="Graph budget: no model"))
    if any(getattr(r, "no_baseline", False) for r in results):  # growth went unchecked
        out.append(command("warning", common.title(results), title="Graph budget: no baseline"))
    names = common.names(results)
    for result in common.ordered(results):
        file = places.repository_path(result.path, root) if result.path else ""
        if result.error is not None:  # at the line to fix: a bad baseline entry's, there
            at, line = places.error_place(result)
            at = places.repository_path(at, root) if at else ""
            title = f"Graph budget: {names[result.id]} could not be checked"
            out.append(command("error", result.error, at, line, title))
        uncompared = common.findings_of(result, NOT_COMPARED_KEY)
        warned = [f for f in common.findings(result, "warn") if f not in uncompared]
        near = "near a limit"
        if warned and common.status(result) == common.UNPRICED:
            near = common.STATUS_WORDS[common.UNPRICED]
        for kind, what, found in (
            ("error", "over budget", common.findings(result, "fail")),
            ("warning", near, warned),
            ("warning", "not compared with the base", uncompared),
            ("notice", "below its baseline", common.drops(result)),
            ("notice", "priced with a note", common.remarks(result)),
            ("warning", "has no baseline: renamed?", common.findings_of(result, UNMATCHED)),
            ("notice", "compared with another id's entry", common.findings_of(result, RENAMED)),
            ("notice", "has nothing checked yet", common.findings_of(result, UNCHECKED_KEY)),
        ):
            if not found:
                continue
            line = result.line if kind == "error" else places.finding_line(result, found[0])
            message = "\n".join(f["message"] for f in found)
            title = f"Graph budget: {names[result.id]} {what}"
            out.append(command(kind, message, file, line, title))
    return out


def summary_path(force: bool = False) -> str | None:
    """``$GITHUB_STEP_SUMMARY`` when running in GitHub Actions (or ``force``: ``graph-budget
    merge --github``), else None."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    return target if (force or os.environ.get("GITHUB_ACTIONS") == "true") and target else None


def append_summary(markdown: str, force: bool = False) -> Path | None:
    """Append the comment to ``$GITHUB_STEP_SUMMARY`` when running in GitHub Actions."""
    target = summary_path(force)
    if target is None:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as out:
        out.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return path
