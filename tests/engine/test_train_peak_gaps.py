"""A training step's peak by hand, and against the memory profiler: what eager torch holds that
the joint graph alone does not show (``engine/joint.py``, ``costs/workspace.py``,
``costs/scratch.py``).

- Adam's single-tensor loop keeps the previous parameter's ``denom`` bound while it computes
  the next one's ``sqrt`` and quotient: three parameter-sized temporaries at once;
- a tensor passed as several arguments (``mha(x, x, x)``) is one input, as in eval;
- a product (``mm``, ``addmm``, ``bmm``) copies an operand BLAS cannot read as it is, such as
  the sum loss's expanded gradient (strides 0), while it runs.

The measured peak is ``test_peak_measured``'s: the tensors before the step plus the running sum
of ``torch.profiler(profile_memory=True)``'s records, one intra-op thread.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.costs.registry import workspace_bytes  # noqa: E402
from pytest_graphbudget.engine.tree import strided_shapes  # noqa: E402

F32 = 4


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: measured peaks need one thread


def total(outs) -> torch.Tensor:
    """The tool's default loss: the sum of every output."""
    outs = outs if isinstance(outs, tuple) else (outs,)
    return sum(o.sum() for o in outs if o is not None)


def measured(
    model: nn.Module,
    args: tuple,
    optimizer: str | None = None,
    kwargs: dict | None = None,
    loss=total,
) -> int:
    """Weights, buffers, inputs (each storage once) and Adam's state, plus the peak of one step of
    ``loss(outputs).backward()`` (their sum unless told) and torch's single-tensor update (its
    state made by a first step outside the measurement, the gradients None before it)."""
    model.train()
    params = list(model.parameters())
    opt = torch.optim.Adam(params, foreach=False) if optimizer == "adam" else None

    def step():
        loss(model(*args, **(kwargs or {}))).backward()  # no output held through the backward
        if opt is not None:
            opt.step()

    if opt is not None:
        step()
    for p in params:
        p.grad = None
    state = [t for s in (opt.state.values() if opt else ()) for t in s.values() if t.dim()]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    live = peak = 0
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    held = [*params, *model.buffers(), *args, *(kwargs or {}).values(), *state]
    tensors = {t.untyped_storage().data_ptr(): t for t in held}
    return sum(t.untyped_storage().nbytes() for t in tensors.values()) + peak


def test_adam_holds_the_previous_parameters_denom():
    # Two 128x128 weights W, no bias. The step's activation peak is in the update of the
    # second: both gradients (live to the end), the first weight's denom (still bound in
    # torch's loop), the second's sqrt and the quotient it is divided into, and the loss.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 128, bias=False), nn.Linear(128, 128, bias=False))
    x = torch.randn(2, 128)
    w = 128 * 128 * F32
    prof = profile_model(model, x, mode="train", optimizer="adam")
    assert prof.activation_peak_bytes == 2 * w + 3 * w + F32  # before: 2 * w + 2 * w + F32
    assert prof.optimizer_state_bytes == 2 * 2 * w
    assert prof.peak_memory_bytes == 2 * w + 4 * w + x.nbytes + prof.activation_peak_bytes
    real = measured(model, (x,), "adam")
    assert abs(prof.peak_memory_bytes - real) <= 16, (prof.peak_memory_bytes, real)


def test_an_input_passed_three_times_is_one_input():
    torch.manual_seed(0)
    mha, x = nn.MultiheadAttention(16, 2, batch_first=True), torch.randn(4, 32, 16)
    prof = profile_model(mha, (x, x, x), mode="train")
    assert prof.input_bytes == 4 * 32 * 16 * F32  # before: three times that
    real = measured(mha, (x, x, x))
    assert abs(prof.peak_memory_bytes - real) <= 16, (prof.peak_memory_bytes, real)
    y = torch.randn(4, 32, 16)  # distinct tensors stay distinct
    assert profile_model(mha, (x, y, y), mode="train").input_bytes == 2 * x.nbytes


def test_a_linear_heads_backward_copies_the_expanded_gradient():
    # Linear(16, 1000) at 8 rows, the sum loss: the output's gradient is a scalar expanded to
    # 8x1000 (strides 0). The weight's gradient, 1000x16, is mm(grad.t(), x), which first
    # copies grad.t() into a contiguous 8x1000 clone; the input needs no gradient. Peak:
    # that product, its output and the clone, beside the loss and its seed (a float each).
    torch.manual_seed(0)
    model, x = nn.Linear(16, 1000), torch.randn(8, 16)
    prof = profile_model(model, x, mode="train")
    logits = 8 * 1000 * F32
    assert prof.activation_peak_bytes == 1000 * 16 * F32 + logits + 2 * F32
    assert prof.peak_memory_bytes == measured(model, (x,))


