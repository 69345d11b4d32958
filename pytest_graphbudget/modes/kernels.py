"""Per-kind calibration: what each kind of kernel achieves, from micro-benchmarks.

Each kind (``rates.KERNEL_KINDS``) is timed on the shapes of ``modes.kernel_shapes`` (the
layers real models use, their FLOPs and bytes counted by hand), on the device calibrated: the
same table drives a CPU's calibration and a GPU's, whose shapes also run at a batch that spills
its L2 cache (``spill_batch``). A
line ``t = overhead + work / rate`` is fitted to each shape's time, in relative error so a 10 µs
kernel weighs as much as a 10 ms one; the work is FLOPs for the compute kinds, bytes for the
memory-bound ones; on a GPU the overhead is the launch's. The zoo's models never enter the fit:
the benchmark that scores the estimate against them (``benchmarks/latency.py``) would
otherwise be circular.

Every shape is timed in rounds (``modes.rounds``): each round times every shape of every kind
once, in a rotated order, and a shape's time is the median of its rounds, so the drift of a
machine over a calibration reaches every kind alike instead of the kinds timed in its slow
second; each kind's spread between rounds comes back beside its rate.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_graphbudget.modes.kernel_shapes import Bench, benches, linear, pool
from pytest_graphbudget.modes.post_shapes import FLOAT32_ONLY
from pytest_graphbudget.modes.rounds import best_of, interleaved, spread
from pytest_graphbudget.rates import COMPUTE_KINDS, SUMMED_KINDS, KernelRate

WINDOW_POOLS = ((192, 28, 1, True, 3), (480, 14, 1, True, 3), (128, 20, 1, False, 5))
"""Stride-1 max pools (GoogLeNet's inception branches, YOLO's SPPF): every input element is
compared k x k times. A full calibration times them beside ``pooling``'s stride-2 shapes and
fits one line over both, ``seconds = overhead + comparisons * a + bytes * b``
(``fit_sum``; ``rates.SUMMED_KINDS``): on one Xeon ATen's max pool spent about 11 ns an
output and 1.6 ns a comparison at any stride, and neither side alone priced every window. The
slower of a bytes rate from 3x3 stride-2 pools and a comparison rate from these had priced
VGG's 2x2 pools at 1.6x their time and the 5x5 SPPF at 1.48x; calibrated as a sum, eleven
pools timed warm read 0.91x to 1.16x (``benchmarks/LATENCY_RESULTS.md``)."""
CUDA_BATCH = 32
"""A GPU times every shape at batch 1 (its launch overhead) and at this batch or more (its
rates: ``spill_batch``)."""
MAX_SPILL = 1024
"""The most ``spill_batch`` multiplies a batch by (a 4,096-element op at batch 32 needs 512x
to move twice a 60 MB L2)."""


def spill_batch(moved: float, batch: int, spill: int) -> int:
    """The batch, ``batch`` times a power of two, at which a shape that moves ``moved`` bytes
    at ``batch`` moves at least ``spill`` (a GPU's calibration asks twice its L2 cache). A
    CPU-sized shape at batch 32 is a few MB, which an H200's 60 MB L2 holds: its memory-bound
    kinds were timed at 5.3 to 10 TB/s where the card's memory moves 3.8, and a timm model at
    batch 1024, whose layers spill the L2, was priced at 0.58 of its time
    (``benchmarks/GPU_RESULTS.md``)."""
    factor = 1
    while 0 < moved * factor < spill and factor < MAX_SPILL:
        factor *= 2
    return batch * factor


def fit_sum(points: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """``(overhead, seconds per FLOP, seconds per byte)`` of ``t = o + a * flops + b *
    bytes`` over ``(flops, bytes, seconds)`` points, least squares in relative error with each
    term >= 0: the best fit over every subset of the three terms, which is what non-negative
    least squares finds, and with three terms cheaper to enumerate than to iterate."""
    scale = [1.0] + [max(max(p[j] for p in points), 1.0) for j in (0, 1)]
    rows = [((1.0, f / scale[1], m / scale[2]), t) for f, m, t in points]
    best: tuple[float, tuple[float, float, float]] | None = None
    for keep in itertools.product((False, True), repeat=3):
        cols = [j for j in range(3) if keep[j]]
        if not cols:
            continue
        matrix = [[sum(r[i] * r[j] / t**2 for r, t in rows) for j in cols] for i in cols]
        solved = _solve(matrix, [sum(r[i] / t for r, t in rows) for i in cols])
        if solved is None or min(solved) < 0:
            continue
        coef = [0.0, 0.0, 0.0]
        for j, value in zip(cols, solved, strict=True):
            coef[j] = value
        fitted = [sum(c * x for c, x in zip(coef, r, strict=True)) for r, _ in rows]
        error = sum(((f - t) / t) ** 2 for f, (_, t) in zip(fitted, rows, strict=True))
        if best is None or error < best[0]:
            best = (error, (coef[0], coef[1] / scale[1], coef[2] / scale[2]))
    return best[1] if best else (min(t for *_, t in points), 0.0, 0.0)


def _solve(matrix: list[list[float]], rhs: list[float]) -> list[float] | None:
    """``matrix @ x = rhs`` by Gaussian elimination with partial pivoting; None if singular."""
    n = len(rhs)
    rows = [[*row, value] for row, value in zip(matrix, rhs, strict=True)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        if abs(rows[pivot][col]) < 1e-12 * max(1.0, max(abs(v) for v in rows[pivot][:n])):
            return None
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(col + 1, n):
            factor = rows[r][col] / rows[col][col]
            rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col], strict=True)]
    x = [0.0] * n
    for r in reversed(range(n)):
        x[r] = (rows[r][n] - sum(rows[r][c] * x[c] for c in range(r + 1, n))) / rows[r][r]
    return x


COLD_BYTES = 64 * 2**20
"""What a micro-benchmark's copies hold together: twice a large server L3 cache (32 MiB). In a
forward each layer reads its weights once, evicted since by the other layers, and its input
from whatever cache level the op before left it in; one call timed in a warm loop finds both
in L1/L2 and runs 1.1x (ResNet-50's 3x3 convolutions) to 1.5x (MobileNet's small ops) faster
than the same call inside the model (``benchmarks/latency_ops.py``). Not scaled to a larger
L3 (a Xeon's 480 MiB holds them): there a small model's weights stay in the L3 between
forwards too, so what these copies must spill is the core's own L2."""
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


SAMPLE_SECONDS = 0.002
"""One timed sample repeats a call until it takes about this long: a 1 µs op timed alone
would be mostly the clock's own cost."""


def loops_for(call: Callable[[], Any], clock: Callable[[], float], target: float) -> int:
    """How many calls of ``call`` take about ``target`` seconds, after three untimed calls
    (lazy initialisation, primitive caches)."""
    for _ in range(3):
        call()
    start = clock()
    call()
    return max(1, min(10_000, int(target / max(clock() - start, 1e-7))))


def per_call(call: Callable[[], Any], loops: int, samples: int, clock: Callable[[], float]):
    """A round's timing of ``call``: the fastest of ``samples`` loops of ``loops`` calls,
    in seconds per call."""

    def loop() -> None:
        for _ in range(loops):
            call()

    return lambda: best_of(loop, samples, clock) / loops


@dataclass
class Timing:
    """How a calibration times: ``rounds`` rounds of the best of ``samples`` loops of about
    ``target`` seconds each, read off ``clock`` (one that waits for the device's queue)."""

    clock: Callable[[], float]
    rounds: int = 7
    samples: int = 2
    target: float = SAMPLE_SECONDS
    batches: tuple[int, ...] = (1,)
    spill: int = 0  # on a GPU: the bytes a shape moves at its larger batch, at least


@dataclass
class KindRates:
    """One dtype's kinds: each one's rate, and how far its shapes' times strayed between
    rounds (``rounds.spread``, the median over its shapes)."""

    rates: dict[str, KernelRate] = field(default_factory=dict)
    spreads: dict[str, float] = field(default_factory=dict)


def _shapes(
    dtype: Any, quick: bool, batches: tuple[int, ...], spill: int = 0
) -> tuple[dict[Any, list[Bench]], dict[tuple[Any, int], Callable[[], Callable[[], Any]]]]:
    """Every kind's benchmarks (cold where the kind reads weights; past batch 1, at the batch
    that moves ``spill`` bytes), and, on a full calibration, matmul's batch-1 product that
    streams its weights and the stride-1 pools; with how to make a benchmark again for each
    round (a cold kind's copies; past a GPU's L2, every shape), by (kind, index)."""
    makers: dict[str, list[Callable[[], Bench]]] = {}
    for batch in batches:
        for kind, found in benches(dtype, quick, batch).items():
            if batch > 1 and spill and kind not in FLOAT32_ONLY:  # those take no batch
                found = [_spilled(dtype, quick, kind, i, make, batch, spill)
                         for i, make in enumerate(found)]  # fmt: skip
            makers.setdefault(kind, []).extend(found)
    shapes: dict[Any, list[Bench]] = {}
    again: dict[tuple[Any, int], Callable[[], Callable[[], Any]]] = {}
    for kind, found in makers.items():
        limit = (COLD_BYTES // 16 if quick else COLD_BYTES) if kind in COLD_KINDS else 0
        if spill and not quick:  # made afresh each round, one at a time: held together, a
            # GPU's shapes would take about 150 times its L2 (20 GB on an H200)
            shapes[kind] = [_counted(make) for make in found]  # (None, flops, bytes)
        else:
            shapes[kind] = [cold(make, limit) for make in found]
        if limit or (spill and not quick):
            again.update({(kind, i): _remade(make, limit) for i, make in enumerate(found)})
    if not quick:
        shapes["streamed"] = [linear(1, 4096, 4096, dtype)]
        shapes["pooling"] += [pool(*shape[:2], dtype, *shape[2:]) for shape in WINDOW_POOLS]
    return shapes, again


def _spilled(
    dtype: Any, quick: bool, kind: str, i: int, make: Callable[[], Bench], batch: int, spill: int
) -> Callable[[], Bench]:
    """``make`` (shape ``i`` of ``kind`` at ``batch``), or the same shape at the batch that
    moves ``spill`` bytes (``spill_batch``)."""
    _, _, moved = make()
    larger = spill_batch(moved, batch, spill)
    return make if larger == batch else benches(dtype, quick, larger)[kind][i]


def _counted(make: Callable[[], Bench]) -> Bench:
    """``make``'s FLOPs and bytes, its tensors let go (no call: ``again`` remakes it)."""
    _, flops, moved = make()
    return None, flops, moved  # type: ignore[return-value]


def _remade(make: Callable[[], Bench], limit: int) -> Callable[[], Callable[[], Any]]:
    return lambda: cold(make, limit)[0]


def _afresh(remake: Callable[[], Callable[[], Any]], loops: int, timing: Timing):
    """A cold kind's round over copies made for that round: copies made once land where they
    land for the whole calibration, and two calibrations disagreed on depthwise convolutions
    by 28% where each one's rounds agreed within 5%."""
    return lambda: per_call(remake(), loops, timing.samples, timing.clock)()


def measure_kernels(
    dtype: Any, quick: bool, peak: float, bandwidth: float, timing: Timing
) -> KindRates:
    """Every kind's fitted rate and spread; ``peak`` and ``bandwidth`` fill the figure a
    kind's fit leaves out (memory kinds have no FLOP rate of their own, compute kinds no
    bandwidth)."""
    target = timing.target / 10 if quick else timing.target
    shapes, again = _shapes(dtype, quick, timing.batches, timing.spill)
    tasks = {}
    for kind, found in shapes.items():
        for i, (call, _, _) in enumerate(found):
            remake = again.get((kind, i)) if not quick else None
            loops = loops_for(call or remake(), timing.clock, target)  # type: ignore[misc]
            tasks[kind, i] = (
                _afresh(remake, loops, timing)
                if remake
                else per_call(call, loops, timing.samples, timing.clock)
            )
    times = interleaved(tasks, timing.rounds)
    del tasks  # the copies: up to COLD_BYTES each kind
    seconds = {key: statistics.median(found) for key, found in times.items()}
    result = KindRates()
    for kind, found in shapes.items():
        if kind == "streamed":
            continue
        compute = kind in COMPUTE_KINDS
        points = [
            (flops if compute else moved, seconds[kind, i])
            for i, (_, flops, moved) in enumerate(found)
        ]
        overhead, slope = fit(points)
        rate = 1 / slope if slope > 0 else (peak if compute else bandwidth)
        streamed = bandwidth
        if kind == "matmul" and "streamed" in shapes:  # batch 1: weights streamed once
            streamed = shapes["streamed"][0][2] / seconds["streamed", 0]
        if kind in SUMMED_KINDS and len(found) >= 3:  # comparisons, then bytes
            summed = [(f, m, seconds[kind, i]) for i, (_, f, m) in enumerate(found)]
            overhead, per_flop, per_byte = fit_sum(summed)
            result.rates[kind] = KernelRate(
                1 / per_flop if per_flop > 0 else peak,
                1 / per_byte if per_byte > 0 else bandwidth,
                overhead,
            )
        elif compute:
            result.rates[kind] = KernelRate(rate, streamed, overhead)
        else:
            result.rates[kind] = KernelRate(peak, rate, overhead)
        result.spreads[kind] = statistics.median(spread(times[kind, i]) for i in range(len(found)))
    return result
