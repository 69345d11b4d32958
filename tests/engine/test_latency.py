"""The calibrated latency estimate (issue 26): each op classified into a kernel kind, priced
with that kind's measured rate (``rates.KernelRate``), summed per subgraph and per model.

The expected seconds are worked out by hand below from the ops' bytes (float32: 4 bytes an
element) and the rates of a hand-written kernel table; FLOP rates are set so high that FLOPs
cost nothing measurable, so the arithmetic needs no FLOP formula of ours.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_graphbudget.api import profile_model
from pytest_graphbudget.engine.kinds import KINDS, LARGE_BYTES, kernel_kind
from pytest_graphbudget.engine.measure import NodeCost
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.hardware import FAMILIES, from_table
from pytest_graphbudget.rates import KernelRate


def node(kind: str, category: str, weights=(), inputs=()) -> NodeCost:
    return NodeCost(
        name=kind,
        op="call_module",
        target=kind,
        module=kind,
        index=0,
        kind=kind,
        category=category,
        weights=dict.fromkeys(weights, 1),
        inputs=list(inputs),
    )


SHAPES = {
    "dw.weight": (32, 1, 3, 3),  # depthwise: one input channel per group
    "pw.weight": (64, 32, 1, 1),  # 1x1
    "dense.weight": (64, 32, 3, 3),
    "grouped.weight": (64, 8, 3, 3),  # 4 groups of 8 channels: dense per group
}


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (node("conv", "anchor", ["dw.weight"], ["x"]), "conv_depthwise"),
        (node("conv", "anchor", ["dw.weight"], ["big"]), "conv_depthwise_large"),
        (node("conv", "anchor", ["pw.weight"], ["big"]), "conv_pointwise"),
        (node("conv", "anchor", ["dense.weight"], ["x"]), "conv_dense"),
        (node("conv", "anchor", ["grouped.weight"], ["x"]), "conv_dense"),
        (node("conv", "anchor", ["not.a.parameter"], ["x"]), "conv_dense"),
        (node("linear", "anchor"), "matmul"),
        (node("bmm", "anchor"), "matmul"),
        (node("attention", "anchor"), "attention"),
        (node("bn", "elementwise"), "batch_norm"),
        (node("relu", "elementwise"), "pointwise"),
        (node("softmax", "reduction"), "reduction"),
        (node("layer_norm", "reduction"), "reduction"),
        (node("max_pool", "reduction"), "pooling"),
        (node("sort", "reduction"), "sort"),
        (node("_unique2", "elementwise"), "sort"),
        (node("median", "reduction"), "topk"),  # a selection (nth_element), as topk's
        (node("kthvalue", "reduction"), "topk"),
        (node("gt", "elementwise"), "compare"),
        (node("eq", "elementwise"), "compare"),
        (node("isnan", "elementwise"), "compare"),
        (node("where", "elementwise"), "compare"),
        (node("masked_fill", "elementwise"), "compare"),
        (node("logical_and", "elementwise"), "pointwise"),  # bool in, bool out: vectorised
        (node("cat", "movement"), "copy"),
        (node("view", "view"), "view"),
    ],
)
def test_each_op_falls_in_its_kernel_kind(op, expected):
    sizes = {"x": 1000, "big": LARGE_BYTES + 1}
    assert kernel_kind(op, SHAPES, sizes) == expected
    assert expected in KINDS


@pytest.mark.parametrize(
    ("layer", "expected"),
    [
        (nn.ConvTranspose2d(256, 1, 4), "conv_dense"),  # weight (256, 1, 4, 4): not depthwise
        (nn.ConvTranspose2d(256, 128, 4), "conv_dense"),  # weight (256, 128, ...): not grouped
        (nn.ConvTranspose2d(64, 64, 3, groups=64), "conv_depthwise"),  # depthwise, transposed
        (nn.Conv2d(64, 64, 3, groups=64), "conv_depthwise"),
    ],
)
def test_a_transposed_convolution_is_classed_by_its_own_weight_layout(layer, expected):
    """A transposed convolution's weight is ``(in, out / groups, *kernel)``: its dim 1 is not
    input channels per group (two dense decoders' upsampling convs read as depthwise and
    grouped, priced 2.8x and 1.3x slow on a GPU profile)."""
    from pytest_graphbudget.engine import latency
    from pytest_graphbudget.engine.tiers import trace_and_measure
    from pytest_graphbudget.engine.trace import Example

    model = nn.Sequential(nn.Conv2d(3, layer.in_channels, 1), layer).eval()
    _, measured, _ = trace_and_measure(model, Example((torch.ones(1, 3, 16, 16),), {}))
    convs = [n for n in measured.nodes if n.kind == "conv"]
    shapes = latency.param_shapes(model)
    sizes, channels = latency.tensor_sizes(measured), latency.tensor_channels(measured)
    assert kernel_kind(convs[-1], shapes, sizes, channels) == expected


class KeepOverThreshold(nn.Module):
    """A detector's post-processing: the boxes over a score threshold, then NMS."""

    def forward(self, boxes: torch.Tensor, scores: torch.Tensor):
        from torchvision.ops import nms

        keep = scores > 0.5
        boxes, scores = boxes[keep], scores[keep]
        return boxes[nms(boxes, scores, 0.5)], torch.nonzero(keep)


