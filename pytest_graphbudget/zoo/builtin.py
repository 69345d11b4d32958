"""Registers the built-in loaders through the same hook that other packages use.

``trylast`` puts them after every plugin, so a plugin can take over a name.
Local paths come first among them (a file or folder that exists on disk is what the user meant),
then the families whose names are known without importing anything. The families with a prefix
(``diffusers:``, ``timm:`` and ``timm/``) come last, so that ``graph-budget list`` ends with
timm's thousand names: no other loader takes a name with a colon, and Hugging Face leaves the
hub's ``timm/`` organisation to timm.
"""

from __future__ import annotations

from pytest_graphbudget.hookspecs import hookimpl


@hookimpl(trylast=True)
def graphbudget_model_loaders():
    from pytest_graphbudget.zoo.diffusers import DiffusersLoader
    from pytest_graphbudget.zoo.huggingface import HuggingFaceLoader
    from pytest_graphbudget.zoo.local import LocalLoader
    from pytest_graphbudget.zoo.timm import TimmLoader
    from pytest_graphbudget.zoo.torchvision import TorchVisionLoader
    from pytest_graphbudget.zoo.ultralytics import UltralyticsLoader

    return [
        LocalLoader(),
        UltralyticsLoader(),
        HuggingFaceLoader(),
        TorchVisionLoader(),
        DiffusersLoader(),
        TimmLoader(),
    ]
