"""Per-kind calibration: what each kind of kernel achieves, from micro-benchmarks.

Each kind (``engine.latency.KINDS``) is timed on a few shapes of the layers real models use
(MobileNet's depthwise 3x3, ResNet's 3x3 and 1x1, BERT's linear layers, ...), each shape's
FLOPs and bytes written out by hand below, as ``engine.latency`` counts them (FLOPs = 2 x MACs;
bytes = inputs + weights + output). A line ``t = overhead + work / rate`` is fitted to the
fastest of ``repeats`` runs of each shape, in relative error so a 10 µs kernel weighs as much
as a 10 ms one; the work is FLOPs for the compute kinds, bytes for the memory-bound ones. The
zoo's models never enter the fit: the benchmark that scores the estimate against them
(``benchmarks/latency.py``) would otherwise be circular.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from pytest_graphbudget.hardware import COMPUTE_KINDS, KernelRate

Bench = tuple[Callable[[], Any], float, float]  # the call, its FLOPs, its bytes


def _conv(cin: int, cout: int, k: int, hw: int, groups: int, dtype: Any, stride: int = 1):
    import torch

    conv = torch.nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups).to(dtype)
    x = torch.randn(1, cin, hw, hw, dtype=dtype)
    out = (hw + 2 * (k // 2) - k) // stride + 1
    macs = cout * out * out * (cin // groups) * k * k
    size = x.element_size()
    moved = size * (cin * hw * hw + cout * out * out + conv.weight.numel() + cout)
    return (lambda: conv(x)), 2 * macs, moved


def _linear(m: int, k: int, n: int, dtype: Any):
    import torch

    layer = torch.nn.Linear(k, n).to(dtype)
    x = torch.randn(m, k, dtype=dtype)
    return (lambda: layer(x)), 2 * m * k * n, x.element_size() * (m * k + k * n + n + m * n)


def _attention(heads: int, seq: int, dim: int, dtype: Any):
    import torch

    q, k, v = (torch.randn(1, heads, seq, dim, dtype=dtype) for _ in range(3))
    call = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)  # noqa: E731
    return call, 4 * heads * seq * seq * dim, q.element_size() * 4 * heads * seq * dim


def _block(seq: int, embed: int, heads: int, dtype: Any):
    """``nn.MultiheadAttention``'s fast path on ``(1, seq, embed)``: its MACs are the four
    projections, 4 seq embed^2, and the scores and their sum, 2 seq^2 embed (the softmax's few
    FLOPs per score left out: under 1% at ViT-B's sizes)."""
    import torch

    block = torch.nn.MultiheadAttention(embed, heads, batch_first=True).eval().to(dtype)
    x = torch.randn(1, seq, embed, dtype=dtype)
    call = lambda: block(x, x, x, need_weights=False)  # noqa: E731
    macs = 4 * seq * embed * embed + 2 * seq * seq * embed
    weights = 4 * embed * embed + 4 * embed
    return call, 2 * macs, x.element_size() * (2 * seq * embed + weights)


def _memory(op: str, n: int, dtype: Any):
    """A memory-bound op over ``n`` elements: its bytes (read + write)."""
    import torch

    x, y = torch.randn(n // 64, 64, dtype=dtype), torch.randn(n // 64, 64, dtype=dtype)
    size = x.element_size()
    relu, silu, hardswish = torch.nn.ReLU(), torch.nn.SiLU(), torch.nn.Hardswish()  # as modules
    calls = {
        "add": (lambda: x + y, n, 3 * n),
        "mul": (lambda: x * y, n, 3 * n),
        "relu": (lambda: relu(x), n, 2 * n),
        "silu": (lambda: silu(x), 4 * n, 2 * n),
        "sigmoid": (lambda: torch.sigmoid(x), 4 * n, 2 * n),
        "gelu": (lambda: torch.nn.functional.gelu(x), 5 * n, 2 * n),
        "tanh": (lambda: torch.tanh(x), n, 2 * n),
        "hardswish": (lambda: hardswish(x), 4 * n, 2 * n),
        "softmax": (lambda: torch.softmax(x, -1), 5 * n, 2 * n),
        "layer_norm": (lambda: torch.nn.functional.layer_norm(x, (64,)), 5 * n, 2 * n),
        "copy": (lambda: x.t().contiguous(), 0, 2 * n),
        "shuffle": (lambda: x.view(2, -1, 64).transpose(0, 1).contiguous(), 0, 2 * n),
        "cat": (lambda: torch.cat([x, y]), 0, 4 * n),
        "view": (lambda: x.view(-1), 0, 0),
    }
    call, flops, elements = calls[op]
    return call, flops, size * elements


def _batch_norm(channels: int, hw: int, dtype: Any):
    """An eval batch norm module: the pointwise op of every convolutional network."""
    import torch

    norm = torch.nn.BatchNorm2d(channels).eval().to(dtype)
    x = torch.randn(1, channels, hw, hw, dtype=dtype)
    n = x.numel()
    return (lambda: norm(x)), 2 * n, x.element_size() * (2 * n + 4 * channels)


def _resample(channels: int, hw: int, scale: int, dtype: Any):
    """Bilinear upsampling by ``scale``: a segmentation head's (LR-ASPP, DeepLab), an FPN's."""
    import torch

    x = torch.randn(1, channels, hw, hw, dtype=dtype)
    out = hw * scale
    call = lambda: torch.nn.functional.interpolate(x, scale_factor=scale, mode="bilinear")  # noqa: E731
    return call, 9 * channels * out * out, x.element_size() * channels * (hw * hw + out * out)


def _pool(channels: int, hw: int, dtype: Any, stride: int = 2, ceil: bool = False, k: int = 3):
    """Max pooling ``k`` x ``k`` (padding k // 2): ResNet's stem at stride 2, GoogLeNet's
    ceil-mode stage pools, its inception branches at stride 1, YOLO's SPPF (5x5, stride 1).
    Its FLOPs are the window's comparisons, its bytes input and output."""
    import torch

    x = torch.randn(1, channels, hw, hw, dtype=dtype)
    call = lambda: torch.nn.functional.max_pool2d(x, k, stride, k // 2, ceil_mode=ceil)  # noqa: E731
    out = torch.nn.functional.max_pool2d(x, k, stride, k // 2, ceil_mode=ceil).shape[-1]
    moved = x.element_size() * channels * (hw * hw + out * out)
    return call, k * k * channels * out * out, moved


WINDOW_POOLS = ((192, 28, 1, True, 3), (480, 14, 1, True, 3), (128, 20, 1, False, 5))
"""Stride-1 max pools (GoogLeNet's inception branches, YOLO's SPPF): every input element is
compared k x k times, so their window, not their bytes, bounds them: ``pooling``'s FLOP rate
comes from these, its bytes rate from the stride-2 shapes, each op then bound by the slower
of the two (``benchmarks/latency_ops.py``: priced by bytes alone, GoogLeNet came out at 0.77x,
its pools 40% of it; by comparisons alone, ResNet-50's stride-2 stem pool at 0.7x)."""


def window_rate(dtype: Any, overhead: float, time_call: Callable[[Callable], float]) -> float:
    """Comparisons per second of ``WINDOW_POOLS`` past ``overhead``: the median of theirs."""
    rates = []
    for shape in WINDOW_POOLS:
        call, flops, _ = _pool(*shape[:2], dtype, *shape[2:])
        rates.append(flops / max(time_call(call) - overhead, 1e-9))
    return sorted(rates)[len(rates) // 2]


def conv_benches(dtype: Any) -> dict[str, list[Callable[[], Bench]]]:
    """The convolution kinds' shapes: ``(in, out, kernel, input size, groups)``."""
    return {
        "conv_depthwise": [  # inputs up to LARGE_BYTES (float32)
            lambda: _conv(32, 32, 3, 28, 32, dtype),
            lambda: _conv(672, 672, 3, 14, 672, dtype),
            lambda: _conv(240, 240, 5, 14, 240, dtype),
            lambda: _conv(96, 96, 3, 28, 96, dtype),
            lambda: _conv(1152, 1152, 3, 7, 1152, dtype),
            lambda: _conv(32, 32, 3, 56, 32, dtype),
        ],
        "conv_depthwise_large": [
            lambda: _conv(96, 96, 3, 56, 96, dtype),
            lambda: _conv(32, 32, 3, 112, 32, dtype),
            lambda: _conv(144, 144, 3, 56, 144, dtype, stride=2),
        ],
        "conv_pointwise": [
            lambda: _conv(16, 96, 1, 56, 1, dtype),
            lambda: _conv(64, 256, 1, 56, 1, dtype),
            lambda: _conv(512, 128, 1, 28, 1, dtype),
            lambda: _conv(1024, 256, 1, 14, 1, dtype),
            lambda: _conv(112, 672, 1, 14, 1, dtype),
        ],
        "conv_pointwise_small_map": [  # 7x7 last stages; squeeze-excitation's 1x1 maps
            lambda: _conv(160, 960, 1, 7, 1, dtype),
            lambda: _conv(960, 160, 1, 7, 1, dtype),
            lambda: _conv(512, 2048, 1, 7, 1, dtype),
            lambda: _conv(1152, 48, 1, 1, 1, dtype),
            lambda: _conv(48, 1152, 1, 1, 1, dtype),
        ],
        "conv_grouped": [  # RegNet's groups of 16 channels, ResNeXt's of 4 and 16
            lambda: _conv(64, 64, 3, 28, 4, dtype),
            lambda: _conv(128, 128, 3, 56, 32, dtype),
            lambda: _conv(160, 160, 3, 14, 10, dtype),
            lambda: _conv(400, 400, 3, 7, 25, dtype),
            lambda: _conv(512, 512, 3, 28, 32, dtype),
        ],
        "conv_dense": [
            lambda: _conv(16, 16, 3, 28, 1, dtype),
            lambda: _conv(32, 64, 3, 112, 1, dtype, stride=2),
            lambda: _conv(64, 64, 3, 56, 1, dtype),
            lambda: _conv(128, 128, 3, 28, 1, dtype),
            lambda: _conv(256, 256, 3, 14, 1, dtype),
        ],
        "conv_stem": [  # an RGB image in: MobileNet's, EfficientNet's, ResNet's, YOLO's
            lambda: _conv(3, 16, 3, 64, 1, dtype, stride=2),
            lambda: _conv(3, 16, 3, 224, 1, dtype, stride=2),
            lambda: _conv(3, 32, 3, 224, 1, dtype, stride=2),
            lambda: _conv(3, 64, 7, 224, 1, dtype, stride=2),
            lambda: _conv(3, 16, 3, 640, 1, dtype, stride=2),
        ],
        "conv_dense_small_map": [
            lambda: _conv(64, 64, 3, 7, 1, dtype),
            lambda: _conv(512, 512, 3, 7, 1, dtype),
            lambda: _conv(160, 320, 3, 7, 1, dtype),
        ],
    }


def benches(dtype: Any, quick: bool) -> dict[str, list[Callable[[], Bench]]]:
    """Every kind's micro-benchmarks, each a maker of a fresh copy (its own weights and
    input: ``cold`` rotates copies); ``quick`` keeps the first (small) shape of each."""
    table: dict[str, list[Callable[[], Bench]]] = {
        **conv_benches(dtype),
        "matmul": [
            lambda: _linear(16, 64, 64, dtype),
            lambda: _linear(128, 768, 768, dtype),
            lambda: _linear(197, 768, 3072, dtype),
            lambda: _linear(64, 256, 1024, dtype),
        ],
        "attention": [
            lambda: _attention(4, 32, 32, dtype),
            lambda: _attention(12, 128, 64, dtype),
            lambda: _attention(12, 197, 64, dtype),
        ],
        "attention_block": [
            lambda: _block(16, 64, 4, dtype),
            lambda: _block(64, 256, 4, dtype),
            lambda: _block(50, 512, 8, dtype),
            lambda: _block(197, 768, 12, dtype),
        ],
        "pointwise": [
            lambda op=op, n=n: _memory(op, n, dtype)
            for op, n in [("add", 4096), ("relu", 2**16), ("mul", 2**16), ("add", 2**20)]
            + [("hardswish", 2**18), ("relu", 2**21)]
        ],
        "pointwise_exp": [
            lambda op=op, n=n: _memory(op, n, dtype)
            for op, n in [("silu", 4096), ("sigmoid", 2**16), ("gelu", 2**18), ("silu", 2**20)]
            + [("tanh", 2**18), ("silu", 2**21)]
        ],
        "batch_norm": [
            lambda c=c, hw=hw: _batch_norm(c, hw, dtype)
            for c, hw in [(576, 7), (144, 28), (32, 112), (256, 56)]
        ],
        "resample": [
            lambda c=c, hw=hw, k=k: _resample(c, hw, k, dtype)
            for c, hw, k in [(16, 14, 2), (21, 65, 8), (64, 40, 2), (256, 33, 2)]
        ],
        "reduction": [
            lambda op=op, n=n: _memory(op, n, dtype)
            for op, n in [("softmax", 4096), ("layer_norm", 2**16), ("softmax", 2**20)]
        ],
        "pooling": [
            lambda c=c, hw=hw, ceil=ceil: _pool(c, hw, dtype, 2, ceil)
            for c, hw, ceil in [(16, 28, False), (64, 112, False), (192, 57, True)]
            + [(480, 28, True), (24, 56, False), (96, 55, True)]
        ],
        "copy": [
            lambda op=op, n=n: _memory(op, n, dtype)
            for op, n in [("copy", 4096), ("cat", 2**16), ("copy", 2**20), ("shuffle", 2**18)]
        ],
        "view": [lambda: _memory("view", 4096, dtype)],
    }
    return {kind: makers[: 1 if quick else None] for kind, makers in table.items()}


COLD_BYTES = 64 * 2**20
"""What a micro-benchmark's copies hold together: twice a large server L3 cache (32 MiB). In a
forward each layer reads its weights once, evicted since by the other layers, and its input
from whatever cache level the op before left it in; one call timed in a warm loop finds both
in L1/L2 and runs 1.1x (ResNet-50's 3x3 convolutions) to 1.5x (MobileNet's small ops) faster
than the same call inside the model (``benchmarks/latency_ops.py``)."""
MAX_COPIES = 256
COLD_KINDS = tuple(kind for kind in COMPUTE_KINDS if kind.startswith(("conv", "matmul")))
"""The kinds that read weights, timed cold. The others read what the op before them wrote,
still in cache in a forward as in a warm loop (timed cold, eval batch norm, pooling and
pointwise ops came out 1.3x to 2.3x slower than inside the models). ``attention_block`` reads
weights too but reuses each 197 times in ViT-B/16, where its blocks ran as fast as warm
(12.7 ms a block in the model, 12.9 ms warm, 14.8 ms cold)."""


def cold(make: Callable[[], Bench], limit: int = COLD_BYTES) -> Bench:
    """``make``'s benchmark over enough copies to hold ``limit`` bytes, called in turn: each
    call finds its weights and input out of cache, as a layer of a forward does."""
    call, flops, moved = make()
    copies = min(MAX_COPIES, int(limit // moved)) if moved else 0  # a view moves nothing
    calls = [call] + [make()[0] for _ in range(copies)]
    turn = itertools.cycle(calls)
    return (lambda: next(turn)()), flops, moved


SAMPLE_SECONDS = 0.002
"""One timed sample repeats a call until it takes about this long: a 1 µs op timed alone
would be mostly the clock's own cost."""


def sample_seconds(
    call: Callable[[], Any],
    repeats: int,
    clock: Callable[[], float],
    target: float = SAMPLE_SECONDS,
) -> float:
    """Seconds per call: the fastest of ``repeats`` samples, each a loop of calls lasting
    about ``target`` seconds."""
    for _ in range(3):  # lazy initialisation, primitive caches
        call()
    start = clock()
    call()
    loops = max(1, min(10_000, int(target / max(clock() - start, 1e-7))))
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        for _ in range(loops):
            call()
        best = min(best, (clock() - start) / loops)
    return best


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """``(overhead, seconds per unit of work)`` of ``t = overhead + work * slope`` over
    ``(work, seconds)`` points, least squares in relative error, both clamped at >= 0."""
    if len({w for w, _ in points}) < 2:  # one size (or no work): the launch cost alone
        return min(t for _, t in points), 0.0
    # minimise sum(((o + s w - t) / t)^2): normal equations of the rows (1/t, w/t) -> 1
    a11 = sum(1 / t**2 for _, t in points)
    a12 = sum(w / t**2 for w, t in points)
    a22 = sum(w * w / t**2 for w, t in points)
    b1 = sum(1 / t for _, t in points)
    b2 = sum(w / t for w, t in points)
    det = a11 * a22 - a12 * a12
    overhead = (b1 * a22 - b2 * a12) / det
    slope = (a11 * b2 - a12 * b1) / det
    if slope <= 0:
        return min(t for _, t in points), 0.0
    if overhead < 0:  # no launch cost to see: the slope through the origin
        return 0.0, sum(w / t for w, t in points) / sum(w * w / t**2 for w, t in points)
    return overhead, slope


def measure_kernels(
    dtype: Any, repeats: int, quick: bool, peak: float, bandwidth: float
) -> dict[str, KernelRate]:
    """Every kind's fitted rate; ``peak`` and ``bandwidth`` fill the figure a kind's fit
    leaves out (memory kinds have no FLOP rate of their own, compute kinds no bandwidth)."""
    import torch

    # one thread: the process's CPU time, which a shared machine's other processes do not
    # add to (wall-clock time, with several threads, counts each of their waits)
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter
    rates: dict[str, KernelRate] = {}
    target = SAMPLE_SECONDS / 10 if quick else SAMPLE_SECONDS
    for kind, makers in benches(dtype, quick).items():
        compute = kind in COMPUTE_KINDS
        limit = (COLD_BYTES // 16 if quick else COLD_BYTES) if kind in COLD_KINDS else 0
        shapes = [cold(make, limit) for make in makers]
        points = [
            (flops if compute else moved, sample_seconds(call, repeats, clock, target))
            for call, flops, moved in shapes
        ]
        del shapes  # the copies: up to COLD_BYTES each kind
        overhead, slope = fit(points)
        rate = 1 / slope if slope > 0 else (peak if compute else bandwidth)
        streamed, window = bandwidth, peak
        if kind == "matmul" and not quick:  # batch 1: weights streamed once, memory-bound
            call, _, moved = _linear(1, 4096, 4096, dtype)
            streamed = moved / sample_seconds(call, repeats, clock, target)
        if kind == "pooling" and not quick:  # stride 1: bound by the window's comparisons
            window = window_rate(
                dtype, overhead, lambda c: sample_seconds(c, repeats, clock, target)
            )
        rates[kind] = (
            KernelRate(rate, streamed, overhead) if compute else KernelRate(window, rate, overhead)
        )
    return rates
