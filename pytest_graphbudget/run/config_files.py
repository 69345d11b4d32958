"""The configuration files around a project that ``[tool.graph_budget]`` could be lost in:
a table misspelt under ``[tool]``, and a pytest configuration file below the project's that
makes pytest's rootdir a folder without the settings. Each is a problem, one line, never a
setting dropped without a word."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

TABLE = "[tool.graph_budget]"


def misspelt_tables(tool: dict[str, Any], path: Path) -> list[str]:
    """A problem for each table under ``[tool]`` that looks like ``[tool.graph_budget]``
    misspelt (``graph-budget``, ``graphbudget``, ``graph_budgets``): nothing reads it, so its
    settings (a tolerance, a baseline) would be dropped without a word. The package's name
    (``[tool.pytest-graphbudget]``) is a near-miss too."""
    import difflib

    problems = []
    for key in tool:
        squashed = re.sub(r"[^a-z0-9]", "", str(key).lower()).removeprefix("pytest")
        near = difflib.SequenceMatcher(None, squashed, "graphbudget").ratio() >= 0.8
        if key != "graph_budget" and near:
            shown = key if re.fullmatch(r"[A-Za-z0-9_-]+", str(key)) else json.dumps(str(key))
            problems.append(
                f"{path}: [tool.{shown}] is not read by pytest-graphbudget: did you mean {TABLE}?"
            )
    return problems


def settings_above(root: Path, config: Path | None) -> list[str]:
    """The problem of a configuration file below the project's (a ``tests/pytest.ini``) that
    made pytest's rootdir a folder with no settings: the ``[tool.graph_budget]`` above it,
    its baseline among them, was left out, and a run over the budget passed."""
    if config is None or config.name == "pyproject.toml":
        return []
    for folder in root.resolve().parents:
        try:
            data = tomllib().loads((folder / "pyproject.toml").read_text("utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data.get("tool"), dict) and "graph_budget" in data["tool"]:
            return [
                f"{config} makes {root} pytest's rootdir, so {TABLE} of "
                f"{folder / 'pyproject.toml'} (its baseline and budgets) is not read: run pytest "
                f"with --rootdir {folder}, or configure this run with graph_budget_* options "
                f"in {config.name}"
            ]
    return []


def tomllib() -> Any:
    """tomllib, imported when settings are read (never on a run without --graph-budget)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib
