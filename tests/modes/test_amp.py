"""``dtype="amp_float16"``: a model profiled as it runs under CUDA's autocast, on a machine
without a GPU. References: bytes counted by hand, and torch's own CUDA autocast run on fake
CUDA tensors (``torch.autocast("cuda")`` refuses without a GPU; its key is switched on by
hand, so the lists are torch's, not ours)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from pytest_graphbudget import profile_model
from pytest_graphbudget.compat import torch_at_least
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.hardware import Hardware
from pytest_graphbudget.modes import amp

BYTES = Hardware(
    name="bytes",
    description="1 GB/s, compute free, no launch cost: the eager estimate is bytes / 1e9",
    peak_flops={"float32": 1e30, "float16": 1e30, "bfloat16": 1e30},
    bandwidth=1e9,
)


def _linear_norm() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32)).eval()
    return model, torch.randn(4, 16)


def _bytes(prof) -> int:
    return round(prof.est_latency_s * 1e9)


def test_each_op_moves_the_bytes_of_the_dtype_cuda_autocast_gives_it():
    model, x = _linear_norm()
    # float32: addmm reads x (4x16x4), W (32x16x4) and b (32x4) and writes 4x32x4; the
    # layer norm reads 4x32x4 and its weight and bias (2x32x4) and writes 4x32x4, and the
    # mean and rstd of its 4 rows (4x4 each), which the CPU's kernel writes as CUDA's does.
    float32 = (256 + 2048 + 128 + 512) + (512 + 256 + 512 + 16 + 16)
    # autocast: x, W and b are cast to float16 first (read 4 bytes an element, write 2);
    # addmm reads the casts and writes float16; layer_norm is on CUDA's float32 list, so its
    # input is cast back up (read 2, write 4), and it writes float32, with its mean and rstd.
    casts = (256 + 128) + (2048 + 1024) + (128 + 64)
    addmm = 128 + 1024 + 64 + 256
    norm = (256 + 512) + (512 + 256 + 512 + 16 + 16)
    plain = profile_model(model, (x,), hardware=BYTES)
    mixed = profile_model(model, (x,), hardware=BYTES, dtype="amp_float16")
    again = profile_model(model, (x,), hardware=BYTES)
    assert _bytes(plain) == float32 == _bytes(again)
    assert _bytes(mixed) == casts + addmm + norm
    assert (mixed.dtype, plain.dtype) == ("float16", "float32")
    # the weights stay float32 in memory; the MACs are the model's
    assert mixed.weights_bytes == plain.weights_bytes == (16 * 32 + 32 + 2 * 32) * 4
    assert mixed.macs == plain.macs == 4 * 16 * 32


def test_a_meta_model_is_profiled_under_autocast_too():
    model, x = _linear_norm()
    with torch.device("meta"):
        meta = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32)).eval()
    real = profile_model(model, (x,), hardware=BYTES, dtype="amp_bfloat16")
    fake = profile_model(meta, (x.to("meta"),), hardware=BYTES, dtype="amp_bfloat16")
    assert _bytes(fake) == _bytes(real) == 7200
    assert fake.dtype == "bfloat16"


class _Ops(TorchDispatchMode):
    """Each op that computes something, with its first result's dtype."""

    SAME = dict.fromkeys(  # one op, by device: cuDNN's on CUDA
        ("cudnn_batch_norm", "native_batch_norm", "_native_batch_norm_legit_no_training"),
        "batch_norm",
    )

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in ("device", "empty", "_unsafe_view") or func.is_view:
            return out
        first = next(t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor))
        self.ops.append((self.SAME.get(name, name), str(first.dtype)))
        return out


