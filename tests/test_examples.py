"""The example project runs green (what `make demo` shows) and the regression example fails
with the message users see in review."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def run_pytest(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "YOLO_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.slow
def test_example_suite_passes_and_prints_the_budget_table():
    result = run_pytest("--graph-budget", "examples/", "--graph-budget-no-cache")
    assert result.returncode == 0, result.stdout[-3000:]
    out = result.stdout
    assert " graph budget " in out
    for model in ("resnet18", "bert-base-uncased", "gpt2", "yolov8n", "tiny-b8"):
        assert model in out
    assert " passed" in out and "failed" not in out.splitlines()[-1]


def test_regression_example_fails_naming_the_layer_that_grew():
    result = run_pytest("--graph-budget", "examples/regression", "--graph-budget-no-cache")
    assert result.returncode == 1, result.stdout[-3000:]
    # The head was widened from 64 to 96 channels: the neck conv (64 -> head channels, 3x3,
    # on 64x64) grows by 64*64 positions * 32 more channels * 64*9 MACs, x2 FLOPs = 151M.
    grown = 2 * 64 * 64 * 32 * 64 * 9 + 64 * 64 * 32  # MACs x2, plus the bias adds
    # The whole model grows by that, plus the head's 1x1 conv reading 32 more channels
    # (2 * 64*64 positions * 15 outputs * 32) and the ReLU on 32 more channels (64*64*32).
    total_growth = grown + 2 * 64 * 64 * 15 * 32 + 64 * 64 * 32
    recorded = tomllib.loads((ROOT / "examples/regression/budgets/baseline.toml").read_text())
    before = recorded["models"]["budgets/detector.toml::detector"]["flops"]
    assert f"FLOPs regressed +{100 * total_growth / before:.1f}%" in result.stdout
    assert f"grew most: neck +{grown / 1e6:.0f}M" in result.stdout
