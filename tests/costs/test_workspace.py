"""Convolution workspaces (issue 26), derived by hand from what the CPU kernels allocate.

``costs/workspace.py`` describes the two paths of a float32 CPU convolution: oneDNN (input and
weight reordered into a blocked layout, the result written in it) and the slow path (im2col
columns). The shapes below are chosen so that the channel block (8 or 16) changes nothing.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_graphbudget.compat import kernels as releases  # noqa: E402
from pytest_graphbudget.costs.registry import Shape, workspace_bytes  # noqa: E402
from pytest_graphbudget.costs.rnn_workspace import rnn_training_workspace  # noqa: E402


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


def test_a_bfloat16_convolution_has_no_workspace():
    # The kernels measured are float32 ones; a bfloat16 call (2-byte elements) has none here
    # (nor a bfloat16 product's copies: tests/engine/test_train_peak_gaps.py).
    args = (Shape((1, 512, 7, 7)), Shape((512, 512, 3, 3)), None, [1, 1], [1, 1], [1, 1])
    assert workspace_bytes("convolution", (*args, False, [0, 0], 1), {}, Shape(()), 2) == 0


def test_the_workspace_does_not_follow_the_machines_thread_count():
    """A budget compares figures recorded on one machine with another's: with two threads
    oneDNN would take this unstrided 1x1 conv (batch 1, 64*32*32 = 65,536 elements, over
    20,480), but the figure stays the one-thread slow path's, whose input already is its
    columns: 0 bytes."""
    torch.set_num_threads(2)  # the autouse fixture puts the count back
    assert conv((1, 64, 32, 32), (64, 64, 1, 1), (1, 64, 32, 32), padding=(0, 0)) == 0


def backward(grad_out, x, w, mask, stride=(1, 1), padding=(1, 1), transposed=False) -> int:
    args = (Shape(grad_out), Shape(x), Shape(w), [w[1] if transposed else w[0]], list(stride))
    args += (list(padding), [1, 1], transposed, [0, 0], 1, mask)
    return workspace_bytes("convolution_backward", args, {}, None, 4)


# The last layer of a decoder (issue 35): 32 -> 3 channels, 4x4 kernel, stride 2, at batch 4.
X, W, OUT = (4, 32, 64, 64), (32, 3, 4, 4), (4, 3, 128, 128)  # 524,288 / 1,536 / 196,608


def test_a_strided_transposed_conv_pads_no_channels_and_keeps_one_image():
    # oneDNN runs it on brgemm, channels-last, neither channel count padded. Live at once:
    #   brgemm's buffer, one image of the input, each border widened by (4 - 1) // 2 = 1
    #   input position:  32 * 66 * 66 =  139,392
    #   the input copied channels-last:   524,288
    #   the weight, C_out 3 -> 16:        32 * 16 * 16 = 8,192
    #   the result, channels-last:        196,608
    #   = 868,480 elements, of which the output's 196,608 are not workspace: 671,872 * 4 =
    #   2,687,488 bytes (the profiler: 2,723,992, brgemm's own state being 36,504 bytes more).
    # Then the result, its dense copy and that made contiguous: 3 * 196,608, less.
    # (The rule before issue 35 held the input twice and the result in blocks of 16 channels,
    # 4 * 16 * 128 * 128: 7,634,944 bytes.)
    assert conv(X, W, OUT, stride=(2, 2), transposed=True) == 2_687_488


def test_an_unstrided_transposed_conv_with_a_bias_holds_a_second_blocked_result():
    # 32 -> 3 channels, 3x3, 4x32x64x64 -> 4x3x64x64 (49,152 elements), with a bias: oneDNN's
    # blocked kernel. Live at once: the input (32 channels, 524,288), the weight with both
    # channel counts rounded up to 16 (32 * 16 * 9 = 4,608), the blocked result (4 * 16 * 64 *
    # 64 = 262,144) and the blocked result the bias is added from (262,144) with 128 bytes:
    # 1,053,184 elements less the output's 49,152, 1,004,032 * 4 + 128 = 4,016,256 bytes, as
    # the profiler records them.
    x, w, out = (4, 32, 64, 64), (32, 3, 3, 3), (4, 3, 64, 64)
    args = (Shape(x), Shape(w), Shape((3,)), [1, 1], [1, 1], [1, 1], True, [0, 0], 1)
    assert workspace_bytes("convolution", args, {}, Shape(out), 4) == 4_016_256
    # In bfloat16 the second blocked result is float32 all the same: (524,288 + 4,608 + 262,144
    # - 49,152) * 2 + 262,144 * 4 + 128 = 2,532,480 bytes (the profiler's figure).
    bf16 = workspace_bytes("convolution", args, {}, Shape(out), 2, "bfloat16")
    assert bf16 == 2_532_480


def test_a_transposed_conv_backward_leaves_a_thin_output_gradient_plain():
    # The weight gradient reads the output's gradient as its source: 3 channels (under 4) stay
    # plain, and only the input is reordered, in blocks of 16 (32 channels: 524,288 elements),
    # beside the weight's gradient, which then is copied out (twice 1,536, less): 524,288 * 4
    # = 2,097,152 bytes, as profiled. The first layer computes no input gradient.
    assert backward(OUT, X, W, [False, True, True], (2, 2), transposed=True) == 2_097_152
    # 8 channels: both in half blocks of 8, 4 * 8 * 128 * 128 + 524,288 = 1,048,576 elements:
    # 4,194,304 bytes, as profiled. (Before issue 35 both were 16-channel blocks: 6,291,456.)
    grad_out, w = (4, 8, 128, 128), (32, 8, 4, 4)
    assert backward(grad_out, X, w, [False, True, True], (2, 2), transposed=True) == 4_194_304


def test_a_first_layer_weight_gradient_reads_its_image_plain():
    # Conv2d(3, 32, 3, padding=1) at 4x3x64x64: the weight gradient reads the 3-channel input
    # in its plain layout and reorders only the output's gradient, 4x32x64x64 = 524,288
    # elements: 2,097,152 bytes, as profiled (the input in blocks of 16 would add 1,048,576).
    grad_out, x, w = (4, 32, 64, 64), (4, 3, 64, 64), (32, 3, 3, 3)
    assert backward(grad_out, x, w, [False, True, True]) == 2_097_152


def test_a_small_transposed_conv_takes_the_slow_path_and_its_columns():
    # Batch 1, 16x32x32 (16,384 elements <= 20,480), 3x3: slow_conv_transpose2d, whose columns
    # are C_out x kernel values per input position: 16 * 9 * 32 * 32 = 147,456 elements, 589,824
    # bytes, forward and backward, as profiled (the rule before issue 35 counted none).
    x, w = (1, 16, 32, 32), (16, 16, 3, 3)
    assert conv(x, w, x, transposed=True) == 589_824
    assert backward(x, x, w, [True, True, True], transposed=True) == 589_824


@pytest.mark.parametrize("onednn", ["3.10 on"], indirect=True)
def test_an_lstm_layer_holds_its_reordered_weights_and_its_states_in_inference(onednn):
    """oneDNN's LSTM in inference (``mkldnn_rnn_layer``, one layer, one direction), read off
    ``torch.profiler`` (benchmarks/peak.py --explain): its weights in its own layout, 4H x I +
    4H x H, its bias, 4H, and a scratchpad of the layer's states, each array on a 4,096-byte
    page. Input 64, hidden 128, 32 steps of 8 samples, float32:
    weights (512*64 + 512*128) * 4 = 393,216 and bias 2,048; the scratchpad's arrays, rounded
    up to a page before the next: the input's and output's states 2*33*8*128*4 = 270,336,
    a step's gates 8*528*4 = 16,896 (4H = 512 padded to 528: oneDNN avoids a multiple of 256),
    a hidden state 8*128*4 = 4,096, the bias 2,048, the cell states 270,336: 569,344.
    964,608 in all; the profiler read 965,384 (776 bytes of oneDNN's own). The rule before
    counted every step's gates, 917,504, and left the states out (a 2-layer bidirectional
    LSTM read 0.92 of its measured peak)."""
    assert workspace_bytes("mkldnn_rnn_layer", lstm_layer(32, 8, 64, 128), {}, None, 4) == 964_608
    assert workspace_bytes("mkldnn_rnn_layer", lstm_layer(32, 8, 64, 128), {}, None, 2) == 0


def lstm_layer(steps: int, batch: int, width: int, hidden: int) -> tuple:
    """``mkldnn_rnn_layer``'s arguments for one direction of an LSTM, float32, in inference."""
    gates = 4 * hidden
    x, w_ih, w_hh = Shape((steps, batch, width)), Shape((gates, width)), Shape((gates, hidden))
    state = Shape((batch, hidden))
    return (x, w_ih, w_hh, Shape((gates,)), Shape((gates,)), state, state, False, [], 1, hidden)


