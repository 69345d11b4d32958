"""The per-kind micro-benchmarks (``modes.kernels``, issue 26): the kinds that read weights
are timed cold, over copies that together outgrow a server's last-level cache, as a layer of a
forward reads its weights once, evicted by the layers since."""

from __future__ import annotations

import pytest
import torch

from pytest_graphbudget.modes.kernel_shapes import benches, pool
from pytest_graphbudget.modes.kernels import (
    MAX_SPILL,
    WINDOW_POOLS,
    _shapes,
    cold,
    fit_sum,
    spill_batch,
)
from pytest_graphbudget.modes.post_shapes import FLOAT32_ONLY
from pytest_graphbudget.rates import KERNEL_KINDS


def test_a_cold_benchmark_rotates_copies_that_together_hold_the_limit():
    made = []

    def make():
        layer = torch.nn.Linear(16, 16)  # one copy: its own weights and input
        x = torch.randn(4, 16)
        made.append(layer)
        # moved: 4 x 16 in + 16 x 16 weight + 16 bias + 4 x 16 out = 416 elements = 1,664 B
        return (lambda: layer(x)), 2 * 4 * 16 * 16, 1_664

    call, flops, moved = cold(make, limit=16_640)  # 10 x 1,664 B: 10 copies besides the first
    assert (flops, moved) == (2_048, 1_664)
    assert len(made) == 11
    seen = set()
    for layer in made:  # each call runs the next copy, in turn
        layer.register_forward_hook(lambda module, *_: seen.add(id(module)))
    for _ in range(11):
        call()
    assert seen == {id(layer) for layer in made}


def test_a_benchmark_that_moves_nothing_keeps_one_copy():
    made = []

    def make():
        made.append(1)
        return (lambda: None), 0, 0

    cold(make, limit=2**26)
    assert made == [1]


def test_pooling_is_fitted_over_comparisons_and_bytes_at_once():
    # 3x3 over 192 x 28 x 28 at stride 1 (same size out): 9 x 192 x 784 = 1,354,752
    # comparisons; reads and writes 192 x 784 x 4 B each (1,204,224 B), and an int64 index
    # an output (1,204,224 B)
    # 3x3 over 480 x 14 x 14: 9 x 480 x 196 = 846,720; 2 x 480 x 196 x 4 = 752,640 B, and
    # 480 x 196 x 8 = 752,640 B of indices
    # 5x5 over 128 x 20 x 20 (YOLO's SPPF): 25 x 128 x 400 = 1,280,000; 409,600 B + 409,600 B
    # 2x2 at stride 2 over 64 x 56 x 56 (VGG's, no padding): 64 x 28 x 28 = 50,176 outputs,
    # 4 comparisons each = 200,704; reads 64 x 3,136 x 4 = 802,816 B, writes 200,704 B and
    # 50,176 x 8 = 401,408 B of indices
    with torch.device("meta"):
        found = [pool(*shape[:2], torch.float32, *shape[2:])[1:] for shape in WINDOW_POOLS]
        found.append(pool(64, 56, torch.float32, 2, False, 2)[1:])
    assert found == [
        (1_354_752, 2_408_448),
        (846_720, 1_505_280),
        (1_280_000, 819_200),
        (200_704, 1_404_928),
    ]
    # timed at 5 us a launch, 1.6 ns a comparison and 0.5 ns a byte: the fit gives them back
    points = [(f, m, 5e-6 + 1.6e-9 * f + 0.5e-9 * m) for f, m in found]
    overhead, per_comparison, per_byte = fit_sum(points)
    assert overhead == pytest.approx(5e-6)
    assert per_comparison == pytest.approx(1.6e-9)
    assert per_byte == pytest.approx(0.5e-9)


def test_a_summed_fit_drops_a_term_that_would_come_out_negative():
    # times that only the bytes explain, at 2 ns a byte, and a comparison count that grows
    # as they shrink: unconstrained, comparisons would cost less than nothing
    points = [(1e6, 4e6, 8e-3), (2e6, 3e6, 6e-3), (3e6, 1e6, 2e-3)]
    assert fit_sum(points) == pytest.approx((0.0, 0.0, 2e-9))


