"""Losses and EmbeddingBag are priced, forward and backward (issue 22, items 1 and 2).

Every expected count is derived here by hand from the loss table of docs/metrics.md and the
ATen ops torch runs (named in each test). Conventions used throughout:
  flops = 2 * macs + other; a mean or sum reduction adds 1 per element summed; a backward
  under mean divides each gradient element once more; log_softmax 5 and its backward 4 per
  element; sigmoid 4, its backward 3; sum 1 per input element.

The training steps are ``nn.Linear(8, 4)`` on a ``(4, 8)`` input, so their common part is:
  forward addmm 4*8*4 = 128 MACs -> 256 FLOPs + 16 bias adds = 272;
  backward: the weight gradient mm (4x4)^T @ (4x8), 128 MACs = 256, and the bias gradient,
  a sum over the batch of 16 elements = 16 (x needs no gradient: no input mm) = 272.
  LINEAR_STEP = 544 FLOPs, 256 MACs.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.costs import price  # noqa: E402
from pytest_graphbudget.engine import tree  # noqa: E402

LINEAR_STEP, LINEAR_MACS = 544, 256
TARGETS = [0, 1, 2, 3]


def step(loss, model=None, x=None):
    torch.manual_seed(0)
    model = model if model is not None else nn.Linear(8, 4)
    x = x if x is not None else torch.randn(4, 8)
    return profile_model(model, (x,), mode="train", loss=loss)


def test_the_issue_repro_lists_no_unsupported_op():
    """Linear(8, 4) -> F.cross_entropy over 4 classes, batch 4.

    Forward: log_softmax 5*16 = 80; nll_loss_forward (mean) per target: negate 1 + sum 1 +
    total weight 1 = 3, x4 = 12. Backward: nll_loss_backward per target: negate 1 + divide 1
    = 2, x4 = 8; log_softmax's backward 4*16 = 64. 544 + 80 + 12 + 8 + 64 = 708.
    """
    prof = step(lambda o: F.cross_entropy(o, torch.tensor(TARGETS)))
    assert prof.coverage.unsupported_ops == {}
    assert (prof.flops, prof.macs) == (LINEAR_STEP + 80 + 12 + 8 + 64, LINEAR_MACS)
    totals = prof.to_dict()["totals"]
    assert totals["forward_flops"] == 272 + 80 + 12
    assert totals["backward_flops"] == 272 + 8 + 64


@pytest.mark.parametrize(
    "loss, flops",
    [
        # class weights: nll forward 4 per target (+1 weight) = 16, backward 3 = 12
        (
            lambda o: F.cross_entropy(o, torch.tensor(TARGETS), weight=torch.ones(4)),
            LINEAR_STEP + 80 + 16 + 12 + 64,
        ),
        # sum: nll forward 2 per target (negate, sum) = 8, backward 1 (negate) = 4
        (
            lambda o: F.cross_entropy(o, torch.tensor(TARGETS), reduction="sum"),
            LINEAR_STEP + 80 + 8 + 4 + 64,
        ),
        # an ignored target is counted as any other (the count is dense): as the plain 708
        (
            lambda o: F.cross_entropy(o, torch.tensor([0, -100, 2, 3])),
            LINEAR_STEP + 80 + 12 + 8 + 64,
        ),
        # mse_loss (x - y)^2 + mean: 3 per element = 48; backward 2(x - y)g + mean: 4 = 64
        (lambda o: F.mse_loss(o, torch.ones(4, 4)), LINEAR_STEP + 48 + 64),
        # huber_loss 8 + mean = 9 per element = 144; backward g*clamp(d) 3 + mean = 64
        (lambda o: F.huber_loss(o, torch.ones(4, 4)), LINEAR_STEP + 144 + 64),
        # smooth_l1_loss 7 + mean = 128; backward g*clamp(d/beta) 4 + mean = 5 per element = 80
        (lambda o: F.smooth_l1_loss(o, torch.ones(4, 4)), LINEAR_STEP + 128 + 80),
        # sigmoid 64, binary_cross_entropy 9 + mean = 160; backward: bce 6 + mean = 112,
        # sigmoid's 3 per element = 48
        (
            lambda o: F.binary_cross_entropy(torch.sigmoid(o), torch.ones(4, 4)),
            LINEAR_STEP + 64 + 160 + 112 + 48,
        ),
        # with logits: log_sigmoid 5 + 3 + mean = 9 per element = 144; backward (torch's own
        # formula, FunctionsManual.cpp): sigmoid 64, sub 16, mul by grad 16, div_ by numel 16
        (
            lambda o: F.binary_cross_entropy_with_logits(o, torch.ones(4, 4)),
            LINEAR_STEP + 144 + 64 + 16 + 16 + 16,
        ),
        # soft_margin_loss 5 + mean = 96; backward 8 + mean = 144
        (lambda o: F.soft_margin_loss(o, torch.ones(4, 4)), LINEAR_STEP + 96 + 144),
    ],
    ids=["ce-weight", "ce-sum", "ce-ignore", "mse", "huber", "smooth-l1", "bce", "bce-logits",
         "soft-margin"],
)  # fmt: skip
def test_training_losses_match_hand_counts(loss, flops):
    prof = step(loss)
    assert prof.coverage.unsupported_ops == {}
    assert (prof.flops, prof.macs) == (flops, LINEAR_MACS)


def test_pixelwise_cross_entropy_prices_nll_loss2d():
    """Conv2d(2, 4, 1) on (2, 2, 3, 3): logits (2, 4, 3, 3), 72 elements, 18 pixel targets.

    conv: 2*4*9 positions * 2 inputs = 144 MACs = 288 + 72 bias; log_softmax 5*72 = 360;
    nll_loss2d_forward 3 per target = 54. Backward: nll_loss2d_backward 2 per target = 36,
    log_softmax's 4*72 = 288, conv's weight gradient 144 MACs = 288 and bias gradient 72 (no
    input gradient). 360 + 360 + 54 + 36 + 288 + 288 + 72 = 1458.
    """
    target = torch.zeros(2, 3, 3, dtype=torch.long)
    prof = step(lambda o: F.cross_entropy(o, target), nn.Conv2d(2, 4, 1), torch.randn(2, 2, 3, 3))
    assert prof.coverage.unsupported_ops == {}
    assert (prof.flops, prof.macs) == (1458, 288)


class Loss(nn.Module):
    """A loss as a model's forward computes it (a model called with its labels), in eval."""

    def __init__(self, fn, **options):
        super().__init__()
        self.fn = fn
        self.options = options

    def forward(self, x, y):
        return self.fn(x, y, **self.options)


