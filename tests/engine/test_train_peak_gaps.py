"""A training step's peak by hand, and against the memory profiler: what eager torch holds that
the joint graph alone does not show (``engine/joint.py``, ``costs/workspace.py``).

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


def measured(model: nn.Module, args: tuple, optimizer: str | None = None) -> int:
    """Weights, inputs (each storage once) and Adam's state, plus the peak of one step of
    ``sum(outputs).backward()`` and torch's single-tensor update (its state made by a first
    step outside the measurement, the gradients None before it)."""
    model.train()
    params = list(model.parameters())
    opt = torch.optim.Adam(params, foreach=False) if optimizer == "adam" else None

    def step():
        total(model(*args)).backward()  # no output held through the backward
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
    tensors = {t.untyped_storage().data_ptr(): t for t in [*params, *args, *state]}
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
