"""Where a project's own code is imported from while its budgets are checked: the project's
root and the ``pythonpath`` of its pytest configuration, the same for ``graph-budget check``
and under pytest, so that ``factory = "package.module:function"`` finds one module either way.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any


def import_paths(root: Path, ini: dict[str, Any]) -> list[str]:
    """Where ``factory = "package.module:function"`` is imported from, by ``graph-budget
    check`` and under pytest alike: the project's root and the ``pythonpath`` entries of its
    pytest configuration (``ini``)."""
    entries = ini.get("pythonpath", [])
    entries = entries.split() if isinstance(entries, str) else entries
    extra = [root / e for e in entries if isinstance(e, str)] if isinstance(entries, list) else []
    return [str(p.resolve()) for p in [*extra, root]]


@contextlib.contextmanager
def importable(paths: list[str]):
    """``paths`` first on ``sys.path`` while budgets are checked, then ``sys.path`` as it was."""
    saved = list(sys.path)
    sys.path[:0] = [p for p in paths if p not in sys.path]
    try:
        yield
    finally:
        sys.path[:] = saved
