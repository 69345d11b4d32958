"""Memory figures derived by hand from the contract's definitions:

* ``weights_bytes``: bytes of the unique parameters and buffers;
* ``activation_peak_bytes``: liveness over the graph's node order. Only node outputs that own new
  storage count (views and in-place ops alias their input and allocate nothing); graph inputs,
  parameters and buffers are not activations; a tensor lives from its producing node to its last
  consumer, inclusive (an op's inputs are live while it writes its output), graph outputs to the
  end. A storage stays live while any alias of it (a view, an in-place result) is still to be
  read;
* ``peak_memory_bytes = weights_bytes + input bytes + activation_peak_bytes``.

Also: a model built on the ``meta`` device profiles exactly like the same model built normally,
and profiling it allocates no real weights.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import skip_before_transformers_5

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402

F32 = 4  # bytes per float32 element


def chain(inplace: bool):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(inplace=inplace), nn.Linear(128, 32)).eval()


WEIGHTS = (64 * 128 + 128 + 128 * 32 + 32) * F32  # 12,448 params = 49,792 bytes
INPUT = 4 * 64 * F32  # x: [4, 64] = 1,024 bytes
H1 = 4 * 128 * F32  # Linear(64, 128) output: 2,048 bytes
OUT = 4 * 32 * F32  # Linear(128, 32) output: 512 bytes


def test_chain_out_of_place_relu():
    # node      live after it runs               bytes
    # linear1   h1                                2,048
    # relu      h1 (read by relu) + r             4,096  <- peak
    # linear2   r (read by linear2) + out         2,560
    prof = profile_model(chain(inplace=False), (torch.randn(4, 64),))
    assert prof.weights_bytes == WEIGHTS
    assert prof.activation_peak_bytes == H1 + H1
    assert prof.peak_memory_bytes == WEIGHTS + INPUT + H1 + H1  # 54,912


def test_chain_in_place_relu():
    # relu(inplace=True) writes into h1 and allocates nothing; h1's storage is read by linear2:
    # linear1   h1                                2,048
    # relu      h1 (aliased by its result)        2,048
    # linear2   h1 (read through the alias) + out 2,560  <- peak
    prof = profile_model(chain(inplace=True), (torch.randn(4, 64),))
    assert prof.weights_bytes == WEIGHTS
    assert prof.activation_peak_bytes == H1 + OUT
    assert prof.peak_memory_bytes == WEIGHTS + INPUT + H1 + OUT  # 53,376


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(64, 64)
        self.l2 = nn.Linear(64, 64)

    def forward(self, x):
        a = self.l1(x)
        b = torch.relu(a)
        c = self.l2(b)
        return c + a


def test_residual_keeps_the_skip_tensor_alive():
    # every activation is [4, 64] float32 = 1,024 bytes. As in eager Python, a local holds its
    # tensor until it is rebound or the forward returns, after its last reader too (b here):
    # l1    a                   1,024
    # relu  a, b                2,048
    # l2    a (skip), b, c      3,072
    # add   a, b, c, d          4,096  <- peak (b is still the local ``b``)
    t = 4 * 64 * F32
    prof = profile_model(Residual().eval(), (torch.randn(4, 64),))
    assert prof.activation_peak_bytes == 4 * t
    assert prof.weights_bytes == 2 * (64 * 64 + 64) * F32
    assert prof.peak_memory_bytes == prof.weights_bytes + t + 4 * t


class ViewThenReduce(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(64, 128)

    def forward(self, x):
        a = self.l1(x)  # [4, 128]: 2,048 bytes
        v = a.view(4, 2, 64)  # alias of a: nothing new
        r = torch.relu(v)  # [4, 2, 64]: 2,048 bytes
        return r.sum(-1)  # [4, 2]: 32 bytes


def test_view_allocates_nothing_but_keeps_its_base_alive():
    # l1    a              2,048
    # view  a              2,048
    # relu  a (via v), r   4,096: a's storage is read through the view
    # sum   a, r, out      4,128  <- peak: the locals a and v still hold a's storage
    prof = profile_model(ViewThenReduce().eval(), (torch.randn(4, 64),))
    assert prof.activation_peak_bytes == 2 * (4 * 128 * F32) + 4 * 2 * F32


def test_float64_doubles_every_byte():
    prof = profile_model(chain(inplace=False).double(), (torch.randn(4, 64, dtype=torch.float64),))
    assert prof.weights_bytes == 2 * WEIGHTS
    assert prof.activation_peak_bytes == 2 * (H1 + H1)
    assert prof.peak_memory_bytes == 2 * (WEIGHTS + INPUT + H1 + H1)


def test_a_transposed_conv_training_step_holds_what_its_kernels_hold():
    """Issue 35: a decoder's last layer, BatchNorm2d(32) then ConvTranspose2d(32, 3, 4, stride
    2, padding 1), one training step at 4x32x64x64, loss ``out.sum()``. torch.profiler
    measures 7,084,308 bytes above the weights and the input, as derived here."""
    y = 4 * 32 * 64 * 64 * F32  # the norm's output, saved for the convolution's backward
    stats = 2 * 32 * F32  # the norm's saved mean and inverse deviation
    out = 4 * 3 * 128 * 128 * F32  # the transposed convolution's output: 786,432 bytes
    grads = y + 32 * 3 * 4 * 4 * F32 + 3 * F32  # the conv's input, weight and bias gradients
    # node                     live while it runs                                  bytes
    # batch_norm               y, stats                                        2,097,408
    # convolution              y, stats, out, its workspace 2,687,488
    #                          (tests/costs/test_workspace.py)                  5,571,328
    # sum, ones_like, expand   y, stats, the loss and the ones (4 + 4; out is freed after
    #                          sum; the expanded gradient is a view, strides 0)
    # convolution_backward     y, stats, loss, ones, grads, and its workspace:     7,084,308
    #                          ATen's contiguous copy of the expanded gradient (786,432),
    #                          y reordered in blocks of 16 for the weight gradient
    #                          (2,097,152; the 3-channel output gradient stays plain)
    #                          <- peak
    # batch_norm_backward      the conv's input gradient, its own (y is freed): less
    # (Before issue 35: the forward convolution's workspace was 7,634,944 and the backward's
    # 6,291,456 without the copy: a peak of 10,518,784 in the forward, +48%.)
    workspace = out + y
    prof = profile_model(
        nn.Sequential(nn.BatchNorm2d(32), nn.ConvTranspose2d(32, 3, 4, stride=2, padding=1)),
        (torch.randn(4, 32, 64, 64),),
        mode="train",
    )
    assert prof.activation_peak_bytes == y + stats + 4 + 4 + grads + workspace == 7_084_308


def test_buffers_count_in_weights_bytes_with_their_own_dtype():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 32)
    ).eval()
    prof = profile_model(model, (torch.randn(4, 64),))
    bn_params = 2 * 128  # weight, bias
    bn_buffers = 2 * 128 * F32 + 8  # running_mean, running_var (fp32), num_batches_tracked int64
    assert prof.params == 12_448 + bn_params
    assert prof.weights_bytes == WEIGHTS + bn_params * F32 + bn_buffers  # 51,848
    # linear1 2,048 -> bn 2,048 -> relu 2,048 -> linear2 512: two [4, 128] tensors at most,
    # and while the BatchNorm runs its scale and shift per channel, 2 x 128 x 4 bytes (the
    # profiler records 512 and 512 inside it)
    assert prof.activation_peak_bytes == 2 * H1 + 2 * 128 * F32


class ViewsItsWeight(nn.Module):
    """A buffer that views half of a weight, and two parameters cut from one tensor."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1000, 1)
        self.register_buffer("part", self.fc.weight.data[:, :500])
        whole = torch.ones(10, 4)
        self.a, self.b = nn.Parameter(whole[:5]), nn.Parameter(whole[5:])

    def forward(self, x):
        return self.fc(x) + self.part.sum() + (self.a @ self.b.T).sum()


