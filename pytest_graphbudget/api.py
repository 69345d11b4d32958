"""The public API: the names ``pytest_graphbudget`` exports, each from the layer that owns it.

``profile_model`` dispatches to exactly one mode (``modes/dispatch.py``), which never calls it
back; ``profile_sweep`` and ``profile_decode`` are the sweep and decode modes' own entry points.
"""

from __future__ import annotations

from pytest_graphbudget.engine.profile import Profile, Subgraph
from pytest_graphbudget.modes.decode import DecodeProfile, profile_decode
from pytest_graphbudget.modes.dispatch import profile_model
from pytest_graphbudget.modes.sweep import Sweep, profile_sweep

__all__ = [
    "DecodeProfile",
    "Profile",
    "Subgraph",
    "Sweep",
    "profile_decode",
    "profile_model",
    "profile_sweep",
]
