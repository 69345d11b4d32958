"""Reports of a budget run: the terminal section, and the files asked for on the command line.

Each writer takes the run's ``ModelResult``s (plain data, the same under xdist) and renders
one format; ``write_all`` calls the ones the options ask for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_graphbudget.reports.terminal import terminal

__all__ = ["terminal", "write_all"]


def write_all(config: Any, results: list[Any], stale: set[str]) -> None:
    """Write every report file the options ask for."""
    from pytest_graphbudget.reports import json_report

    path = config.getoption("graph_budget_json")
    if path:
        json_report.write(Path(path), results, stale)
