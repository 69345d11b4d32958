"""Does a calibration repeat? ``benchmarks/latency.py --calibrations N`` calibrates this machine N
times in a row, times each model once, and prices each model on every calibration: the hit
rates of each calibration against the same measured times, how far they lie apart (issue 36's
bar: three in a row within 10 points of each other), and each kind's run-to-run spread.

Written beside the hit rates in LATENCY_RESULTS.md; its figures are what one machine did at one
load (the load average is in the section), so compare runs taken at the same load.
"""

from __future__ import annotations

import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_graphbudget.modes.calibrate import Calibration, calibrate
from pytest_graphbudget.rates import COMPUTE_KINDS


def calibrations(count: int, threads: int, fresh: bool = False) -> list[dict]:
    """``count`` calibrations in a row, each with its seconds and the load average before it;
    with ``fresh``, each in a process of its own, as ``graph-budget hardware --calibrate``
    runs (three in one process on an Intel Xeon VM measured 207, 195 and 188 GFLOP/s in turn;
    three in processes of their own, 196, 172 and 194)."""
    found = []
    for i in range(count):
        load, start = os.getloadavg()[0], time.perf_counter()
        name = f"this-machine-{i + 1}"
        cal = calibrate_fresh(name, threads) if fresh else calibrate(name, threads=threads)
        found.append({"cal": cal, "seconds": time.perf_counter() - start, "load": load})
        print(f"calibration {i + 1}: {cal.flops / 1e9:.4g} GFLOP/s, {cal.bandwidth / 1e9:.4g} GB/s")
    return found


def calibrate_fresh(name: str, threads: int) -> Calibration:
    """``calibrate`` in a child process, its result handed back pickled."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "calibration.pickle"
        code = (
            "import pickle, sys; from pytest_graphbudget.modes.calibrate import calibrate; "
            f"pickle.dump(calibrate({name!r}, threads={threads}), open(sys.argv[1], 'wb'))"
        )
        root = str(Path(__file__).resolve().parents[1])
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
        }
        subprocess.run([sys.executable, "-c", code, str(out)], check=True, env=env)
        return pickle.loads(out.read_bytes())


def hits(rows: list[dict], index: int) -> tuple[int, int, float]:
    """Models within ±10% and ±25% on calibration ``index``, and the mean absolute error."""
    errors = [abs(r["ests"][index] / r["min"] - 1) for r in rows]
    return sum(e <= 0.10 for e in errors), sum(e <= 0.25 for e in errors), statistics.mean(errors)


def run_to_run(cals: list[Calibration]) -> list[tuple[str, str, float, float]]:
    """Each dtype's kinds: the spread of their rate and of their overhead over the
    calibrations, (max - min) / median; the rate is FLOP/s for compute kinds, else bytes/s."""
    rows = []
    for dtype in cals[0].kernels:
        for kind in cals[0].kernels[dtype]:
            rates = [cal.kernels[dtype][kind] for cal in cals]
            pick = (lambda r: r.flops_per_s) if kind in COMPUTE_KINDS else (lambda r: r.bytes_per_s)
            rows.append(
                (
                    dtype,
                    kind,
                    _range([pick(r) for r in rates]),
                    _range([r.overhead_s for r in rates]),
                )
            )
    return rows


def _range(values: list[float]) -> float:
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else 0.0


def section(rows: list[dict], runs: list[dict]) -> list[str]:
    """The markdown section: each calibration's hit rates, their spread, each kind's."""
    n, cals = len(rows), [run["cal"] for run in runs]
    lines = [
        "",
        f"## Repeatability: {len(runs)} calibrations in a row",
        "",
        "Each model timed once; its estimate priced on each calibration in turn, so the hit "
        "rates below differ by the calibration alone.",
        "",
        "| calibration | load before | seconds | GFLOP/s | GB/s | noisiest kind (within run) "
        "| within ±10% | within ±25% | mean error |",
        "|--:|--:|--:|--:|--:|:--|--:|--:|--:|",
    ]
    tens = []
    for i, run in enumerate(runs):
        cal = run["cal"]
        ten, quarter, mean = hits(rows, i)
        tens.append(ten / n)
        worst = max(cal.spreads, key=lambda key: cal.spreads[key])
        lines.append(
            f"| {i + 1} | {run['load']:.2f} | {run['seconds']:.0f} | {cal.flops / 1e9:.4g} "
            f"| {cal.bandwidth / 1e9:.4g} | {worst} ±{cal.spreads[worst]:.1%} "
            f"| {ten}/{n} ({ten / n:.0%}) | {quarter}/{n} ({quarter / n:.0%}) | {mean:.1%} |"
        )
    points = (max(tens) - min(tens)) * 100
    verdict = "within" if points <= 10 else "NOT within"
    lines += [
        "",
        f"- **±10% hit rates {points:.0f} points apart** ({verdict} the 10 points issue 36 asks)",
        "- Run-to-run spread of each kind, (max - min) / median over the calibrations: its rate "
        "(FLOP/s for convolutions, matmul and attention; bytes/s for the others) and its "
        "launch overhead",
        "",
        "| dtype | kind | rate | overhead |",
        "|:--|:--|--:|--:|",
    ]
    for dtype, kind, rate, overhead in run_to_run(cals):
        lines.append(f"| {dtype} | {kind} | {rate:.1%} | {overhead:.1%} |")
    return lines