def boxes_and_scores(n: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    corner = torch.arange(n, dtype=torch.float32)[:, None] * 20  # apart: none suppressed
    return torch.cat([corner, corner, corner + 10, corner + 10], 1), torch.linspace(0, 1, n)


def test_a_selection_by_a_mask_and_nms_have_kinds_of_their_own():
    """An ``index`` by a boolean mask counts it first, as ``nonzero`` does (``select``);
    one by integer indices computes an offset for each (``index``); NMS is scalar comparisons
    (``nms``)."""
    from pytest_graphbudget.engine import latency
    from pytest_graphbudget.engine.breaks import capture_eager
    from pytest_graphbudget.engine.trace import Example

    measured = capture_eager(KeepOverThreshold(), Example(boxes_and_scores(), {})).measured
    masks = latency.tensor_masks(measured)
    found = [(n.kind, kernel_kind(n, {}, {}, {}, masks)) for n in measured.nodes]
    found = [pair for pair in found if pair[1] != "view"]  # torchvision's first-call checks
    assert found == [
        ("gt", "compare"),
        ("index", "select"),  # boxes[keep]
        ("index", "select"),  # scores[keep]
        ("torchvision.nms", "nms"),
        ("index", "index"),  # boxes[kept indices]: an offset an index value
        ("nonzero", "select"),
    ]
    assert {*found[1], "nms", "select"} <= {*KINDS, "index"}


class PickByMask(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x[mask] * 2


@pytest.mark.parametrize("tier", ["graph", "tape"])
def test_an_index_by_a_mask_the_caller_passes_in_selects(tier):
    """A boolean mask given as an input is a mask too: ``x[mask]`` counts it first, in the
    graph's tier as on the tape (it had been priced as a plain gather, ``copy``)."""
    from pytest_graphbudget.engine import latency
    from pytest_graphbudget.engine.breaks import capture_eager
    from pytest_graphbudget.engine.tiers import trace_and_measure
    from pytest_graphbudget.engine.trace import Example

    example = Example((torch.ones(8, 4), torch.arange(8) % 3 == 0), {})
    if tier == "graph":
        _, measured, _ = trace_and_measure(PickByMask(), example)
    else:
        measured = capture_eager(PickByMask(), example).measured
    masks = latency.tensor_masks(measured)
    found = [(n.kind, kernel_kind(n, {}, {}, {}, masks)) for n in measured.nodes]
    assert [pair for pair in found if pair[1] != "view"] == [
        ("index", "select"),
        ("mul", "pointwise"),
    ]


class Suppress(nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        from torchvision.ops import nms

        return nms(boxes, scores, 0.5)


def test_nms_is_priced_at_its_kinds_flop_rate_else_pointwises():
    # 6 boxes, none suppressed: areas 3*6, sort 6*ceil(log2 6) = 18, IoU 10 x 15 pairs: 186
    boxes, scores = boxes_and_scores()
    table = rates(nms=(1e6, FREE), pointwise=(1e9, FREE))
    hardware = from_table("box", table)
    assert profile_model(Suppress(), (boxes, scores), hardware=hardware).flops == 186
    assert estimate(Suppress(), (boxes, scores), table) == pytest.approx(186 / 1e6)
    old = rates(pointwise=(1e9, FREE))  # calibrated before nms existed
    assert estimate(Suppress(), (boxes, scores), old) == pytest.approx(186 / 1e9)


class Align(nn.Module):
    def forward(self, x: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        from torchvision.ops import roi_align

        return roi_align(x, rois, output_size=(2, 2), sampling_ratio=2)


def test_roi_align_is_priced_at_its_kinds_flop_rate_else_pointwises():
    # 1 RoI x 2 channels x 2x2 bins = 8 bins, each 2x2 samples of 8 FLOPs and a divide: 264
    x, rois = torch.rand(1, 2, 8, 8), torch.tensor([[0.0, 0.0, 0.0, 4.0, 4.0]])
    table = rates(roi_align=(1e6, FREE), pointwise=(1e9, FREE))
    hardware = from_table("box", table)
    assert profile_model(Align(), (x, rois), hardware=hardware).flops == 264
    assert estimate(Align(), (x, rois), table) == pytest.approx(264 / 1e6)
    old = rates(pointwise=(1e9, FREE))  # calibrated before roi_align existed
    assert estimate(Align(), (x, rois), old) == pytest.approx(264 / 1e9)


class Rank(nn.Module):
    def forward(self, x: torch.Tensor, labels: torch.Tensor):
        return torch.sort(x, descending=True), torch.unique(labels)


def test_a_sort_and_unique_are_priced_at_sorts_flop_rate_else_a_reductions():
    # sort of 8 floats: 8 x 3 comparisons; unique of 8 int64 labels (3 distinct): 8 x 3 + 8
    x, labels = torch.rand(8), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    table = rates(sort=(1e6, FREE), reduction=FAST, pointwise=FAST, view=FAST)
    assert estimate(Rank(), (x, labels), table) == pytest.approx((24 + 32) / 1e6)
    # before sort existed, both by a reduction's bytes: the sort reads 32 B and writes 32 B of
    # values and 64 B of int64 indices, unique reads 64 B and writes its 3 labels, 24 B
    old = rates(reduction=(FREE, 1e9), pointwise=FAST, view=FAST)
    assert estimate(Rank(), (x, labels), old) == pytest.approx((32 + 96 + 64 + 24) / 1e9)


def top(rows: int, n: int, k: int, dtype: str = "float32") -> NodeCost:
    """A ``topk`` node of ``k`` a row over ``rows`` rows of ``n`` elements of ``dtype``."""
    made = node("topk", "reduction", inputs=["x"])
    made.shapes, made.dtype = [(rows, k), (rows, k)], dtype
    return made


@pytest.mark.parametrize(
    ("op", "size", "expected"),
    [  # ATen's CPU kernel keeps a heap when k * 64 <= n, else it selects
        (top(4096, 8, 2), 4096 * 8 * 4, "topk"),  # a router's top 2 of 8 experts
        (top(1, 3234, 300), 3234 * 4, "topk"),  # a detector's top 300 of one class's 3,234
        (top(1, 6400, 100), 6400 * 4, "topk_heap"),  # k * 64 == n
        (top(1, 6399, 100), 6399 * 4, "topk"),
        (top(4096, 128, 1), 4096 * 128 * 4, "topk_heap"),  # a router's top 1 of 128
        (top(4096, 127, 2, "bfloat16"), 4096 * 127 * 2, "topk"),  # the itemsize counts
        (top(4096, 128, 2, "bfloat16"), 4096 * 128 * 2, "topk_heap"),
    ],
)
def test_a_topk_is_a_heap_when_it_keeps_a_sixty_fourth_of_its_row_or_less(op, size, expected):
    assert kernel_kind(op, {}, {"x": size}) == expected


class Top(nn.Module):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor):
        return torch.topk(x, self.k)


def test_a_topk_is_priced_by_what_it_reads_at_its_kinds_rate_else_a_reductions():
    # top 2 of 8 over 4 rows: reads 32 floats, 128 B (it writes 8 values and 8 int64
    # indices, 96 B, which the price leaves out); its comparisons, 4 x 8 x 1, cost nothing
    x = torch.rand(4, 8)
    table = rates(topk=(FREE, 1e9), topk_heap=(FREE, 1e6), reduction=(FREE, 1e7))
    assert estimate(Top(2), x, table) == pytest.approx(128 / 1e9)
    old = rates(reduction=(FREE, 1e7))  # calibrated before topk existed: by the same reads
    assert estimate(Top(2), x, old) == pytest.approx(128 / 1e7)


class ColumnTop(nn.Module):
    def forward(self, x: torch.Tensor):
        return torch.topk(x[:, 0], 100)


def test_a_topk_of_a_strided_column_is_told_apart_by_its_elements_and_priced_by_its_lines():
    # x (1000, 16): column 0 holds 1,000 floats 64 B apart, 64,000 B of lines; top 100 of
    # 1,000 selects (100 x 64 > 1,000), though its lines hold 64,000 >= 64 x 100 x 4 bytes
    table = rates(topk=(FREE, 1e9), topk_heap=(FREE, 1e6), view=FAST)
    assert estimate(ColumnTop(), torch.rand(1000, 16), table) == pytest.approx(64000 / 1e9)


class Median(nn.Module):
    def forward(self, x: torch.Tensor):
        return torch.median(x, -1)


def test_a_median_is_priced_by_what_it_reads_at_topks_rate():
    # x (2, 128): a median a row selects (nth_element) over 256 floats, 1,024 B read (its 2
    # values and int64 indices left out), though 1 kept of 128 would be a heap for topk
    table = rates(topk=(FREE, 1e9), topk_heap=(FREE, 1e6), reduction=(FREE, 1e7))
    assert estimate(Median(), torch.rand(2, 128), table) == pytest.approx(1024 / 1e9)


def test_a_topk_heap_takes_its_comparisons_then_what_it_reads():
    # top 1 of 64 over 2 rows: a heap (1 x 64 <= 64); 128 comparisons (one an element: a
    # heap of 1), reads 128 floats, 512 B. The two add (SUMMED_KINDS): 128 / 1e6 + 512 / 1e9
    table = rates(topk_heap=(1e6, 1e9), topk=(FREE, 1e6))
    assert estimate(Top(1), torch.rand(2, 64), table) == pytest.approx(128e-6 + 512e-9)


class Mask(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.masked_fill(x > 0.5, 0.0)


def test_a_comparison_and_a_masked_fill_are_priced_at_compares_flop_rate_else_pointwises():
    # x (4, 8): gt, 32 comparisons (reads 128 B, writes 32 B of bools); masked_fill, 32
    # elements chosen (reads 128 B and the 32 B mask, writes 128 B): one FLOP an element each
    x = torch.rand(4, 8)
    table = rates(compare=(1e6, FREE), pointwise=(FREE, 1e6))
    assert estimate(Mask(), x, table) == pytest.approx(64 / 1e6)
    old = rates(pointwise=(FREE, 1e9))  # calibrated before compare existed: by their bytes
    assert estimate(Mask(), x, old) == pytest.approx((160 + 288) / 1e9)


class Select(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x[:, 0] > 0]


def test_an_index_by_a_mask_is_priced_at_selects_bandwidth_else_copys():
    # x (4, 2) with rows 0 and 2 kept: the mask's comparison (pointwise, free here), then
    # the index: reads x 32 B and the mask 4 B, writes 2 rows 16 B -> 52 B
    x = torch.tensor([[1.0, 0], [-1, 0], [2, 0], [-2, 0]])
    table = rates(select=(FREE, 1e6), copy=(FREE, 1e9), pointwise=FAST, view=FAST)
    assert estimate(Select(), x, table) == pytest.approx(52 / 1e6)
    old = rates(copy=(FREE, 1e9), pointwise=FAST, view=FAST)  # before select existed
    assert estimate(Select(), x, old) == pytest.approx(52 / 1e9)


def test_an_index_by_a_mask_passed_in_is_priced_at_selects_bandwidth():
    # x (4, 2) and a mask of 4 bools keeping rows 0 and 2: the index reads x 32 B and the
    # mask 4 B, writes 2 rows 16 B -> 52 B; the product after it costs nothing here
    x = torch.tensor([[1.0, 0], [-1, 0], [2, 0], [-2, 0]])
    mask = torch.tensor([True, False, True, False])
    table = rates(select=(FREE, 1e6), copy=(FREE, 1e9), pointwise=FAST, view=FAST)
    assert estimate(PickByMask(), (x, mask), table) == pytest.approx(52 / 1e6)


def test_a_kernel_rate_prices_overhead_plus_the_slower_of_compute_and_memory():
    rate = KernelRate(flops_per_s=1e9, bytes_per_s=1e10, overhead_s=5e-6)
    # compute-bound: 2e6 FLOPs / 1e9 = 2 ms against 1e5 bytes / 1e10 = 10 us -> 5 us + 2 ms
    assert rate.time(2e6, 1e5) == pytest.approx(2.005e-3)
    # memory-bound: 1e3 FLOPs / 1e9 = 1 us against 1e6 bytes / 1e10 = 100 us -> 105 us
    assert rate.time(1e3, 1e6) == pytest.approx(105e-6)


FREE = 1e30  # FLOP/s: FLOPs add nothing
TABLE = {
    "peak_tflops": {"float32": 1},
    "bandwidth_gbs": 1,
    "kernels": {
        "matmul": {"flops_per_s": FREE, "bytes_per_s": 1e9, "overhead_s": 1e-3},
        "pointwise": {"flops_per_s": FREE, "bytes_per_s": 2e9, "overhead_s": 1e-4},
        "reduction": {"flops_per_s": FREE, "bytes_per_s": 4e9, "overhead_s": 1e-5},
    },
}


def test_a_calibrated_profile_prices_every_op_and_the_subgraphs_add_up():
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Softmax(-1)).eval()
    prof = profile_model(model, torch.randn(2, 8), hardware=from_table("box", TABLE))
    # linear: reads x 2*8*4 = 64 B, weight 8*4*4 = 128 B, bias 16 B, writes 2*4*4 = 32 B
    #   -> 1 ms + 240 B / 1e9 = 1e-3 + 2.4e-7 s
    # relu (fused with it): reads 32 B, writes 32 B -> 1e-4 + 64 / 2e9 = 1e-4 + 3.2e-8 s
    # softmax (its own kernel): reads 32 B, writes 32 B -> 1e-5 + 64 / 4e9 = 1e-5 + 1.6e-8 s
    linear_relu = 1e-3 + 2.4e-7 + 1e-4 + 3.2e-8
    softmax = 1e-5 + 1.6e-8
    assert [s.est_latency_s for s in prof.subgraphs] == pytest.approx([linear_relu, softmax])
    assert prof.est_latency_s == pytest.approx(linear_relu + softmax)
    assert prof.est_latency_s == pytest.approx(sum(s.est_latency_s for s in prof.subgraphs))


def test_a_profile_without_kernels_keeps_the_roofline():
    old = {"peak_tflops": {"float32": 1}, "bandwidth_gbs": 1}  # a file from before issue 26
    hardware = from_table("old", old)
    assert hardware.kernels == {}
    prof = profile_model(nn.Sequential(nn.Linear(8, 4)), torch.randn(2, 8), hardware=hardware)
    (sub,) = prof.subgraphs
    # the roofline: max(FLOPs / 1e12, traffic / 1e9); traffic 64 + 144 + 32 = 240 B dominates
    assert sub.traffic_bytes == 240
    assert prof.est_latency_s == pytest.approx(240 / 1e9)


def test_kernel_tables_read_per_dtype_and_fall_back_to_float32():
    table = {
        **TABLE,
        "kernels_bfloat16": {
            "matmul": {"flops_per_s": 2e9, "bytes_per_s": 3e9, "overhead_s": 0},
        },
    }
    hardware = from_table("box", table)
    assert hardware.kernel("matmul", "bfloat16") == KernelRate(2e9, 3e9, 0.0)
    assert hardware.kernel("matmul", "float16") == KernelRate(FREE, 1e9, 1e-3)
    assert hardware.kernel("conv_dense") is None  # not calibrated: the op keeps the roofline


def matmul(**figures: object) -> dict:
    """A ``kernels`` table whose matmul rate is a good one but for ``figures``."""
    return {"matmul": {"flops_per_s": 1e9, "bytes_per_s": 1e9, "overhead_s": 0, **figures}}


@pytest.mark.parametrize(
    ("kernels", "says"),
    [
        (
            {"matmul": {"flops_per_s": 1e9, "bytes_per_s": 1e9}},
            "kernels.matmul needs numbers flops_per_s, bytes_per_s, overhead_s; missing overhead_s",
        ),
        (matmul(flops_per_s=0), "kernels.matmul.flops_per_s must be a number > 0, got 0"),
        (matmul(bytes_per_s=-1e9), "kernels.matmul.bytes_per_s must be a number > 0, got -1"),
        (matmul(overhead_s=-1), "kernels.matmul.overhead_s must be a number >= 0, got -1"),
        # as every other figure of a profile: true is no rate, nor a number in quotes
        (matmul(flops_per_s=True), "kernels.matmul.flops_per_s must be a number > 0, got True"),
        (
            matmul(flops_per_s="2.2e10"),
            "kernels.matmul.flops_per_s must be a number > 0, got '2.2e10'",
        ),
        (matmul(overhead_s=float("inf")), "kernels.matmul.overhead_s must be a number >= 0"),
        (
            matmul(flops_per_s=10**400),
            "kernels.matmul.flops_per_s must be a number > 0, got 10000000000000000000... (too "
            "large)",
        ),
        # a key it does not know would be left out of every estimate, silently
        (
            matmul(overhead_us=9999),
            "kernels.matmul: unknown key 'overhead_us' (did you mean 'overhead_s'?)",
        ),
        (matmul(notes=1), "kernels.matmul: unknown key 'notes'; keys: flops_per_s, bytes_per_s"),
        ({"matmul": 5}, "kernels.matmul must be a table of flops_per_s, bytes_per_s, overhead_s"),
        ("fast", "kernels must be a table of kernel kinds"),
    ],
)
def test_a_bad_kernel_table_is_a_one_line_error(kernels, says):
    with pytest.raises(GraphBudgetError) as info:
        from_table("box", {**TABLE, "kernels": kernels})
    assert str(info.value).startswith(f"hardware 'box': {says}"), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"launch_us": 4}, "launch_us"),
        ({"efficiency": {"conv": [0.5, 0.8]}}, "efficiency"),
        ({"peak_tflops": {"float32": 1, "float16": 4}, "family": "ada"}, "family"),
        (
            {"peak_tflops": {"float32": 1, "float16": 4}, "family": "ada", "launch_us": 4},
            "family, launch_us",
        ),
    ],
)
def test_a_calibrated_profile_refuses_what_its_kernel_rates_would_override(extra, named):
    """A calibration's kernel rates price every kernel: a ``launch_us``, ``efficiency`` or
    ``family`` beside them changed nothing, without a word."""
    with pytest.raises(GraphBudgetError) as info:
        from_table("box", {**TABLE, **extra})
    assert str(info.value) == (
        f"hardware 'box': {named} would change nothing: the calibrated kernel rates of its "
        f"kernels tables price every kernel; drop {'them' if ', ' in named else 'it'}, or the "
        "kernels tables"
    )
    bfloat16 = {"kernels_bfloat16": TABLE["kernels"]}  # any dtype's tables
    with pytest.raises(GraphBudgetError, match="would change nothing"):
        from_table(
            "box", {**{k: v for k, v in TABLE.items() if k != "kernels"}, **bfloat16, **extra}
        )
    assert from_table("card", {k: v for k, v in {**TABLE, **extra}.items() if k != "kernels"})


