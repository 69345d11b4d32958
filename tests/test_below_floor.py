"""A torch below the floor is refused in one line, wherever the engine would start.

``compat.TORCH_FLOOR`` is the oldest torch ``make compat`` proves (benchmarks/COMPAT_RESULTS.md).
Here a new environment holds the release just below it, and the package installed without its
dependencies (pip would otherwise upgrade torch, which is what a team on an older torch avoids
with ``--no-deps`` or a constraints file): ``pytest --graph-budget`` stops with pytest's one-line
usage error, ``graph-budget profile`` with its own, a plain ``pytest`` run is not disturbed, and
importing the engine raises an ImportError whose message is that line.

Marked ``compat`` (a torch from the registry, or uv's cache): ``make compat`` and ``.ci/run``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from compat import BELOW_FLOOR, fresh_env, uv  # noqa: E402

from pytest_graphbudget.compat import TORCH_FLOOR  # noqa: E402

pytestmark = pytest.mark.compat

LINE = f"pytest-graphbudget needs torch>={TORCH_FLOOR[0]}.{TORCH_FLOOR[1]}; this is {BELOW_FLOOR}"
PROJECT = """
import pytest
import torch

from pytest_graphbudget import ModelCase


@pytest.fixture
def linear():
    return ModelCase(torch.nn.Linear(2, 2), (torch.zeros(1, 2),))


@pytest.mark.flops_max("1M")
def test_linear(linear): ...
"""


@pytest.fixture(scope="module")
def old(tmp_path_factory) -> tuple[Path, Path]:
    """(python, project) of an environment with the torch below the floor."""
    base = tmp_path_factory.mktemp("below-floor")
    deps = ("pytest>=8", "pluggy", "tomlkit", "filelock", "sympy", "numpy<2")
    python = fresh_env(base / "venv", f"torch=={BELOW_FLOOR}", *deps)
    env = {**os.environ, "VIRTUAL_ENV": str(base / "venv")}
    subprocess.run([uv(), "pip", "install", "-q", "--no-deps", str(ROOT)], env=env, check=True)
    project = base / "project"
    project.mkdir()
    (project / "test_linear.py").write_text(PROJECT)
    (project / "model.py").write_text("import torch\nmodel = torch.nn.Linear(2, 2)\n")
    return python, project


def _run(python: Path, project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([python, *args], cwd=project, capture_output=True, text=True, env=env)


def test_pytest_graph_budget_stops_with_one_line(old):
    done = _run(*old, "-m", "pytest", "--graph-budget", "-p", "no:cacheprovider")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert lines == [f"ERROR: {LINE}"]


def test_the_command_line_stops_with_one_line(old):
    python, project = old
    cli = python.parent / "graph-budget"
    done = _run(python, project, str(cli), "profile", "model:model", "--input-shape", "1,2")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"graph-budget: error: {LINE}"
    assert "Traceback" not in done.stderr


def test_a_run_without_the_gate_is_not_disturbed(old):
    done = _run(*old, "-m", "pytest", "-p", "no:cacheprovider")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert "not checked" in done.stdout  # the dormant plugin still says the budget was not


def test_importing_the_engine_raises_an_import_error_with_that_line(old):
    code = (
        "try:\n"
        "    from pytest_graphbudget import profile_model\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    done = _run(*old, "-c", code)
    # The imported torch's own version, local label included (2.3.1+cu121).
    assert done.stdout.strip().startswith(f"TorchTooOld {LINE}"), done.stdout + done.stderr
