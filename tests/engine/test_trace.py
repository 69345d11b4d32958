"""The tracer's warm-up: lazy state exists, on real tensors, before the model is traced."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.engine.trace import Example, warm_up  # noqa: E402
from pytest_graphbudget.errors import TraceError  # noqa: E402


class Lazy(nn.Module):
    """Like YOLO's Detect head: builds a tensor on its first forward and reuses it."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.grid = None

    def forward(self, x):
        if self.grid is None or self.grid.shape != x.shape:
            self.grid = torch.arange(x.numel(), dtype=x.dtype).reshape(x.shape)
        return self.proj(x) + self.grid


def test_lazy_state_is_initialised_on_real_tensors():
    model = Lazy()
    assert warm_up(model, Example((torch.randn(2, 8),), {})) > 0
    assert type(model.grid) is torch.Tensor  # not a fake tensor
    assert torch.equal(model.grid, torch.arange(16.0).reshape(2, 8))


def test_meta_model_warms_up_without_weights():
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    prof = profile_model(model, torch.randn(2, 8))  # would fail on real inputs with meta weights
    assert prof.macs == 2 * 8 * 8 and prof.trace.cost_pass == "fake"
    assert model[0].weight.is_meta


class LazyOnce(Lazy):
    """Builds its grid on its first forward only: after the warm-up FX traces it."""

    def forward(self, x):
        if self.grid is None:
            self.grid = torch.arange(x.numel(), dtype=x.dtype).reshape(x.shape)
        return self.proj(x) + self.grid


def test_real_and_fake_cost_passes_agree():
    # A quick FX-traced model is measured on real tensors, a meta-device one on fake tensors.
    real = profile_model(LazyOnce(), torch.randn(2, 8))
    assert real.trace.method == "fx"
    assert real.trace.cost_pass == "real"
    with torch.device("meta"):
        meta = nn.Linear(8, 8)
    fake = profile_model(meta, torch.randn(2, 8))
    plain = profile_model(nn.Linear(8, 8), torch.randn(2, 8))
    assert (fake.flops, fake.traffic_bytes, fake.activation_peak_bytes) == (
        plain.flops,
        plain.traffic_bytes,
        plain.activation_peak_bytes,
    )


def test_lazy_model_is_traced_after_its_state_exists():
    # After warm-up the grid is a constant: the traced graph adds it, it does not rebuild it
    # (no arange in the profile's nodes), as every real forward after the first does.
    prof = profile_model(Lazy(), torch.randn(2, 8))
    assert prof.macs == 2 * 8 * 8
    assert not any(n.kind == "arange" for n in prof.node_info)


# --------------------------------------------------------------------------------------------
# Issue 11: no warm-up forward for a model without lazy state


CALLS: list[str] = []


class Counted(nn.Module):
    """Counts its forwards outside its own state (a list it does not own)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        CALLS.append("forward")
        return self.proj(x).relu()


def test_model_without_lazy_state_is_traced_without_a_warm_up():
    CALLS.clear()
    prof = profile_model(Counted(), torch.randn(2, 8), tier="fx")
    assert prof.trace.method == "fx"
    assert CALLS == ["forward"]  # the symbolic trace only: no real forward before it
    assert prof.macs == 2 * 8 * 8 and prof.flops == 2 * 2 * 8 * 8 + 2 * 8 + 2 * 8


class Appends(nn.Module):
    """Lazy state kept in a container the forward fills in place, not assigned."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.cache: list = []

    def forward(self, x):
        if not self.cache:
            self.cache.append(torch.arange(x.numel(), dtype=x.dtype).reshape(x.shape))
        return self.proj(x) + self.cache[0]


@pytest.mark.parametrize("make", [Lazy, Appends], ids=["assigned", "appended"])
def test_lazy_state_found_by_the_trace_is_built_on_real_tensors(make):
    model = make()
    prof = profile_model(model, torch.randn(2, 8))
    state = model.grid if make is Lazy else model.cache[0]
    assert type(state) is torch.Tensor  # the warm-up's tensor, not a proxy left by the trace
    assert torch.equal(state, torch.arange(16.0).reshape(2, 8))
    assert not any(n.kind == "arange" for n in prof.node_info)
    assert make is Lazy or len(model.cache) == 1