class _Mixed(torch.nn.Module):
    """A convolution, batch and group norms, an interpolation, a layer norm, a linear, a
    float32 layer scale, attention by hand, exp, sum, pow, rsqrt, einsum and cumsum."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.gn = torch.nn.GroupNorm(2, 8)
        self.ln = torch.nn.LayerNorm(8)
        self.fc = torch.nn.Linear(8, 8)
        self.scale = torch.nn.Parameter(torch.ones(8))

    def forward(self, x):
        y = self.gn(self.bn(self.conv(x))) * 2
        y = torch.nn.functional.interpolate(y, scale_factor=2, mode="bilinear")
        t = self.ln(y.flatten(2).transpose(1, 2))
        q = self.fc(t) * self.scale
        a = torch.softmax(q @ q.transpose(1, 2), -1) @ q
        a = a + torch.exp(a).sum(-1, keepdim=True) + a.pow(2).mean(-1, keepdim=True).rsqrt()
        return torch.einsum("bij,bkj->bik", a, t).cumsum(-1)


@contextlib.contextmanager
def _torch_cuda_autocast(low):
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", low)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        torch.autocast_decrement_nesting()
        torch.clear_autocast_cache()
        torch.set_autocast_enabled("cuda", False)


def _on_fake_cuda(low) -> list[tuple[str, str]]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with torch.device("meta"):
        model = _Mixed().eval()
    ops = _Ops()
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = model.to_empty(device="cuda")
        x = torch.empty(2, 3, 8, 8, device="cuda")
        with _torch_cuda_autocast(low), torch.no_grad(), ops:
            model(x)
    return ops.ops


@pytest.mark.skipif(
    not torch_at_least(2, 14),
    reason="held on the pinned torch: 2.4's fake CUDA tensors call the CUDA runtime (bfloat16)",
)
@pytest.mark.parametrize("dtype", ["amp_float16", "amp_bfloat16"])
def test_the_profile_casts_as_torch_cuda_autocast_does(dtype):
    low = getattr(torch, amp.AMP[dtype])
    model, x, ops = _Mixed().eval(), torch.randn(2, 3, 8, 8), _Ops()
    with amp.cuda_autocast(dtype), torch.no_grad(), ops:
        model(x)
    expected = _on_fake_cuda(low)
    if low == torch.float16:
        # CUDA's float16 softmax writes float32 itself (half_to_float, no CPU kernel has it);
        # the profile casts first: the one difference, documented in amp.py
        i = ops.ops.index(("_softmax", "torch.float32"))
        assert ops.ops.pop(i - 1) == ("_to_copy", "torch.float32")
    assert ops.ops == expected
    assert ("native_layer_norm", "torch.float32") in expected  # what the test is about
    assert ("convolution", str(low)) in expected


@pytest.mark.skipif(
    not torch_at_least(2, 14),
    reason="held on the pinned torch: 2.4's fake CUDA tensors call the CUDA runtime (bfloat16)",
)
def test_attention_leaves_its_fast_path_as_under_cuda_autocast():
    """User trial: under CUDA's autocast a TransformerEncoderLayer leaves its fused fast path
    (it asks ``torch.is_autocast_enabled()``), and its products run in float16; under CPU
    autocast it took the fast path, in float32, uncast: vit_b_16's traffic 17% low."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def layer():
        torch.manual_seed(0)
        return torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0).eval()

    ops, model, x = _Ops(), layer(), torch.randn(2, 8, 32)
    with amp.cuda_autocast("amp_float16"), torch.no_grad(), ops:
        model(x)
    expected = _Ops()
    with torch.device("meta"):
        model = layer()
    with FakeTensorMode(allow_non_fake_inputs=True):
        model, x = model.to_empty(device="cuda"), torch.empty(2, 8, 32, device="cuda")
        with _torch_cuda_autocast(torch.float16), torch.no_grad(), expected:
            model(x)
    fused = {"_transformer_encoder_layer_fwd", "_native_multi_head_attention"}
    assert not fused & {name for name, _ in ops.ops + expected.ops}
    # the feed-forward and output products in float16, the norms in float32, as on CUDA
    # (the attention kernel itself differs by device: CPU's flash, the fake CUDA math path)
    kept = ("addmm", "native_layer_norm", "relu")
    assert [op for op in ops.ops if op[0] in kept] == [op for op in expected.ops if op[0] in kept]
    assert torch.backends.mha.get_fastpath_enabled()  # put back after the profile


def test_every_op_cuda_autocasts_and_cpu_does_not_has_a_policy():
    registered = torch._C._dispatch_get_registrations_for_dispatch_key
    cpu, cuda = ({n for n in registered(key) if n.startswith("aten::")} for key in amp.KEYS)
    known = amp.LOWER | amp.FLOAT32 | amp.FLOAT32_DTYPE | amp.PROMOTE | amp.UNREACHABLE
    missing = {n for n in cuda - cpu if n.removeprefix("aten::").split(".")[0] not in known}
    assert not missing, f"torch casts these on CUDA and amp.py has no policy: {missing}"