def test_the_same_shapes_drive_every_device_at_any_batch():
    """A GPU's calibration times the CPU's table at batch 1 and at a larger batch: the same
    kinds, the same shapes, FLOPs and activation bytes scaled by the batch, weights not."""
    with torch.device("meta"):  # shapes only: nothing allocated, nothing run
        one = {k: [make() for make in found] for k, found in benches(torch.float32, True).items()}
        many = {
            k: [make() for make in found] for k, found in benches(torch.float32, True, 32).items()
        }
    assert sorted(one) == sorted(many) == sorted(KERNEL_KINDS)
    # a detector's boxes are float32 whatever its dtype: a half table takes float32's rates
    half = benches(torch.bfloat16, True)
    assert sorted(half) == sorted(set(KERNEL_KINDS) - set(FLOAT32_ONLY))
    # conv_dense's first shape: 16 -> 16 channels, 3x3, 28x28, stride 1, padding 1
    # MACs 16 x 28 x 28 x 16 x 9 = 1,806,336; bytes 4 x (16 x 784 in + 16 x 784 out + 2,304
    # weights + 16 bias) = 4 x 27,408 = 109,632
    _, flops, moved = one["conv_dense"][0]
    assert (flops, moved) == (2 * 1_806_336, 109_632)
    _, flops, moved = many["conv_dense"][0]
    assert (flops, moved) == (32 * 2 * 1_806_336, 4 * (32 * 2 * 16 * 784 + 2_304 + 16))
    # matmul's first: (16 x 64) @ (64 x 64): at batch 32, 512 rows
    assert many["matmul"][0][1] == 2 * 512 * 64 * 64


def test_a_gpus_larger_batch_spills_its_l2_cache():
    """An H200's calibration timed its shapes at batch 32, a few MB each, inside its 60 MB
    L2: float16 copies at 10 TB/s on a card whose memory moves 3.8. Past batch 1 each shape
    runs at the batch, 32 times a power of two, that moves twice the L2."""
    spill = 2 * 62_914_560  # twice an H200's L2 (torch's L2_cache_size), 125,829,120 B
    with torch.device("meta"):  # shapes only: nothing allocated, nothing run
        shapes, _ = _shapes(torch.float32, True, (1, 32), spill)
    # pointwise's first shape, add over 4,096 floats a batch: reads two, writes one.
    # 3 x 4,096 x 4 B = 49,152 B at batch 1; at 32, 1,572,864 B, x64 = 100,663,296 (short),
    # x128 = 201,326,592: batch 4,096
    assert [moved for _, _, moved in shapes["pointwise"]] == [49_152, 201_326_592]
    # conv_dense's first (16 -> 16, 3x3, 28x28): at batch 32 4 x (32 x 2 x 16 x 784 + 2,304
    # weights + 16 bias) = 3,220,544 B, x32 = 103,057,408 (short), x64: batch 2,048
    (_, flops1, moved1), (_, flops, moved) = shapes["conv_dense"]
    assert moved1 == 109_632 and moved == 4 * (2_048 * 2 * 16 * 784 + 2_304 + 16)
    assert flops == 2_048 * flops1  # the same shape, 2,048 images of it
    # what takes no batch keeps it: a detector's boxes, a view that moves nothing
    assert shapes["nms"][0][1:] == shapes["nms"][1][1:]
    assert [moved for _, _, moved in shapes["view"]] == [0, 0]
    with torch.device("meta"):  # a CPU's calibration (spill 0) keeps batch 32 as it was
        unspilled, _ = _shapes(torch.float32, True, (1, 32))
    assert [moved for _, _, moved in unspilled["pointwise"]] == [49_152, 1_572_864]


def test_a_full_gpu_calibration_makes_each_shape_afresh_for_each_round():
    """Spilled, a GPU's shapes held together would take about 150 times its L2: each is
    counted, let go, and made again for each round (``again``), one at a time."""
    with torch.device("meta"):
        shapes, again = _shapes(torch.float32, False, (1, 32), 2 * 62_914_560)
        first = len(benches(torch.float32, False)["pointwise"])  # batch 1's, then batch 32's
        made = again["pointwise", first]()  # the add over 4,096 floats, spilled to 4,096
    timed = {(kind, i) for kind, found in shapes.items() for i in range(len(found))}
    pools = len(shapes["pooling"])  # the stride-1 pools come last, at batch 1, kept made
    kept = {("streamed", 0)} | {("pooling", i) for i in range(pools - len(WINDOW_POOLS), pools)}
    assert set(again) == timed - kept
    assert all(shapes[kind][i][0] is None for kind, i in again)  # nothing held between rounds
    assert shapes["pointwise"][first][2] == 201_326_592 and callable(made)


