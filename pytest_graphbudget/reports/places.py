"""Where a result points: the budget's line (or the baseline's, for an error fixed there), as
annotations, the JSON report and the comment's links on GitHub name it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pytest_graphbudget.reports.common import LIMIT_OF


def repository_path(path: str, root: Path | None = None) -> str:
    """A result's path (relative to pytest's rootdir) as GitHub names it: relative to
    ``$GITHUB_WORKSPACE`` (the checkout) when that is set and holds the file."""
    workspace = os.environ.get("GITHUB_WORKSPACE")
    if not workspace or root is None:
        return path
    full = (root / path).resolve()
    try:
        return full.relative_to(Path(workspace).resolve()).as_posix()
    except ValueError:
        return path


def head_sha() -> str | None:
    """The pull request's head commit: on ``pull_request`` events ``GITHUB_SHA`` is the
    merge commit GitHub made for the run, whose lines a reviewer does not see."""
    event = os.environ.get("GITHUB_EVENT_PATH")
    if not event:
        return None
    try:
        with open(event, encoding="utf-8") as handle:
            return json.load(handle)["pull_request"]["head"]["sha"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def error_place(result: Any) -> tuple[str, int]:
    """Where the result's error is fixed: the baseline's line for a bad baseline entry (the
    message names it; the budget's line would send the reader to the wrong file), else the
    budget's: its ``factory`` line for a factory that could not build the model (a user trial:
    annotated at ``flops_max``)."""
    if result.error is not None and getattr(result, "error_path", ""):
        return result.error_path, result.error_line
    lines = result.budget.get("lines") or {} if isinstance(result.budget, dict) else {}
    if (result.error or "").startswith("factory ") and "factory" in lines:
        return result.path, lines["factory"]
    return result.path, result.line


def source_link(result: Any, root: Path | None = None, line: int = 0, file: str = "") -> str | None:
    """A link to the budget's line (or ``line`` of ``file``) on GitHub, when run in GitHub
    Actions; else None."""
    server, repo = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY")
    sha = head_sha() or os.environ.get("GITHUB_SHA")
    file = file or result.path
    path = repository_path(file, root) if file else ""
    if not (server and repo and sha and path) or os.path.isabs(path):
        return None
    line = line or result.line
    anchor = f"#L{line}" if line else ""
    return f"{server}/{repo}/blob/{sha}/{path}{anchor}"


def finding_line(result: Any, finding: dict[str, Any]) -> int:
    """The line a finding points at: its key's line in the budget's TOML table when known
    (``flops_max`` for ``flops_max`` and ``baseline.flops``), else the result's line."""
    lines = result.budget.get("lines") or {}
    key = finding["key"].removeprefix("baseline.")
    for candidate in (key, LIMIT_OF.get(key)):
        if candidate in lines:
            return lines[candidate]
    return result.line
