"""pluggy extension points of pytest-graphbudget (project name ``"graphbudget"``).

Another package adds model loaders by exposing a module or object with a hook implementation
under the ``graphbudget`` entry-point group::

    # pyproject.toml of the other package
    [project.entry-points.graphbudget]
    mymodels = "mypackage.graphbudget_loaders"

    # mypackage/graphbudget_loaders.py
    from pytest_graphbudget.hookspecs import hookimpl

    @hookimpl
    def graphbudget_model_loaders():
        return [MyLoader()]

The built-in loaders (TorchVision, Hugging Face, Ultralytics, local paths) are registered
through the same hook, after every plugin, so a plugin's loader is asked first.

Cost formulas for a package's own ops come through ``graphbudget_register_formulas``, from the
same entry point::

    @hookimpl
    def graphbudget_register_formulas(register):
        @register(torch.ops.mylib.fused_mm.default, role="anchor", kind="matmul")
        def fused_mm(a, b, *, out=None, **kwargs):
            return {"macs": a[0] * a[1] * b[1], "flops": 2 * a[0] * a[1] * b[1]}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from pytest_graphbudget.zoo.base import ModelLoader

PROJECT_NAME = "graphbudget"
ENTRY_POINT_GROUP = "graphbudget"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def graphbudget_model_loaders() -> list[ModelLoader]:
    """Return the model loaders this plugin provides (objects with ``family``, ``names()``,
    ``can_load(name)`` and ``load(name, options)``; see ``pytest_graphbudget.zoo.base``).

    Every implementation is called; a name goes to the first loader whose ``can_load`` accepts
    it, plugins before the built-in loaders.
    """


@hookspec
def graphbudget_register_formulas(register: Callable[..., Any]) -> None:
    """Register cost formulas for the ops this plugin's package defines.

    ``register`` is ``pytest_graphbudget.register_formula``. Called once per process, the
    first time the op registry is looked up (the first model priced); an op that already has
    an entry (a built-in one, or another plugin's) raises.
    """
