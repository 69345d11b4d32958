"""Reports of a budget run: the terminal section, and the files asked for on the command line.

Each module renders one format from the run's ``ModelResult``s (plain data, the same under
pytest-xdist): ``terminal`` (the summary section and, in GitHub Actions, the annotations),
``junit``, ``json_report``, ``markdown`` (the pull-request comment) and ``github`` (workflow
commands and the job summary). ``write_all`` writes the ones the options ask for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_graphbudget.reports.terminal import terminal

__all__ = ["terminal", "write_all"]


def write_all(config: Any, results: list[Any], stale: set[str]) -> None:
    """Write every report file the options ask for, and the GitHub Actions job summary.

    Paths are relative to the directory pytest was started in, as for ``--junitxml``.
    """
    from pytest_graphbudget.reports import github, json_report, junit, markdown

    here = Path(config.invocation_params.dir)
    root = Path(config.rootpath)

    path = config.getoption("graph_budget_json")
    if path:
        json_report.write(here / path, results, stale)
    path = config.getoption("graph_budget_junit")
    if path:
        junit.write(here / path, results)
    path = config.getoption("graph_budget_markdown")
    text = markdown.write(here / path, results, stale, root) if path else None
    if results or stale:
        github.append_summary(text or markdown.render(results, stale, root))
