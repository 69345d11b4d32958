"""The calibrated latency estimate against the clock, over a sample of zoo models across
families (issue 26). Writes benchmarks/LATENCY_RESULTS.md.

Run: .venv/bin/python benchmarks/latency.py [--runs N] [--models a,b,c] [--threads 1]
     [--calibrations 3]

One run: this machine calibrated (``graph-budget hardware --calibrate``: micro-benchmarks of
each kernel kind, never these models), then each model profiled on that profile and timed for
real (``profile_model(..., measure=N)``: the fastest of N eval forwards, batch 1,
inference mode, after 3 warm-up runs), torch held to ``--threads`` intra-op threads for both.
Published: the share of models within ±10% and ±25%, the mean absolute error, the worst models.
With ``--calibrations N``, N calibrations in a row, every model priced on each: their hit rates
and each kind's run-to-run spread (``latency_repeat.py``), beside the first one's table.
Each calibration runs and each model is timed in a process of its own, as a user's
``graph-budget hardware --calibrate`` and service do, so that no model's time depends on what
ran before it: on an Intel Xeon VM a forward timed after a calibration in the same process ran
up to 1.45x slower than in a new one, and on an AMD EPYC VM YOLO's forwards 1.5x slower after
thirty models than alone. ``--in-process`` keeps everything in this one (the default until
2026-12-03: the EPYC table of 2026-11-28 was made so).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from latency_repeat import calibrations, section  # benchmarks/latency_repeat.py
from notes import save_results  # benchmarks/notes.py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from pytest_graphbudget.api import profile_model  # noqa: E402
from pytest_graphbudget.hardware import from_table  # noqa: E402
from pytest_graphbudget.units import format_seconds  # noqa: E402
from pytest_graphbudget.zoo import resolve  # noqa: E402

MODELS = {
    "torchvision classification": (
        "resnet18 resnet50 resnext50_32x4d mobilenet_v2 mobilenet_v3_large mobilenet_v3_small "
        "efficientnet_b0 shufflenet_v2_x1_0 shufflenet_v2_x0_5 regnet_x_400mf regnet_y_400mf "
        "mnasnet1_0 squeezenet1_1 googlenet densenet121 alexnet vgg11 convnext_tiny vit_b_16 "
        "swin_t"
    ),
    "torchvision segmentation": "lraspp_mobilenet_v3_large deeplabv3_mobilenet_v3_large",
    "torchvision detection": "ssdlite320_mobilenet_v3_large fasterrcnn_mobilenet_v3_large_320_fpn",
    "torchvision video": "r3d_18",
    "huggingface": "bert-base-uncased distilbert-base-uncased gpt2 t5-small "
    "google/electra-small-discriminator facebook/opt-125m",
    "ultralytics": "yolov8n yolo11n yolov5nu yolov8s",
}


def timed(case, runs: int) -> tuple[float, float]:
    """The fastest of ``runs`` eval forwards after 3 warm-up ones: wall-clock seconds, and the
    process's CPU seconds (one thread: what the forward took, less the time other processes
    on a shared machine held the core)."""
    model = case.model.eval()
    wall, cpu = [], []
    with torch.inference_mode():
        for _ in range(3):
            model(*case.inputs, **case.kwargs)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(runs):
            start, start_cpu = time.perf_counter(), time.process_time()
            model(*case.inputs, **case.kwargs)
            cpu.append(time.process_time() - start_cpu)
            wall.append(time.perf_counter() - start)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / runs
    print(f"{faults:.0f} minor page faults a forward", file=sys.stderr)
    return min(wall), min(cpu)


def timed_fresh(name: str, runs: int, threads: int) -> tuple[float, float]:
    """``timed`` in a child process of its own, whose heap nothing before it shaped."""
    command = [sys.executable, __file__, "--time-one", name, "--runs", str(runs)]
    done = subprocess.run(
        [*command, "--threads", str(threads)], capture_output=True, text=True, check=True
    )
    print(done.stderr.strip().splitlines()[-1], file=sys.stderr)
    wall, cpu = json.loads(done.stdout.strip().splitlines()[-1])
    return wall, cpu


def measure(name: str, hardwares: list, runs: int, fresh: int = 0) -> dict:
    """One model: its estimate on each hardware profile (the first's kinds shown), its
    fastest run (in a process of its own, of ``fresh`` threads, when given), and the subgraph
    kinds that dominate."""
    start = time.perf_counter()
    case = resolve(name, meta=False)
    prof = profile_model(case, hardware=hardwares[0])
    ests = [prof.est_latency_s]
    ests += [profile_model(case, hardware=hw).est_latency_s for hw in hardwares[1:]]
    wall, cpu = timed_fresh(name, runs, fresh) if fresh else timed(case, runs)
    by_kind: dict[str, float] = defaultdict(float)
    for sub in prof.subgraphs:
        by_kind[sub.kind.split("+")[0]] += sub.est_latency_s
    top = sorted(by_kind.items(), key=lambda kv: -kv[1])[:2]
    total = prof.est_latency_s or 1.0
    return {
        "model": name,
        "est": prof.est_latency_s,
        "ests": ests,
        "min": cpu,
        "wall": wall,
        "ops": len(prof.node_info),
        "top": ", ".join(f"{k} {v / total:.0%}" for k, v in top),
        "seconds": time.perf_counter() - start,
    }


def summary(rows: list[dict]) -> list[str]:
    errors = [abs(r["est"] / r["min"] - 1) for r in rows]
    n = len(rows)
    within10 = sum(e <= 0.10 for e in errors)
    within25 = sum(e <= 0.25 for e in errors)
    return [
        f"- **Within ±10%: {within10} of {n} ({within10 / n:.0%})**; "
        f"**within ±25%: {within25} of {n} ({within25 / n:.0%})**",
        f"- Mean absolute error {statistics.mean(errors):.1%}, median "
        f"{statistics.median(errors):.1%}; estimate / measured from "
        f"{min(r['est'] / r['min'] for r in rows):.2f}x to "
        f"{max(r['est'] / r['min'] for r in rows):.2f}x",
    ]


def table(rows: list[dict], family: dict[str, str]) -> list[str]:
    headers = ["model", "family", "ops", "estimate", "measured (CPU, min)", "est. / measured",
               "error", "wall-clock (min)", "estimate by subgraph kind", "s"]  # fmt: skip
    lines = ["| " + " | ".join(headers) + " |", "|:--|:--|" + "--:|" * 6 + ":--|--:|"]
    for r in sorted(rows, key=lambda r: -abs(r["est"] / r["min"] - 1)):
        ratio = r["est"] / r["min"]
        lines.append(
            f"| {r['model']} | {family[r['model']]} | {r['ops']} | {format_seconds(r['est'])} "
            f"| {format_seconds(r['min'])} | {ratio:.2f}x | {ratio - 1:+.0%} "
            f"| {format_seconds(r['wall'])} | {r['top']} | {r['seconds']:.0f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--models", help="comma-separated names (default: the sample)")
    parser.add_argument("--output", help="where to write the table (default: LATENCY_RESULTS.md)")
    parser.add_argument(
        "--calibrations", type=int, default=1, help="calibrate this many times in a row"
    )
    parser.add_argument(
        "--in-process",
        dest="fresh",
        action="store_false",
        help="calibrate and time every model in this process (default: each in a new one)",
    )
    parser.add_argument("--fresh", action="store_true", help=argparse.SUPPRESS)  # the default
    parser.add_argument("--time-one", help=argparse.SUPPRESS)  # --fresh's child
    args = parser.parse_args()
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "YOLO_OFFLINE"):
        os.environ.setdefault(key, "1")
    if args.time_one:
        torch.set_num_threads(args.threads)
        print(json.dumps(timed(resolve(args.time_one, meta=False), args.runs)))
        return
    family = {m: fam for fam, names in MODELS.items() for m in names.split()}
    names = args.models.split(",") if args.models else list(family)
    load, began = os.getloadavg(), time.perf_counter()
    runs = calibrations(max(1, args.calibrations), args.threads, args.fresh)
    measured, calibration_s = runs[0]["cal"], runs[0]["seconds"]
    hardwares = [from_table(run["cal"].name, run["cal"].table()) for run in runs]
    rows, failed = [], []
    for name in names:
        torch.set_num_threads(args.threads)
        try:
            rows.append(measure(name, hardwares, args.runs, args.threads if args.fresh else 0))
        except Exception as exc:  # a model that cannot run is reported, not fatal
            failed.append(f"{name}: {str(exc).splitlines()[0][:160]}")
        print(rows[-1] if rows else failed[-1], flush=True)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Calibrated latency estimate against measured latency",
        "",
        f"Written by `benchmarks/latency.py --runs {args.runs} --threads {args.threads} "
        f"--calibrations {len(runs)}{'' if args.fresh else ' --in-process'}` on {when}, "
        f"in {time.perf_counter() - began:.0f} s; the "
        "table's estimates are the first calibration's.",
        "",
        *summary(rows),
        f"- Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs, "
        f"torch {torch.__version__}, {args.threads} intra-op thread(s) for calibration and "
        f"timing; load average at the start {', '.join(f'{v:.2f}' for v in load)}, at the end "
        f"{', '.join(f'{v:.2f}' for v in os.getloadavg())}",
        f"- Calibration: {calibration_s:.0f} s (`graph-budget hardware --calibrate`, micro-"
        "benchmarks of each kernel kind only; no model of this table enters the fit), "
        f"{measured.flops / 1e9:.4g} GFLOP/s float32 matmul, {measured.bandwidth / 1e9:.4g} GB/s, "
        f"median of {measured.rounds} interleaved rounds; the noisiest kind within it strayed "
        f"±{max(measured.spreads.values()):.1%} between rounds",
        f"- Measured: the fastest of {args.runs} eval forwards after 3 warm-up runs, batch 1, "
        "inference mode, the zoo's default input"
        + (", each model in a process of its own" if args.fresh else ""),
        *(f"- Failed: {f}" for f in failed),
        "",
        *table(rows, family),
        *(section(rows, runs) if len(runs) > 1 and rows else []),
        "",
    ]
    output = Path(args.output or ROOT / "benchmarks" / "LATENCY_RESULTS.md")
    save_results(output, "\n".join(lines), partial=bool(args.models), chosen=bool(args.output))


if __name__ == "__main__":
    main()