def rates(**kinds: tuple[float, float]) -> dict:
    """A kernel table: each kind's (FLOP/s, bytes/s), no launch overhead."""
    table = {
        kind: {"flops_per_s": f, "bytes_per_s": b, "overhead_s": 0}
        for kind, (f, b) in kinds.items()
    }
    return {"peak_tflops": {"float32": 1}, "bandwidth_gbs": 1, "kernels": table}


FAST = (FREE, FREE)  # a kind that costs nothing


def estimate(model: nn.Module, x: torch.Tensor | tuple, table: dict) -> float:
    return profile_model(model.eval(), x, hardware=from_table("box", table)).est_latency_s


def test_a_grouped_convolution_is_priced_at_its_own_rate_else_the_dense_one():
    # 16 channels in 2 groups of 8 (weight (16, 8, 3, 3)), 10x10 out (padding 1):
    # MACs = 16 out x 100 pixels x 8 x 9 = 115,200 -> 230,400 FLOPs
    model = nn.Sequential(nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1, groups=2, bias=False))
    x = torch.randn(1, 16, 10, 10)
    slow, fast = (1e9, FREE), (1e10, FREE)
    table = rates(conv_grouped=slow, conv_dense=fast, pointwise=FAST)
    assert estimate(model, x, table) == pytest.approx(230_400 / 1e9)
    old = rates(conv_dense=fast, pointwise=FAST)  # calibrated before conv_grouped existed
    assert estimate(model, x, old) == pytest.approx(230_400 / 1e10)


