"""The gradients that reach one tensor by several paths, summed as eager autograd sums them
(``engine/accumulate.py``): in place into the first when nothing else holds it, dense
(``InputBuffer::accumulate``), else into a new tensor; and each parameter's, kept or copied as
``AccumulateGrad`` keeps it. By hand, and against the memory profiler
(``test_train_peak_gaps``'s measurement: the tensors before the step plus the running sum of
``torch.profiler(profile_memory=True)``'s records, one intra-op thread).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402

F32 = 4
SCALARS = 2 * F32  # the loss and its gradient's seed, live through the backward


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: measured peaks need one thread


def measured(model: nn.Module, args: tuple) -> int:
    """Weights, buffers and inputs (each storage once) plus the peak of
    ``sum(outputs).backward()``. Buffers: transformers 4's GPT-2 keeps a causal mask per layer
    (bool 64 x 64) and a scalar, 8,200 B the reference had left out on torch 2.4."""
    model.train()
    params = list(model.parameters())
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model(*args).sum().backward()
    live = peak = 0
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    tensors = {t.untyped_storage().data_ptr(): t for t in [*params, *model.buffers(), *args]}
    return sum(t.untyped_storage().nbytes() for t in tensors.values()) + peak


class Tied(nn.Module):
    """One embedding read twice (T5's shared embedding, encoder and decoder)."""

    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)

    def forward(self, a, b):
        return self.emb(a).sum() + self.emb(b).sum()


class Fork(nn.Module):
    """``h`` read by two paths, ``g = 2h + h``, whose gradients are summed into ``h``'s."""

    def __init__(self, shape: tuple[int, int]) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.randn(shape))

    def forward(self, x):
        h = x * self.scale
        g = h * 2
        g += h
        return g.relu_()


def test_a_tied_weights_two_gradients_are_summed_into_the_first():
    # Each read's embedding_dense_backward makes a whole-table gradient; the engine adds the
    # second into the first (add_): two tables at the peak, with the loss and its seed (a new
    # sum beside both had read three).
    torch.manual_seed(0)
    vocab, dim = 4000, 64
    model = Tied(vocab, dim)
    args = (torch.randint(0, vocab, (1, 16)), torch.randint(0, vocab, (1, 8)))
    prof = profile_model(model, args, mode="train")
    table = vocab * dim * F32
    assert prof.activation_peak_bytes == 2 * table + SCALARS
    # eager's embedding backward also sorts the indices: a few KB more (0.4% here)
    assert prof.peak_memory_bytes == pytest.approx(measured(model, args), rel=0.005)


def test_a_tensor_read_by_two_paths_sums_its_gradients_in_place():
    # The activation h (s bytes) feeds 2h and the sum 2h + h. Backward: ReLU's gradient G (s)
    # goes to both paths; MulBackward makes 2G (s), which the engine adds into G, the only
    # tensor on its storage: G and 2G at the peak (2s), not G, 2G and a new sum (3s). The
    # forward holds h and 2h + h (2s); x * scale's weight gradient then reads the sum (2s).
    torch.manual_seed(0)
    shape = (64, 256)
    model, x = Fork(shape), torch.randn(shape)
    prof = profile_model(model, x, mode="train")
    s = shape[0] * shape[1] * F32
    assert prof.activation_peak_bytes == 2 * s + SCALARS
    assert prof.peak_memory_bytes == 2 * s + prof.activation_peak_bytes  # scale and x
    # eager also wraps the Python scalar 2 as a tensor: 12 bytes
    assert prof.peak_memory_bytes == pytest.approx(measured(model, (x,)), abs=16)


class Residual(nn.Module):
    """``g = b(h) + h``: the residual's gradient and b's input gradient summed into h's."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(128, 256), nn.Linear(256, 256), nn.Linear(256, 128)

    def forward(self, x):
        h = self.a(x).relu()
        g = self.b(h) + h
        return self.c(g * 0.5) + x


class Chain(nn.Module):
    """``x = x + lin(x)`` three times: each sum goes on into the next, and each layer's weight
    gradient reads it through ``t``, a view of the first gradient's storage once rewritten."""

    def __init__(self) -> None:
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(128, 128) for _ in range(3))

    def forward(self, x):
        for lin in self.lins:
            x = x + lin(x)
        return x.relu()


class Twice(nn.Module):
    """One weight read by two products: each gradient comes out of ``t`` as a view of its
    product's, whose base the view keeps: two tensors on the storage, summed out of place."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(n, n) / n**0.5)

    def forward(self, x):
        return F.linear(F.linear(x, self.w), self.w)


class Expanded(nn.Module):
    """``2h + h`` under the sum loss: the first gradient is the loss's expanded seed (strides
    0), not dense, which eager sums out of place."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(256, 256, bias=False)

    def forward(self, x):
        h = self.a(x)
        return h * 2 + h


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (Residual, (64, 128)),
        (Chain, (64, 128)),
        (lambda: Twice(256), (1, 256)),
        (Expanded, (64, 256)),
    ],
    ids=["residual", "chained-sums", "weight-read-twice", "expanded-first-gradient"],
)
def test_the_step_peak_is_the_profilers_in_place_or_not(make, shape):
    torch.manual_seed(0)
    model, x = make(), torch.randn(shape)
    prof = profile_model(model, x, mode="train")
    assert prof.peak_memory_bytes == measured(model, (x,))