def test_spill_batch_doubles_until_the_shape_moves_enough():
    assert spill_batch(1_000, 32, 4_000) == 128  # 1,000 -> 2,000 -> 4,000 bytes
    assert spill_batch(4_000, 32, 4_000) == 32  # already enough
    assert spill_batch(0, 32, 4_000) == 32  # a view moves nothing: no batch makes it move
    assert spill_batch(1, 32, 10**12) == 32 * MAX_SPILL  # bounded


def test_the_nms_benchmark_counts_its_flops_as_the_registry_prices_nms():
    """The calibration's FLOPs of an NMS are those ``costs.detection.nms`` gives the same call
    in a model: a rate fitted on other counts would price every model's NMS off by their ratio."""
    from pytest_graphbudget.costs import Shape, price
    from pytest_graphbudget.modes.post_shapes import nms

    call, flops, moved = nms(300, 100)
    k = len(call())
    assert 0 < k < 300  # some suppressed: the count of kept boxes matters
    # areas 3 x 300, sort 300 x ceil(log2 300) = 300 x 9, IoU (10) of k x 299 - k(k-1)/2 pairs
    assert flops == 3 * 300 + 300 * 9 + 10 * (k * 299 - k * (k - 1) // 2)
    priced = price("torchvision.nms", (Shape((300, 4)), Shape((300,)), 0.5), {}, Shape((k,)))
    assert flops == priced.other
    assert moved == 4 * 5 * 300 + 8 * k  # boxes and scores in float32, int64 indices out


def test_the_roi_align_benchmark_counts_its_flops_as_the_registry_prices_it():
    from pytest_graphbudget.costs import Shape, price
    from pytest_graphbudget.modes.post_shapes import roi_align

    call, flops, moved = roi_align(16, 20, 10, 1 / 16)
    out = tuple(call().shape)
    assert out == (10, 16, 7, 7)
    args = (Shape((1, 16, 20, 20)), Shape((10, 5)), 1 / 16, 7, 7, 2)
    assert flops == price("torchvision.roi_align", args, {}, Shape(out)).other == 10 * 16 * 49 * 33
    assert moved == 4 * (16 * 400 + 10 * 5 + 10 * 16 * 49)


def test_the_sort_benchmarks_count_the_comparisons_the_registry_prices():
    """A sort of n keys: n x ceil(log2 n) comparisons (``costs.reduction.sort``); unique of n
    labels the same and one a neighbour pair (``costs.detection.unique``)."""
    from pytest_graphbudget.modes.post_shapes import sort

    call, flops, moved = sort("sort", 3234, 91)  # 91 descending runs of 36 scores
    values, indices = call()
    assert values.shape == indices.shape == (3234,) and bool((values[:-1] >= values[1:]).all())
    assert (flops, moved) == (3234 * 12, 3234 * (4 + 4 + 8))  # 2**11 < 3234 <= 2**12
    call, flops, moved = sort("unique", 20000, 80)
    assert call().tolist() == list(range(80))
    assert (flops, moved) == (20000 * 15 + 20000, 8 * (20000 + 80))  # 2**14 < 20000 <= 2**15
    call, flops, _ = sort("sort", 300, 300)  # 300 scores in no order
    assert flops == 300 * 9 and bool((call()[0][:-1] >= call()[0][1:]).all())
    call, flops, moved = sort("argsort", 8192, 8)  # int64 expert ids, ascending
    values, _ = call()
    assert values.dtype == torch.int64 and set(values.tolist()) == set(range(8))
    assert bool((values[:-1] <= values[1:]).all())
    assert (flops, moved) == (8192 * 13, 8192 * (8 + 8 + 8))


def test_the_topk_benchmarks_are_what_their_kinds_price_and_rotate_their_inputs():
    """Each ``topk`` benchmark counts the registry's comparisons (n x ceil(log2 k) a row,
    ``costs.reduction.topk``) and the float32 it reads; the kind ``engine.latency`` gives a
    topk of its shape is the kind it calibrates (a selection, or a heap when k * 64 <= n);
    and its calls take turns over different inputs, as a forward's never repeat."""
    from pytest_graphbudget.engine.kinds import kernel_kind
    from pytest_graphbudget.engine.measure import NodeCost
    from pytest_graphbudget.modes.post_shapes import float32_benches, topk

    call, flops, moved = topk(4096, 8, 2, copies=3)  # a router's top 2 of 8 experts
    assert (flops, moved) == (4096 * 8 * 1, 4096 * 8 * 4)
    first, second, third, fourth = (call().values for _ in range(4))
    assert first.shape == (4096, 2) and not torch.equal(first, second)
    assert torch.equal(first, fourth) and not torch.equal(second, third)
    _, flops, _ = topk(1, 3234, 300, copies=1)
    assert flops == 3234 * 9  # 2**8 < 300 <= 2**9
    for kind in ("topk", "topk_heap"):
        for make in float32_benches()[kind]:
            call, _, moved = make()
            rows, k = call().values.shape
            node = NodeCost("t", "call_function", "topk", "", 0, kind="topk", inputs=["x"])
            node.shapes, node.dtype = [(rows, k), (rows, k)], "float32"
            assert kernel_kind(node, {}, {"x": moved}) == kind, (rows, moved // 4 // rows, k)


@pytest.mark.parametrize("op", ["gt", "eq", "masked_fill", "where"])
def test_the_compare_benchmarks_count_the_registrys_flops_and_bytes(op):
    """Each ``compare`` benchmark's FLOPs are what ``profile_model`` counts for the same call
    (one an element), its bytes what it reads and writes: the scores (or int64 labels), the
    bool mask or result; the masked ones' mask is a triangle, as a causal mask."""
    from pytest_graphbudget.api import profile_model
    from pytest_graphbudget.modes.kernel_shapes import _compare

    call, flops, moved = _compare(op, 4096, torch.float32)
    out = call()

    class Call(torch.nn.Module):
        def forward(self) -> torch.Tensor:
            return call()

    assert profile_model(Call(), ()).flops == flops == out.numel()
    if op in ("gt", "eq"):
        assert out.dtype == torch.bool and moved == (8 if op == "eq" else 4) * 4096 + 4096
    else:  # 12 heads of 64 x 64, a 64 x 64 triangle of bools broadcast over them
        assert out.shape == (12, 64, 64) and moved == 2 * 4 * 12 * 4096 + 4096
        filled = 64 * 65 // 2 if op == "masked_fill" else 64 * 63 // 2  # where keeps the mask's
        assert int((out == -1e4).sum()) == 12 * filled


def test_the_index_benchmarks_are_what_the_engine_prices_an_index_by():
    """Each ``index`` benchmark's FLOPs are the offsets ``engine.lookups`` counts for the same
    call, its bytes the elements it copies, read and written, and ``engine.kinds`` gives the
    call the kind it calibrates: a rate fitted on other counts would misprice every model's."""
    from pytest_graphbudget.engine.breaks import capture_eager
    from pytest_graphbudget.engine.kinds import kernel_kind
    from pytest_graphbudget.engine.latency import kernel_bytes, kernel_flops, tensor_sizes
    from pytest_graphbudget.engine.trace import Example
    from pytest_graphbudget.modes.kernel_shapes import _index

    # by hand: SSDlite's 300 boxes of 4 floats (300 offsets, 2 x 4,800 B), and Faster
    # R-CNN's 150 RoIs of 64 x 7 x 7 put back (150 offsets, 2 x 150 x 3,136 x 4 B)
    assert _index(3234, 4, 300, torch.float32)[1:] == (300, 9_600)
    assert _index(150, 3136, 150, torch.float32, put=True)[1:] == (150, 3_763_200)
    for make in benches(torch.float32, quick=False)["index"]:
        call, flops, moved = make()

        class Call(torch.nn.Module):
            def forward(self, call=call) -> torch.Tensor:
                return call()

        measured = capture_eager(Call(), Example((), {})).measured
        sizes = tensor_sizes(measured)
        (node,) = [n for n in measured.nodes if kernel_kind(n, {}, sizes) == "index"]
        assert (kernel_flops("index", node), kernel_bytes("index", node, sizes)) == (flops, moved)