@pytest.mark.parametrize("tier", ["fx", "eager"])
def test_a_grouped_convolution_reading_the_models_input_is_priced_as_grouped(tier):
    """The same convolution as the first op of the model: its input's channels (16, twice
    the 8 a group takes) come from the input itself, where no node made it. It had been
    priced as dense, at the fast rate (23 us where it takes 230)."""
    model = nn.Conv2d(16, 16, 3, padding=1, groups=2, bias=False).eval()
    table = rates(conv_grouped=(1e9, FREE), conv_dense=(1e10, FREE), pointwise=FAST)
    box = from_table("box", table)
    found = profile_model(model, torch.randn(1, 16, 10, 10), hardware=box, tier=tier)
    assert found.est_latency_s == pytest.approx(230_400 / 1e9)


@pytest.mark.parametrize(
    ("model", "x", "kind", "flops"),
    [
        # 1x1, 4 -> 4 channels on 7x7 = 49 pixels (<= 64): 4 x 49 x 4 MACs = 784 -> 1,568 FLOPs
        (nn.Conv2d(4, 4, 1, bias=False), (1, 4, 7, 7), "conv_pointwise_small_map", 1_568),
        # 3x3, 8 -> 8 on 8x8 out (padding 1, 64 pixels): 8 x 64 x 8 x 9 = 36,864 MACs
        (nn.Conv2d(8, 8, 3, padding=1, bias=False), (1, 8, 8, 8), "conv_dense_small_map", 73_728),
        # an RGB image in: 3 -> 8 channels, 3x3, 10x10 out: 8 x 100 x 3 x 9 = 21,600 MACs
        (nn.Conv2d(3, 8, 3, bias=False), (1, 3, 12, 12), "conv_stem", 43_200),
    ],
)
def test_convolution_shape_classes_are_priced_at_their_kinds_rate(model, x, kind, flops):
    others = dict.fromkeys(["conv_pointwise", "conv_dense", "conv_stem"], (1e12, FREE))
    table = rates(**{**others, kind: (1e9, FREE)})
    assert estimate(model, torch.randn(*x), table) == pytest.approx(flops / 1e9)


