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

import functools
from collections.abc import Callable
from typing import Any

import pluggy

PROJECT_NAME = "graphbudget"
ENTRY_POINT_GROUP = "graphbudget"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def graphbudget_model_loaders() -> list[Any]:
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


@functools.cache
def plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, built on first use: the cost registry asks it for
    formulas, and ``zoo.plugin_manager`` adds the built-in model loaders to it."""
    return make_plugin_manager()


def make_plugin_manager(*, entry_points: bool = True) -> pluggy.PluginManager:
    """A fresh plugin manager with these hooks and, unless ``entry_points`` is false, the
    plugins of every installed package under the ``graphbudget`` entry-point group."""
    import sys

    from pytest_graphbudget.errors import GraphBudgetError

    pm = pluggy.PluginManager(PROJECT_NAME)
    pm.add_hookspecs(sys.modules[__name__])
    if entry_points:
        try:
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        except Exception as exc:  # a broken third-party package: say which, in one line
            raise GraphBudgetError(
                f"could not load a {ENTRY_POINT_GROUP!r} entry point: {type(exc).__name__}: {exc}"
            ) from exc
    return pm