class BatchedHead(nn.Module):
    """A Linear, then a batched product with a weight: both of bmm's gradients are products
    of the expanded gradient, each item copied in turn."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(32, 32)
        self.w = nn.Parameter(torch.randn(4, 32, 24))

    def forward(self, x):
        return torch.bmm(self.a(x), self.w)


def test_a_batched_products_backward_copies_one_item_at_a_time():
    torch.manual_seed(0)
    model, x = BatchedHead(), torch.randn(4, 16, 32)
    prof = profile_model(model, x, mode="train")
    assert prof.peak_memory_bytes == measured(model, (x,))


def strided(*tensors):
    return strided_shapes(tensors)


@pytest.mark.parametrize(
    ("make", "copied"),
    [
        (lambda: (torch.randn(64, 32), torch.randn(32, 16)), 0),
        (lambda: (torch.randn(32, 64).t(), torch.randn(16, 32).t()), 0),  # column-major
        (lambda: (torch.ones(()).expand(64, 32), torch.randn(32, 16)), 64 * 32),
        (lambda: (torch.randn(32).expand(64, 32), torch.randn(32, 16)), 64 * 32),
        (lambda: (torch.randn(64, 64)[:, ::2], torch.randn(64, 16)[::2]), 64 * 32),
        (lambda: (torch.ones(()).expand(64, 32), torch.ones(()).expand(32, 16)), 64 * 32 + 32 * 16),
    ],
    ids=["row-major", "column-major", "expanded", "broadcast-row", "strided", "both-expanded"],
)
def test_a_product_copies_what_blas_cannot_read(make, copied):
    a, b = make()
    assert workspace_bytes("mm", strided(a, b), {}, None, F32) == copied * F32
    bias = torch.randn(b.shape[1])
    assert workspace_bytes("addmm", strided(bias, a, b), {}, None, F32) == copied * F32
    assert workspace_bytes("mm", strided(a.bfloat16(), b.bfloat16()), {}, None, 2) == 0


def test_a_batched_product_copies_only_off_its_fast_paths():
    grad = torch.ones(()).expand(4, 16, 24)  # a sum loss's gradient of a bmm's output
    w = torch.randn(4, 24, 32)
    assert workspace_bytes("bmm", strided(grad, w), {}, None, F32) == 16 * 24 * F32
    assert workspace_bytes("bmm", strided(torch.randn(4, 16, 24), w), {}, None, F32) == 0
    small = torch.ones(()).expand(2, 4, 4)  # 4 x 4 x 4 < 400 multiply-adds an item: a loop
    assert workspace_bytes("bmm", strided(small, torch.randn(2, 4, 4)), {}, None, F32) == 0


# Convolution backwards: what oneDNN and the slow path allocate beside the gradients. Each
# model below read under its measured peak (ConvNeXt's whole step: 0.70) before its rule.


class LayerNorm2d(nn.LayerNorm):
    """timm's ``LayerNorm2d``: a LayerNorm over channels, through two permutes, so that it
    normalizes a permuted (non-contiguous) view and returns a channels-last one."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def conv_backward(x, w, grad_out, stride, padding, groups=1, mask=(True, True, True)) -> int:
    """``convolution_backward``'s workspace in bytes for float32 ``x``, ``w``, ``grad_out``."""
    shapes = strided(grad_out, x, w)
    args = (*shapes, [w.shape[0]], list(stride), list(padding), [1, 1], False, [0, 0], groups)
    return workspace_bytes("convolution_backward", (*args, list(mask)), {}, None, F32)


def test_a_strided_convolutions_input_gradient_holds_a_second_buffer():
    # A 2x2 stride-2 conv, 64 -> 64 channels, input 2x64x32x32 (131,072 elements), output
    # 2x64x16x16 (32,768). Once oneDNN has the input's gradient, it holds it (plain) and a
    # second input-sized buffer while the plain gradient is written: 2 x 131,072, of which the
    # weight's and bias's gradients (64*64*4 + 64 = 16,448), counted from the op's start by the
    # cost pass but made after, are taken off: 245,696 elements.
    x, w, g = torch.randn(2, 64, 32, 32), torch.randn(64, 64, 2, 2), torch.randn(2, 64, 16, 16)
    assert conv_backward(x, w, g, (2, 2), (0, 0)) == 245_696 * F32
    # Unstrided (output 31x31), the larger phase is the weight gradient's: the input and the
    # output's gradient reordered, 131,072 + 2*64*31*31 = 254,080 elements.
    g = torch.randn(2, 64, 31, 31)
    assert conv_backward(x, w, g, (1, 1), (0, 0)) == 254_080 * F32