X, Y = torch.randn(4, 5), torch.tensor(TARGETS)


@pytest.mark.parametrize(
    "options, flops",
    [
        # log_softmax 5*20 = 100; nll mean: 3 per target = 12
        ({}, 100 + 12),
        ({"ignore_index": 1}, 100 + 12),
        ({"weight": torch.ones(5)}, 100 + 16),  # + 1 weight per target
        ({"reduction": "sum"}, 100 + 8),
        ({"reduction": "none"}, 100 + 4),  # negate only
        # ATen's cross_entropy_loss_label_smoothing: log_softmax 100, nll 12, then
        # -input.sum(1): sum 20 + neg 4; target == ignore_index 4, masked_fill_ 4, ~mask 4,
        # mask.sum() 4, smooth.sum() 4, divide 1, (1 - eps) * nll 1, * eps / C 1, add 1
        ({"label_smoothing": 0.1}, 100 + 12 + 20 + 4 + 4 + 4 + 4 + 4 + 4 + 1 + 1 + 1 + 1),
        # with weights: nll 16; input * weight 20, sum 20, neg 4; eq 4, masked_fill_ 4, the
        # target's weights (masked_fill 4, gather 0, masked_fill_ 4, sum 4), smooth.sum() 4,
        # divide 1, two scales 2, add 1
        (
            {"weight": torch.ones(5), "label_smoothing": 0.1},
            100 + 16 + 20 + 20 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 1 + 2 + 1,
        ),
    ],
    ids=["plain", "ignore-index", "weight", "sum", "none", "smoothing", "weight-smoothing"],
)
def test_cross_entropy_in_a_forward_matches_hand_counts(options, flops):
    prof = profile_model(Loss(F.cross_entropy, **options).eval(), (X, Y))
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops == flops


def test_kl_div_prices_xlogy():
    """kl_div(input, target) without log_target: target * log(target) by xlogy (3 per element,
    60), target * input 20, subtract 20, sum 20, batchmean's divide 1."""
    prof = profile_model(
        Loss(F.kl_div, reduction="batchmean").eval(), (X.log_softmax(1), torch.rand(4, 5))
    )
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops == 60 + 20 + 20 + 20 + 1


T, N, C, S = 6, 2, 5, 3  # time, batch, classes, target length: 2*3 + 1 = 7 CTC states


def ctc_inputs():
    torch.manual_seed(0)
    log_probs = torch.randn(T, N, C).log_softmax(2)
    return log_probs, torch.randint(1, C, (N, S)), torch.full((N,), T), torch.full((N,), S)


class CTC(nn.Module):
    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths)


def test_ctc_loss_forward_matches_hand_count():
    """log_alpha is N x T x 7 = 84 states at 13 each = 1092, plus 9 per sample = 18; the mean
    divides by the clamped target lengths (clamp_min 2, div 2), then means them (2)."""
    prof = profile_model(CTC(), ctc_inputs())
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops == 84 * 13 + 2 * 9 + 2 + 2 + 2


