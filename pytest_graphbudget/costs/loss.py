"""Losses, forward and backward: what a training step with a real loss runs.

Counts follow the rest of the registry: every operation of the loss's formula once per element
(constants folded), a select or clamp 1, ``log_sigmoid`` 5 as in ``elementwise.py``.
``reduction`` is ATen's enum (0 none, 1 mean, 2 sum): a mean or sum adds 1 per element summed,
as ``sum`` and ``mean`` do; a backward under ``mean`` divides each gradient element by the
count (1 more). Where a kernel skips work on the data (an ignored target, a padded index, a
CTC state with fewer predecessors), the count is dense, as a causal mask is. Losses that
decompose into priced ops (``l1_loss``, ``kl_div``, label smoothing, probability targets) need
no entry. The formulas are listed in docs/metrics.md ("Losses").
"""

from __future__ import annotations

from pytest_graphbudget.costs.registry import (
    OpCost,
    Shape,
    numel,
    output_storage,
    register,
    workspace,
)

NONE, MEAN = 0, 1  # torch's Reduction enum; 2 is sum
LOG_SIGMOID = 5  # as log_sigmoid_forward in elementwise.py


def _reduced(reduction: int) -> int:
    """FLOPs per element that a mean or a sum adds: 1, none 0."""
    return int(reduction != NONE)


def _mean(reduction: int) -> int:
    """FLOPs per gradient element that a mean's division adds."""
    return int(reduction == MEAN)


def _given(tensor) -> int:
    return int(isinstance(tensor, Shape))


# Classification: NLL (cross-entropy is log_softmax, then this) ------------------------------


@register("nll_loss_forward", "nll_loss2d_forward", role="reduction", kind="nll_loss")
def nll_loss(x: Shape, target: Shape, weight=None, reduction: int = MEAN, *_, out, **__) -> OpCost:
    # Per target (sample, or pixel for 2d): pick its log-probability (0), negate it (1), scale
    # by its class weight (1 with weight); a mean or sum adds it up (1), a mean also sums the
    # targets' weights, its divisor (1).
    per_target = 1 + _given(weight) + _reduced(reduction) + _mean(reduction)
    return OpCost(other=per_target * numel(target))


@register("nll_loss_backward", "nll_loss2d_backward", role="pointwise", kind="nll_loss_bwd")
def nll_loss_backward(
    grad: Shape, x: Shape, target: Shape, weight=None, reduction: int = MEAN, *_, out, **__
) -> OpCost:
    # A zero gradient (no FLOPs) with, per target, -weight * grad (/ total weight for a mean)
    # written at its class: negate (1), weight (1), divide (1 for a mean).
    return OpCost(other=(1 + _given(weight) + _mean(reduction)) * numel(target))


# Regression: squared error, Huber and smooth L1 -------------------------------------------


@register("mse_loss", role="reduction", kind="mse_loss")
def mse_loss(x: Shape, target: Shape, reduction: int = MEAN, *_, out, **__) -> OpCost:
    # (x - y)^2: subtract, square (2).
    return OpCost(other=(2 + _reduced(reduction)) * numel(x))


@register("mse_loss_backward", kind="mse_loss_bwd")
def mse_loss_backward(
    grad: Shape, x: Shape, target: Shape, reduction: int = MEAN, *_, out, **__
) -> OpCost:
    # 2 * (x - y) * grad: subtract, scale, multiply (3).
    return OpCost(other=(3 + _mean(reduction)) * numel(x))


@register("smooth_l1_loss", role="reduction", kind="smooth_l1_loss")
def smooth_l1_loss(x: Shape, target: Shape, reduction: int = MEAN, *_, out, **__) -> OpCost:
    # d = x - y, a = |d|; a < beta ? a * a * (0.5 / beta) : a - 0.5 * beta: subtract, abs,
    # compare, square, scale, subtract, select (7).
    return OpCost(other=(7 + _reduced(reduction)) * numel(x))


