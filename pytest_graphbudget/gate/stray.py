"""Budget files no run collects: a folder at the project's root named nearly ``budgets``
(``budget/``, ``Budgets/``) that holds budget tables, the root's ``budgets/`` itself when
configured budget paths replace it, or a file in a budget folder named nearly ``*.toml``
(``x.tml``, ``x.TOML``). Neither ``pytest --graph-budget`` nor ``graph-budget check`` looks
there, so its budgets would never be checked, and the run would be green without them: said
as a usage error, with the fix.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from pytest_graphbudget.gate.budget_files import SKIPPED, covered, looks_like_budget

DEFAULT = "budgets"


def stray_folders(root: Path, collected: list[Path]) -> list[str]:
    """A problem for each folder at ``root`` named ``budgets`` or nearly so that budget runs
    do not collect (``collected``: the configured budget paths, or ``budgets/``) and that
    holds a budget file no collected path covers; then each file named nearly ``*.toml``."""
    problems = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if covered(folder, collected):
            continue
        if not difflib.get_close_matches(folder.name.lower(), [DEFAULT], 1, 0.8):
            continue
        files = (f for f in sorted(folder.rglob("*.toml")) if not covered(f, collected))
        found = next((f for f in files if _budget(f)), None)
        if found is None:
            continue
        shown = found.relative_to(root)
        if folder.name == DEFAULT:  # configured budget paths replace it, and it was left out
            problems.append(
                f"{shown} is a budget file, but no run collects {DEFAULT}/: the paths of "
                f"[tool.graph_budget] budgets replace it; add '{DEFAULT}' to them in "
                "pyproject.toml, or move it into one of them"
            )
            continue
        problems.append(
            f"{shown} looks like a budget file, but no run collects {folder.name}/: budget "
            f"files are read from {DEFAULT}/ or the paths of [tool.graph_budget] budgets; "
            f"move it to {DEFAULT}/, or add '{folder.name}' to budgets in pyproject.toml"
        )
    return problems + stray_files(root, collected)


def _budget(path: Path) -> bool:
    """A budget file: not the baseline (which holds ``[models]`` tables too) nor pyproject."""
    return path.name not in SKIPPED and looks_like_budget(path)


def stray_files(root: Path, collected: list[Path]) -> list[str]:
    """A problem for each file in the budget folders with a suffix nearly ``.toml``
    (``.tml``, ``.TOML``) that holds budget tables: only ``*.toml`` files are read."""
    problems = []
    for folder in (f for f in collected if f.is_dir()):
        for file in sorted(folder.rglob("*")):
            near = difflib.get_close_matches(file.suffix.lower(), [".toml"], 1, 0.8)
            hidden = any(p.startswith(".") for p in file.relative_to(folder).parts)
            if file.suffix == ".toml" or not near or hidden or not file.is_file():
                continue
            if looks_like_budget(file):
                problems.append(
                    f"{file.relative_to(root)} looks like a budget file, but only *.toml files "
                    f"are read: rename it {file.with_suffix('.toml').name}"
                )
    return problems
