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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