def test_lazy_module_is_warmed_up_before_it_is_traced():
    model = nn.Sequential(nn.LazyLinear(8), nn.ReLU())
    prof = profile_model(model, torch.randn(2, 4))
    assert prof.macs == 2 * 4 * 8 and prof.params == 4 * 8 + 8


class CachedByDevice(nn.Module):
    """LeViT's attention-bias cache: a tensor computed once, kept under a key made from the
    input (``str(x.device)``). A symbolic trace makes the key from a proxy and stores a proxy."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4, 4))
        self.cache: dict = {}

    def forward(self, x):
        key = str(x.device)
        if key not in self.cache:
            self.cache[key] = self.weight * 2
        return x @ self.cache[key]


def test_a_cache_filled_by_a_trace_never_holds_its_proxies():
    # A later trace would find the earlier trace's proxy under the same key, and its graph a
    # node of another graph: the second profile of timm's LeViT with tier="fx" failed so.
    # FX's graph is the first call's (it multiplies on every call), so FX refuses the model,
    # saying why, each time; the tape prices the forward after the first: x @ cached alone.
    from pytest_graphbudget.errors import TraceError

    model = CachedByDevice()
    for _ in range(2):
        with pytest.raises(TraceError, match=r"keeps what it computes in module state \(cache\)"):
            profile_model(model, torch.randn(3, 4), tier="fx")
    profile = profile_model(model, torch.randn(3, 4))
    assert (profile.macs, profile.flops) == (3 * 4 * 4, 2 * 3 * 4 * 4)
    assert profile.activation_peak_bytes == 3 * 4 * 4  # the product only: no doubled weight
    assert list(model.cache) == ["cpu"]  # the warm-up's entry, no trace's


class CountsInABuffer(nn.Module):
    """Counts its calls in a buffer, as a running statistic or a step counter does."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return self.proj(x)


def test_forward_that_assigns_a_buffer_is_not_an_fx_graph():
    # FX stored its proxy in the buffer, and every cost pass grew the graph past its output:
    # tier="fx" failed with a bare KeyError: 'add'
    with pytest.raises(TraceError, match=r"assigns its buffer calls .*cannot replay"):
        profile_model(CountsInABuffer(), torch.randn(2, 4), tier="fx")
    prof = profile_model(CountsInABuffer(), torch.randn(2, 4))
    assert prof.macs == 2 * 4 * 4
    assert prof.flops == 2 * 2 * 4 * 4 + 2 * 4 + 1  # the products, the bias, the count
    assert "assigns its buffer calls" in prof.trace.failures["fx"]


# --------------------------------------------------------------------------------------------
# Issue 11: an exported graph is priced on the fake values export left on it


class ViewsAndInPlace(nn.Module):
    """Control flow FX cannot trace, with views, an in-place op and a weight read twice."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        for row in x:  # iterating a tensor: FX fails, export unrolls it
            row.mul_(2)
        y = self.proj(x).view(2, 2, 8).transpose(0, 1)
        return torch.relu_(y.contiguous()) + self.proj.weight.sum()


def _canonical(measured) -> tuple:
    """Every figure of every node, storages numbered by first appearance (their keys differ).

    Inputs, writes and views are ordered dicts; a read of a storage no node wrote (a weight)
    has no number, and such reads are counted, so the numbering does not hang on set order;
    the views read and returned (``extents``) are sorted, a weight's numbered -1."""
    keys: dict = {}

    def number(key):
        return keys.setdefault(key, len(keys))

    inputs = {n: sorted((number(k), v) for k, v in s.items()) for n, s in measured.inputs.items()}
    nodes = []
    for node in measured.nodes:
        fields = dict(vars(node))
        fields["writes"] = [(number(k), v) for k, v in node.writes.items()]
        fields["views"] = [(number(k), v) for k, v in node.views.items()]
        known = sorted(keys[k] for k in node.reads if k in keys)
        fields["reads"] = (known, len(node.reads) - len(known))
        for name in ("read_extents", "view_extents"):  # a weight's read: -1
            found = getattr(node, name).items()
            fields[name] = sorted((keys.get(k, -1), e.nbytes, sorted(e.forms)) for k, e in found)
        nodes.append(fields)
    return nodes, inputs, measured.graph_outputs