class Calls(TorchDispatchMode):
    """The ATen calls a real run makes, as (op, shapes of args, kwargs, output)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.calls.append((func, *tree.shapes((args, kwargs or {}, out))))
        return out


def test_ctc_loss_backward_prices_the_call_torch_makes():
    """The real backward's ``_ctc_loss_backward`` call, priced as the cost pass would: 84
    states at 22 (beta 13, alpha + beta into its label 9) + 6 per gradient element (T*N*C = 60).
    A training step with CTC needs a real run (its output shapes depend on the lengths)."""
    log_probs, *rest = ctc_inputs()
    log_probs.requires_grad_()
    loss = F.ctc_loss(log_probs, *rest)
    with Calls() as mode:
        loss.backward()
    [(func, args, kwargs, out)] = [c for c in mode.calls if "ctc" in str(c[0])]
    assert str(func) == "aten._ctc_loss_backward.default"
    assert price("_ctc_loss_backward", args, kwargs, out).other == 84 * 22 + 60 * 6


# EmbeddingBag: 7 indices into a 10 x 3 table, 2 bags (offsets 0 and 3) -------------------

INDICES, OFFSETS = torch.tensor([1, 2, 4, 5, 4, 3, 2]), torch.tensor([0, 3])


class Bag(nn.Module):
    def __init__(self, mode, weighted=False):
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 3, mode=mode)
        self.weights = nn.Parameter(torch.ones(7)) if weighted else None

    def forward(self, indices, offsets):
        return self.bag(indices, offsets, per_sample_weights=self.weights)


@pytest.mark.parametrize(
    "mode, weighted, forward",
    [
        ("sum", False, 7 * 3),  # each looked-up row added into its bag
        ("mean", False, 7 * 3 + 2 * 3),  # then each bag divided by its size
        ("max", False, 7 * 3),  # compared instead of added
        ("sum", True, 7 * 3 + 7 * 3),  # each row scaled by its weight first
    ],
)
def test_embedding_bag_prices_its_reduction(mode, weighted, forward):
    prof = profile_model(Bag(mode, weighted).eval(), (INDICES, OFFSETS))
    assert (prof.flops, prof.coverage.unsupported_ops) == (forward, {})
    with torch.inference_mode():  # embedding_bag reaches the recorder whole there
        assert profile_model(Bag(mode, weighted).eval(), (INDICES, OFFSETS)).flops == forward


@pytest.mark.parametrize("tier", ["fx", "eager"])
def test_embedding_bag_reads_a_row_per_index_not_per_bag(tier):
    """Its output holds one row per bag, but it reads one row of the table per index: 7 rows
    of 3 float32 here, 84 bytes (it had read as its output's 2 rows and bookkeeping)."""
    prof = profile_model(Bag("sum").eval(), (INDICES, OFFSETS), tier=tier)
    (subgraph,) = prof.subgraphs
    assert subgraph.bytes_weights == 7 * 3 * 4


@pytest.mark.parametrize(
    "mode, weighted, backward",
    [
        ("sum", False, 7 * 3),  # each row's gradient gets its bag's
        ("mean", False, 2 * 7 * 3),  # and is divided by the bag's size
        ("max", False, 2 * 3),  # only the row that won each bag
        # scaled by its weight (7*3 more), and each weight's gradient is a dot product of its
        # row with its bag's gradient: 7*3 MACs
        ("sum", True, 2 * 7 * 3 + 2 * 7 * 3),
    ],
)
def test_embedding_bag_backward_matches_hand_counts(mode, weighted, backward):
    """Default loss: the sum of the 2 x 3 output, 6 FLOPs, in the forward."""
    from pytest_graphbudget.compat import torch_version

    prof = profile_model(Bag(mode, weighted), (INDICES, OFFSETS), mode="train")
    totals = prof.to_dict()["totals"]
    assert prof.coverage.unsupported_ops == {}
    # torch 2.4's backward of a sum bag first rebuilds which bag each index belongs to, with
    # integers: an index_add of the 2 offsets, a cumsum of the 8 positions and a sub of 1.
    offset2bag = 2 + 8 + 1 if mode == "sum" and torch_version() < (2, 5) else 0
    assert totals["backward_flops"] == backward + offset2bag
    assert totals["backward_macs"] == (7 * 3 if weighted else 0)


def test_a_two_dimensional_bag_input_is_priced():
    """(2, 3) indices, one bag per row: 6 rows of 3 added, 2 bags of 3 divided (mean)."""
    prof = profile_model(
        nn.EmbeddingBag(10, 3, mode="mean"), (torch.tensor([[1, 2, 3], [4, 5, 6]]),)
    )
    assert prof.flops == 6 * 3 + 2 * 3


# Budgets: pytest --graph-budget, with no allow_unsupported --------------------------------

MODELS = """
import torch
import transformers
from torch import nn
from torch.nn import functional as F

from pytest_graphbudget import ModelCase


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x, y):
        return F.cross_entropy(self.fc(x), y)


def classifier():
    torch.manual_seed(0)
    return ModelCase(Classifier(), (torch.randn(4, 8), torch.tensor([0, 1, 2, 3])))


def gpt2_lm():
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=0,
        eos_token_id=0,
    )
    ids = torch.randint(0, 64, (2, 8))
    return ModelCase(transformers.GPT2LMHeadModel(config), (), {"input_ids": ids, "labels": ids})
"""

TESTS = """
import pytest

from models import gpt2_lm


@pytest.fixture
def lm():
    return gpt2_lm()


@pytest.mark.flops_max("1G")
def test_lm_eval(lm):
    pass


@pytest.mark.flops_max("1G")
@pytest.mark.graph_budget(mode="train")
def test_lm_train(lm):
    pass
"""

# The classifier's step: the issue repro's 708 FLOPs, plus the default loss's sum of the
# model's one output, the cross-entropy (1 FLOP): 709, exactly at the limit.
BUDGET = """
[models.classifier]
factory = "models:classifier"
mode = "train"
flops_max = 709
"""


def test_cross_entropy_budgets_pass_without_allow_unsupported(pytester):
    pytest.importorskip("transformers")
    pytester.makepyfile(models=MODELS, test_hf_labels=TESTS)
    pytester.syspathinsert()
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets" / "losses.toml").write_text(BUDGET)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "--graph-budget-json=report.json"
    )
    result.assert_outcomes(passed=3)
    models = json.loads((pytester.path / "report.json").read_text())["models"]
    assert len(models) == 3
    for model in models:
        assert model["passed"] is True, model
        assert model["profile"]["coverage"]["unsupported_ops"] == {}
    [classifier] = [m for m in models if m["id"].endswith("classifier@train")]
    assert classifier["profile"]["totals"]["flops"] == 709
    assert classifier["verdict"] == "warn"  # at 100% of its limit, not over it


