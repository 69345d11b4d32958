"""Detection ops: TorchVision's RoI pooling and NMS, and the data-dependent ATen ops detectors
use around them (``unique``, ``sort`` of scores, ``where``). None is a contraction: they add to
``flops``, never to ``macs``.

Their work depends on values (boxes that survive NMS, RoI sizes with adaptive sampling); the
formulas below price the shapes of the one forward that was run, with the conventions stated
next to each.
"""

from __future__ import annotations

from pytest_graphbudget.costs.registry import OpCost, Shape, numel, out_numel, register

BILINEAR = 7  # four weighted reads: 4 multiplies, 3 adds
IOU = 10  # intersection (2 max, 2 min, 2 subtracts, 1 multiply), union (2 adds), 1 divide
ADAPTIVE_SAMPLES = 2  # samples per bin side assumed when ``sampling_ratio <= 0`` (data-dependent)


@register("torchvision.roi_align", "torchvision.ps_roi_align")
def roi_align(
    x: Shape, rois: Shape, scale, pooled_h, pooled_w, sampling_ratio=-1, *_, out, **__
) -> OpCost:
    # Every output bin averages s x s bilinear samples: per sample an interpolation and an add
    # to the sum, then one divide per bin.
    s = sampling_ratio if sampling_ratio > 0 else ADAPTIVE_SAMPLES
    return OpCost(other=out_numel(out) * (s * s * (BILINEAR + 1) + 1))


def _align_backward(grad: Shape, sampling_ratio: int) -> OpCost:
    # The forward in reverse: each bin's gradient divided by its sample count once, then per
    # sample the four bilinear weights and four weighted adds into the input's gradient.
    s = sampling_ratio if sampling_ratio > 0 else ADAPTIVE_SAMPLES
    return OpCost(other=numel(grad) * (s * s * (BILINEAR + 1) + 1))


@register("torchvision._roi_align_backward")
def roi_align_backward(
    grad: Shape, rois, scale, ph, pw, n, c, h, w, ratio, *_, out, **__
) -> OpCost:
    return _align_backward(grad, ratio)


@register("torchvision._ps_roi_align_backward")
def ps_roi_align_backward(
    grad: Shape, rois, mapping, scale, ph, pw, ratio, *_, out, **__
) -> OpCost:
    # Each bin reads one channel of its group: RoI Align's count per bin of the output.
    return _align_backward(grad, ratio)


@register("torchvision._ps_roi_pool_backward")
def ps_roi_pool_backward(
    grad: Shape, rois: Shape, mapping, scale, ph, pw, n, c, h, w, *_, out, **__
) -> OpCost:
    # Position-sensitive pooling averages each bin: backward divides each bin's gradient by its
    # area once and adds it to every input element the bin covers, the forward's count.
    rois_n = rois[0] if rois else 0
    return OpCost(other=rois_n * c * h * w // max(1, ph * pw) + numel(grad))


@register("torchvision._roi_pool_backward")
def roi_pool_backward(grad: Shape, *_, out, **__) -> OpCost:
    # Each bin's gradient added to the input element its max came from (``argmax``).
    return OpCost(other=numel(grad))


@register("torchvision.roi_pool", "torchvision.ps_roi_pool")
def roi_pool(x: Shape, rois: Shape, scale, pooled_h, pooled_w, *_, out, **__) -> OpCost:
    # A max over each bin: one comparison per input element the bins cover, at most the
    # whole feature map per RoI; priced as the bin count times the mean bin area.
    rois_n = rois[0] if rois else 0
    bins = max(1, pooled_h * pooled_w)
    area = numel(x) // max(1, x[0] if x else 1)  # one image's C*H*W
    return OpCost(other=rois_n * area // bins + out_numel(out))


@register("torchvision.nms")
def nms(boxes: Shape, scores: Shape, iou_threshold=0.5, *_, out, **__) -> OpCost:
    # Areas (3 per box), a sort of the scores (n log2 n), and the IoU of every pair the greedy
    # scan may compare. It compares each box it keeps with the boxes after it in score order
    # that are not yet suppressed: for k kept of n, at most k (n - 1) - k (k - 1) / 2 pairs
    # (the k first in order), n (n - 1) / 2 when every box is kept or k is not known.
    n = boxes[0] if boxes else 0
    k = min(n, out[0]) if isinstance(out, Shape) and out and isinstance(out[0], int) else n
    pairs = k * (n - 1) - k * (k - 1) // 2
    return OpCost(other=3 * n + n * max(1, (n - 1).bit_length()) + IOU * pairs)


@register("_unique2", "unique_dim", "_unique", "unique_consecutive", "unique_dim_consecutive")
def unique(x: Shape, *_, out, **__) -> OpCost:
    # A sort (n log2 n comparisons) and one comparison per neighbour pair.
    n = numel(x)
    return OpCost(other=n * max(1, (n - 1).bit_length()) + n)


@register("searchsorted", "bucketize")
def searchsorted(a: Shape, b: Shape, *_, out, **__) -> OpCost:
    # A binary search per query: log2 of the sorted length.
    sorted_len = a[-1] if isinstance(a, Shape) and a else 1
    return OpCost(other=out_numel(out) * max(1, (sorted_len - 1).bit_length()))