@register("huber_loss", role="reduction", kind="huber_loss")
def huber_loss(x: Shape, target: Shape, reduction: int = MEAN, *_, out, **__) -> OpCost:
    # a = |x - y|; a < delta ? 0.5 * a * a : delta * (a - 0.5 * delta): subtract, abs, compare,
    # square, scale, subtract, scale, select (8).
    return OpCost(other=(8 + _reduced(reduction)) * numel(x))


@register("smooth_l1_loss_backward", kind="smooth_l1_loss_bwd")
def smooth_l1_loss_backward(
    grad: Shape, x: Shape, target: Shape, reduction: int = MEAN, *_, out, **__
) -> OpCost:
    # grad * clamp((x - y) / beta, -1, 1): subtract, divide, clamp, multiply (4).
    return OpCost(other=(4 + _mean(reduction)) * numel(x))


@register("huber_loss_backward", kind="huber_loss_bwd")
def huber_loss_backward(
    grad: Shape, x: Shape, target: Shape, reduction: int = MEAN, *_, out, **__
) -> OpCost:
    # grad * clamp(x - y, -delta, delta): subtract, clamp, multiply (3).
    return OpCost(other=(3 + _mean(reduction)) * numel(x))


# Binary classification --------------------------------------------------------------------


@register("binary_cross_entropy", role="reduction", kind="bce")
def binary_cross_entropy(
    p: Shape, target: Shape, weight=None, reduction: int = MEAN, *_, out, **__
) -> OpCost:
    # (y - 1) * max(log1p(-p), -100) - y * max(log(p), -100), as ATen computes it: negate,
    # log1p, clamp, log, clamp, subtract, two multiplies, subtract (9); weight 1.
    return OpCost(other=(9 + _given(weight) + _reduced(reduction)) * numel(p))


@register("binary_cross_entropy_backward", kind="bce_bwd")
def binary_cross_entropy_backward(
    grad: Shape, p: Shape, target: Shape, weight=None, reduction: int = MEAN, *_, out, **__
) -> OpCost:
    # grad * (p - y) / max((1 - p) * p, eps): subtract, subtract, multiply, clamp, divide,
    # multiply (6); weight 1.
    return OpCost(other=(6 + _given(weight) + _mean(reduction)) * numel(p))


@register("binary_cross_entropy_with_logits", role="reduction", kind="bce_logits")
def binary_cross_entropy_with_logits(
    x: Shape, target: Shape, weight=None, pos_weight=None, reduction: int = MEAN, *_, out, **__
) -> OpCost:
    # (1 - y) * x - log_sigmoid(x) * ((pos_weight - 1) * y + 1), as ATen computes it:
    # log_sigmoid (5), subtract, multiply, subtract (3); pos_weight: subtract, multiply, add,
    # multiply (4); weight 1. Its backward is sigmoid, sub and mul ops, priced as such.
    per_element = LOG_SIGMOID + 3 + 4 * _given(pos_weight) + _given(weight)
    return OpCost(other=(per_element + _reduced(reduction)) * numel(x))


@register("soft_margin_loss", role="reduction", kind="soft_margin_loss")
def soft_margin_loss(x: Shape, target: Shape, reduction: int = MEAN, *_, out, **__) -> OpCost:
    # log(1 + exp(-y * x)): multiply, negate, exp, add, log (5).
    return OpCost(other=(5 + _reduced(reduction)) * numel(x))


@register("soft_margin_loss_backward", kind="soft_margin_loss_bwd")
def soft_margin_loss_backward(
    grad: Shape, x: Shape, target: Shape, reduction: int = MEAN, *_, out, **__
) -> OpCost:
    # grad * -y * e / (1 + e), e = exp(-y * x): multiply, negate, exp, add, divide, negate,
    # multiply, multiply (8).
    return OpCost(other=(8 + _mean(reduction)) * numel(x))


# Margins over the classes: multi_margin_loss, multilabel_margin_loss --------------------