@pytest.fixture(params=["3.10 on", "before 3.10"])
def onednn(request, monkeypatch):
    """The RNN layout of either side of oneDNN 3.10, whichever this torch bundles (torch 2.10
    and older bundle one before it): the hand counts hold for both."""
    books_twice = request.param == "before 3.10"
    monkeypatch.setattr(releases, "onednn_rnn_books_twice", lambda: books_twice)
    return books_twice


def test_an_lstm_layer_of_one_sample_runs_its_steps_through_one_gemm(onednn):
    """oneDNN's brgemm LSTM merges the layer's GEMM over every step when the batch is one
    sample, so its gates' scratch holds every step: 32 steps x 528 (4H = 512, padded) x 4 =
    67,584 bytes, 17 pages, where a batch of 8 holds one step's. Input 64, hidden 128: weights
    393,216 and bias 2,048; scratchpad pages: states 2*33*1*128*4 = 33,792 (9 pages), the
    gates (17), a hidden state 512 (1), the bias (1), cell states (9): 151,552. 546,816 in
    all; the profiler read 548,616 on torch 2.14 (the rule before: 481,280, one step's gates).

    Before oneDNN 3.10, two more arrays of states (2 x 9 pages, 73,728) and the gates' and
    hidden state's scratch booked again at four times their bytes with 128 bytes each
    (4 * (67,584 + 512) + 256 = 272,640): 893,184; the profiler read 894,984 on torch 2.9."""
    expected = 893_184 if onednn else 546_816
    assert workspace_bytes("mkldnn_rnn_layer", lstm_layer(32, 1, 64, 128), {}, None, 4) == expected


