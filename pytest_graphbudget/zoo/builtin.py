"""Registers the built-in loaders through the same hook that other packages use.

``trylast`` puts them after every plugin, so a plugin can take over a name.
Local paths come first among them (a file or folder that exists on disk is what the user meant),
then the families whose names are known without importing anything.
"""

from __future__ import annotations

from pytest_graphbudget.hookspecs import hookimpl


@hookimpl(trylast=True)
def graphbudget_model_loaders():
    from pytest_graphbudget.zoo.huggingface import HuggingFaceLoader
    from pytest_graphbudget.zoo.local import LocalLoader
    from pytest_graphbudget.zoo.torchvision import TorchVisionLoader
    from pytest_graphbudget.zoo.ultralytics import UltralyticsLoader

    return [LocalLoader(), UltralyticsLoader(), HuggingFaceLoader(), TorchVisionLoader()]