@pytest.mark.parametrize(
    "make",
    [
        lambda: (ViewsAndInPlace(), (torch.randn(4, 8),)),
        lambda: (nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), (torch.randn(2, 6, 16),)),
        lambda: (nn.LSTM(4, 5, batch_first=True), (torch.randn(2, 3, 4),)),
    ],
    ids=["views-in-place", "encoder-layer", "lstm"],
)
def test_exported_graph_priced_on_its_own_values_as_on_fresh_fakes(make, request):
    from pytest_graphbudget.compat import export_values_match_fresh
    from pytest_graphbudget.engine.measure import measure
    from pytest_graphbudget.engine.measure_export import measure_exported
    from pytest_graphbudget.engine.trace import trace_dynamo

    model, inputs = make()
    model.eval()
    traced = trace_dynamo(model, Example(inputs, {}))
    reused = measure_exported(model, traced)
    if request.node.callspec.id in ("encoder-layer", "lstm"):
        # A node that runs several kernels (aten.lstm; the encoder layer's attention) is priced
        # one node per kernel on fresh fakes (engine/split.py): export's values are not reused
        assert reused is None
        assert len(measure(model, traced, list(inputs), fake=True).nodes) > len(
            [n for n in traced.graph_module.graph.nodes if n.op == "call_function"]
        )
        return
    if not export_values_match_fresh():  # an older torch records other values: never reused
        assert reused is None
        pytest.skip("torch<2.14: exported values are not reused (compat.EXPORT_VALUES_AS_FRESH)")
    assert reused is not None and reused.nodes
    fresh = measure(model, traced, list(inputs), fake=True)
    assert _canonical(reused) == _canonical(fresh)
    assert sum(n.macs for n in reused.nodes) > 0


def test_input_passed_twice_is_priced_on_fresh_fakes():
    # export gives one tensor passed twice one fake; the ordinary pass gives each its own twin
    from pytest_graphbudget.engine.measure_export import measure_exported
    from pytest_graphbudget.engine.trace import trace_dynamo

    x = torch.randn(2, 6, 16)
    model = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    assert measure_exported(model, trace_dynamo(model, Example((x, x, x), {}))) is None


def test_exported_graph_of_a_quick_model_is_priced_without_running_it():
    # Export left a value on every node: even a model quick enough to run for real is priced
    # on them, and its figures are those of the hand count (a linear layer plus the grid).
    from pytest_graphbudget.compat import export_values_match_fresh

    prof = profile_model(Lazy(), torch.randn(2, 8), tier="dynamo")
    # Before torch 2.14 export's values are not reused (compat.EXPORT_VALUES_AS_FRESH): it runs.
    pass_ = "fake" if export_values_match_fresh() else "real"
    assert prof.trace.method == "dynamo" and prof.trace.cost_pass == pass_
    assert prof.macs == 2 * 8 * 8


def test_heap_is_unfrozen_after_a_profile_and_a_callers_freeze_is_left_alone():
    import gc

    from pytest_graphbudget.heap import INTERPRETER_FROZEN

    profile_model(Lazy(), torch.randn(2, 8))
    assert gc.get_freeze_count() <= INTERPRETER_FROZEN and gc.isenabled()  # 3.12: its own too
    gc.freeze()
    try:
        profile_model(Lazy(), torch.randn(2, 8))
        assert gc.get_freeze_count() > INTERPRETER_FROZEN  # ours would have unfrozen everything
    finally:
        gc.unfreeze()


# --------------------------------------------------------------------------------------------
# Issue 11: an FX graph whose code cannot see the device is priced on meta tensors


