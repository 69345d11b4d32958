"""A small detector whose head a pull request widened from 64 to 96 channels."""

from __future__ import annotations

import torch
from torch import nn

HEAD_CHANNELS = 96  # was 64 when budgets/baseline.toml was written


class Detector(nn.Module):
    def __init__(self, head: int = HEAD_CHANNELS) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1),
            nn.ReLU(),
        )
        self.neck = nn.Conv2d(64, head, 3, padding=1)
        self.head = nn.Conv2d(head, 5 * 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.neck(self.backbone(x))))


def detector():
    """The factory named in budgets/detector.toml: the model and its example input."""
    return Detector(), (torch.randn(1, 3, 256, 256),)
