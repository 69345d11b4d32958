"""Reports of a budget run: the terminal section, and the files asked for on the command line.

Each module renders one format from the run's ``ModelResult``s (plain data, the same under
pytest-xdist): ``terminal`` (the summary section and, in GitHub Actions, the annotations),
``junit``, ``json_report``, ``markdown`` (the pull-request comment), ``github`` (workflow
commands and the job summary) and ``html`` (the interactive page). ``write_all`` writes the
ones the options ask for.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.reports.terminal import terminal

if TYPE_CHECKING:
    from pytest_graphbudget.reports.json_report import Collection

__all__ = ["Written", "cannot_write", "names_a_folder", "terminal", "write_all", "write_files"]


@dataclass
class Written:
    """What ``write_all`` did: the files written (kind, path as given) and, one line each,
    the ones it could not write."""

    files: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def names_a_folder(path: str) -> bool:
    """``out/``: a folder, which ``Path`` reads as a file named ``out`` (``--graph-budget-html
    out/`` had written the page to a file ``out``, and said "reports written: HTML out/")."""
    return path.endswith(tuple(sep for sep in ("/", os.sep, os.altsep) if sep))


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
    """Write every report file pytest's options ask for, and the GitHub Actions job summary.

    Paths are relative to the directory pytest was started in, as for ``--junitxml``.
    """
    return write_files(
        results,
        stale,
        here=Path(config.invocation_params.dir),
        root=Path(config.rootpath),
        junit=config.getoption("graph_budget_junit"),
        json=config.getoption("graph_budget_json"),
        markdown=config.getoption("graph_budget_markdown"),
        html=config.getoption("graph_budget_html"),
    )


def write_files(
    results: list[Any],
    stale: set[str],
    *,
    here: Path,
    root: Path,
    junit: str | None = None,
    json: str | None = None,
    markdown: str | None = None,
    html: str | None = None,
    github: bool = False,
    environment: Mapping[str, str] | None = None,
    collection: Collection | None = None,
    orphans: Mapping[str, Any] | None = None,
    commit: str | None = "HEAD",
    prefix: str | None = "HEAD",
    settings: Mapping[str, Any] | None = None,
) -> Written:
    """Write the report files asked for (paths relative to ``here``) and the GitHub Actions
    job summary (in GitHub Actions, or asked by ``github``). A file that cannot be written
    does not stop the others: it becomes one line in ``problems``. ``environment``: what the
    figures were measured in (default: this process; ``merge`` gives the shards');
    ``collection``: a pytest run's budgeted items, and ``orphans`` the stale entries' figures
    (``renames.orphans_record``), for the JSON; ``commit``: the code's, by default the
    repository's at ``root`` (``merge`` gives the shards'), and ``prefix`` ``root``'s place in
    it; ``settings``: the run's flags that change figures or verdicts, for the JSON."""
    from pytest_graphbudget.reports import github as github_report
    from pytest_graphbudget.reports import json_report
    from pytest_graphbudget.reports import junit as junit_report
    from pytest_graphbudget.reports import markdown as markdown_report

    done = Written()

    def attempt(kind: str, shown: str, write: Callable[[], Any]) -> None:
        try:
            write()
        except OSError as exc:
            done.problems.append(cannot_write(shown, exc))
        else:
            done.files.append((kind, shown))

    from pytest_graphbudget.gate.environment import current

    # what every report says the figures were measured in
    environment = dict(environment) if environment else current(root)
    if junit:
        write_junit = junit_report.write
        attempt("JUnit", junit, lambda: write_junit(here / junit, results, stale, environment))
    if json:
        from pytest_graphbudget.reports.history import commit_of, prefix_of

        sha = commit_of(root) if commit == "HEAD" else commit
        where = prefix_of(root) if prefix == "HEAD" else prefix
        found = (environment, collection, orphans, sha, where, settings)
        attempt("JSON", json, lambda: json_report.write(here / json, results, stale, *found))
    text = markdown_report.render(results, stale, root, environment)
    if markdown:
        attempt("markdown", markdown, lambda: markdown_report.save(here / markdown, text))
    if html:
        from pytest_graphbudget.reports import html as html_report

        page = html_report.run_page(results, stale, environment)
        attempt("HTML", html, lambda: html_report.write(here / html, page))
    try:  # an empty run's too: its title says no model was checked
        github_report.append_summary(text, force=github)
    except OSError as exc:
        shown = github_report.summary_path(force=github) or "the job summary"
        done.problems.append(cannot_write(shown, exc))
    return done
