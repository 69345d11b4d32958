"""Profile two models with the Python API and print their figures.

Run with ``.venv/bin/python examples/profile_models.py`` (``make demo`` does, until the pytest
plugin's example budget suite takes over). No weights are downloaded: resnet18 is built from
torchvision's architecture alone, and FLOPs do not depend on weights.
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn

from pytest_graphbudget import profile_model


class TinyNet(nn.Module):
    """A small custom model: conv + BN + ReLU, a residual block, pooling and a classifier."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()
        )
        self.block = nn.Sequential(
            nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = x + self.block(x)
        return self.head(self.pool(x).flatten(1))


def human(value: float, unit: str = "") -> str:
    """Decimal prefixes, the way the reports print counts and bytes."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def show(name: str, prof) -> None:
    compute = prof.bottleneck["compute_bound"]
    print(f"{name}  (traced with {prof.trace.method})")
    print(f"  FLOPs          {human(prof.flops)}")
    print(f"  MACs           {human(prof.macs)}")
    print(f"  params         {human(prof.params)}")
    print(f"  weights        {human(prof.weights_bytes, 'B')}")
    print(f"  traffic        {human(prof.traffic_bytes, 'B')}")
    print(f"  peak memory    {human(prof.peak_memory_bytes, 'B')}")
    print(f"  intensity      {prof.arithmetic_intensity:.1f} FLOPs/byte")
    print(f"  est. latency   {prof.est_latency_s * 1e3:.3f} ms on generic hardware")
    print(
        f"  compute-bound  {compute['subgraphs']} subgraphs, "
        f"{compute['share']:.0%} of subgraphs, {compute['flops_share']:.0%} of FLOPs"
    )
    unsupported = prof.coverage.unsupported_ops
    if unsupported:
        print(f"  not costed     {', '.join(sorted(unsupported))}")
    print()


def main() -> int:
    torch.manual_seed(0)
    cases = {
        "resnet18": (torchvision.models.resnet18(weights=None), (torch.randn(1, 3, 224, 224),)),
        "TinyNet": (TinyNet(), (torch.randn(1, 3, 32, 32),)),
    }
    for name, (model, inputs) in cases.items():
        show(name, profile_model(model, inputs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
