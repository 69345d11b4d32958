"""Fourier transforms, counted as FFTW's benchFFT counts them (fftw.org/speed/method.html):
``5 N log2 N`` FLOPs for a complex transform of ``N`` points and ``2.5 N log2 N`` for a real one
(real to complex or back), ``N`` the product of the transformed sizes; a batch of transforms
is that many of one. An FFT does no multiply-accumulates in the convention of a product, so
its MACs are 0. ``torch.stft`` and ``torch.istft`` run on these ops, and so do their
gradients."""

from __future__ import annotations

from math import log2, prod

from pytest_graphbudget.costs.registry import OpCost, Shape, numel, register

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
