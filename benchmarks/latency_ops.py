"""Where the calibrated latency estimate of one model goes wrong, op by op (issue 26).

Run: .venv/bin/python benchmarks/latency_ops.py resnet50 [more models] [--runs 5] [--quick]

One calibration (``graph-budget hardware --calibrate``, one thread), then per model:

- the engine's tape of one eager forward (``breaks.capture_eager``: every ATen op, with the
  FLOPs and bytes the engine counts), each op priced as ``engine.latency`` prices it;
- the same forward run ``--runs`` times under a dispatch mode that times each ATen op with the
  process's CPU clock (one thread), the fastest run of each op kept;
- the two matched op by op (same order, same names), then summed by kernel kind and by shape
  class (a convolution's kernel size and groups).

The forward's own fastest time is printed too: the part of it outside every ATen op (Python,
module calls) is what no per-op price sees. A diagnosis, not a test: the figures are this
machine's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from pytest_graphbudget.engine.breaks import capture_eager  # noqa: E402
from pytest_graphbudget.engine.latency import (  # noqa: E402
    group_seconds,
    kernel_kind,
    param_shapes,
    tensor_channels,
    tensor_masks,
    tensor_sizes,
    weight_casts,
)
from pytest_graphbudget.engine.trace import Example  # noqa: E402
from pytest_graphbudget.hardware import from_table  # noqa: E402
from pytest_graphbudget.modes.calibrate import calibrate  # noqa: E402
from pytest_graphbudget.zoo import resolve  # noqa: E402

SKIP = {"detach", "lift_fresh", "_to_copy"}


class OpClock(TorchDispatchMode):
    """Each ATen op's CPU seconds, in call order."""

    def __init__(self, keep: bool = False) -> None:
        super().__init__()
        self.ops: list[tuple[str, float]] = []
        self.calls: list[tuple] = []  # with ``keep``: each op's call, to time it again warm
        self.keep = keep

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        start = time.process_time()
        out = func(*args, **(kwargs or {}))
        self.ops.append((func.__name__.split(".")[0].rstrip("_"), time.process_time() - start))
        if self.keep:
            self.calls.append((func, args, kwargs or {}))
        return out


def op_times(model, case, runs: int) -> tuple[list[tuple[str, float]], float]:
    """The fastest time of each op over ``runs`` forwards, and the fastest plain forward."""
    best: list[tuple[str, float]] | None = None
    forward = float("inf")
    with torch.inference_mode():
        for _ in range(2):
            model(*case.inputs, **case.kwargs)
        for _ in range(runs):
            start = time.process_time()
            model(*case.inputs, **case.kwargs)
            forward = min(forward, time.process_time() - start)
    with torch.no_grad():  # outside inference mode: the ops the tape records, decomposed alike
        for _ in range(runs):
            clock = OpClock()
            with clock:
                model(*case.inputs, **case.kwargs)
            if best is None or len(best) != len(clock.ops):
                best = clock.ops
            else:
                best = [(n, min(t, u)) for (n, t), (_, u) in zip(best, clock.ops, strict=True)]
    return best or [], forward


def shape_class(node, kind: str, shapes: dict) -> str:
    """A convolution's kernel and output size; any other op's kind and ATen name."""
    if not kind.startswith("conv"):
        return f"{kind}:{node.target.rpartition('.')[2]}"
    weight = next((shapes[w] for w in node.weights if w in shapes), ())
    out = node.shapes[0][-1] if node.shapes and node.shapes[0] else 0
    return f"{kind}:{'x'.join(map(str, weight[2:]))} out {out}"


def warm_seconds(call: tuple) -> float:
    func, args, kwargs = call
    best = float("inf")
    for _ in range(3):
        func(*args, **kwargs)
    for _ in range(10):
        start = time.process_time()
        func(*args, **kwargs)
        best = min(best, time.process_time() - start)
    return best


