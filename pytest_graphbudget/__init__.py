"""pytest-graphbudget: FLOP, memory and roofline budgets for PyTorch models, checked by pytest.

The names below load lazily, so that importing the package (as pytest does for every run with
the plugin installed) never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_graphbudget.case import ModelCase

if TYPE_CHECKING:
    from pytest_graphbudget.costs import register_formula
    from pytest_graphbudget.decode import DecodeProfile, profile_decode
    from pytest_graphbudget.profile import Profile, Subgraph, profile_model
    from pytest_graphbudget.shape_sweep import Sweep, profile_sweep

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


def __getattr__(name: str) -> Any:
    if name in ("Profile", "Subgraph", "profile_model"):
        from pytest_graphbudget import profile

        return getattr(profile, name)
    if name in ("Sweep", "profile_sweep"):
        from pytest_graphbudget import shape_sweep

        return getattr(shape_sweep, name)
    if name in ("DecodeProfile", "profile_decode"):
        from pytest_graphbudget import decode

        return getattr(decode, name)
    if name == "register_formula":
        from pytest_graphbudget.costs import register_formula

        return register_formula
    raise AttributeError(f"module 'pytest_graphbudget' has no attribute {name!r}")
