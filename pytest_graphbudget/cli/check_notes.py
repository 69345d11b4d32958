"""What ``graph-budget check`` leaves to ``pytest --graph-budget``, said after its verdict.

A check of the project's budget files (no path named) reads its budget paths only. Under the
project's ``testpaths`` pytest collects more: test files with budget markers, and budget
files in a ``budgets`` folder there (``tests/budgets/x.toml``). A user reading "within
budget" must not think those checked, so each kind is one note naming them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

SHOWN = 3
"""Files named in a note; the rest are counted."""


def unchecked_notes(here: Path, pruned: Sequence[str]) -> list[str]:
    """The notes for a check started in ``here``: marker test files, then budget files that
    pytest collects under ``testpaths`` and check's budget paths do not reach."""
    from pytest_graphbudget.cli.merge_expect import budget_markers
    from pytest_graphbudget.gate import budget_files
    from pytest_graphbudget.gate.check import relative
    from pytest_graphbudget.run import settings as project

    try:
        found, conf = project.for_directory(here, [])
    except Exception:  # no project to read: nothing to say
        return []
    root = found.root
    pattern = re.compile(rf"\bmark\.({'|'.join(sorted(budget_markers()))})\b")
    marked = [
        relative(str(f), root)
        for f in _under_testpaths(root, found.ini, "*.py", pruned)
        if pattern.search(f.read_text(encoding="utf-8", errors="replace"))
    ]
    roots = [root / p for p in conf.budgets]
    reached = roots or [root / "budgets"]
    baseline = (root / conf.baseline).resolve()
    stray = [
        relative(str(f), root)
        for f in _under_testpaths(root, found.ini, "*.toml", pruned)
        if f.name not in budget_files.SKIPPED
        and f.resolve() != baseline
        and budget_files.is_budget_file(f, roots)
        and not budget_files.covered(f, reached)
    ]
    notes = []
    if marked:
        files = "test file holds" if len(marked) == 1 else "test files hold"
        notes.append(
            f"{len(marked)} {files} budget markers, which check does not run "
            f"({_shown(marked)}): run pytest --graph-budget for them"
        )
    if stray:
        one = len(stray) == 1
        notes.append(
            f"{len(stray)} budget {'file' if one else 'files'} under testpaths, which pytest "
            f"--graph-budget checks, {'is' if one else 'are'} outside check's budget paths "
            f"({_shown(stray)}): name {'it' if one else 'them'}, or add "
            f"{'its' if one else 'their'} folder to [tool.graph_budget] budgets"
        )
    return notes


def _under_testpaths(root: Path, ini: dict, glob: str, pruned: Sequence[str]) -> Iterator[Path]:
    """The files matching ``glob`` under the project's ``testpaths`` (else ``tests/``), as
    pytest walks them: no hidden or pruned folders."""
    paths = ini.get("testpaths") or ["tests"]
    for top in (root / str(p) for p in (paths.split() if isinstance(paths, str) else paths)):
        for file in sorted(top.rglob(glob)) if top.is_dir() else []:
            parts = file.relative_to(top).parts[:-1]
            if not any(p.startswith(".") or p in pruned for p in parts):
                yield file


def _shown(files: list[str]) -> str:
    rest = len(files) - SHOWN
    return ", ".join(files[:SHOWN]) + (f" and {rest} more" if rest > 0 else "")