def test_a_large_weights_gradient_is_held_blocked_beside_the_plain_one():
    # Wide ResNet-50's layer3 3x3 conv, 512 channels at 16x16 -> 8x8 (stride 2): the input
    # and output gradient reordered are 2*512*256 + 2*512*64 = 327,680 elements, but the
    # weight's gradient (512*512*9 = 2,359,296) is computed blocked, then copied into the plain
    # one while the blocked one lives: 2,359,296 elements beside the gradients, 9.4 MB the
    # step had left out (its first block read 0.72 of the measured peak).
    x, w, g = torch.randn(2, 512, 16, 16), torch.randn(512, 512, 3, 3), torch.randn(2, 512, 8, 8)
    weight_only = (False, True, False)
    assert conv_backward(x, w, g, (2, 2), (1, 1), mask=weight_only) == 2_359_296 * F32
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(512, 512, 1), nn.Conv2d(512, 512, 3, stride=2, padding=1))
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


def test_a_frozen_convolutions_input_gradient_counts_each_phase_once():
    # A 3x3 conv, 64 channels at 32x32, its weight frozen: only the input's gradient. While
    # oneDNN computes it, the output's gradient (131,072), the weight (64*64*9 = 36,864) and
    # the result (131,072) are reordered and the gradient itself does not exist yet: 167,936
    # elements beyond it, where every buffer had been counted beside it (1.17x measured).
    x, w, g = torch.randn(2, 64, 32, 32), torch.randn(64, 64, 3, 3), torch.randn(2, 64, 32, 32)
    assert conv_backward(x, w, g, (1, 1), (1, 1), mask=(True, False, False)) == 167_936 * F32
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(64, 64, 1), nn.Conv2d(64, 64, 3, padding=1))
    model[1].requires_grad_(False)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


@pytest.mark.parametrize(
    "conv",
    [
        lambda: nn.Conv2d(64, 64, 2, stride=2),  # ConvNeXt's downsampling
        lambda: nn.Conv2d(64, 64, 3, stride=2, padding=1),
        lambda: nn.Conv2d(64, 128, 1, stride=2),
        lambda: nn.Conv2d(40, 16, 3, stride=2, padding=1),
    ],
    ids=["2x2-s2", "3x3-s2", "1x1-s2", "40-channels"],
)
def test_a_strided_convolutions_step_peak_is_the_measured_one(conv):
    torch.manual_seed(0)
    first = conv()
    model = nn.Sequential(nn.Conv2d(first.in_channels, first.in_channels, 1), first)
    x = torch.randn(2, first.in_channels, 32, 32)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


