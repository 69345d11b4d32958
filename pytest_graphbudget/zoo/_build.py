"""Helpers the loaders share once they have imported torch: building on the meta device and
making example tensors. Imported by loaders inside ``load``, never at package import."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from pytest_graphbudget.compat import before_device_context
from pytest_graphbudget.zoo.base import META_PARAMS_THRESHOLD


def count_params(model: nn.Module) -> int:
    """Unique parameters (tied weights counted once), on any device."""
    return sum(p.numel() for p in model.parameters())


def build_module(
    factory: Callable[[], nn.Module],
    meta: bool | None,
    *,
    threshold: int = META_PARAMS_THRESHOLD,
) -> nn.Module:
    """Call ``factory`` on the meta device (``meta=True``), on the CPU (``meta=False``) or, for
    ``meta=None``, on the meta device first and again on the CPU only when the model has at most
    ``threshold`` parameters. The model is returned in eval mode.

    A model whose constructor cannot run on the meta device (it reads values of its own
    weights, as ultralytics' detection heads do) is built on the CPU, and moved to the meta
    device afterwards when that was asked for or it is above the threshold.
    """
    if meta is False:
        with torch.device("cpu"):
            return factory().eval()
    before_device_context()
    try:
        with torch.device("meta"):
            probe = factory()
    except (RuntimeError, NotImplementedError) as exc:
        if "meta" not in str(exc):
            raise
        with torch.device("cpu"):
            model = factory().eval()
        if meta or count_params(model) > threshold:
            model = model.to("meta")
        return model
    if meta or count_params(probe) > threshold:
        return probe.eval()
    del probe
    with torch.device("cpu"):
        return factory().eval()


def image(shape: tuple[int, ...]) -> torch.Tensor:
    """A deterministic float image-like tensor (values do not change the cost, only shapes)."""
    return torch.rand(shape, generator=torch.Generator().manual_seed(0))


def token_ids(batch: int, seq_len: int, vocab_size: int, *, low: int = 0) -> torch.Tensor:
    """Deterministic token ids in ``[low, vocab_size)``."""
    low = min(max(low, 0), max(vocab_size - 1, 0))
    span = max(vocab_size - low, 1)
    ids = torch.arange(batch * seq_len, dtype=torch.long).reshape(batch, seq_len)
    return (ids * 7919 % span + low).contiguous()
