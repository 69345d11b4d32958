"""Plugin costs, measured: start-up with the plugin installed but disabled, and the example
suite cold against a warm profile cache. Writes benchmarks/PLUGIN_RESULTS.md.

Run: .venv/bin/python benchmarks/plugin.py [--repeat N]   (part of `make bench`)
Targets (issue 4): disabled start-up under 50 ms over pytest without the plugin; the warm
example suite at least 5x faster than the cold one.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
ENV = {**os.environ, "YOLO_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 5):
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return elapsed


def startup(repeat: int) -> tuple[float, float]:
    """Median seconds of a trivial pytest run without and with the (disabled) plugin."""
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "test_trivial.py").write_text("def test_one():\n    assert True\n")
        without, with_plugin = [], []
        for _ in range(repeat):  # interleaved, so that machine noise hits both alike
            without.append(timed([*PYTEST, "-p", "no:graphbudget"], project))
            with_plugin.append(timed(PYTEST, project))
    return statistics.median(without), statistics.median(with_plugin)


def example_suite(repeat: int) -> tuple[float, list[float]]:
    """Seconds of the example suite with an empty cache, then warm runs."""
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "examples"
        shutil.copytree(
            ROOT / "examples",
            project,
            ignore=shutil.ignore_patterns(".graph_budget_cache", "__pycache__"),
        )
        command = [*PYTEST, "--graph-budget", "."]
        cold = timed(command, project)
        warm = [timed(command, project) for _ in range(repeat)]
    return cold, warm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    without, with_plugin = startup(max(args.repeat, 5))
    overhead_ms = (with_plugin - without) * 1000
    cold, warm = example_suite(max(1, args.repeat // 2))
    speedup = cold / statistics.median(warm)
    lines = [
        "# Plugin costs",
        "",
        f"Measured by `benchmarks/plugin.py` on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}. Medians of repeated runs, wall-clock seconds.",
        "",
        "| measurement | seconds | target | verdict |",
        "| --- | --- | --- | --- |",
        f"| trivial pytest run, plugin disabled (`-p no:graphbudget`) | {without:.3f} | | |",
        f"| trivial pytest run, plugin installed, no `--graph-budget` | {with_plugin:.3f} | | |",
        f"| start-up overhead | {overhead_ms / 1000:.3f} ({overhead_ms:.0f} ms) | < 50 ms | "
        f"{'MET' if overhead_ms < 50 else 'MISSED'} |",
        f"| example suite, cold cache | {cold:.2f} | | |",
        f"| example suite, warm cache | {statistics.median(warm):.2f} | | |",
        f"| warm speed-up | {speedup:.1f}x | >= 5x | {'MET' if speedup >= 5 else 'MISSED'} |",
        "",
        "The warm run still starts pytest, imports torch and builds the models of the fixture "
        "tests (their cache key hashes the module); TOML budgets of zoo models are keyed by "
        "name and are not even built.",
    ]
    out = ROOT / "benchmarks" / "PLUGIN_RESULTS.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
