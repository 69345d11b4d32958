"""Convolution workspaces (issue 26), derived by hand from what the CPU kernels allocate.

``costs/workspace.py`` describes the two paths of a float32 CPU convolution: oneDNN (input and
weight reordered into a blocked layout, the result written in it) and the slow path (im2col
columns). The shapes below are chosen so that the channel block (8 or 16) changes nothing.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_graphbudget.costs.registry import REGISTRY, Shape, workspace_bytes  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    """The choice of path for a 1x1 kernel depends on the thread count: fix it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def conv(x, w, out, stride=(1, 1), padding=(1, 1), transposed=False, groups=1) -> int:
    args = (Shape(x), Shape(w), None, list(stride), list(padding), [1, 1], transposed, [0, 0])
    return workspace_bytes("convolution", (*args, groups), {}, Shape(out), 4)


def test_resnet50_layer4_conv_holds_its_reordered_weight():
    # layer4's 3x3 conv at 7x7, batch 1: 512*7*7 = 25,088 input elements > 20,480, so oneDNN.
    # Live at once: the input reordered (25,088), the weight reordered (512*512*9 = 2,359,296)
    # and the blocked result (25,088), of which the output's own 25,088 is not workspace:
    # 25,088 + 2,359,296 elements * 4 bytes = 9,537,536 bytes, the 9.4 MB block.
    assert conv((1, 512, 7, 7), (512, 512, 3, 3), (1, 512, 7, 7)) == 9_537_536


def test_small_conv_takes_the_slow_path_and_its_columns():
    # 16*32*32 = 16,384 input elements <= 20,480 and a 3x3 kernel: the slow path, whose im2col
    # buffer has 16 channels * 9 kernel values per output position, 32*32 of them:
    # 16 * 9 * 1024 = 147,456 elements * 4 bytes = 589,824 bytes.
    assert conv((1, 16, 32, 32), (16, 16, 3, 3), (1, 16, 32, 32)) == 589_824
    # An unstrided, unpadded 1x1 kernel on one thread: its input already is its columns.
    assert conv((1, 64, 56, 56), (64, 64, 1, 1), (1, 64, 56, 56), padding=(0, 0)) == 0


def test_transposed_conv_and_its_backward():
    # 64 -> 32 channels, 4x4 kernel, stride 2: 1x64x128x128 in (1,048,576 elements),
    # 1x32x256x256 out (2,097,152). Forward: the blocked result and a contiguous copy of the
    # output beside the output, 2 * 2,097,152 = 4,194,304 elements (more than the input twice,
    # the weight and the blocked result less the output: 2 * 1,048,576 + 64*32*16 = 2,129,920):
    # 16,777,216 bytes.
    x, w, out = (1, 64, 128, 128), (64, 32, 4, 4), (1, 32, 256, 256)
    assert conv(x, w, out, stride=(2, 2), transposed=True) == 16_777_216
    # Backward: the output's gradient reordered (2,097,152) and the input reordered for the
    # weight's gradient (1,048,576): 3,145,728 elements * 4 = 12,582,912 bytes.
    args = (Shape(out), Shape(x), Shape(w), [32], [2, 2], [1, 1], [1, 1], True, [0, 0], 1)
    grads = (Shape(x), Shape(w), Shape((32,)))
    assert (
        workspace_bytes("convolution_backward", (*args, [True, True, True]), {}, grads, 4)
        == 12_582_912
    )


def test_only_float32_convolutions_have_a_workspace():
    # The kernels measured are float32 ones; a bfloat16 call (2-byte elements) has none here.
    args = (Shape((1, 512, 7, 7)), Shape((512, 512, 3, 3)), None, [1, 1], [1, 1], [1, 1])
    assert workspace_bytes("convolution", (*args, False, [0, 0], 1), {}, Shape(()), 2) == 0
    assert REGISTRY["mm"].workspace is None


def test_the_workspace_does_not_follow_the_machines_thread_count():
    """A budget compares figures recorded on one machine with another's: with two threads
    oneDNN would take this unstrided 1x1 conv (batch 1, 64*32*32 = 65,536 elements, over
    20,480), but the figure stays the one-thread slow path's, whose input already is its
    columns: 0 bytes."""
    torch.set_num_threads(2)  # the autouse fixture puts the count back
    assert conv((1, 64, 32, 32), (64, 64, 1, 1), (1, 64, 32, 32), padding=(0, 0)) == 0
