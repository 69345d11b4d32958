"""The micro-benchmarks of the kinds a model's post-processing runs (a detector's NMS, RoI
align, sorts and top-k, a router's top-k), timed in float32 alone (``FLOAT32_ONLY``): what
they compute is the registry's (``costs``), so a benchmark's FLOPs cannot drift from a model's
op's. ``modes.kernel_shapes`` adds them to every kind's shapes.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

Bench = tuple[Callable[[], Any], float, float]  # the call, its FLOPs, its bytes


def nms(n: int, spread: float):
    """TorchVision's non-maximum suppression of ``n`` boxes 20 to 60 pixels wide, their corners
    spread over ``spread`` pixels (the closer, the more suppressed), at IoU 0.5. Its FLOPs are
    the registry's (``costs.detection.nms``), from the boxes it keeps, as a model's are priced;
    its bytes the boxes, scores and kept indices. A detector suppresses per image (or per
    class), so a GPU's batch leaves it be."""
    import torch
    from torchvision.ops import nms as suppress

    from pytest_graphbudget.costs import Shape, price

    generator = torch.Generator(device="cpu").manual_seed(n)
    corner = torch.rand(n, 2, generator=generator, device="cpu") * spread
    size = 20 + 40 * torch.rand(n, 2, generator=generator, device="cpu")
    boxes = torch.cat([corner, corner + size], 1)
    scores = torch.rand(n, generator=generator, device="cpu")
    kept = len(suppress(boxes, scores, 0.5))  # on the CPU: the device may be ``meta``
    boxes, scores = boxes.to(torch.get_default_device()), scores.to(torch.get_default_device())
    cost = price("torchvision.nms", (Shape((n, 4)), Shape((n,)), 0.5), {}, Shape((kept,)))
    return (lambda: suppress(boxes, scores, 0.5)), cost.flops, 4 * 5 * n + 8 * kept


def roi_align(channels: int, hw: int, rois: int, scale: float):
    """TorchVision's RoI align to 7x7 bins, 2x2 samples a bin (Faster and Mask R-CNN's
    ``MultiScaleRoIAlign``), of ``rois`` boxes over a ``channels`` x ``hw`` x ``hw`` map at
    ``scale``. Its FLOPs are the registry's (``costs.detection.roi_align``): 7 x 7 bins a
    channel and RoI, each 4 samples of 8 and a divide; its bytes the map, boxes and output."""
    import torch
    from torchvision.ops import roi_align as align

    from pytest_graphbudget.costs import Shape, price

    generator = torch.Generator(device="cpu").manual_seed(rois)
    corner = torch.rand(rois, 2, generator=generator, device="cpu") * hw / scale * 0.8
    size = 10 + torch.rand(rois, 2, generator=generator, device="cpu") * hw / scale * 0.5
    boxes = torch.cat([torch.zeros(rois, 1, device="cpu"), corner, corner + size], 1)
    boxes = boxes.to(torch.get_default_device())
    x = torch.randn(1, channels, hw, hw)
    call = lambda: align(x, boxes, 7, scale, 2)  # noqa: E731
    out = Shape((rois, channels, 7, 7))
    cost = price(
        "torchvision.roi_align", (Shape(x.shape), Shape((rois, 5)), scale, 7, 7, 2), {}, out
    )
    return call, cost.flops, 4 * (x.numel() + 5 * rois + rois * channels * 49)


def sort(op: str, n: int, groups: int):
    """What a model sorts, ``n`` values in ``groups``: ``sort``, a detector's scores, descending,
    made of one descending run a class (batched NMS ranking what each class kept; as many
    groups as values: in no order); ``unique``, its int64 labels, a block a class (as batched
    NMS builds them); ``argsort``, a router's int64 expert ids, ``groups`` experts in random
    order (a mixture of experts grouping its tokens). Its FLOPs are the registry's comparisons
    (``costs.reduction.sort``, ``costs.detection.unique``); its bytes what it reads and writes
    (int64 indices). Random floats, which models seldom sort, took up to twice as long a
    comparison on one EPYC."""
    import torch

    from pytest_graphbudget.costs import Shape, price

    generator = torch.Generator(device="cpu").manual_seed(n)
    labels = torch.arange(n, device="cpu") * groups // n  # 0, 0, ..., 1, 1, ..., evenly
    if op == "unique":
        kept = len(torch.unique(labels))  # on the CPU: the device may be ``meta``
        labels = labels.to(torch.get_default_device())
        cost = price("_unique2", (Shape((n,)), True), {}, Shape((kept,)))
        return (lambda: torch.unique(labels)), cost.flops, 8 * (n + kept)
    if op == "argsort":
        keys = torch.randint(0, groups, (n,), generator=generator, device="cpu")
    else:  # a descending run of scores a label: ordered by label, then by score down
        scores = torch.rand(n, generator=generator, device="cpu")
        keys = scores[torch.argsort(2 * labels - scores)]
    keys = keys.to(torch.get_default_device())
    cost = price("sort", (Shape((n,)), -1, op == "sort"), {}, (Shape((n,)), Shape((n,))))
    moved = (2 * keys.element_size() + 8) * n
    return (lambda: torch.sort(keys, descending=op == "sort")), cost.flops, moved