def test_the_policies_are_undone_after_the_profile():
    model, x = _linear_norm()
    profile_model(model, (x,), hardware=BYTES, dtype="amp_float16")
    with torch.autocast("cpu", dtype=torch.bfloat16):  # CPU autocast: its own lists again
        out = torch.nn.functional.layer_norm(torch.randn(2, 4).bfloat16(), (4,))
    assert out.dtype == torch.bfloat16


def _mlp() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return model, torch.randn(4, 16)


@pytest.mark.parametrize("dtype", ["amp_float16", "amp_bfloat16"])
def test_a_training_step_under_autocast_is_torchs_amp_recipe(dtype):
    """The forward and the loss under autocast, the backward and Adam outside it: the same
    products and updates as the float32 step (casts compute nothing). float16 adds a
    GradScaler: the loss scaled and its gradient (1 + 1), and each of the 676 gradient
    elements unscaled and checked for inf (2 each); bfloat16 needs none."""
    model, x = _mlp()
    plain = profile_model(model, (x,), mode="train", optimizer="adam")
    mixed = profile_model(model, (x,), mode="train", optimizer="adam", dtype=dtype)
    params = sum(p.numel() for p in model.parameters())
    scaled = dtype == "amp_float16"
    assert mixed.macs == plain.macs
    assert mixed.flops == plain.flops + (2 + 2 * params if scaled else 0)
    assert mixed.coverage.unsupported_ops == {}
    data = mixed.to_dict()
    assert (data["dtype"], data["autocast"], data["mode"]) == (amp.AMP[dtype], True, "train")


def test_the_steps_products_run_low_and_its_gradients_and_update_in_float32():
    from pytest_graphbudget.engine.joint import capture
    from pytest_graphbudget.engine.trace import Example

    model, x = _mlp()
    joint = capture(
        model, Example((x,), {}), None, "sgd", autocast=lambda: amp.cuda_autocast("amp_float16")
    )
    graph, phase = joint.traced.graph_module.graph, joint.tags.node_phase
    dtypes = {n.name: n.meta["val"].dtype for n in graph.nodes if "val" in n.meta}

    def named(*ops):
        return [n.name for n in graph.nodes if getattr(n.target, "__name__", "") in ops]

    products = named("addmm.default", "mm.default")
    assert {phase[n] for n in products} == {"forward", "backward"}
    assert {dtypes[n] for n in products} == {torch.float16}  # forward and backward alike
    steps = [n for n in named("mul_.Tensor", "add_.Tensor") if phase[n] == "optimizer"]
    # SGD with momentum: the buffer's mul_ and add_, then the parameter's add_, on 4 tensors
    assert len(steps) == 3 * 4 and {dtypes[n] for n in steps} == {torch.float32}
    (_, grads, _) = next(n for n in graph.nodes if n.op == "output").args[0]
    assert [g.meta["val"].dtype for g in grads] == [torch.float32] * 4  # as .grad holds them


def test_a_sharded_step_under_autocast_is_refused_in_one_line():
    model, x = _linear_norm()
    with pytest.raises(GraphBudgetError, match="a sharded step under autocast is not priced"):
        profile_model(model, (x,), mode="train", dtype="amp_float16", parallel="fsdp=2")


def test_the_profile_says_it_was_taken_under_autocast():
    from pytest_graphbudget.cli.sections import summary
    from pytest_graphbudget.engine.profile import profile_from_dict

    model, x = _linear_norm()
    mixed = profile_model(model, (x,), dtype="amp_bfloat16")
    data = mixed.to_dict()
    assert (data["dtype"], data["autocast"]) == ("bfloat16", True)
    assert "autocast" not in profile_model(model, (x,), dtype="bfloat16").to_dict()
    again = profile_from_dict(data)
    assert again.autocast and dict(summary(again))["dtype"] == "bfloat16, under autocast"