@pytest.mark.parametrize(
    ("model", "kind", "moved"),
    [
        # silu over 1 x 2 x 4 x 4 = 32 elements: reads 128 B, writes 128 B
        (nn.SiLU(), "pointwise_exp", 256),
        # bilinear x2: reads 32 elements (128 B), writes 2 x 8 x 8 = 128 elements (512 B)
        (nn.Upsample(scale_factor=2, mode="bilinear"), "resample", 640),
    ],
)
def test_exp_and_interpolating_ops_are_priced_at_their_kinds_bandwidth(model, kind, moved):
    table = rates(pointwise=(FREE, 1e12), **{kind: (FREE, 1e9)})
    assert estimate(model, torch.randn(1, 2, 4, 4), table) == pytest.approx(moved / 1e9)


def test_a_max_pool_takes_its_comparisons_then_its_bytes():
    # 2x2, stride 2 over 1 x 4 x 8 x 8: 4 x 4 x 4 = 64 outputs, 4 comparisons each = 256;
    # reads 256 elements (1,024 B), writes 64 (256 B) and their int64 indices (512 B):
    # 1,792 B. The two add (SUMMED_KINDS): 256 / 1e9 + 1,792 / 1e10 s, where the slower of
    # them alone would be 256 ns.
    table = rates(pooling=(1e9, 1e10))
    model = nn.MaxPool2d(2)
    assert estimate(model, torch.randn(1, 4, 8, 8), table) == pytest.approx(256e-9 + 179.2e-9)


class Column(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0] > 0.5


class EveryOther(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, ::2] + 1


@pytest.mark.parametrize(
    ("model", "moved"),
    [
        # x (100, 32) float32: its column 0 has its elements 128 B apart, a line (64 B) each:
        # 6,400 B read where its 100 floats are 400; gt writes 100 bools
        (Column(), 100 * 64 + 100),
        # every other column: 16 floats a row, 8 B apart, so each moves 8 B of the lines it
        # shares with its neighbour: 100 x 16 x 8 = 12,800 B read; the sum writes 1,600 floats
        (EveryOther(), 100 * 16 * 8 + 1600 * 4),
    ],
)
def test_a_strided_view_is_read_a_cache_line_at_a_time(model, moved):
    table = rates(pointwise=(FREE, 1e9), view=FAST)
    assert estimate(model, torch.rand(100, 32), table) == pytest.approx(moved / 1e9)


def test_nearest_upsampling_copies_and_stays_a_plain_pointwise_op():
    # nearest x2: FLOPs 0, reads 128 B, writes 512 B, at the pointwise kind's 1e9 B/s
    table = rates(pointwise=(FREE, 1e9), resample=(FREE, 1e6))
    model = nn.Upsample(scale_factor=2, mode="nearest")
    assert estimate(model, torch.randn(1, 2, 4, 4), table) == pytest.approx(640 / 1e9)


class SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


def test_a_fused_attention_block_is_priced_at_its_own_rate_else_attentions():
    # nn.MultiheadAttention's fast path, 4 tokens of 8, 2 heads: MACs = projections
    # (2 x 32 + 2 x 32) x 8 = 1,024 + QK^T and AV 2 x 4 x 4 x 8 = 256 -> 2,560 FLOPs; biases
    # 4 x 32 = 128; 2 x 4 x 4 = 32 scores x (scale 1 + softmax 5) = 192 -> 2,880 FLOPs
    x = torch.randn(1, 4, 8)
    table = rates(attention_block=(1e9, FREE), attention=(1e12, FREE))
    assert estimate(SelfAttention(), x, table) == pytest.approx(2_880 / 1e9)
    old = rates(attention=(1e10, FREE))  # calibrated before attention_block existed
    assert estimate(SelfAttention(), x, old) == pytest.approx(2_880 / 1e10)


@pytest.mark.parametrize(
    ("key", "kind", "says"),
    [
        ("kernels", "conv_deptwise", "kernels.conv_deptwise: unknown kind (did you mean "
         "'conv_depthwise'?)"),
        ("kernels_bflot16", "matmul", "kernels_bflot16: unknown dtype 'bflot16' (did you mean "
         "'bfloat16'?)"),
    ],
)  # fmt: skip
def test_a_misspelt_kernel_kind_or_dtype_is_refused(key, kind, says):
    """A misspelt kind or dtype would leave its ops on the roofline, silently."""
    rate = {"flops_per_s": 1e9, "bytes_per_s": 1e9, "overhead_s": 0}
    with pytest.raises(GraphBudgetError) as info:
        from_table("box", {**TABLE, key: {kind: rate}})
    assert str(info.value) == f"hardware 'box': {says}"


@pytest.mark.parametrize(
    ("key", "given", "says"),
    [
        ("flops_per_s", 90, "flops_per_s = 90 is below 1e+06: give it in FLOP/s (9e10 for 90"),
        ("bytes_per_s", 22, "bytes_per_s = 22 is below 1e+06: give it in bytes/s (2.2e10 for"),
        ("overhead_s", 30, "overhead_s = 30 is above 0.1: give it in seconds (3e-05 for 30 us)"),
    ],
)
def test_a_kernel_rate_in_another_unit_is_refused(key, given, says):
    """User trial: GFLOP/s, GB/s and microseconds written as the numbers alone priced
    ResNet-50 at 43,727,222 s, accepted."""
    rate = {"flops_per_s": 9e10, "bytes_per_s": 2.2e10, "overhead_s": 3e-5} | {key: given}
    with pytest.raises(GraphBudgetError) as info:
        from_table("box", {**TABLE, "kernels": {"conv_dense": rate}})
    assert str(info.value).startswith(f"hardware 'box': kernels.conv_dense.{says}")


def test_every_kind_the_estimate_prices_is_one_a_profile_may_name():
    from pytest_graphbudget.engine.latency import FALLBACK
    from pytest_graphbudget.rates import COMPUTE_KINDS

    assert {*COMPUTE_KINDS, *FALLBACK, *FALLBACK.values()} <= set(KINDS)


GPU = {
    "peak_tflops": {"float32": 1, "float16": 1},
    "bandwidth_gbs": 1,
    "family": "ada",
    "launch_us": 10,
    "efficiency": {"matmul_small": [0.5, 0.25], "elementwise": [1, 0.5]},
}
"""A card of 1 TFLOP/s and 1 GB/s whose products reach half the peak and a quarter of the
bandwidth, elementwise ops half the bandwidth, each kernel launched in 10 us."""


def test_eager_on_a_gpu_profile_prices_each_op_as_its_own_kernel_with_its_launch():
    """linear (8 -> 4) on (2, 8), then relu, float32. The linear's 2*2*8*4 MAC FLOPs and 8
    bias adds (136) take 136 / (0.5 * 1e12) s; its 240 bytes (x 64, weight 128, bias 16, out
    32) take 240 / (0.25 * 1e9) s, the longer: 10 us + 0.96 us. The relu reads and writes 32
    bytes each: 10 us + 64 / (0.5 * 1e9) s. Eager is their sum."""
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU()).eval()
    card = from_table("card", GPU)
    prof = profile_model(model, torch.randn(2, 8), hardware=card)
    assert prof.execution == "eager" and prof.to_dict()["execution"] == "eager"
    linear = 1e-5 + max(136 / 0.5e12, 240 / 0.25e9)
    relu = 1e-5 + 64 / 0.5e9
    assert prof.est_latency_s == pytest.approx(linear + relu)