def test_onednn_before_3_10_books_an_lstms_scratch_twice(onednn):
    """The layer of ``test_an_lstm_layer_holds_...`` (32 steps of 8, 64 -> 128) on oneDNN
    before 3.10 (torch 2.10 and older: 2.9's 3.7, 2.4's 3.4), whose RNN lays out two arrays of
    the layer's states no cell reads (2 x 66 pages = 540,672) and books the gates' and hidden
    state's scratch a second time, their bytes taken for float32 elements, 128 bytes of
    alignment each: 4 * (16,896 + 4,096) + 256 = 84,224 (uxlfoundation/oneDNN d3fb569 removed
    both). 1,589,504; the profiler read 1,598,472 on torch 2.9 and 2.4, the 8,968 above the
    estimate the same as torch 2.14's (without this rule: -39%)."""
    expected = 964_608 + (540_672 + 84_224 if onednn else 0)
    assert workspace_bytes("mkldnn_rnn_layer", lstm_layer(32, 8, 64, 128), {}, None, 4) == expected


@pytest.mark.parametrize(
    "steps, batch, width, hidden",
    [(50, 16, 128, 256), (50, 16, 512, 256), (1, 1, 8, 8), (7, 3, 5, 11), (20, 8, 64, 200)],
)
def test_a_differentiated_lstm_layer_keeps_the_workspace_torch_allocates(
    steps, batch, width, hidden
):
    """The workspace oneDNN returns from a forward autograd will differentiate, which the op's
    meta kernel returns empty: the training step of an LSTM had left out every layer's, a
    quarter of its measured peak. Held to the bytes torch's kernel allocates."""
    layer = torch.nn.LSTM(width, hidden)
    out, _ = layer(torch.randn(steps, batch, width))
    node = out.grad_fn
    while not hasattr(node, "_saved_result3"):  # down to MkldnnRnnLayerBackward0
        node = node.next_functions[0][0]
    expected = node._saved_result3.untyped_storage().nbytes()
    assert rnn_training_workspace((steps, batch, width), hidden, 4) == expected


