"""Fourier transforms, counted as FFTW's benchFFT counts them (fftw.org/speed/method.html):
``5 N log2 N`` FLOPs for a complex transform of ``N`` points and ``2.5 N log2 N`` for a real one
(real to complex or back), ``N`` the product of the transformed sizes; a batch of transforms
is that many of one. An FFT does no multiply-accumulates in the convention of a product, so
its MACs are 0. ``torch.stft`` and ``torch.istft`` run on these ops, and so do their
gradients."""

from __future__ import annotations

import itertools
from math import log2, prod

from pytest_graphbudget.costs import channels_last
from pytest_graphbudget.costs.registry import OpCost, Shape, numel, register, workspace

NORM_NONE = 0
"""ATen's ``fft_norm_mode``: 0 leaves the output unscaled; 1 (by root n) and 2 (by n) scale it."""


def _fft(signal: Shape, dim, per_point: float) -> int:
    """``per_point * N log2 N`` for each transform of ``signal`` along ``dim``."""
    points = prod(signal[d] for d in dim)
    if points <= 1:
        return 0
    return round(numel(signal) // points * per_point * points * log2(points))


@register("_fft_c2c", role="anchor", kind="fft")
def fft_c2c(x: Shape, dim, normalization, forward=True, *_, out, **__) -> OpCost:
    # a complex output's scaling is two real multiplies per element
    scale = 2 * numel(out) if normalization != NORM_NONE else 0
    return OpCost(other=_fft(x, dim, 5) + scale)


@register("_fft_r2c", role="anchor", kind="fft")
def fft_r2c(x: Shape, dim, normalization, onesided=True, *_, out, **__) -> OpCost:
    scale = 2 * numel(out) if normalization != NORM_NONE else 0
    return OpCost(other=_fft(x, dim, 2.5) + scale)


@register("_fft_c2r", role="anchor", kind="fft")
def fft_c2r(x: Shape, dim, normalization, last_dim_size=0, *_, out, **__) -> OpCost:
    # the real signal is the output (its last transformed size is last_dim_size)
    scale = numel(out) if normalization != NORM_NONE else 0
    return OpCost(other=_fft(out, dim, 2.5) + scale)


def _batch_copied(x: Shape, dim) -> bool:
    """Whether ATen's CPU FFT (``_exec_fft``) copies its input: it puts the dimensions not
    transformed first, in stride order, then reshapes them into one batch dimension, which
    copies when they do not merge (a transform along the sequence of a (batch, length,
    width) tensor: FNet's)."""
    strides = channels_last._strides(x)
    wrapped = {d % len(x) for d in dim}
    batch = sorted(
        (d for d in range(len(x)) if d not in wrapped and x[d] != 1), key=lambda d: -strides[d]
    )
    return any(strides[a] != strides[b] * x[b] for a, b in itertools.pairwise(batch))


@workspace("_fft_c2c")
def fft_input_copy(x: Shape, dim, *_, out, itemsize: int, **__) -> int:
    """The input copied into its batch-first layout (``_batch_copied``)."""
    return numel(x) * itemsize if _batch_copied(x, dim) else 0


@workspace("_fft_r2c")
def rfft_input_copy(x: Shape, dim, *_, out, itemsize: int, **__) -> int:
    """As ``fft_input_copy``; the input is real, half the complex output's element size."""
    return numel(x) * itemsize // 2 if _batch_copied(x, dim) else 0