def test_fx_graph_priced_on_meta_tensors_as_on_fake_ones():
    from pytest_graphbudget.engine.measure import measure
    from pytest_graphbudget.engine.meta_pass import meta_safe
    from pytest_graphbudget.engine.trace import trace_fx

    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 5),
    ).eval()
    x = torch.randn(2, 3, 8, 8)
    traced = trace_fx(model, Example((x,), {}))
    assert meta_safe(traced.graph_module)
    on_meta = measure(model, traced, [x], meta=True)
    on_fake = measure(model, traced, [x], fake=True)
    assert _canonical(on_meta) == _canonical(on_fake)
    assert sum(n.macs for n in on_meta.nodes) == 2 * 8 * 8 * 8 * 3 * 9 + 2 * 5 * 128


@pytest.mark.parametrize("mask", ["none", "causal", "float", "bool"])
def test_attention_and_timm_style_graphs_priced_on_meta_tensors_as_on_fake_ones(mask):
    # SDPA picks its kernel by device: the math decomposition on meta tensors (its
    # _fused_sdp_choice), the CPU's flash kernel on fake CPU ones, as on the tape. So a graph
    # calling it is not meta-safe; F.linear and F.gelu (recorded from torch._C._nn) and x.shape
    # (a getattr node) are, and the fake pass prices the graph as the tape does
    from pytest_graphbudget.engine.measure import measure
    from pytest_graphbudget.engine.meta_pass import meta_safe
    from pytest_graphbudget.engine.trace import trace_fx

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(32, 96)
            self.bias = nn.Parameter(torch.zeros(96))

        def forward(self, x, m):
            b, n, _ = x.shape
            h = nn.functional.linear(x, self.qkv.weight, self.bias + torch.zeros_like(self.bias))
            q, k, v = nn.functional.gelu(h).view(b, n, 3, 4, 8).permute(2, 0, 3, 1, 4)
            sdpa = nn.functional.scaled_dot_product_attention
            if mask == "causal":
                return sdpa(q, k, v, is_causal=True)
            return sdpa(q, k, v, attn_mask=None if mask == "none" else m)

    model = Attention().eval()
    x = torch.randn(2, 6, 32)
    m = torch.rand(2, 4, 6, 6)
    m = m > 0.5 if mask == "bool" else m
    traced = trace_fx(model, Example((x, m), {}))
    assert not meta_safe(traced.graph_module)
    meta = torch.empty(2, 4, 6, 8, device="meta")
    assert torch._fused_sdp_choice(meta, meta, meta) == 0  # the math backend, on any input
    on_fake = measure(model, traced, [x, m], fake=True)
    # 2x6 tokens: the qkv linear (32 -> 96) and QK^T and AV over 4 heads of 8, 6x6 scores
    assert sum(n.macs for n in on_fake.nodes) == 2 * 6 * 32 * 96 + 2 * 4 * 6 * 6 * (8 + 8)


def test_module_that_looks_at_the_device_is_not_priced_on_meta_tensors():
    # nn.MultiheadAttention's fused path runs on CPU and CUDA only: on meta it computes other ops
    from pytest_graphbudget.engine.meta_pass import meta_safe
    from pytest_graphbudget.engine.trace import trace_fx

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mha = nn.MultiheadAttention(16, 4, batch_first=True)

        def forward(self, x):
            return self.mha(x, x, x, need_weights=False)[0]

    model = SelfAttention().eval()
    traced = trace_fx(model, Example((torch.randn(2, 6, 16),), {}))
    assert not meta_safe(traced.graph_module)
    prof = profile_model(model, torch.randn(2, 6, 16), tier="fx")
    assert prof.trace.method == "fx" and any(n.kind == "mha" for n in prof.node_info)


# --------------------------------------------------------------------------------------------
# Issue 11: on meta tensors each op signature's kernel runs once (``meta_pass.MetaCache``)


def _metadata(out) -> list:
    tensors = out if isinstance(out, tuple) else (out,)
    return [(t.shape, t.stride(), t.dtype, t.untyped_storage().nbytes()) for t in tensors]