def test_an_allocation_launches_no_kernel_so_the_tape_prices_a_batchnorm_as_fx_does():
    """The tape sees BatchNorm's empty reserve (``_batch_norm_impl_index``) as an op of its
    own; an ``empty`` writes nothing and launches nothing on a GPU. It had cost a 10 us launch
    a BatchNorm on the tape, where the traced tier has one node: 24% on resnet18."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).eval()
    x = torch.randn(2, 3, 16, 16)
    card = from_table("card", GPU)
    traced = profile_model(model, x, hardware=card)
    taped = profile_model(model, x, hardware=card, tier="eager")
    assert taped.trace.method != traced.trace.method
    assert any(n.endswith("_empty") for s in taped.to_dict()["subgraphs"] for n in s["nodes"])
    assert taped.est_latency_s == pytest.approx(traced.est_latency_s)


@pytest.mark.parametrize("tier", [None, "eager"])
def test_a_kernel_reads_the_tensor_it_takes_not_the_others_its_producer_made(tier):
    """On the tape a max pool that needs grad runs with its indices: two tensors, int64
    indices twice the float32 values. The convolution after it reads the values alone: 2 x 8
    x 4 x 4 floats (1,024 B), its weight and bias (8 x 8 x 1 x 1 + 8 floats, 288 B), and
    writes 1,024 B. It had read the indices too (2,048 B more)."""
    from pytest_graphbudget.engine import latency
    from pytest_graphbudget.engine.tiers import trace_and_measure
    from pytest_graphbudget.engine.trace import Example

    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.MaxPool2d(2), nn.Conv2d(8, 8, 1)).eval()
    _, measured, _ = trace_and_measure(model, Example((torch.ones(2, 3, 8, 8),), {}), tier=tier)
    conv = [n for n in measured.nodes if n.kind == "conv"][-1]
    sizes = latency.tensor_sizes(measured)
    assert latency.kernel_bytes("conv_pointwise", conv, sizes) == 1024 + 288 + 1024


POOLS = {
    "max_pool2d": (nn.Conv2d, nn.MaxPool2d, (2, 3, 8, 8), 4096, 1024, 2048),
    "max_pool1d": (nn.Conv1d, nn.MaxPool1d, (2, 3, 8), 512, 256, 0),
}


@pytest.mark.parametrize("tier", ["fx", "eager"])
@pytest.mark.parametrize("pool", POOLS)
def test_a_max_pool_kernel_writes_the_indices_its_op_makes_in_either_tier(tier, pool):
    """ATen's CPU ``max_pool2d`` is ``max_pool2d_with_indices`` (torch.profiler shows both):
    it reads 2 x 8 x 8 x 8 floats (4,096 B) and writes 2 x 8 x 4 x 4 floats (1,024 B) and as
    many int64 indices (2,048 B), returned or not. FX's node of ``nn.MaxPool2d`` returns the
    values alone, and had been priced without the indices the tape's op returns. CPU's
    ``max_pool1d`` without grad makes no indices (``eager_cpu_max_pool1d``), on either tier:
    over 2 x 8 x 8 it reads 512 B and writes 256 B; the tape had priced its indices."""
    from pytest_graphbudget.engine import latency
    from pytest_graphbudget.engine.tiers import trace_and_measure
    from pytest_graphbudget.engine.trace import Example

    conv, max_pool, shape, read, values, indices = POOLS[pool]
    model = nn.Sequential(conv(3, 8, 1), max_pool(2), conv(8, 8, 1)).eval()
    _, measured, _ = trace_and_measure(model, Example((torch.ones(shape),), {}), tier=tier)
    (node,) = [n for n in measured.nodes if n.kind == "max_pool"]
    sizes = latency.tensor_sizes(measured)
    assert latency.kernel_bytes("pool", node, sizes) == read + values + indices


def test_compiled_prices_each_fused_group_as_one_kernel_at_its_anchors_kind():
    """The same model compiled: linear and relu fuse into one kernel over the group's traffic
    (x 64 B, weights 144 B, the relu's output 32 B: 240 B), priced at the linear's kind,
    with one launch."""
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU()).eval()
    prof = profile_model(
        model, torch.randn(2, 8), hardware=from_table("card", GPU), execution="compiled"
    )
    (group,) = prof.subgraphs
    assert group.traffic_bytes == 240
    assert prof.est_latency_s == pytest.approx(1e-5 + max(136 / 0.5e12, 240 / 0.25e9))
    assert prof.to_dict()["execution"] == "compiled"


def test_compiled_fused_kernels_take_the_profiles_compiled_fractions_and_eager_ops_do_not():
    """The card above with compiled fractions of its own for products (a quarter of the peak,
    an eighth of the bandwidth): the compiled group's 240 B take 240 / (0.125 * 1e9) s; eager
    still prices the linear at ``efficiency``'s (0.5, 0.25)."""
    from dataclasses import replace

    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU()).eval()
    x = torch.randn(2, 8)
    card = replace(from_table("card", GPU), compiled_efficiency={"matmul_small": (0.25, 0.125)})
    compiled = profile_model(model, x, hardware=card, execution="compiled")
    assert compiled.est_latency_s == pytest.approx(1e-5 + max(136 / 0.25e12, 240 / 0.125e9))
    eager = profile_model(model, x, hardware=card)
    linear = 1e-5 + max(136 / 0.5e12, 240 / 0.25e9)
    assert eager.est_latency_s == pytest.approx(linear + 1e-5 + 64 / 0.5e9)


def test_on_the_plain_roofline_compiled_is_the_fused_roofline_and_eager_sums_the_ops():
    """generic (1 TFLOP/s, 100 GB/s, no family): compiled is the roofline of each fused
    group, as every estimate was before ``execution``; eager each op's, summed: the linear's
    240 B and the relu's 64 B, no launch cost."""
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU()).eval()
    x = torch.randn(2, 8)
    compiled = profile_model(model, x, execution="compiled")
    eager = profile_model(model, x)
    assert compiled.est_latency_s == pytest.approx(240 / 100e9)
    assert eager.est_latency_s == pytest.approx((240 + 64) / 100e9)