@pytest.mark.parametrize("meta", [False, True])
def test_a_buffer_viewing_a_weight_adds_no_bytes_and_cut_parameters_add_theirs(meta):
    """The weights hold 1,000 + 1 floats of the Linear and 40 of the two halves: 4,164 bytes.
    The buffer is a view of the Linear's weight (it had added its 2,000 bytes again)."""
    with torch.device("meta" if meta else "cpu"):
        model = ViewsItsWeight().eval()
        x = torch.ones(2, 1000)
    assert profile_model(model, (x,)).weights_bytes == (1000 + 1 + 40) * F32


# --------------------------------------------------------------------------------------------
# meta device


FIGURES = (
    "flops",
    "macs",
    "flops_contraction",
    "params",
    "weights_bytes",
    "activation_peak_bytes",
    "peak_memory_bytes",
)


def figures(prof):
    return {key: getattr(prof, key) for key in FIGURES}


def test_meta_resnet18_profiles_like_the_real_one():
    torchvision = pytest.importorskip("torchvision")
    x = torch.randn(1, 3, 224, 224)
    real = torchvision.models.resnet18(weights=None).eval()
    with torch.device("meta"):
        meta = torchvision.models.resnet18(weights=None).eval()
    assert all(p.is_meta for p in meta.parameters())

    meta_prof = profile_model(meta, (x,))
    assert all(t.is_meta for t in [*meta.parameters(), *meta.buffers()])  # still no storage
    assert figures(meta_prof) == figures(profile_model(real, (x,)))
    assert meta_prof.params == 11_689_512  # torchvision's published num_params