def test_meta_kernel_runs_once_per_signature_and_rebuilds_its_outputs():
    from pytest_graphbudget.engine.meta_pass import MetaCache

    cache = MetaCache({})
    x = torch.empty(2, 8, 4, 4, device="meta").to(memory_format=torch.channels_last)
    stats = torch.empty(8, device="meta")
    bn = torch.ops.aten.native_batch_norm.default
    args = (x, stats, stats, stats, stats, False, 0.1, 1e-5)
    first, again = cache(bn, args, {}), cache(bn, args, {})
    assert cache.hits == 1
    assert _metadata(again) == _metadata(first)
    assert _metadata(first)[0] == _metadata(bn(*args))[0]
    # In inference the CPU kernel returns its saved statistics empty, where the meta kernel
    # gives them C elements: the meta pass takes the CPU's (meta_pass.EMPTY_ON_CPU)
    cpu = bn(torch.randn(2, 8, 4, 4), *(torch.ones(8),) * 4, False, 0.1, 1e-5)
    assert [t.numel() for t in first[1:]] == [t.numel() for t in cpu[1:]] == [0, 0]
    assert again[0].stride() == x.stride()  # channels-last kept
    assert again[0].untyped_storage()._cdata != first[0].untyped_storage()._cdata


def test_meta_signature_tells_an_int_from_a_float():
    # 2 == 2.0 and hash(2) == hash(2.0), but an integer tensor times 2.0 is a float tensor
    from pytest_graphbudget.engine.meta_pass import MetaCache

    cache = MetaCache({})
    ints = torch.empty(3, dtype=torch.int64, device="meta")
    mul = torch.ops.aten.mul.Scalar
    assert cache(mul, (ints, 2), {}).dtype == torch.int64
    assert cache(mul, (ints, 2.0), {}).dtype == torch.float32
    assert cache(mul, (ints, 2.0), {}).dtype == torch.float32 and cache.hits == 1


def test_meta_kernel_that_aliases_its_input_always_runs():
    # ``_unsafe_view`` says it returns a new tensor but shares its input's storage: a rebuilt
    # output would count a write that never happens
    from pytest_graphbudget.engine.meta_pass import MetaCache

    cache = MetaCache({})
    x = torch.empty(4, 6, device="meta")
    for op, args in [
        (torch.ops.aten._unsafe_view.default, (x, [24])),
        (torch.ops.aten.view.default, (x, [24])),
    ]:
        for _ in range(2):
            out = cache(op, args, {})
            assert out.untyped_storage()._cdata == x.untyped_storage()._cdata
    assert cache.hits == 0


def test_in_place_meta_kernel_returns_its_argument_and_runs_once_per_signature():
    # hardswish_'s meta kernel is a Python decomposition; its output is always ``self``
    from pytest_graphbudget.engine.meta_pass import MetaCache

    cache = MetaCache({})
    x = torch.empty(4, 6, device="meta")
    for op in (torch.ops.aten.hardswish_.default, torch.ops.aten.relu_.default):
        assert cache(op, (x,), {}) is x and cache(op, (x,), {}) is x
    assert cache.hits == 2
    grown = torch.empty(4, 6, device="meta")  # an inplace_view op changes metadata: never kept
    assert cache(torch.ops.aten.t_.default, (grown,), {}).shape == (6, 4)
    assert cache.hits == 2