@register("multi_margin_loss", role="reduction", kind="multi_margin_loss")
def multi_margin_loss(
    x: Shape, target: Shape, p=1, margin=1, weight=None, reduction: int = MEAN, *_, out, **__
) -> OpCost:
    # Per class of each sample: margin - x[y] + x[i] (2), max(0, .) (1), squared for p=2 (1),
    # times the target's class weight (1), added to the sample's sum (1); per sample the sum
    # is divided by the class count (1), and a mean or sum adds the samples up (1).
    samples = numel(target)
    per_element = 4 + int(p == 2) + _given(weight)
    return OpCost(other=per_element * numel(x) + (1 + _reduced(reduction)) * samples)


@register("multi_margin_loss_backward", kind="multi_margin_loss_bwd")
def multi_margin_loss_backward(
    grad: Shape, x: Shape, target: Shape, p=1, margin=1, weight=None, *_, out, **__
) -> OpCost:
    # Per element: the margin term again (2), its comparison (1), 2 z for p=2 (1; the
    # 1 / (count) scale is a constant), the class weight (1), subtracted from the target's
    # gradient (1), times the output's gradient (1).
    return OpCost(other=(5 + int(p == 2) + _given(weight)) * numel(x))


def _label_pairs(x: Shape) -> int:
    """(target, other class) pairs a multilabel margin loss visits: ``k (C - k)`` for ``k``
    targets of ``C`` classes, data the shapes do not hold; its maximum (``k = C / 2``) per
    sample, an upper bound as ``nms``'s."""
    classes = x[-1] if len(x) else 1
    return (classes // 2) * (classes - classes // 2) * (numel(x) // max(classes, 1))


@register("multilabel_margin_loss_forward", role="reduction", kind="multilabel_margin_loss")
def multilabel_margin_loss(x: Shape, target: Shape, reduction: int = MEAN, *_, out, **__) -> OpCost:
    # Per pair: 1 - x[j] + x[i] (2), max(0, .) (1), added to the sum (1); per sample the sum
    # is divided by the class count (1) and a mean or sum adds it up (1).
    samples = numel(x) // max(x[-1] if len(x) else 1, 1)
    return OpCost(other=4 * _label_pairs(x) + (1 + _reduced(reduction)) * samples)


@register("multilabel_margin_loss_backward", kind="multilabel_margin_loss_bwd")
def multilabel_margin_loss_backward(grad: Shape, x: Shape, *_, out, **__) -> OpCost:
    # Per pair: the margin term (2), its comparison (1), +g at the class and -g at the target
    # (2); per element, times the output's gradient (1).
    return OpCost(other=5 * _label_pairs(x) + numel(x))


@register("xlogy", kind="xlogy")
def xlogy(*_, out, **__) -> OpCost:
    # x * log(y), 0 where x is 0 (kl_div's target * log(target)): log, multiply, select (3).
    return OpCost(other=3 * numel(out))


# Sequences: CTC ---------------------------------------------------------------------------

CTC_STATE = 13
"""FLOPs per element of ``log_alpha`` (batch x time x (2 * target length + 1) states): a
logsumexp of three predecessors (max 2, subtract 3, exp 3, add 2, log 1, add the max back 1)
plus the emission's log-probability (1), counted for every state, as if each had three."""
CTC_END = 9
"""Per sample: the loss is minus the logsumexp of the last two states (max 1, subtract 2,
exp 2, add 1, log 1, add 1, negate 1)."""
CTC_GRAD_STATE = 9
"""Backward, per state, besides computing beta as alpha (``CTC_STATE``): alpha + beta (1),
added into its label's slot by a logaddexp (max 1, subtract 2, exp 2, add 1, log 1, add 1)."""
CTC_GRAD = 6
"""Backward, per element of the gradient (time x batch x classes):
(exp(lp) - exp(lcab + nll - lp)) * grad: exp, add, subtract, exp, subtract, multiply."""


@register("_ctc_loss", role="reduction", kind="ctc_loss")
def ctc_loss(log_probs: Shape, *_, out, **__) -> OpCost:
    nll, log_alpha = out[0], out[1]
    return OpCost(other=CTC_STATE * numel(log_alpha) + CTC_END * numel(nll))


@register("_ctc_loss_backward", role="reduction", kind="ctc_loss_bwd")
def ctc_loss_backward(
    grad: Shape,
    log_probs: Shape,
    targets,
    input_lengths,
    target_lengths,
    nll,
    log_alpha,
    *_,
    out,
    **__,
) -> OpCost:
    states = (CTC_STATE + CTC_GRAD_STATE) * numel(log_alpha)
    return OpCost(other=states + CTC_GRAD * numel(log_probs))


# Workspaces: the elementwise losses' CPU kernels, read off torch.profiler ------------------
# (bytes beside the op's output while it runs, in the input's size: ``_elements``)


def _elements(x: Shape, target) -> int:
    """Elements of the loss before its reduction: the input and target broadcast."""
    return max(numel(x), numel(target))


@workspace("mse_loss", "smooth_l1_loss", "huber_loss")
def regression_loss_scratch(
    x: Shape, target, reduction=MEAN, beta=1.0, *_, out, itemsize: int, **kw
) -> int:
    """Reduced, one input-sized temporary beside the per-element losses (smooth L1 with
    ``beta=0`` is L1, which reduces as it goes)."""
    reduced = kw.get("reduction", reduction) != NONE
    return _elements(x, target) * itemsize if reduced and kw.get("beta", beta) != 0 else 0


@output_storage("mse_loss", "smooth_l1_loss", "soft_margin_loss")
def reduced_in_place(x: Shape, target, reduction=MEAN, beta=1.0, *_, out, **kw) -> int:
    """A reduced MSE, smooth L1 or soft margin loss is written into element 0 of its
    per-element losses (``at::mean_out`` into the iterator's output): the scalar holds their
    storage as long as it lives (a training loop's ``loss``, through its backward)."""
    reduced = kw.get("reduction", reduction) != NONE
    return _elements(x, target) if reduced and kw.get("beta", beta) != 0 else 0


@output_storage("binary_cross_entropy")
def bce_reduced_in_place(x: Shape, target, weight=None, reduction=MEAN, *_, out, **kw) -> int:
    """As ``reduced_in_place``, for binary cross-entropy (its weight before the reduction)."""
    return _elements(x, target) if kw.get("reduction", reduction) != NONE else 0


@workspace("binary_cross_entropy_with_logits")
def bce_logits_scratch(
    x: Shape, target, weight=None, pos_weight=None, reduction=MEAN, *_, out, itemsize: int, **kw
):
    """ATen composes it of whole-tensor ops: two input-sized temporaries before the reduction
    (one when not reduced, where the output is the other), and ``pos_weight`` less one."""
    reduced = kw.get("reduction", reduction) != NONE
    pos_weight = kw.get("pos_weight", pos_weight)
    return ((1 + reduced) * _elements(x, target) + numel(pos_weight)) * itemsize


@workspace("binary_cross_entropy", "binary_cross_entropy_backward")
def bce_scratch(first: Shape, second: Shape, *_, out, itemsize: int, **__) -> int:
    """Forward and backward alike hold one input-sized temporary, reduced or not."""
    return max(numel(first), numel(second)) * itemsize


@workspace("soft_margin_loss_backward")
def soft_margin_backward_scratch(grad: Shape, x: Shape, target, *_, out, itemsize: int, **__):
    """``-y * exp(-y * x) / (1 + exp(-y * x))`` of whole tensors: two input-sized temporaries."""
    return 2 * _elements(x, target) * itemsize


@workspace("_ctc_loss_backward")
def ctc_backward_scratch(
    grad: Shape,
    log_probs: Shape,
    targets,
    input_lengths,
    target_lengths,
    neg_log_likelihood,
    log_alpha: Shape,
    *_,
    out,
    itemsize: int,
    **__,
) -> int:
    """The backward's own recursion, ``log_beta``, the size of the forward's ``log_alpha``
    (batch x time x 2 * target + 1), live while the gradient is written."""
    return numel(log_alpha) * itemsize