def per_op(model, case, nodes, timed, hardware, tables, top: int) -> None:
    """The ``top`` slowest ops: estimate, time in the forward, time of the same call warm."""
    sizes, shapes, channels, masks = tables
    clock = OpClock(keep=True)
    with torch.no_grad(), clock:
        model(*case.inputs, **case.kwargs)
    calls = [c for (n, _), c in zip(clock.ops, clock.calls, strict=True) if n not in SKIP]
    order = sorted(range(len(nodes)), key=lambda i: -timed[i][1])[:top]
    print("| op | weight | input | est us | model us | warm us | est/model | model/warm |")
    with torch.no_grad():
        for i in order:
            node = nodes[i]
            est = group_seconds([node], hardware, "float32", sizes, shapes, channels, masks)
            warm = warm_seconds(calls[i])
            weight = next((shapes[w] for w in node.weights if w in shapes), ())
            arg = calls[i][1][0] if calls[i][1] else None
            shape = tuple(arg.shape) if isinstance(arg, torch.Tensor) else ()
            kind = kernel_kind(node, shapes, sizes, channels, masks)
            print(
                f"| {kind}:{node.target} | {weight} | {shape} "
                f"| {est * 1e6:.0f} | {timed[i][1] * 1e6:.0f} | {warm * 1e6:.0f} "
                f"| {est / timed[i][1]:.2f} | {timed[i][1] / warm:.2f} |"
            )


def diagnose(name: str, hardware, runs: int, verbose: int = 0) -> None:
    case = resolve(name, meta=False)
    model = case.model.eval()
    measured = capture_eager(model, Example(tuple(case.inputs), dict(case.kwargs))).measured
    sizes, shapes = tensor_sizes(measured), weight_casts(param_shapes(model), measured)
    channels, masks = tensor_channels(measured), tensor_masks(measured)
    timed, forward = op_times(model, case, runs)
    nodes = [n for n in measured.nodes if n.target.rpartition(".")[2] not in SKIP]
    timed = [(n, t) for n, t in timed if n not in SKIP]
    names = [n.target.rpartition(".")[2] for n in nodes]
    if names != [n for n, _ in timed]:
        print(f"{name}: tape ({len(names)}) and timed ops ({len(timed)}) differ; by name only")
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    by_class: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    matched = names == [n for n, _ in timed]
    pool = defaultdict(list)
    for n, t in timed:
        pool[n].append(t)
    for i, node in enumerate(nodes):
        kind = kernel_kind(node, shapes, sizes, channels, masks)
        est = group_seconds([node], hardware, "float32", sizes, shapes, channels, masks)
        if matched:
            real = timed[i][1]
        else:
            real = pool[names[i]].pop(0) if pool[names[i]] else 0.0
        for row in (by_kind[kind], by_class[shape_class(node, kind, shapes)]):
            row[0] += est
            row[1] += real
            row[2] += 1
    if verbose and matched:
        per_op(model, case, nodes, timed, hardware, (sizes, shapes, channels, masks), verbose)
    est_total = sum(r[0] for r in by_kind.values())
    real_total = sum(r[1] for r in by_kind.values())
    print(
        f"\n## {name}: forward {forward * 1e3:.2f} ms, ops timed {real_total * 1e3:.2f} ms "
        f"(outside ops {1 - real_total / forward:+.0%}), estimate {est_total * 1e3:.2f} ms "
        f"({est_total / forward:.2f}x forward)"
    )
    for title, table in (("kind", by_kind), ("class", by_class)):
        print(f"| {title} | n | est ms | real ms | est/real | share of real |")
        for key, (e, r, c) in sorted(table.items(), key=lambda kv: -kv[1][1]):
            if r < 0.005 * real_total and title == "class":
                continue
            print(
                f"| {key} | {c} | {e * 1e3:.3f} | {r * 1e3:.3f} | "
                f"{e / r if r else float('nan'):.2f} | {r / max(real_total, 1e-9):.1%} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a quick calibration")
    parser.add_argument("--top", type=int, default=0, help="print the N slowest ops")
    args = parser.parse_args()
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "YOLO_OFFLINE"):
        os.environ.setdefault(key, "1")
    torch.set_num_threads(1)
    start = time.perf_counter()
    hardware = from_table(
        "this-machine", calibrate("this-machine", threads=1, quick=args.quick).table()
    )
    print(f"calibrated in {time.perf_counter() - start:.0f} s; load {os.getloadavg()}")
    for name in args.models:
        torch.set_num_threads(1)
        diagnose(name, hardware, args.runs, args.top)


if __name__ == "__main__":
    main()
