"""Fixtures that hand models to the budget markers: every ``ModelCase`` a test receives is
profiled after the test body when pytest runs with ``--graph-budget``."""

from __future__ import annotations

import pytest
import torch
import torchvision

from pytest_graphbudget import ModelCase

# The regression example is a project of its own: run it with pytest --graph-budget
# examples/regression (it fails on purpose, to show the message).
collect_ignore = ["regression"]


@pytest.fixture
def resnet18() -> ModelCase:
    return ModelCase(torchvision.models.resnet18(), (torch.randn(1, 3, 224, 224),))


class TinyClassifier(torch.nn.Module):
    """The kind of in-house model a team ships: a conv stem, a residual block, a head."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False),
            torch.nn.BatchNorm2d(32),
            torch.nn.ReLU(),
        )
        self.block = torch.nn.Sequential(
            torch.nn.Conv2d(32, 32, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(32),
        )
        self.head = torch.nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        return self.head(x.mean(dim=(2, 3)))


@pytest.fixture(params=[1, 8], ids=lambda b: f"batch{b}")
def tiny(request: pytest.FixtureRequest) -> ModelCase:
    batch = request.param
    return ModelCase(TinyClassifier(), (torch.randn(batch, 3, 64, 64),), name=f"tiny-b{batch}")