@pytest.mark.parametrize(
    ("x", "w", "groups", "elements"),
    [
        # ConvNeXt's first stage, a 7x7 depthwise conv of 40 channels at 32x32: oneDNN reorders
        # nothing for its weight gradient but unfolds one channel of one image (32*32 positions
        # x 49 kernel values = 50,176), with four kernels per channel (4*40*49 = 7,840) and 64
        # more: 232,320 bytes, the profiler's figure.
        ((2, 40, 32, 32), (40, 1, 7, 7), 40, 50_176 + 7_840 + 64),
        # A 3x3 one reorders its input and output gradient, 2 x 2*48*32*32 (40 channels padded
        # to 48), beside its blocked weight gradient (48*9), 72 more than the 40*9 it returns.
        ((2, 40, 32, 32), (40, 1, 3, 3), 40, 2 * 2 * 48 * 32 * 32 + 72),
        # ResNeXt's 32x4d, 128 channels in groups of 4 at 16x16: one group of one image
        # unfolded (256 positions x 4 channels x 9 = 9,216), four copies of the weight
        # (4 x 128*4*9 = 18,432) and 64 more: 110,848 bytes, the profiler's figure.
        ((2, 128, 16, 16), (128, 4, 3, 3), 32, 9_216 + 18_432 + 64),
        # Groups of 16 work in blocks: the input and output gradient reordered.
        ((2, 128, 16, 16), (128, 16, 3, 3), 8, 2 * 2 * 128 * 16 * 16),
        # ViT's patch embedding, 3 -> 192 channels, 16x16 patches of a 128x128 image: a kernel
        # 15 wide or more takes the im2col kernel, 8*8 patches x 3*256 values = 49,152, four
        # copies of the 147,456-value weight and 64: 2,556,160 bytes, the profiler's figure.
        ((2, 3, 128, 128), (192, 3, 16, 16), 1, 49_152 + 4 * 147_456 + 64),
    ],
    ids=["depthwise-7x7", "depthwise-3x3", "groups-of-4", "groups-of-16", "vit-patches"],
)
def test_a_grouped_weight_gradients_workspace(x, w, groups, elements):
    x, w = torch.randn(*x), torch.randn(*w)
    patches = w.shape[-1] == 16  # stride 16, no padding
    stride, pad = (16, 0) if patches else (1, w.shape[-1] // 2)
    g = torch.randn(x.shape[0], w.shape[0], *(d // stride for d in x.shape[2:]))
    held = conv_backward(x, w, g, (stride,) * 2, (pad, pad), groups, mask=(False, True, True))
    assert held == elements * F32


@pytest.mark.parametrize(
    ("conv", "shape"),
    [
        (lambda: nn.Conv1d(64, 64, 4, padding=3, groups=64), (2, 64, 256)),  # Mamba's conv
        (lambda: nn.Conv1d(64, 64, 128, padding=64, groups=16), (2, 64, 200)),  # wav2vec2's
        (lambda: nn.Conv1d(64, 64, 15, padding=7), (2, 64, 256)),
        (lambda: nn.Conv2d(8, 64, 16, stride=16), (2, 8, 128, 128)),  # a patch embedding
    ],
    ids=["depthwise-1d-4", "positional-1d-128", "wide-1d-15", "patches-16"],
)
def test_a_wide_or_1d_convolutions_step_peak_is_the_measured_one(conv, shape):
    # Before: 1.25x (Mamba's), 0.47 (wav2vec2's positional conv), 0.35 and 0.91.
    torch.manual_seed(0)
    wide = conv()
    pointwise = nn.Conv1d if wide.weight.dim() == 3 else nn.Conv2d
    model = nn.Sequential(pointwise(shape[1], shape[1], 1), wide)
    x = torch.randn(*shape)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


@pytest.mark.onednn_avx512
@pytest.mark.parametrize("frozen", [False, True], ids=["trained", "frozen"])
@pytest.mark.parametrize(
    ("conv", "channels"),
    [
        (lambda: nn.Conv2d(128, 128, 3, padding=1, groups=32), 128),  # ResNeXt: groups of 4
        (lambda: nn.Conv2d(48, 96, 7, stride=2, padding=3, groups=48), 48),  # FastViT: 1 -> 2
        (lambda: nn.Conv2d(64, 32, 3, padding=1, groups=32), 64),  # 2 -> 1 a group
        (lambda: nn.Conv2d(64, 64, 3, padding=1, groups=8), 64),  # groups of 8, in blocks
        (lambda: nn.Conv2d(64, 128, 3, padding=1, groups=2), 64),  # ResNeSt's radix 2: 32 -> 64
        (lambda: nn.Conv2d(64, 64, 3, stride=2, padding=1, groups=2), 64),  # a second buffer
    ],
    ids=["resnext", "multiplier", "reducer", "blocks", "resnest", "strided-groups-of-32"],
)
def test_a_grouped_convolutions_step_peak_is_the_measured_one(conv, channels, frozen):
    # Before: up to 1.5x (the reducer), 1.26x (ResNeXt's), 1.24x (groups of 8, frozen), 1.11x
    # (ResNeSt's, frozen), 0.89 (strided groups of 32, frozen).
    torch.manual_seed(0)
    grouped = conv().requires_grad_(not frozen)
    model = nn.Sequential(nn.Conv2d(channels, channels, 1), grouped)
    x = torch.randn(2, channels, 16, 16)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


@pytest.mark.onednn_avx512
@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels-last"])
def test_a_depthwise_7x7_step_peak_is_the_measured_one(channels_last):
    # Channels-last (ConvNeXt after its first downsample), the weight gradient's buffer is 256
    # rows of the kernel's values per channel: 80 * 49 * 256 * 4 = 4,014,080 bytes, 25x the
    # 80x16x16 input; it had been left out.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(80, 80, 1), nn.Conv2d(80, 80, 7, padding=3, groups=80))
    x = torch.randn(2, 80, 16, 16)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


class Scale(nn.Module):
    """ConvNeXt's layer scale: the output times a learned per-channel gamma."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(channels, 1, 1))

    def forward(self, x):
        return x * self.gamma


def test_a_permuted_layer_norm_copies_its_input():
    # LayerNorm2d's CPU kernel normalizes a contiguous copy of its permuted input, forward and
    # backward: at the backward's peak, 2*64*32*32*4 = 524,288 bytes the tool had left out
    # (0.91 of the measured step). The kernel's two 256-byte partial sums are still left out.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(64, 64, 1), LayerNorm2d(64), nn.Conv2d(64, 64, 2, stride=2))
    x = torch.randn(2, 64, 32, 32)
    estimate, real = profile_model(model, x, mode="train").peak_memory_bytes, measured(model, (x,))
    assert real - estimate == 512


def test_a_channels_last_slow_convolution_copies_its_output_gradient():
    # After LayerNorm2d the 1x1 convs see a channels-last input and take the slow path (batch
    # 2), whose backward copies the contiguous output gradient (made by the layer scale)
    # channels-last for each gradient in turn: 2*40*32*32*4 = 327,680 bytes at the peak,
    # left out before (ConvNeXt's MLP).
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(40, 40, 1),
        LayerNorm2d(40),
        nn.Conv2d(40, 160, 1),
        nn.GELU(),
        nn.Conv2d(160, 40, 1),
        Scale(40),
    )
    x = torch.randn(2, 40, 32, 32)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


def test_a_batch_norms_backward_allocates_the_input_gradient_twice():
    # ATen's CPU kernel, for dense operands in training, allocates the input's gradient, then
    # again, freeing the first as the second replaces it: one input-sized buffer (2*64*18*18 =
    # 41,472 elements) beside the gradients. An expanded output gradient (a sum loss taken on
    # the norm's output, strides 0) takes another path, without it.
    x = torch.randn(2, 64, 18, 18)
    stats = (torch.randn(64),) * 5
    args = (*stats, True, 1e-5, [True, True, True])
    for grad, held in (
        (torch.randn(2, 64, 18, 18), 41_472 * F32),
        (torch.ones(()).expand(x.shape), 0),
    ):
        shapes = (*strided(grad, x), *strided(*stats), *args[5:])
        assert workspace_bytes("native_batch_norm_backward", shapes, {}, None, F32) == held
    # ConvMixer's head: its last norm's backward, at the step's start, sets the peak.
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(64, 64, 1),
        nn.ReLU(),
        nn.BatchNorm2d(64),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


class Patches(nn.Module):
    """MLP-Mixer's stem: 16x16 patches, flattened and transposed into tokens, then a norm."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.norm = nn.Conv2d(3, 64, 16, stride=16), nn.LayerNorm(64)

    def forward(self, x):
        return self.norm(self.proj(x).flatten(2).transpose(1, 2))


def test_a_channels_last_output_gradient_is_copied_for_a_contiguous_convolution():
    # The tokens' gradient reaches the conv's output as a transposed view, channels-last dense:
    # ATen copies it contiguous (2*64*8*8*4 = 32,768 bytes) before the weight gradient's im2col
    # buffer, the step's peak. mixer_s16's step read 0.997 of measured without.
    torch.manual_seed(0)
    model, x = Patches(), torch.randn(2, 3, 128, 128)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


def test_a_3d_kernel_one_wide_and_high_takes_the_slow_path():
    # R(2+1)D's temporal 3x1x1 convolution, unstrided: ATen takes slow_conv3d (as for a 1x1
    # kernel), whose columns are 144 channels x 3 x 8*32*32 positions = 3,538,944 elements,
    # where oneDNN's reorders had been counted (0.72 of measured; r2plus1d_18's step 0.979).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv3d(144, 144, 1), nn.Conv3d(144, 64, (3, 1, 1), padding=(1, 0, 0)))
    x = torch.randn(1, 144, 8, 32, 32)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


class TokensToImage(nn.Module):
    """An attention's output tokens put back into an image (a diffusers VAE's attention block):
    transposed and reshaped, then convolved."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.conv = nn.Linear(64, 64), nn.Conv2d(64, 64, 3, padding=1)

    def forward(self, x):
        return self.conv(self.proj(x).transpose(-1, -2).reshape(x.shape[0], 64, 32, 32))


@pytest.mark.onednn_avx512
@pytest.mark.parametrize(
    ("cin", "cout", "kernel", "groups"),
    [(64, 64, 3, 1), (64, 128, 3, 8), (64, 64, 3, 64), (32, 48, 3, 1)],
)
def test_a_channels_last_convolutions_bias_gradient_is_held_beside_its_weights(
    cin, cout, kernel, groups
):
    # A channels-last convolution's weight gradient holds its bias's gradient too (4 bytes an
    # output channel, computed in its blocks) while the plain weight gradient is written: the
    # step read 4 x cout bytes under measured (a grouped or depthwise 3x3 too).
    torch.manual_seed(0)
    conv = nn.Conv2d(cin, cout, kernel, padding=kernel // 2, groups=groups)
    model = nn.Sequential(nn.Conv2d(cin, cin, 1), conv).to(memory_format=torch.channels_last)
    x = torch.randn(2, cin, 16, 16).to(memory_format=torch.channels_last)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


def test_tokens_reshaped_into_an_image_at_batch_1_are_copied_contiguous():
    # At batch 1 the image is strided (64, 1, 2048, 64): dense channels-last to is_contiguous,
    # which ignores the size-1 batch, but contiguous to ATen's suggest_memory_format, which
    # reads its stride. So the convolution runs contiguous and copies its input, 1x64x32x32
    # floats = 262,144 bytes, in the forward and again in the backward beside the output's
    # gradient. Fake tensors had strided the view (65536, 1, 2048, 64), channels-last: the
    # step read 0.84 of measured, eval 262,144 bytes under.
    torch.manual_seed(0)
    model, x = TokensToImage(), torch.randn(1, 1024, 64)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


class VaeAttention(nn.Module):
    """A diffusers VAE decoder's attention block, cut down: the image as tokens, projected,
    put back into an image, the residual added, then upsampled and convolved."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.conv = nn.Linear(32, 32), nn.Conv2d(32, 32, 3, padding=1)

    def forward(self, x):
        b, c, h, w = x.shape
        tokens = self.proj(x.view(b, c, h * w).transpose(1, 2))
        y = tokens.transpose(-1, -2).reshape(b, c, h, w) + x
        return self.conv(nn.functional.interpolate(y, scale_factor=2.0, mode="nearest"))


def test_a_residual_added_to_tokens_reshaped_at_batch_1_keeps_eager_torchs_layout():
    # The sum keeps the reshaped tokens' strides (1x32x16x16 strided (32, 1, 512, 32)), as
    # TensorIterator lays out its result, so the upsample and the convolution run contiguous.
    # Fake tensors had laid the sum out channels-last, and the upsample and the convolution
    # after it too: the step read 151,552 bytes under the measured peak.
    torch.manual_seed(0)
    model, x = VaeAttention(), torch.randn(1, 32, 16, 16)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


class PermutedLinear(nn.Module):
    """An image permuted channels-last into a linear (a channels-last MLP): neither 2-D nor
    contiguous, so ``F.linear`` goes through ``matmul`` and adds its bias after, in place."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 32)

    def forward(self, x):
        return self.fc(x.permute(0, 2, 3, 1))


def test_a_linear_on_a_permuted_input_adds_its_bias_in_place():
    # Eager ATen adds the bias in place on plain tensors and out of place on fakes (and under
    # any dispatch mode): the product and the sum were both live, +21% at batch 1.
    torch.manual_seed(0)
    model, x = PermutedLinear(), torch.randn(1, 64, 16, 16)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


class UnfoldLinear(nn.Module):
    """Patches by ``nn.Unfold`` (im2col) into a linear: the step's first op makes a new
    storage, which the linear's call holds while it copies it for its product."""

    def __init__(self) -> None:
        super().__init__()
        self.unfold, self.fc = nn.Unfold(3, padding=1), nn.Linear(8 * 9, 16)

    def forward(self, x):
        return self.fc(self.unfold(x).transpose(1, 2))


def test_the_steps_first_op_output_lives_as_long_as_eager_holds_it():
    # 2x8x16x16 in: the patches (2x72x256 floats, 147,456 bytes) are held by the linear's
    # argument through its contiguous copy (147,456) and its product (2x256x16, 32,768), its
    # bias added in place. The first op's output had been taken for a step input's and freed
    # at its last reader, the copy: 9.4% under.
    torch.manual_seed(0)
    model, x = UnfoldLinear(), torch.randn(2, 8, 16, 16)
    weights = (72 * 16 + 16) * F32
    by_hand = weights + x.nbytes + 147_456 + 147_456 + 32_768
    assert profile_model(model, x, mode="train").peak_memory_bytes == by_hand
    assert measured(model, (x,)) == by_hand


def video_net() -> nn.Module:
    """3-D convolutions of the sizes oneDNN treats apart: 8 input channels under a 3x3x3
    kernel, a depthwise one, groups of 4, groups of 6 (not of fours)."""
    return nn.Sequential(
        nn.Conv3d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv3d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv3d(16, 16, 3, stride=2, padding=1, groups=16),
        nn.Conv3d(16, 32, 3, padding=1, groups=4),
        nn.Conv3d(32, 24, 3, padding=1, groups=4),
    )


def test_a_3d_convolution_nets_step_and_eval_peaks_match_the_profiler():
    # Before: the step read 1,121,864 bytes (+3.2%), eval 771,424 (+1.8%): 8 input channels
    # charged a reordered input; the depthwise result's copy, the 3-D weight gradients' and
    # groups of 6's im2col kernels unmodelled (a lone Conv3d of each read -25% to +25%).
    torch.manual_seed(0)
    model, x = video_net(), torch.randn(2, 3, 8, 16, 16)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))
    model.eval()
    with torch.inference_mode():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = model(x)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    held = sum(p.nbytes for p in model.parameters()) + x.nbytes
    assert out is not None and profile_model(model, x).peak_memory_bytes == held + peak


@pytest.mark.parametrize(
    ("layer", "shape"),
    [
        (nn.MaxPool2d(2), (2, 8, 16, 16)),
        (nn.AvgPool2d(3, 1, 1, count_include_pad=False), (2, 8, 16, 16)),
        (nn.AdaptiveAvgPool2d(3), (2, 8, 16, 16)),
        (nn.ReflectionPad2d(2), (2, 8, 16, 16)),
        (nn.GroupNorm(4, 8), (2, 8, 16, 16)),
        (nn.LogSoftmax(dim=1), (2, 8, 16, 16)),
        (nn.GELU(), (2, 8, 16, 16)),
        (nn.MaxPool1d(3, 2), (2, 8, 32)),
        (nn.ReplicationPad3d(1), (2, 8, 8, 8, 8)),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, nn.Module) else None,
)
def test_a_last_layers_backward_copies_the_sum_losss_expanded_gradient(layer, shape):
    # The layer is the model's last, so its output's gradient is the sum loss's seed expanded
    # (strides 0); these backwards read it through ``.contiguous()`` (GELU's exact form:
    # oneDNN's kernel) and copy it whole. Before: 8% to 30% under (a 2x8x16x16 map's copy).
    torch.manual_seed(0)
    conv = {3: nn.Conv1d, 4: nn.Conv2d, 5: nn.Conv3d}[len(shape)]
    model, x = nn.Sequential(conv(3, shape[1], 1), layer), torch.randn(shape[0], 3, *shape[2:])
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


@pytest.mark.parametrize(
    ("grad", "x", "copies"),
    [
        (lambda: torch.ones(()).expand(2, 8, 16, 16), lambda: torch.randn(2, 8, 16, 16), 1),
        (lambda: torch.ones(2, 8, 16, 16), lambda: torch.randn(2, 8, 16, 16), 0),
        (lambda: torch.ones(2, 8, 16, 16).transpose(2, 3), lambda: torch.randn(2, 8, 16, 16), 2),
        (lambda: torch.ones(2, 8, 16, 32)[..., :16], lambda: torch.randn(2, 8, 16, 16), 1),
        (lambda: torch.ones(2, 8, 16, 16).transpose(2, 3), lambda: torch.randn(2, 8, 16, 16).mT, 0),
    ],
    ids=["expanded", "contiguous", "transposed", "sliced", "input-transposed"],
)
def test_the_exact_gelus_backward_copies_what_onednn_cannot_read(grad, x, copies):
    # On a contiguous input the exact GELU's backward is oneDNN's: a gradient that is not
    # contiguous is copied, and one dense in another layout gets a contiguous result too;
    # on any other input ATen's own kernel reads every stride. Counted against the profiler.
    grad, x = grad(), x()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = torch.ops.aten.gelu_backward(grad, x)
    made = sum(e.nbytes() for e in prof.profiler.kineto_results.events() if e.nbytes() > 0)
    held = workspace_bytes("gelu_backward", strided(grad, x), {}, strided(out)[0], F32)
    assert held == copies * out.numel() * F32 == made - out.numel() * F32


def test_mish_backward_is_one_kernel():
    # mish_backward has a fused CPU kernel and no meta one: priced as what it decomposes into,
    # the step held that formula's four temporaries at its backward (1.9x the measured peak).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 1), nn.Mish(), nn.Conv2d(32, 4, 1))
    x = torch.randn(2, 3, 32, 32)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


def test_fractional_max_pooling_is_priced_forward_and_backward():
    # 2x8x16x16 pooled to 8x8 with 2x2 windows: one comparison per window element, and one add
    # per output gradient in the backward; its expanded gradient is copied as max pooling's.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.FractionalMaxPool2d(2, output_size=8))
    x = torch.randn(2, 3, 16, 16)
    prof = profile_model(model, x, mode="train")
    assert not prof.coverage.unsupported_ops
    pooled = 2 * 8 * 8 * 8
    conv, mapped = 2 * 16 * 16 * 8 * 3, 2 * 8 * 16 * 16  # the 1x1 convolution's MACs, outputs
    forward = 2 * conv + mapped + 4 * pooled + pooled  # its bias, the windows, the sum loss
    backward = pooled + 2 * conv + mapped  # the pool's adds, the weight's and bias' gradients
    assert prof.flops == forward + backward
    assert prof.peak_memory_bytes == measured(model, (x,))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_an_embedding_bags_backward_holds_its_sorted_indices(mode):
    # 64 bags of 5 of 2,000 rows of 32: sum and mean sort the 320 indices and gather through
    # them (three int64 arrays of 320), and sum, whose forward kept no bag per index, makes
    # that map again (321 int64); max gathers the winning rows (64 x 32 int64) and their
    # gradients (64 x 32 float), and the 64 bags. Before: 1.2% to 6.7% under. Torch 2.4's
    # joint graph makes the map with ops of its own and calls the dense kernel by name.
    torch.manual_seed(0)
    model = nn.Sequential(nn.EmbeddingBag(2000, 32, mode=mode), nn.Linear(32, 4))
    x = torch.randint(0, 2000, (64, 5))
    ours = profile_model(model, x, mode="train").peak_memory_bytes
    assert 0 <= measured(model, (x,)) - ours <= 8  # a scalar eager wraps in a tensor


@pytest.mark.parametrize(
    ("grad", "copied"),
    [
        (lambda: torch.randn(2, 4, 64, 16), True),  # (batch, heads, length, dim) contiguous
        (lambda: torch.randn(2, 64, 4, 16).transpose(1, 2), False),  # heads inside the length
        (lambda: torch.ones(()).expand(2, 4, 64, 16), True),  # the sum loss's seed
    ],
    ids=["contiguous", "heads-inside", "expanded"],
)
def test_the_cpu_flash_backward_copies_the_output_gradient_into_its_layout(grad, copied):
    # One block of 32 queries by 64 keys: scores and score gradients (2 x 32 x 64 floats) and a
    # row sum (32), and the output's gradient copied into (batch, length, heads, dim) unless it
    # is laid out so already. Counted against the profiler.
    q = torch.randn(2, 64, 4, 16).transpose(1, 2)
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q)
    g = grad()
    backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        grads = backward(g, q, q, q, out, lse, 0.0, False)
    live = peak = 0
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    held = workspace_bytes(
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        strided(g, q, q, q, out, lse),
        {},
        strided(*grads),
        F32,
    )
    expected = (2 * 32 * 64 + 32 + (g.numel() if copied else 0)) * F32
    assert held == expected == peak - sum(t.numel() * F32 for t in grads)


