"""pytest-graphbudget: FLOP, memory and roofline budgets for PyTorch models, checked by pytest.

The names below load lazily, so that importing the package (as pytest does for every run with
the plugin installed) never imports torch. Importing one of the profiling functions
(``from pytest_graphbudget import profile_model``) loads the engine, torch included, so that
the first profile pays for profiling only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_graphbudget.case import ModelCase

__version__ = "0.1.0"
"""The package's version, its one source: ``pyproject.toml`` reads it (``dynamic``), and the
CLI's ``--version``, the JSON report and the recorded environment read it from here. A plain
string, so that reading it imports nothing (torch least of all)."""

if TYPE_CHECKING:
    from pytest_graphbudget.api import (
        DecodeProfile,
        Profile,
        Subgraph,
        Sweep,
        profile_decode,
        profile_model,
        profile_sweep,
    )
    from pytest_graphbudget.costs import register_formula

__all__ = [
    "DecodeProfile",
    "ModelCase",
    "Profile",
    "Subgraph",
    "Sweep",
    "profile_decode",
    "profile_model",
    "profile_sweep",
    "register_formula",
]


def _profile_html(prof: Any) -> str:
    """``Profile._repr_html_``'s renderer: the root sits above every layer, so it may hand the
    engine a part of ``reports`` without the engine importing upwards."""
    from pytest_graphbudget.reports.notebook import profile_html

    return profile_html(prof)


def _sweep_html(sweep: Any) -> str:
    """``Sweep._repr_html_``'s renderer, handed to the modes as ``_profile_html`` is."""
    from pytest_graphbudget.reports.notebook import sweep_html

    return sweep_html(sweep)


def _decode_html(result: Any) -> str:
    """``DecodeProfile._repr_html_``'s renderer, handed to the modes as ``_profile_html`` is."""
    from pytest_graphbudget.reports.notebook import decode_html

    return decode_html(result)


PROFILERS = frozenset({"profile_model", "profile_decode", "profile_sweep"})
"""The names whose import loads the engine (``modes.dispatch.preload``): the first call of
one then pays for profiling, not for importing."""


def __getattr__(name: str) -> Any:
    if name == "register_formula":
        from pytest_graphbudget.costs import register_formula

        return register_formula
    if name in __all__ and name != "ModelCase":
        from pytest_graphbudget import api

        if name in PROFILERS:  # about to profile: load the engine (and torch) now
            from pytest_graphbudget.modes.dispatch import preload

            preload()
        return getattr(api, name)
    raise AttributeError(f"module 'pytest_graphbudget' has no attribute {name!r}")