def topk(rows: int, n: int, k: int, copies: int):
    """``topk`` of ``k`` along rows of ``n`` float32 scores, called on ``copies`` different
    inputs in turn: one input again and again trains the branch predictor (a detector's row
    of 3,234 took 5.7 ns an element repeated, 12.7 ns over 16 inputs, on one EPYC), where a
    forward's other ops leave it none the wiser. Its FLOPs are the registry's comparisons
    (``costs.reduction.topk``); its bytes what it reads, as ``engine.latency`` prices it."""
    import itertools

    import torch

    from pytest_graphbudget.costs import Shape, price

    generator = torch.Generator(device="cpu").manual_seed(rows * n + k)
    inputs = [
        torch.rand(rows, n, generator=generator, device="cpu").to(torch.get_default_device())
        for _ in range(copies)
    ]
    turn = itertools.cycle(inputs)
    cost = price("topk", (Shape((rows, n)), k), {}, (Shape((rows, k)), Shape((rows, k))))
    return (lambda: torch.topk(next(turn), k)), cost.flops, 4 * rows * n


TORCHVISION_KINDS = ("nms", "roi_align")
"""Kinds of TorchVision's ops: without it they are not timed, and price as ``pointwise``
(``engine.latency.FALLBACK``)."""
FLOAT32_ONLY = (*TORCHVISION_KINDS, "sort", "topk", "topk_heap")
"""Kinds timed in float32 alone: a detector's boxes and scores stay float32 whatever its
dtype, as does a router's softmax before its top-k, a sort's comparisons hardly depend on it,
and a half-precision table takes float32's rate for a kind it lacks (``Hardware.kernel``)."""


def float32_benches() -> dict[str, list[Callable[[], Bench]]]:
    """The ``FLOAT32_ONLY`` kinds' micro-benchmarks; TorchVision's only where it is installed."""
    table: dict[str, list[Callable[[], Bench]]] = {
        "nms": [  # SSDlite's 300 boxes a class, a region proposal network's 1000 or so
            lambda n=n, spread=spread: nms(n, spread)
            for n, spread in [(100, 100), (300, 100), (1000, 300)]
        ],
        "roi_align": [  # Faster R-CNN's 150 RoIs at stride 16, Mask R-CNN's at stride 4
            lambda c=c, hw=hw, n=n, scale=scale: roi_align(c, hw, n, scale)
            for c, hw, n, scale in [(16, 20, 10, 1 / 16), (256, 20, 150, 1 / 16)]
            + [(64, 50, 50, 1 / 4)]
        ],
        "sort": [  # sizes a decade apart: on one EPYC the fit strayed 72% across calibrations
            # when two of three sizes were alike; a class's 300 candidates, a detector's 3,234
            # anchors of 91 classes, 4,096 tokens to 8 experts (top 2), 20,000 labels of 80
            lambda op=op, n=n, groups=groups: sort(op, n, groups)
            for op, n, groups in [("sort", 300, 300), ("sort", 3234, 91), ("argsort", 8192, 8)]
            + [("unique", 20000, 80)]
        ],
        "topk": [  # a router's token (decoding) and 4,096 of them, to 8 and to 64 experts; a
            # detector's class of 3,234 anchors, its last levels
            lambda rows=rows, n=n, k=k: topk(rows, n, k, copies=16)
            for rows, n, k in [(1, 8, 2), (4096, 8, 2), (1, 3234, 300), (4096, 64, 6)]
            + [(1, 20000, 1000)]
        ],
        "topk_heap": [  # a router's 4,096 tokens to 128 experts, top 1; a region proposal
            # network's 120,000 anchors, RetinaNet's levels
            lambda rows=rows, n=n, k=k: topk(rows, n, k, copies=2)
            for rows, n, k in [(1, 128, 1), (4096, 128, 1), (1, 120_000, 1000)]
            + [(1, 500_000, 1000), (1, 2_000_000, 1000)]
        ],
    }
    if importlib.util.find_spec("torchvision") is None:
        for kind in TORCHVISION_KINDS:
            del table[kind]
    return table