class Then(nn.Module):
    """A Linear, then a tensor function of its output, scaled by a weight (its gradient
    reaches the function dense, as inside a network)."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.lin, self.fn = nn.Linear(16, 64), fn
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return self.fn(self.lin(x)) * self.scale


@pytest.mark.parametrize(
    "fn",
    [
        lambda h: h.topk(8, -1).values,
        lambda h: h.max(-1).values,
        lambda h: h.gather(-1, torch.arange(64).flip(0).expand(8, 32, 64)),
        lambda h: h.index_select(1, torch.arange(0, 32, 8)),
    ],
    ids=["topk", "max-dim", "gather", "index_select"],
)
def test_a_selections_gradient_fills_its_zeros_in_place(fn):
    # ATen's gradient of topk, max(dim), gather and index_select makes a tensor of zeros and
    # scatters or adds the output's gradient into it in place on plain tensors (out of place
    # only for a tensor subclass, as fakes are): one input-sized gradient, not two.
    torch.manual_seed(0)
    model, x = Then(fn), torch.randn(8, 32, 16)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


@pytest.mark.parametrize(
    "fn",
    [lambda h: h.logsumexp(-1), lambda h: torch.fft.rfft(h, dim=1).abs()],
    ids=["logsumexp", "rfft-along-the-sequence"],
)
def test_a_reductions_and_ffts_temporaries_count_in_a_step(fn):
    # logsumexp holds exp(x - max) and the maxima beside its result; an FFT along a dimension
    # that is not the innermost copies its input with the other dimensions first (FNet's).
    torch.manual_seed(0)
    model, x = Then(fn), torch.randn(8, 32, 16)
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))


class GroupedFallback(nn.Module):
    """transformers 5's stand-in for ``_grouped_mm`` (torch 2.8 and older on the CPU, float32
    under export): 4 experts' (64, 128) products over 256 rows sorted by expert."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 64, 128))
        self.register_buffer("offs", torch.tensor([64, 128, 192, 256]))

    def forward(self, x):
        return torch.ops.transformers.grouped_mm_fallback(x, self.weight, self.offs)


