"""Channels-last convolutions (``costs/channels_last.py``), counted by hand from what
``torch.profiler(profile_memory=True)`` records inside one float32 CPU convolution on one
thread (AVX-512: oneDNN's block of 16 channels): the copies ``_convolution`` makes, the
weight oneDNN reorders and its scratchpad."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_graphbudget.costs.channels_last import (  # noqa: E402
    Strided,
    suggests_channels_last,
)
from pytest_graphbudget.costs.registry import Shape, workspace_bytes  # noqa: E402


def nhwc(*sizes: int) -> Strided:
    t = torch.empty(sizes).to(memory_format=torch.channels_last)
    return Strided(t.shape, t.stride())


def conv(x, w, out, padding=(1, 1), groups=1) -> int:
    args = (x, w, None, [1, 1], list(padding), [1, 1], False, [0, 0], groups)
    return workspace_bytes("convolution", args, {}, Shape(out), 4)


def test_the_format_is_read_from_strides_as_aten_reads_it():
    assert suggests_channels_last(nhwc(2, 64, 56, 56))
    assert not suggests_channels_last(Shape((2, 64, 56, 56)))  # no strides: contiguous
    # Ambiguous strides fall back to contiguous: a contiguous 1x1 weight, a depthwise one.
    assert not suggests_channels_last(Strided((128, 64, 1, 1), (64, 1, 1, 1)))
    assert not suggests_channels_last(Strided((64, 1, 3, 3), (9, 9, 3, 1)))
    assert suggests_channels_last(nhwc(64, 1, 3, 3))


def test_a_contiguous_weight_meeting_a_channels_last_input_is_copied():
    # ResNet-18's layer4 3x3 at 1x512x7x7: the weight (512*512*9 = 2,359,296 elements) copied
    # channels-last, then reordered (512 output channels, whole blocks), and the scratchpad:
    # 2 * 2,359,296 * 4 + 8,216 = 18,882,584 bytes; measured 18,982,936 at the peak, less the
    # output's 100,352. The contiguous input's path holds the weight once (9,537,536).
    w = Shape((512, 512, 3, 3))
    assert conv(nhwc(1, 512, 7, 7), w, (1, 512, 7, 7)) == 18_882_584


def test_a_channels_last_convolution_reorders_only_its_weight():
    # 64 -> 64, 3x3 at 2x64x56x56, model and input channels-last: the weight reordered
    # (147,456 bytes) and the scratchpad (8,216): 155,672; measured peak 1,761,304, less the
    # output's 1,605,632. The contiguous path holds the input and result blocked: 1,753,088.
    assert conv(nhwc(2, 64, 56, 56), nhwc(64, 64, 3, 3), (2, 64, 56, 56)) == 155_672
    # 24 -> 40: the reordered weight's output channels rounded up to 48: 48*24*9*4 = 41,472.
    assert conv(nhwc(2, 24, 30, 30), nhwc(40, 24, 3, 3), (2, 40, 30, 30)) == 41_472 + 8_216
    # A channels-last model fed a contiguous image copies the image: 2*64*56*56*4 more.
    assert conv(Shape((2, 64, 56, 56)), nhwc(64, 64, 3, 3), (2, 64, 56, 56)) == 1_761_304


def test_depthwise_and_grouped_weights():
    # Depthwise, 64 channels: its weight reordered (64*9*4 = 2,304), no scratchpad.
    dw = conv(nhwc(2, 64, 56, 56), nhwc(64, 1, 3, 3), (2, 64, 56, 56), groups=64)
    assert dw == 2_304
    # 32 groups of 1 -> 2 channels: each group's both sides rounded up to 16:
    # 32 * 16 * 16 * 9 * 4 = 294,912 bytes, no scratchpad.
    grouped = conv(nhwc(2, 32, 28, 28), nhwc(64, 1, 3, 3), (2, 64, 28, 28), groups=32)
    assert grouped == 294_912


def test_the_backward_of_a_channels_last_convolution():
    # 24 -> 40, 3x3, both gradients: the input's holds the weight reordered with its input
    # channels rounded up (40*32*9*4 = 46,080) and 8,344 of scratchpad; the weight's, the
    # blocked gradient (48*24*9*4 = 55,296), the bias's beside it (40*4 = 160) and a copy of
    # the gradient (34,560): 90,016, the larger, as measured above the gradients.
    x, w, g = nhwc(2, 24, 30, 30), nhwc(40, 24, 3, 3), nhwc(2, 40, 30, 30)
    args = (g, x, w, [40], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True])
    grads = (Shape(x), Shape(w), Shape((40,)))
    assert workspace_bytes("convolution_backward", args, {}, grads, 4) == 90_016
    # The weight's gradient alone, of a contiguous weight: the weight copied (34,560) too.
    args = (g, x, Shape(w), [40], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, True])
    assert workspace_bytes("convolution_backward", args, {}, grads, 4) == 90_016 + 34_560