def test_a_grouped_convolution_reorders_unpadded_or_unfolds_one_group():
    # RegNet's groups of 8: 24 channels in 3 groups, 3x3, stride 2, 2x24x64x64 in. oneDNN
    # reorders the input (196,608 elements) and the weight (24*8*9 = 1,728) without padding
    # the 24 channels to 32, and writes a result the output's size: 198,336 elements beyond the
    # output, as the profiler records them. Groups of 10 channels, not a multiple of 4, unfold
    # one group of one image instead (32*32 positions x 10*9) and 32 more: 92,192.
    x, out = (2, 24, 64, 64), (2, 24, 32, 32)
    assert conv(x, (24, 8, 3, 3), out, stride=(2, 2), groups=3) == 198_336 * 4
    x, out = (2, 20, 64, 64), (2, 20, 32, 32)
    assert conv(x, (20, 10, 3, 3), out, stride=(2, 2), groups=2) == 92_192 * 4
    # Then it copies a plain result into the output: groups of 2 channels, 3x3, 2x64x32x32,
    # unfold 32*32 positions x 2*9 = 18,464 elements with the 32, fewer than the result's
    # 2*64*32*32 = 131,072, which is what it holds beside the output (it had read 28% under).
    x = out = (2, 64, 32, 32)
    assert conv(x, (64, 2, 3, 3), out, groups=32) == 131_072 * 4


def conv3d(x, w, out, stride=1, padding=1, groups=1) -> int:
    args = (Shape(x), Shape(w), None, [stride] * 3, [padding] * 3, [1] * 3, False, [0] * 3)
    return workspace_bytes("convolution", (*args, groups), {}, Shape(out), 4)


@pytest.mark.parametrize("cin", [8, 12, 15])
def test_a_3x3_kernel_reads_fewer_than_a_block_of_channels_plain(cin):
    # 2 x cin x 24 x 24 -> 32, 3x3, on oneDNN: the input is read as it is; the weight is
    # reordered with its output channels in blocks, 32 * cin * 9; the blocked result
    # (2 x 32 x 24 x 24 = 36,864 elements) is as large as the output, then copied into it.
    # The workspace is the larger of the weight and the blocked result: 36,864 * 4 bytes.
    assert conv((2, cin, 24, 24), (32, cin, 3, 3), (2, 32, 24, 24)) == 36_864 * 4
    # 3-D, 2 x cin x 8 x 12 x 12 -> 16 (36,864 output elements): the same two phases.
    assert conv3d((2, cin, 8, 12, 12), (16, cin, 3, 3, 3), (2, 16, 8, 12, 12)) == 36_864 * 4


def test_a_reordered_input_rounds_the_weights_input_channels_up_too():
    # 2 x 17 x 28 x 28 -> 32, 3x3: the input reordered to 32 channels (2*32*784 = 50,176
    # elements), the weight to 32 x 32 x 9 (9,216), the blocked result (50,176) beside them,
    # less the output's own 50,176: 59,392 elements, 237,568 bytes.
    assert conv((2, 17, 28, 28), (32, 17, 3, 3), (2, 32, 28, 28)) == 237_568
    # 3-D, 2 x 24 x 8 x 14 x 14 -> 40: input 2*32*1,568 = 100,352 elements, weight
    # 48 x 32 x 27 = 41,472, result 2*48*1,568 = 150,528, less the output's 125,440.
    assert conv3d((2, 24, 8, 14, 14), (40, 24, 3, 3, 3), (2, 40, 8, 14, 14)) == 166_912 * 4


def test_a_strided_1x1_kernel_copies_one_image_in_2d_only():
    # ResNet's shortcut, 2 x 64 x 56 x 56 -> 128, stride 2: one image subsampled (64 x 28 x
    # 28 = 50,176 elements) and 32 more, the input reordered (401,408), the weight (8,192)
    # and the blocked result (200,704) less the output: 459,808 elements.
    assert conv((2, 64, 56, 56), (128, 64, 1, 1), (2, 128, 28, 28), (2, 2), (0, 0)) == 459_808 * 4
    # 3-D, 2 x 16 x 8 x 14 x 14 -> 32, stride 2: no copy; the input reordered (50,176) and
    # the weight (512), the result (12,544) as large as the output.
    assert conv3d((2, 16, 8, 14, 14), (32, 16, 1, 1, 1), (2, 32, 4, 7, 7), 2, 0) == 50_688 * 4


