"""The roofline against the clock: this machine calibrated (``graph-budget hardware
--calibrate``), then a few models profiled on that profile and timed for real
(``profile_model(..., measure_runs=N)``). Writes benchmarks/RUNTIME_RESULTS.md.

Run: .venv/bin/python benchmarks/runtime.py [--runs N] [--models a,b,c]
The ratio column is the profile's estimated latency over the fastest measured run: 1.0 means
the model ran as fast as the calibrated roofline allows; a CPU usually reaches a fraction of it
(kernel launch and framework overhead per op, small kernels far from the matmul's peak).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_graphbudget.api import profile_model  # noqa: E402
from pytest_graphbudget.hardware import from_table  # noqa: E402
from pytest_graphbudget.modes.calibrate import calibrate  # noqa: E402
from pytest_graphbudget.units import format_bytes, format_seconds  # noqa: E402

MODELS = ("resnet18", "mobilenet_v2", "bert-base-uncased")


def row(name: str, hardware, runs: int) -> list[str]:
    start = time.perf_counter()
    prof = profile_model(name, hardware=hardware, measure_runs=runs)
    rt = prof.runtime
    return [
        name,
        format_seconds(rt.load_s),
        format_bytes(rt.rss_bytes) if rt.rss_bytes is not None else "n/a",
        format_seconds(prof.est_latency_s),
        format_seconds(rt.min_s),
        format_seconds(rt.median_s),
        f"{rt.throughput:.3g}",
        f"{rt.roofline_ratio:.3f}",
        f"{time.perf_counter() - start:.0f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    load = os.getloadavg()
    measured = calibrate("this-machine")
    hardware = from_table("this-machine", measured.table())
    rows = [row(name, hardware, args.runs) for name in args.models.split(",")]
    headers = [
        "model", "load", "RSS after load", "est. latency", "min", "median",
        "samples/s", "est. / min", "wall s",
    ]  # fmt: skip
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Measured runtime against the calibrated roofline",
        "",
        f"Written by `benchmarks/runtime.py --runs {args.runs}` on {when}.",
        "",
        f"- Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical "
        f"CPUs, torch threads {measured.threads}; load average at the start "
        f"{', '.join(f'{v:.2f}' for v in load)}, at the end "
        f"{', '.join(f'{v:.2f}' for v in os.getloadavg())}",
        f"- Calibrated: {measured.flops / 1e9:.4g} GFLOP/s float32 (matmul n={measured.matmul_n}), "
        f"{measured.bandwidth / 1e9:.4g} GB/s (copy of {measured.copy_bytes >> 20} MiB), "
        f"best of {measured.repeats}",
        f"- Each model: profiled on that profile, then {args.runs} timed forwards after 3 "
        "warm-up runs, batch 1, eval mode, inference mode",
        "",
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(":--" if i == 0 else "--:" for i in range(len(headers))) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
        "",
    ]
    out = ROOT / "benchmarks" / "RUNTIME_RESULTS.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
