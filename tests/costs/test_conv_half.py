"""bfloat16's convolution kernels (``costs/conv_half.py``) and BatchNorm's backward in half
precision, counted by hand from oneDNN's scratchpad bookings and checked against what
``torch.profiler(profile_memory=True)`` records inside one op on one thread of an AVX-512 CPU
with BF16 instructions (``benchmarks/peak_half.py``'s machine). Each figure is bytes held beside
the op's inputs and gradients, as ``workspace_bytes`` returns them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_graphbudget.costs.channels_last import Strided  # noqa: E402
from pytest_graphbudget.costs.registry import Shape, workspace_bytes  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def nhwc(*sizes: int) -> Strided:
    t = torch.empty(sizes).to(memory_format=torch.channels_last)
    return Strided(t.shape, t.stride())


def backward(grad_out, x, w, mask, stride, padding, groups=1, dtype="bfloat16") -> int:
    args = (grad_out, x, w, None, list(stride), list(padding), [1, 1], False, [0, 0], groups)
    return workspace_bytes("convolution_backward", (*args, list(mask)), {}, None, 2, dtype)


def test_a_channels_last_7x7_depthwise_weight_gradient_runs_as_groups_of_a_block():
    # ConvNeXt's 7x7 depthwise, 16 channels at 1x16x32x32, channels-last, the weight's gradient
    # alone. oneDNN's depthwise kernel takes kernels up to 3 wide, so this runs on the grouped
    # bfloat16 kernel with every channel padded to a block of 16 each way. Its blocked result:
    # 16 x 16 x 16 x 49 x 2 = 401,408 bytes. Its scratchpad: each channel's input transposed
    # into 16 rows of 32 x (32 + 4) (tr_pad: 3 of padding and one more to the right, rounded to
    # pairs), 16 x 16 x 32 x 36 x 2 = 589,824; the output's gradient likewise,
    # 16 x 16 x 32 x 32 x 2 = 524,288; the gradient accumulated in float32,
    # 16 x 256 x 49 x 4 = 802,816; 4 guard elements (8 bytes) and 8,576: 1,925,512, the
    # profiler's allocation. Less the plain gradient not yet written (1,568): 2,325,352.
    x = nhwc(1, 16, 32, 32)
    got = backward(x, x, nhwc(16, 1, 7, 7), (False, True, False), (1, 1), (3, 3), groups=16)
    assert got == 401_408 + 1_925_512 - 1_568


def test_a_strided_depthwise_input_gradient_runs_on_the_strided_brgemm_kernel():
    # EfficientNet's strided 5x5 depthwise, 16 channels, 1x16x32x32 -> 16x16, contiguous, the
    # input's gradient alone: the output's gradient copied channels-last (8,192 bytes), the
    # weight with each channel padded to 16 x 2 (16 x 32 x 25 x 2 = 25,600), the channels-last
    # result (32,768) and the scratchpad: the output's gradient with the row and column the
    # kernel overhangs at each end (18 x 18 x 16 = 5,184 elements, two pages of 4,096: 16,384
    # bytes), a row of 16 results in float32 (16 x 16 x 4 = 1,024) and 24,600: 42,008. Less
    # the gradient: 8,192 + 25,600 + 42,008 = 75,800, above the result then copied plain twice
    # (65,536).
    got = backward(
        Shape((1, 16, 16, 16)),
        Shape((1, 16, 32, 32)),
        Shape((16, 1, 5, 5)),
        (True, False, False),
        (2, 2),
        (2, 2),
        groups=16,
    )
    assert got == 8_192 + 25_600 + 42_008


def test_a_1x1_weight_gradient_under_15_wide_transposes_rows():
    # MobileNetV3's 288 -> 288 1x1 at 1x288x8x8, the weight's gradient alone. Under 15 high or
    # wide oneDNN transposes rows instead of permuting: 64 positions x 16 channels x 2 bytes for
    # each of 18 blocks of output channels loaded at once and 6 of input channels broadcast
    # (the smallest divisor of 18 from 5): 49,152, and 256. With the input and output gradient
    # reordered (36,864 each), the blocked gradient (165,888) and the gradient in float32
    # (288 x 288 x 4 = 331,776, and 128): 620,928 at the peak, less the plain gradient: 455,040.
    x, w = Shape((1, 288, 8, 8)), Shape((288, 288, 1, 1))
    got = backward(x, x, w, (False, True, False), (1, 1), (0, 0))
    assert got == 36_864 * 2 + 165_888 + 331_776 + 128 + 49_152 + 256 - 165_888
    # At 16x16 it permutes: no rows.
    x = Shape((1, 288, 16, 16))
    rows = backward(x, x, w, (False, True, False), (1, 1), (0, 0)) - 147_456 * 2
    assert rows == 331_776 + 128


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_batch_norms_backward_allocates_the_input_gradient_twice_in_half_precision(dtype):
    # As in float32: the dense path's second allocation of the input's gradient, one input of
    # 2x16x64x64 in 2-byte elements, 262,144 bytes (MobileNetV3's stem read that much under).
    x = Shape((2, 16, 64, 64))
    stats = [Shape((16,))] * 5
    args = (x, x, *stats, True, 1e-5, [True, True, True])
    got = workspace_bytes("native_batch_norm_backward", args, {}, None, 2, dtype)
    assert got == 2 * 16 * 64 * 64 * 2