def test_a_convolution_keeps_its_kernel_kind_when_autocast_casts_its_weight():
    from pytest_graphbudget.engine import latency
    from pytest_graphbudget.engine.tiers import trace_and_measure
    from pytest_graphbudget.engine.trace import Example

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),  # over RGB: a stem
        torch.nn.Conv2d(16, 16, 3, padding=1, groups=16),  # depthwise
        torch.nn.Conv2d(16, 32, 1),  # 1x1
        torch.nn.Conv2d(32, 32, 3, padding=1, groups=4),  # grouped
        torch.nn.Conv2d(32, 32, 3, padding=1),  # dense
    ).eval()
    x = torch.randn(1, 3, 16, 16)

    def kinds(autocast):
        with autocast:
            _, measured, _ = trace_and_measure(model, Example((x,), {}))
        shapes = latency.weight_casts(latency.param_shapes(model), measured)
        sizes, channels = latency.tensor_sizes(measured), latency.tensor_channels(measured)
        found = [latency.kernel_kind(n, shapes, sizes, channels) for n in measured.nodes]
        return [k for k in found if k.startswith("conv")]

    expected = ["conv_stem", "conv_depthwise", "conv_pointwise", "conv_grouped", "conv_dense"]
    assert kinds(contextlib.nullcontext()) == expected
    assert kinds(amp.cuda_autocast("amp_float16")) == expected


def test_the_dtypes_checked_are_the_dtypes_profiled_under_autocast():
    from pytest_graphbudget.modes.request import AUTOCAST, DTYPES

    assert set(AUTOCAST) == set(amp.AMP) <= set(DTYPES)


def test_a_compiled_product_writes_its_own_dtype_and_the_norm_casts_it_up():
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8)
    ).eval()
    prof = profile_model(model, (torch.randn(4, 16),), dtype="amp_float16", execution="compiled")
    kernels = [s for s in prof.subgraphs if s.kind != "copy"]
    first, norm, last = kernels
    assert (first.kind, norm.kind, last.kind) == ("linear", "copy+layer_norm+copy", "linear")
    # the first product hands on 4x32 float16 (2 bytes), not the float32 its norm reads
    assert first.bytes_out == norm.bytes_in == 4 * 32 * 2


def test_a_compiled_product_reads_the_casts_that_kernels_of_their_own_wrote():
    """cuBLAS takes no prologue: Inductor runs autocast's cast of each weight and of the input
    as a kernel that reads float32 and writes float16, and the product reads float16."""
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8)
    ).eval()
    prof = profile_model(model, (torch.randn(4, 16),), dtype="amp_float16", execution="compiled")
    traffic = [(s.kind, s.bytes_in + s.bytes_weights, s.bytes_out) for s in prof.subgraphs]
    casts = sorted(t for t in traffic if t[0] == "copy")
    # x (4x16), W1 (32x16), b1 (32), W2 (8x32), b2 (8): each element read in 4 bytes, written in 2
    assert casts == sorted(("copy", 4 * n, 2 * n) for n in (64, 512, 32, 256, 8))
    products = [t for t in traffic if t[0] == "linear"]
    # each reads its float16 input, weight and bias and writes float16
    assert products == [
        ("linear", 2 * (64 + 512 + 32), 2 * 4 * 32),
        ("linear", 2 * (128 + 256 + 8), 2 * 4 * 8),
    ]
    # the casts run where the model casts, before their product
    assert [t[0] for t in traffic][:4] == ["copy", "copy", "copy", "linear"]


def test_a_profile_under_the_callers_own_autocast_prices_every_weights_cast():
    model, x = _linear_norm()
    # CPU autocast's lists: linear in bfloat16 (x, W and b cast: read 4 bytes, write 2), and
    # layer_norm left in bfloat16 (reads 4x32x2 and its float32 weight and bias, writes 4x32x2,
    # and its rows' mean and rstd in float32, the weight's dtype: 4x4 each)
    casts = (256 + 128) + (2048 + 1024) + (128 + 64)
    addmm = 128 + 1024 + 64 + 256
    norm = 256 + 256 + 256 + 16 + 16
    for cache in (True, False):  # a cached cast would be priced in the first forward only
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=cache):
            prof = profile_model(model, (x,), hardware=BYTES)
        assert (prof.dtype, prof.autocast) == ("bfloat16", True)
        assert _bytes(prof) == casts + addmm + norm
    assert torch.is_autocast_cache_enabled()  # the caller's setting, back