def test_meta_small_bert_profiles_like_the_real_one():
    skip_before_transformers_5("its BERT reads the mask's values, which a meta model lacks")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=64,
    )
    ids = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(0))
    # No attention mask: Hugging Face looks at a mask's values to drop one that masks nothing,
    # which a meta model's fake mask cannot show (docs/metrics.md).
    kwargs = {"token_type_ids": torch.zeros(1, 16, dtype=torch.long)}
    torch.manual_seed(0)
    real = transformers.BertModel(cfg).eval()
    with torch.device("meta"):
        meta = transformers.BertModel(cfg).eval()
    assert all(p.is_meta for p in meta.parameters())

    # The taped forward, on fake tensors for the meta model, on real ones for the other; and
    # the export on request, on fake tensors for the meta model.
    for tier in (None, "dynamo"):
        meta_prof = profile_model(meta, (ids,), kwargs, tier=tier)
        real_prof = profile_model(real, (ids,), kwargs, tier=tier)
        assert all(p.is_meta for p in meta.parameters())
        assert figures(meta_prof) == figures(real_prof)
        assert meta_prof.trace.method == real_prof.trace.method == (tier or "eager")


_BIG_META_SCRIPT = textwrap.dedent(
    """
    import resource
    import torch
    from torch import nn
    from pytest_graphbudget import profile_model

    def peak_rss():  # bytes of memory actually touched (ru_maxrss is KiB on Linux)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def peak_vm():  # bytes of address space, also counting allocations never touched
        with open("/proc/self/status") as status:  # (e.g. to_empty() or torch.empty)
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024

    # warm the machinery (imports, tracer, dispatch, threads) on a tiny meta model first
    with torch.device("meta"):
        tiny = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    profile_model(tiny, (torch.randn(1, 8),))

    class Checked(nn.Sequential):  # FX cannot branch on a proxy: the taped forward, on fakes
        def forward(self, x):
            if x.dim() != 2:
                raise ValueError("2-D inputs only")
            return super().forward(x)

    D, N = 8192, 4  # 4 x (8192 x 8192 + 8192) params = 268,468,224: 1.07 GB in float32
    for kind in (nn.Sequential, Checked):
        with torch.device("meta"):
            big = kind(*[nn.Linear(D, D) for _ in range(N)])
        rss, vm = peak_rss(), peak_vm()
        prof = profile_model(big, (torch.randn(1, D),))
        print(prof.trace.method, prof.params, prof.weights_bytes, prof.macs, end=" ")
        print(peak_rss() - rss, peak_vm() - vm)
    """
)


def test_meta_model_allocates_no_weights():
    """Profiling a 1.07 GB model built on meta must not come near allocating 1.07 GB.

    Runs in a fresh interpreter so that the peak resident size measures this profile only."""
    root = str(Path(__file__).resolve().parents[2])  # the package, installed or not
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [sys.executable, "-c", _BIG_META_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line.split() for line in result.stdout.splitlines()[-2:]]
    assert [line[0] for line in lines] == ["fx", "eager"]  # FX's graph, then the tape
    D, N = 8192, 4
    for line in lines:
        params, weights_bytes, macs, rss, vm = map(int, line[1:])
        assert params == N * (D * D + D)
        assert weights_bytes == 4 * N * (D * D + D)
        assert macs == N * 1 * D * D
        assert rss < 256 * 2**20, f"peak RSS grew by {rss / 2**20:.0f} MiB while profiling"
        assert vm < 512 * 2**20, f"peak address space grew by {vm / 2**20:.0f} MiB profiling"