@pytest.mark.parametrize(("c", "stride", "weight"), [(16, 1, 16 * 27), (24, 2, 32 * 27)])
def test_a_3d_depthwise_convolution_copies_its_result(c, stride, weight):
    # 2 x c x 8 x 12 x 12 depthwise 3x3x3: the input copied and the weight (channels rounded
    # up to 16) beside the result, none padded; then the result, the output and a copy.
    x = 2 * c * 8 * 12 * 12
    out = x // stride**3
    size = (2, c, 8 // stride, 12 // stride, 12 // stride)
    held = max(x + weight + out, 3 * out) - out
    got = conv3d((2, c, 8, 12, 12), (c, 1, 3, 3, 3), size, stride, groups=c)
    assert got == held * 4
    assert held == (2 * out if stride == 1 else x + weight)  # the copy, or the input, decides


def conv_backward(grad_out, x, w, mask, groups=1, stride=1, padding=1) -> int:
    nd = len(x) - 2
    args = (Shape(grad_out), Shape(x), Shape(w), [w[0]], [stride] * nd, [padding] * nd)
    args += ([1] * nd, False, [0] * nd, groups, list(mask))
    grads = (Shape(x), Shape(w), Shape((w[0],)))
    return workspace_bytes("convolution_backward", args, {}, grads, 4)


def test_a_weight_gradient_rounds_its_input_channels_to_the_sources_blocks():
    # 2 x 12 x 24 x 24 -> 32, 3x3, the weight's gradient alone: the output's gradient
    # reordered (36,864 elements), the input in half blocks of 8 (16 channels: 18,432), and the
    # gradient computed in blocks, 32 x 16 x 9 = 4,608 (the input channels rounded up as the
    # input is), less the plain gradient's 3,456: 56,448 elements, 225,792 bytes.
    g, x, w = (2, 32, 24, 24), (2, 12, 24, 24), (32, 12, 3, 3)
    assert conv_backward(g, x, w, (False, True, False)) == 225_792
    # Under 4 input channels (an image) nothing is rounded: the output's gradient alone.
    assert conv_backward(g, (2, 3, 24, 24), (32, 3, 3, 3), (False, True, False)) == 36_864 * 4


@pytest.mark.parametrize(("cin", "groups"), [(8, 1), (12, 1), (16, 2), (16, 16)])
def test_a_3d_weight_gradient_of_under_a_block_a_group_unfolds_one_depth_slice(cin, groups):
    # 2 x cin x 8 x 12 x 12 -> 16, 3x3x3: oneDNN's im2col kernel unfolds one group of one
    # depth slice of the output (12 x 12 positions x the group's input channels x 27 kernel
    # values) beside four copies of the weight and 64 elements more.
    w = (16, cin // groups, 3, 3, 3)
    columns = 12 * 12 * (cin // groups) * 27
    got = conv_backward((2, 16, 8, 12, 12), (2, cin, 8, 12, 12), w, (False, True, False), groups)
    assert got == (columns + 4 * 16 * (cin // groups) * 27 + 64) * 4


def test_a_3d_depthwise_input_gradient_holds_a_plain_result():
    # 2 x 16 x 8 x 12 x 12 depthwise: the input's gradient computed into a plain buffer of its
    # size (36,864 elements) beside one channel of one depth slice unfolded (12 x 12 x 27 =
    # 3,888) and 32 more, then copied out: the buffer is the larger.
    x, w = (2, 16, 8, 12, 12), (16, 1, 3, 3, 3)
    assert conv_backward(x, x, w, (True, False, False), groups=16) == 36_864 * 4
    # 1 x 4 x 4 x 6 x 6: the columns are the larger, 6 x 6 x 27 + 32 = 1,004 elements.
    x, w = (1, 4, 4, 6, 6), (4, 1, 3, 3, 3)
    assert conv_backward(x, x, w, (True, False, False), groups=4) == 1_004 * 4


@pytest.mark.parametrize(("cin", "cout", "groups"), [(12, 24, 2), (20, 20, 2), (8, 16, 8)])
def test_3d_groups_not_of_fours_unfold_one_depth_slice(cin, cout, groups):
    # 2 x cin x 8 x 12 x 12, 3x3x3: one group of one depth slice of the output unfolded (12 x
    # 12 x the group's input channels x 27) and 32 more, then a plain result the output's
    # size copied into it (the forward); the input's gradient holds the columns beside a
    # plain result of the input's size. A depthwise multiplier (8 -> 16) unfolds likewise.
    x, out = (2, cin, 8, 12, 12), (2, cout, 8, 12, 12)
    w = (cout, cin // groups, 3, 3, 3)
    columns = 12 * 12 * (cin // groups) * 27 + 32
    assert conv3d(x, w, out, groups=groups) == max(columns, 2 * cout * 1152) * 4
    got = conv_backward(out, x, w, (True, False, False), groups=groups)
    assert got == max(columns, 2 * cin * 1152) * 4


@pytest.mark.parametrize("per_group", [10, 14, 22])
def test_a_frozen_grouped_convolutions_input_gradient_unfolds_groups_not_of_fours(per_group):
    # Groups of as many channels each way, not a multiple of 4: the input's gradient alone (a
    # frozen convolution) unfolds one group of one image, 24 x 24 positions x the group's
    # channels x 9, and 32 more, as the forward does. They had been charged blocked buffers
    # (groups of 10: +3.3%, of 14: -37%). Strided, they write a plain result instead.
    c = 2 * per_group
    x, w = (2, c, 24, 24), (c, per_group, 3, 3)
    got = conv_backward(x, x, w, (True, False, False), groups=2)
    assert got == (24 * 24 * per_group * 9 + 32) * 4


def half_conv(x, w, out, dtype, stride=1, padding=1, groups=1) -> int:
    nd = len(x) - 2
    args = (Shape(x), Shape(w), None, [stride] * nd, [padding] * nd, [1] * nd, False, [0] * nd)
    return workspace_bytes("convolution", (*args, groups), {}, Shape(out), 2, dtype)


def half_conv_backward(grad_out, x, w, mask, dtype, groups=1) -> int:
    args = (Shape(grad_out), Shape(x), Shape(w), None, [1, 1], [1, 1], [1, 1], False, [0, 0])
    args += (groups, list(mask))
    return workspace_bytes("convolution_backward", args, {}, None, 2, dtype)


def test_a_bfloat16_1x1_conv_accumulates_one_image_in_float32():
    # 64 -> 64 channels, 1x1, 2x64x32x32: oneDNN (bfloat16 always takes it) holds the input
    # reordered (262,144 bytes), the weight (8,192), the blocked result (262,144) and one
    # image's result in float32, 64 x 32 x 32 x 4 = 262,144, with 128 bytes; less the output's
    # 262,144: 532,608 bytes, what the profiler records. In float32 the same 1x1 conv on one
    # thread and a batch under 16 takes the slow path, which needs no columns: nothing.
    x = out = (2, 64, 32, 32)
    assert half_conv(x, (64, 64, 1, 1), out, "bfloat16", padding=0) == 532_608
    assert conv(x, (64, 64, 1, 1), out, padding=(0, 0)) == 0


def test_a_float16_conv_unfolds_its_input_on_the_slow_path():
    # Without FP16 instructions ATen's use_mkldnn sends float16 to the slow path: a 3x3 conv of
    # 2x64x32x32 unfolds 2 x 64 x 9 x 1,024 values, 2,359,296 bytes (the profiler's figure).
    x = out = (2, 64, 32, 32)
    assert half_conv(x, (64, 64, 3, 3), out, "float16") == 2 * 64 * 9 * 1024 * 2


def test_a_float16_grouped_conv_runs_one_group_at_a_time():
    # 8 channels in 2 groups, 3x3, 2x8x16x16: each group's 4 input channels copied (a channel
    # slice of a batch of 2 is not contiguous: 2,048 elements) and unfolded (2 x 4 x 9 x 256 =
    # 18,432): 40,960 bytes; the backward copies the group's output gradient too: 45,056.
    x = out = (2, 8, 16, 16)
    assert half_conv(x, (8, 4, 3, 3), out, "float16", groups=2) == 40_960
    got = half_conv_backward(out, x, (8, 4, 3, 3), (False, True, False), "float16", groups=2)
    assert got == 45_056


def test_a_bfloat16_weight_gradient_takes_float32_buffers():
    # 64 -> 64 channels, 3x3, 2x64x32x32, the weight's gradient alone: the input and the output
    # gradient reordered (262,144 bytes each), the blocked gradient (73,728) and oneDNN's
    # buffers: the gradient in float32 (147,456), one image of the output gradient (131,072),
    # one of the input with rows widened by 2 (64 x 32 x 34 x 2 = 139,264) and 8,580: 1,024,388
    # bytes at the peak, less the weight's gradient (73,728): 950,660, as the profiler records.
    x = (2, 64, 32, 32)
    got = half_conv_backward(x, x, (64, 64, 3, 3), (False, True, False), "bfloat16")
    assert got == 950_660