class ExpandedWeight(nn.Module):
    """``bmm`` over a weight expanded along the batch: what ``F.linear`` over a
    non-contiguous 3-d input runs (pytorch/pytorch#126973)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(64, 64))

    def forward(self, x):
        return torch.bmm(x, self.w.expand(x.shape[0], 64, 64))


def test_a_kernel_reading_a_broadcast_weight_moves_its_storage_once():
    """On (100, 8, 64): the bmm's 2*100*8*64*64 = 6,553,600 FLOPs take 6.55 us at generic's
    1 TFLOP/s; it moves x (204,800 B), the weight's storage once (16,384 B, not the 1,638,400
    of its expanded view) and its output (204,800 B): 4.26 us at 100 GB/s. Eager had priced
    the expanded view's bytes (20.5 us): a torchvision ViT under autocast read 4x slower at
    batch 2 than at batch 1 on a 4090, and the total traffic, which counts storages, did not."""
    prof = profile_model(ExpandedWeight(), torch.randn(100, 8, 64))
    assert prof.flops == 2 * 100 * 8 * 64 * 64
    assert prof.traffic_bytes == 204_800 + 16_384 + 204_800
    assert prof.est_latency_s == pytest.approx(max(6_553_600 / 1e12, 425_984 / 100e9))


NPU = {"peak_tflops": {"float32": 2.0}, "bandwidth_gbs": 50, "launch_us": 1000}
"""A profile of peaks and bandwidth, no family or efficiency, whose kernels launch in 1 ms."""
FLAT = nn.Sequential(nn.Flatten(), nn.Linear(256, 128), nn.ReLU()).eval()
"""On (32, 16, 16): a view, then the linear (2*32*256*128 MAC FLOPs + 32*128 bias adds =
2,101,248; x 32,768 B, weight 131,072 B, bias 512 B, out 16,384 B = 180,736 B), then the
relu (4,096 FLOPs; 16,384 B read, 16,384 B written). At 2 TFLOP/s and 50 GB/s the bytes take
longer in both: 180,736 / 50e9 = 3.61472 us and 32,768 / 50e9 = 0.65536 us."""


def test_a_launch_of_its_own_is_added_to_every_kernel_of_a_profile_without_family():
    """``launch_us`` on a profile without family or efficiency priced nothing (3.61 us for a
    linear on the user's trial, not 1 ms more). Eager: the linear and the relu launch, 1 ms
    each; the flatten is a view and launches nothing. Without ``launch_us`` (or at 0) the
    figures are the plain roofline's, exactly."""
    x = torch.randn(32, 16, 16)
    eager = profile_model(FLAT, x, hardware=from_table("npu", NPU))
    assert eager.est_latency_s == pytest.approx(2e-3 + 180_736 / 50e9 + 32_768 / 50e9)
    plain = {k: v for k, v in NPU.items() if k != "launch_us"}
    roof = profile_model(FLAT, x, hardware=from_table("npu", plain)).est_latency_s
    assert roof == pytest.approx((180_736 + 32_768) / 50e9)
    zero = profile_model(FLAT, x, hardware=from_table("npu", {**NPU, "launch_us": 0}))
    assert zero.est_latency_s == roof


def test_compiled_adds_one_launch_per_fused_group_on_a_profile_without_family():
    """Compiled, the view, linear and relu are one fused kernel (traffic 180,736 B: x, the
    weights, the relu's output): one 1 ms launch."""
    prof = profile_model(
        FLAT, torch.randn(32, 16, 16), hardware=from_table("npu", NPU), execution="compiled"
    )
    assert prof.est_latency_s == pytest.approx(1e-3 + 180_736 / 50e9)


@pytest.mark.parametrize(
    ("kind", "flops", "expected"),
    [
        ("conv_dense", 1, "conv"),
        ("conv_pointwise_small_map", 1, "conv"),
        ("conv_grouped", 1, "conv_grouped"),
        ("conv_depthwise_large", 1, "depthwise"),
        ("matmul", 2**30, "matmul"),
        ("matmul", 2**30 - 1, "matmul_small"),
        # user trial: nn.MultiheadAttention's fused block, mostly projections, had taken
        # attention's share (0.59 on ampere, a product's 1.0): float16 ViT-B/16 compiled read
        # slower than under autocast, which turns the fused path off and does more work
        ("attention_block", 2**30, "matmul"),
        ("attention_block", 1, "matmul_small"),
        ("batch_norm", 1, "norm"),
        ("reduction", 1, "norm"),
        ("sort", 1, "norm"),  # as when it was a reduction: no GPU's sort was timed
        ("topk", 1, "norm"),  # nor its top-k
        ("topk_heap", 1, "norm"),
        ("compare", 1, "elementwise"),
        ("pooling", 1, "pool"),
        ("pointwise_exp", 1, "elementwise"),
        ("copy", 1, "elementwise"),
    ],
)
def test_each_kernel_kind_has_a_gpu_efficiency_kind(kind, flops, expected):
    from pytest_graphbudget.engine.latency import efficiency_kind
    from pytest_graphbudget.hardware import EFFICIENCY_KINDS

    assert efficiency_kind(kind, flops) == expected and expected in EFFICIENCY_KINDS


@pytest.mark.parametrize("bad", ["eagre", "jit", 1, None])
def test_a_bad_execution_is_one_line_naming_the_two(bad):
    with pytest.raises(GraphBudgetError, match="must be 'eager' or 'compiled'") as info:
        profile_model(nn.Linear(2, 2), torch.randn(1, 2), execution=bad)
    assert "\n" not in str(info.value)
    if bad == "eagre":
        assert "did you mean 'eager'?" in str(info.value)


def test_a_float32_model_runs_its_convolutions_at_tf32_as_pytorch_does_by_default():
    """A compute-bound 3x3 convolution (38.7 GFLOPs against 70 MB) in float32 on ``a100``:
    at the TF32 peak (156 TFLOP/s) while cuDNN may use TF32, PyTorch's default, and at the
    FP32 peak (19.5) without; a product at FP32's until cuBLAS is allowed TF32
    (``torch.set_float32_matmul_precision("high")``), then at TF32's. Off the tensor cores a
    product runs as it was measured to on the card (19.18 TFLOP/s, zzc0721's database), and
    a convolution at its share relative to a product's, so both move by one ratio."""
    with torch.device("meta"):  # nothing to compute: the figures are the shapes'
        conv = nn.Conv2d(256, 256, 3, padding=1).eval()
        linear = nn.Linear(4096, 4096).eval()
        cases = ((conv, torch.ones(8, 256, 64, 64)), (linear, torch.ones(4096, 4096)))

    def above_launch(model, x):
        prof = profile_model(model, (x,), hardware="a100")
        return prof.est_latency_s - prof.hardware.launch_s

    matmul = torch.backends.cuda.matmul.allow_tf32
    try:
        conv_tf32, linear_fp32 = (above_launch(*case) for case in cases)
        torch.backends.cuda.matmul.allow_tf32 = True
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            conv_fp32, linear_tf32 = (above_launch(*case) for case in cases)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul
    assert linear_fp32 == pytest.approx(2 * 4096**3 / 19.18e12, rel=1e-3)  # plus the bias
    assert conv_fp32 / conv_tf32 == pytest.approx(linear_fp32 / linear_tf32)
    # TF32 at ampere's fitted matmul share, times the A100's measured share of its datasheet
    # over the fit card's (the 3090's): 258.74 of 312 TFLOP/s against 75.64 of 71
    share = FAMILIES["ampere"].efficiency["matmul"][0]
    expected = 156 * share * 258.74 / 312 / (75.64 / 71) / 19.18
    assert linear_fp32 / linear_tf32 == pytest.approx(expected)