def test_a_custom_ops_two_gradients_are_written_once():
    # The backward op returns the input's and the weights' gradients. Priced on export's
    # recorded values, the two it ran were counted besides them as tensors it made and let
    # go: 131,072 B over the measured step. (Squared, so that the gradient reaching the op
    # is contiguous: from the sum, each expert's product copies its rows of the expanded
    # gradient while it runs, a size its offsets decide, which no rule reads.)
    pytest.importorskip("transformers.integrations.moe", reason="transformers 5's op")
    torch.manual_seed(0)
    model, x = GroupedFallback(), torch.randn(256, 64)

    def squared(out):
        return (out * out).sum()

    ours = profile_model(model, x, mode="train", optimizer=None, loss=squared)
    assert ours.trace.method == "joint"
    assert ours.peak_memory_bytes == measured(model, (x,), loss=squared)


class _Masked(torch.autograd.Function):
    """A mask kept on ``ctx`` as an attribute, not through ``save_for_backward``."""

    @staticmethod
    def forward(ctx, x, mask):
        ctx.mask = mask
        return x * mask

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.mask, None


class KeptOnCtx(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wide = nn.Linear(1024, 64)

    def forward(self, x):
        h = self.wide(x)
        return _Masked.apply(h, h > 0)


def test_a_tensor_kept_on_a_custom_functions_ctx_lives_to_the_end_of_the_backward():
    # Saved tensors are freed once their node has run; a ctx attribute lives with the node,
    # which eager's ``loss.backward()`` holds until it returns. The peak is later, in the
    # wide layer's gradients: the 256 x 64 boolean mask (16,384 B) is still live there. Its
    # last reader had freed it: 16,384 B under the measured step (so was Jamba's routing
    # offsets, 64 B, on torch 2.8 and older).
    torch.manual_seed(0)
    model, x = KeptOnCtx(), torch.randn(256, 1024)
    ours = profile_model(model, x, mode="train", optimizer=None)
    assert ours.trace.method == "joint"
    assert ours.peak_memory_bytes == measured(model, (x,))