def test_a_tied_lm_heads_gradient_is_a_view_and_summed_out_of_place():
    # GPT-2's lm_head reads the token embedding through ``t``: its gradient is a view whose
    # base lives on, so eager adds the embedding's gradient into a new tensor.
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=8000, n_positions=64, tie_word_embeddings=True
    )
    torch.manual_seed(0)
    lm = transformers.GPT2LMHeadModel(config)

    class Logits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, ids):
            return self.lm(ids).logits

    model, ids = Logits(), torch.randint(0, 8000, (2, 32))
    prof = profile_model(model, ids, mode="train")
    assert prof.peak_memory_bytes == measured(model, (ids,))


class Positions(nn.Module):
    """``lin(x) + pos`` as a ViT adds its position embedding: at batch 1 the sum's gradient
    goes unchanged both to ``pos`` and on to ``lin``'s backward, one tensor two ways, which
    ``AccumulateGrad`` copies for ``pos`` (it runs first and sees another reference); at batch 2
    ``pos``'s gradient is a new sum over the batch. ``branch`` reads a value into Python, so
    the step is traced on real tensors."""

    def __init__(self, branch: bool = False) -> None:
        super().__init__()
        self.lin, self.out = nn.Linear(64, 64), nn.Linear(64, 64)
        self.pos = nn.Parameter(torch.zeros(1, 32, 64))
        self.branch = branch

    def forward(self, x):
        h = self.lin(x) + self.pos
        if self.branch and h.sum().item() > float("-inf"):
            h = h * 1.0
        return self.out(h.relu())


class Summed(nn.Module):
    """Parameters whose gradient is the loss's seed expanded (strides 0, four bytes): each
    ``AccumulateGrad`` keeps a dense copy, ``a.sum()`` a whole ``a`` of gradient."""

    def __init__(self, two: bool) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.zeros(256, 64))
        self.b = nn.Parameter(torch.zeros(256, 64)) if two else None

    def forward(self, x):
        return ((self.a + self.b) if self.b is not None else self.a).sum() * x.sum()


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (Positions, (1, 32, 64)),
        (Positions, (2, 32, 64)),
        (lambda: Positions(branch=True), (1, 32, 64)),
        (lambda: Summed(two=False), (4,)),
        (lambda: Summed(two=True), (4,)),
    ],
    ids=[
        "two-ways-batch-1",
        "summed-batch-2",
        "two-ways-real-tier",
        "broadcast",
        "broadcast-twice",
    ],
)
def test_a_parameters_gradient_is_kept_or_copied_as_accumulate_grad_does(make, shape):
    torch.manual_seed(0)
    model, x = make(), torch.randn(shape)
    prof = profile_model(model, x, mode="train")
    assert prof.peak_memory_bytes == measured(model, (x,))
    if isinstance(model, Summed):  # the weights and a dense gradient for each, at the end
        assert prof.peak_memory_bytes >= 2 * sum(p.numel() * F32 for p in model.parameters())


class CircularLast(nn.Module):
    """A circular pad as the model's last layer, as ``nn.CircularPad2d`` runs it: a new
    tensor, the input copied into its middle and four copies of its own edges, each a
    ``CopySlices`` node whose backward writes the incoming gradient into a new buffer with
    ``copy_``; the copied edges' gradient (``slice_backward``) is then summed into that
    buffer, in place."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8, 1, 1))

    def forward(self, x):
        return F.pad(x * self.scale, (2, 2, 2, 2), mode="circular")


def test_a_gradient_written_in_place_before_its_sum_is_summed_in_place():
    # By hand: the backward of the input's copy into the middle (the last to run) holds its
    # new buffer and the gradient it came with (the padded shape, 2x8x20x20 floats each) and
    # the middle's gradient it clones (2x8x16x16), with the loss and its seed. The buffer had
    # counted as held twice (the tensor and copy_'s result, the same tensor), so each sum had
    # made a third padded tensor: +9,216 B (12%) at this size.
    torch.manual_seed(0)
    model, x = CircularLast(), torch.randn(2, 8, 16, 16)
    prof = profile_model(model, x, mode="train")
    padded, middle = 2 * 8 * 20 * 20 * F32, 2 * 8 * 16 * 16 * F32
    assert prof.activation_peak_bytes == 2 * padded + middle + SCALARS
    assert prof.peak_memory_bytes == measured(model, (x,))


class SliceWrites(nn.Module):
    """A model's own slice assignments into a tensor it made (a halo copied from the far
    rows): each ``out[...] = ...`` is a ``CopySlices`` node, as in ``CircularLast``."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(16, 1, 1))

    def forward(self, x):
        h = x * self.scale
        out = h.new_zeros(h.shape[0], 16, h.shape[2] + 2, h.shape[3])
        out[:, :, 1:-1] = h
        out[:, :, 0] = out[:, :, -2]
        out[:, :, -1] = out[:, :, 1]
        return out


def test_a_models_own_slice_writes_sum_their_gradients_in_place():
    torch.manual_seed(0)
    model, x = SliceWrites(), torch.randn(2, 16, 32, 32)
    # 8 KB (1.5%) over before: one more padded gradient at each of the two halo copies' sums
    assert profile_model(model, x, mode="train").peak_memory_bytes == measured(model, (x,))
