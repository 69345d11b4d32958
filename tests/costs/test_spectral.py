"""Fourier transforms, counted as FFTW's benchFFT counts them (fftw.org/speed/method.html):
``5 N log2 N`` per complex transform of ``N`` points, ``2.5 N log2 N`` per real one, plus the
scaling of a normalized transform (2 FLOPs per complex output element, 1 per real one). They
had no formula, so a model with an FFT failed as "may hide a contraction" at 0 FLOPs.

Every figure is written as the arithmetic that gives it; which transform ATen runs (a real
input's ``fft`` is a real-to-complex transform of the full length, ``fftn`` of a real input a
complex one) is what torch dispatches, not a choice of ours.
"""

from __future__ import annotations

from math import log2

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize(
    ("fn", "shape", "flops"),
    [
        # fftn of a real input runs one complex transform of 16 x 64 = 1,024 points a batch row
        (lambda x: torch.fft.fftn(x, dim=(-1, -2)).real, (2, 16, 64), 2 * 5 * 1024 * 10),
        # a real input's fft: a real transform of the full 8 points, its mirror half copied
        (lambda x: torch.fft.fft(x), (3, 8), 3 * 2.5 * 8 * 3),
        # "ortho" scales each of the 3 x 8 complex outputs: 2 real multiplies
        (lambda x: torch.fft.fft(x, norm="ortho"), (3, 8), 3 * 2.5 * 8 * 3 + 2 * 3 * 8),
        # then a complex inverse, scaled by 1/n by default (2 per complex output); .real a view
        (
            lambda x: torch.fft.ifft(torch.fft.fft(x)).real,
            (3, 8),
            3 * 2.5 * 8 * 3 + 3 * 5 * 8 * 3 + 2 * 3 * 8,
        ),
        # rfft then irfft back to 256 points: two real transforms, the inverse's 1/n per output
        (
            lambda x: torch.fft.irfft(torch.fft.rfft(x), n=256),
            (4, 256),
            2 * (4 * 2.5 * 256 * 8) + 4 * 256,
        ),
        # 2-d: 8 x 16 = 128 points a transform, log2 128 = 7
        (lambda x: torch.fft.rfft2(x), (2, 8, 16), 2 * 2.5 * 128 * 7),
    ],
    ids=["fftn", "fft-real", "fft-ortho", "ifft", "rfft-irfft", "rfft2"],
)
def test_each_transform_is_counted_as_benchfft_counts_it(fn, shape, flops):
    prof = profile_model(Fn(fn), torch.randn(shape))
    assert prof.coverage.unsupported_ops == {}
    assert (prof.flops, prof.macs) == (flops, 0)


def test_an_stft_counts_its_frames_transforms_and_window():
    # 16,000 samples padded by n_fft / 2 = 200 each side (center=True): 1 + (16,400 - 400) / 160
    # = 101 frames a signal, 202 real transforms of 400 points; the hann window multiplies
    # every frame sample (a factory itself: 0), abs reads each of the 201 one-sided bins.
    class Spectrogram(nn.Module):
        def forward(self, x):
            window = torch.hann_window(400)
            return torch.stft(x, 400, 160, window=window, return_complex=True).abs()

    prof = profile_model(Spectrogram(), torch.randn(2, 16000))
    assert prof.coverage.unsupported_ops == {}
    transforms = round(202 * 2.5 * 400 * log2(400))
    assert prof.flops == transforms + 202 * 400 + 202 * 201


def test_fnet_mixes_tokens_with_a_priced_fourier_transform():
    """Hugging Face's FNet replaces attention with ``fftn`` over (sequence, hidden): one
    complex transform of 32 x 64 = 2,048 points per sequence and layer, none unpriced."""
    transformers = pytest.importorskip("transformers")
    config = transformers.FNetConfig(
        vocab_size=1000, hidden_size=64, num_hidden_layers=2, intermediate_size=128
    )
    model = transformers.FNetModel(config).eval()
    prof = profile_model(model, (torch.randint(0, 1000, (2, 32)),))
    assert prof.coverage.unsupported_ops == {}
    fourier = prof.to_dict()["modules"]["encoder.layer.0.fourier.self"]["flops"]
    assert fourier == 2 * 5 * 2048 * 11


def test_a_training_step_through_an_fft_is_priced_whole():
    """The gradient of an FFT is FFTs: a step through one leaves no op unpriced, and costs
    more than its forward."""
    model = nn.Sequential(nn.Linear(32, 32), Fn(lambda x: torch.fft.rfft(x).abs()))
    x = torch.randn(4, 32)
    step = profile_model(model, x, mode="train")
    assert step.coverage.unsupported_ops == {}
    assert step.flops > profile_model(model, x).flops
