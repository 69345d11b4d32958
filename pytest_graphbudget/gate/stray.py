"""Budget files no run collects: a folder at the project's root named nearly ``budgets``
(``budget/``, ``Budgets/``) that holds budget tables. Neither ``pytest --graph-budget`` nor
``graph-budget check`` looks there, so its budgets would never be checked, and the run would
be green without them: said as a usage error, with the fix.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from pytest_graphbudget.gate.budget_files import covered, looks_like_budget

DEFAULT = "budgets"


def stray_folders(root: Path, collected: list[Path]) -> list[str]:
    """A problem for each folder at ``root`` whose name is nearly ``budgets`` but is not a
    folder budget runs collect (``collected``: the configured budget paths, or ``budgets/``),
    and that holds a budget file."""
    problems = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if folder.name == DEFAULT or covered(folder, collected):
            continue
        if not difflib.get_close_matches(folder.name.lower(), [DEFAULT], 1, 0.8):
            continue
        found = next((f for f in sorted(folder.rglob("*.toml")) if looks_like_budget(f)), None)
        if found is not None:
            shown = found.relative_to(root)
            problems.append(
                f"{shown} looks like a budget file, but no run collects {folder.name}/: budget "
                f"files are read from {DEFAULT}/ or the paths of [tool.graph_budget] budgets; "
                f"move it to {DEFAULT}/, or add '{folder.name}' to budgets in pyproject.toml"
            )
    return problems