@pytest.mark.parametrize(
    "options, flops",
    [
        # per element (4 x 5 = 20): margin - x[y] + x[i] 2, max 1, into the sum 1 = 4 -> 80;
        # per sample: divide by the 5 classes 1, the mean adds it up 1 -> 8
        ({}, 80 + 8),
        # p=2 squares (+1) and the class weight scales (+1): 6 per element -> 120; sum: 8
        ({"p": 2, "weight": torch.ones(5), "reduction": "sum"}, 120 + 8),
        ({"reduction": "none"}, 80 + 4),  # the per-sample divide only
    ],
    ids=["plain", "p2-weight-sum", "none"],
)
def test_multi_margin_loss_matches_hand_counts(options, flops):
    prof = profile_model(Loss(F.multi_margin_loss, **options).eval(), (X, Y))
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops == flops


def test_multi_margin_loss_training_step():
    """Linear(8, 4) -> multi_margin_loss over 4 classes: forward 4 per element (16) = 64 + 2
    per sample = 8; backward 5 per element (the margin term 2, compare 1, into the target's
    gradient 1, times the output's gradient 1) = 80."""
    prof = step(lambda o: F.multi_margin_loss(o, torch.tensor(TARGETS)))
    assert prof.coverage.unsupported_ops == {}
    assert (prof.flops, prof.macs) == (LINEAR_STEP + 64 + 8 + 80, LINEAR_MACS)


def test_multilabel_margin_loss_counts_its_class_pairs():
    """Two targets of 5 classes per sample: 2 x 3 = 6 (target, other) pairs, which is also the
    bound the shapes allow (k = 5 // 2). Forward, eval: 4 per pair = 24, divide 1 and mean 1
    = 26 per sample, x4 = 104. Training step on Linear(8, 5) with (4, 8) inputs (Linear: 160
    MACs, 320 + 20 bias; backward mm 320 + bias sum 20): backward 5 per pair = 30 and 1 per
    element (times the output's gradient) = 5, x4 = 140."""
    labels = torch.tensor([[0, 1, -1, 0, 0]] * 4)
    prof = profile_model(Loss(F.multilabel_margin_loss).eval(), (X, labels))
    assert prof.coverage.unsupported_ops == {}
    assert prof.flops == 104
    trained = step(lambda o: F.multilabel_margin_loss(o, labels), nn.Linear(8, 5))
    assert trained.coverage.unsupported_ops == {}
    assert trained.flops == 340 + 340 + 104 + 140
