"""What the Python stack says while the eager tape records a forward: which module runs."""

from __future__ import annotations

import sys
from typing import Any

SNAPSHOTS = sys.version_info < (3, 13)
"""Before PEP 667, ``frame.f_locals`` copies a function's locals into a dict the frame keeps
until the next read: the values a forward has rebound since stay alive (one op late)."""


def self_of(frame: Any) -> Any:
    """The ``self`` of a method's frame (None for other frames), without keeping its locals:
    the snapshot is emptied (a later read makes a new one, and no key is written back), so
    the tape sees a tensor freed when the forward lets go of it, as it is without the tape."""
    code = frame.f_code
    if not code.co_argcount or code.co_varnames[0] != "self":
        return None
    snapshot = frame.f_locals
    owner = snapshot.get("self")
    if SNAPSHOTS:
        snapshot.clear()
    return owner
