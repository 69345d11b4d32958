"""Reports of a budget run: the terminal section, and the files asked for on the command line.

Each module renders one format from the run's ``ModelResult``s (plain data, the same under
pytest-xdist): ``terminal`` (the summary section and, in GitHub Actions, the annotations),
``junit``, ``json_report``, ``markdown`` (the pull-request comment) and ``github`` (workflow
commands and the job summary). ``write_all`` writes the ones the options ask for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_graphbudget.reports.terminal import terminal

__all__ = ["Written", "cannot_write", "terminal", "write_all"]


@dataclass
class Written:
    """What ``write_all`` did: the files written (kind, path as given) and, one line each,
    the ones it could not write."""

    files: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def cannot_write(shown: str, exc: OSError) -> str:
    """``graph-budget: cannot write out/x.xml: Not a directory: out``: the path as the user
    gave it, and why, in one line."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if isinstance(exc, FileExistsError) and exc.filename:
        reason = f"{exc.filename} is a file, not a directory"
    elif exc.filename and str(exc.filename) != shown:
        reason = f"{reason}: {exc.filename}"
    return f"graph-budget: cannot write {shown}: {reason}"


def write_all(config: Any, results: list[Any], stale: set[str]) -> Written:
    """Write every report file the options ask for, and the GitHub Actions job summary.

    Paths are relative to the directory pytest was started in, as for ``--junitxml``. A file
    that cannot be written does not stop the others: it becomes one line in ``problems``.
    """
    from pytest_graphbudget.reports import github, json_report, junit, markdown

    here = Path(config.invocation_params.dir)
    root = Path(config.rootpath)
    done = Written()

    def attempt(kind: str, shown: str, write: Callable[[], Any]) -> None:
        try:
            write()
        except OSError as exc:
            done.problems.append(cannot_write(shown, exc))
        else:
            done.files.append((kind, shown))

    path = config.getoption("graph_budget_junit")
    if path:
        attempt("JUnit", path, lambda: junit.write(here / path, results))
    path_json = config.getoption("graph_budget_json")
    if path_json:
        attempt("JSON", path_json, lambda: json_report.write(here / path_json, results, stale))
    text = markdown.render(results, stale, root)
    path_md = config.getoption("graph_budget_markdown")
    if path_md:
        attempt("markdown", path_md, lambda: markdown.save(here / path_md, text))
    if results or stale:
        try:
            github.append_summary(text)
        except OSError as exc:
            done.problems.append(cannot_write(github.summary_path() or "the job summary", exc))
    return done