class Repeated(nn.Module):
    """The same conv, norm and pooling signatures several times, with a residual add."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
            for _ in range(3)
        )
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = x + block(x)
        return self.head(torch.flatten(self.pool(x), 1))


def test_memoised_meta_pass_prices_every_node_as_the_fake_pass():
    from pytest_graphbudget.engine.measure import measure
    from pytest_graphbudget.engine.trace import trace_fx

    model, x = Repeated().eval(), torch.randn(2, 3, 8, 8)
    traced = trace_fx(model, Example((x,), {}))
    on_meta = measure(model, traced, [x], meta=True)
    on_fake = measure(model, traced, [x], fake=True)
    assert _canonical(on_meta) == _canonical(on_fake)
    per_block = 8 * 8 * 9 * 8 * 8 * 2  # conv MACs: out channels x in x 3x3 x 8x8 x batch
    assert sum(n.macs for n in on_meta.nodes) == 3 * 8 * 9 * 8 * 8 * 2 + 3 * per_block + 2 * 5 * 128


def test_fx_tier_generates_no_code_until_its_graph_is_called():
    # Code generation was a third of resnet50's symbolic trace; the cost pass never needs it
    from torch.fx._lazy_graph_module import _LazyGraphModule

    from pytest_graphbudget.engine.trace import trace_fx

    model, x = Repeated().eval(), torch.randn(2, 3, 8, 8)
    gm = trace_fx(model, Example((x,), {})).graph_module
    assert isinstance(gm, _LazyGraphModule) and gm._needs_recompile()
    assert torch.equal(gm(x), model(x))  # called, it compiles as a plain GraphModule would
    assert not gm._needs_recompile()


def test_cost_pass_walks_arguments_as_pytree_does():
    # ``tree`` walks plain tuples, lists and dicts itself and must give pytree's answer
    from torch.utils import _pytree as pytree

    from pytest_graphbudget.costs import Shape
    from pytest_graphbudget.engine import tree

    a, b, c = torch.zeros(2, 3), torch.zeros(4), torch.zeros(1, 1, 5)
    last = torch.zeros(1, 3, 4, 4).to(memory_format=torch.channels_last)
    values = [
        (a, [b, 2.0, None], {"alpha": 1, "out": c}),
        (last, a.t(), [last[:, :, 1:]], {"x": torch.zeros(3).to_sparse()}),
        [torch.float16, torch.device("cpu"), "mean", True],
        torch.max(a, dim=1),  # a structseq: left to pytree
        (torch.Size([2, 3]), {"nested": ((a,), [b])}),
        a,
    ]
    for value in values:
        expected = pytree.tree_map(lambda v: Shape(v.shape) if torch.is_tensor(v) else v, value)
        got = tree.shapes(value)
        assert got == expected and type(got) is type(expected)
        assert [id(t) for t in tree.tensors(value)] == [
            id(t) for t in pytree.tree_leaves(value) if torch.is_tensor(t)
        ]
        strided = tree.strided_shapes(value)  # with strides, for workspaces
        expected = pytree.tree_map(tree._strided, value)
        assert strided == expected and type(strided) is type(expected)
    assert type(tree.shapes((a, [b]))[1][0]) is Shape


def test_keyword_defaults_are_bound_to_the_placeholders_fx_renames():
    # FX specialises an unpassed keyword to its default under a new name (``causal_1``, with a
    # check that it still holds): timm's ViTs take ``attn_mask=None, is_causal=False``, and
    # binding nothing there failed the check and sent every one of them to the tape
    class WithFlags(nn.Module):
        def forward(self, x, mask=None, causal: bool = False, scale: float = 2.0):
            if causal:
                x = x.tril()
            return x * scale if mask is None else x.masked_fill(mask, 0.0)

    prof = profile_model(WithFlags(), (torch.rand(4, 4),), tier="fx")
    assert prof.trace.method == "fx" and prof.trace.failures == {}
    assert prof.flops == 16  # one multiply per element, no tril


class SparseProduct(torch.nn.Module):
    def forward(self, x):
        return torch.sparse.mm(x.to_sparse(), x.t())


@pytest.mark.parametrize(
    ("model", "make_input", "said"),
    [
        (SparseProduct(), lambda: torch.randn(8, 8), "to_sparse's output is a sparse_coo tensor"),
        (nn.Identity(), lambda: torch.randn(8, 8).to_sparse_csr(), "an input is a sparse_csr"),
    ],
)
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_a_sparse_tensor_is_refused_in_one_line_for_every_tier(model, make_input, said):
    # each tier had failed on its storage: "could not trace the model (eager: Cannot access
    # storage of SparseTensorImpl; fx: ...; dynamo: ...)"; a sparse COO input priced at 0 FLOPs
    from pytest_graphbudget.errors import GraphBudgetError

    with pytest.raises(GraphBudgetError) as raised:
        profile_model(model, make_input())
    message = str(raised.value)
    assert said in message and "dense tensors" in message and "eager:" not in message
