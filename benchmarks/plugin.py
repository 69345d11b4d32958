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


def cold_and_warm(source: Path, repeat: int) -> tuple[float, list[float]]:
    """Seconds of ``pytest --graph-budget`` on a copy of ``source`` with an empty cache, then
    warm runs."""
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / source.name
        shutil.copytree(
            source, project, ignore=shutil.ignore_patterns(".graph_budget_cache", "__pycache__")
        )
        command = [*PYTEST, "--graph-budget", "."]
        cold = timed(command, project)
        warm = [timed(command, project) for _ in range(repeat)]
    return cold, warm


def toml_only_project(tmp: Path) -> Path:
    """The project's own budget files alone, in a project with no conftest: a suite of TOML
    budgets for zoo models (seven benchmark models)."""
    project = tmp / "toml-only"
    (project / "budgets").mkdir(parents=True)
    shutil.copy(ROOT / "budgets" / "benchmarks.toml", project / "budgets")
    return project


def import_seconds(repeat: int) -> float:
    """Median seconds to import pytest, torch and torchvision: the floor of any warm run whose
    conftest builds models (the example's does)."""
    command = [sys.executable, "-c", "import pytest, torch, torchvision"]
    return statistics.median(timed(command, ROOT) for _ in range(repeat))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    without, with_plugin = startup(max(args.repeat, 5))
    overhead_ms = (with_plugin - without) * 1000
    cold, warm = cold_and_warm(ROOT / "examples", max(1, args.repeat // 2))
    speedup = cold / statistics.median(warm)
    with tempfile.TemporaryDirectory() as tmp:
        toml_cold, toml_warm = cold_and_warm(toml_only_project(Path(tmp)), max(1, args.repeat // 2))
    toml_speedup = toml_cold / statistics.median(toml_warm)
    floor = import_seconds(3)
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
        f"| TOML budgets only (budgets/benchmarks.toml, 7 zoo models), cold | {toml_cold:.2f} |"
        " | |",
        f"| TOML budgets only, warm | {statistics.median(toml_warm):.2f} | | |",
        f"| TOML budgets only, warm speed-up | {toml_speedup:.1f}x | >= 5x | "
        f"{'MET' if toml_speedup >= 5 else 'MISSED'} |",
        f"| `import pytest, torch, torchvision` alone | {floor:.2f} | | |",
        "",
        "A warm run of the example suite still starts pytest, imports torch and torchvision "
        "(its conftest builds models with them) and builds the models of the fixture tests, "
        "whose cache key hashes the module: that import is most of the warm time, a floor no "
        "cache can lower. Budgets of zoo models in TOML are cached by name: a warm run neither "
        "builds them nor imports torch.",
    ]
    out = ROOT / "benchmarks" / "PLUGIN_RESULTS.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
