"""Installed as a user installs it: the wheel, into a project that already pins an older torch.

A team adds the plugin to a project whose torch is fixed; pip must keep that torch, and
``pytest --graph-budget`` must work there. The environment is made fresh for the test with the
floor torch of ``benchmarks/compat.py`` (uv takes it from its cache once downloaded), the wheel
is built from this checkout with ``python -m build`` and installed by that environment's own pip,
not editable, and a small project with a budget marker runs in it.

Marked ``compat``: it needs the registry (or uv's cache) and a minute, so ``make test`` leaves
it to ``make compat`` and ``.ci/run``, which select it with ``-m compat``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from compat import TORCH, TORCH_FLOOR_ROW, fresh_env  # noqa: E402

pytestmark = pytest.mark.compat

PROJECT = """
import pytest
import torch

from pytest_graphbudget import ModelCase


@pytest.fixture
def small_mlp():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return ModelCase(model, (torch.randn(3, 4),))


@pytest.mark.flops_max("1M")
@pytest.mark.params_max(100)
def test_small_mlp(small_mlp): ...
"""


def _run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}: {done.stdout}{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", out, ROOT])
    (found,) = out.glob("pytest_graphbudget-*.whl")
    return found


def test_the_wheel_keeps_the_projects_older_torch_and_checks_a_budget(wheel, tmp_path):
    torch_version = TORCH[TORCH_FLOOR_ROW][0]
    env = tmp_path / "venv"
    # The project as it was before the plugin: its own torch, and pip to add packages with.
    python = fresh_env(env, f"torch=={torch_version}", pip=True)

    installed = _run([python, "-m", "pip", "install", "--quiet", wheel])
    assert "torch" not in installed.stdout.lower(), installed.stdout
    got = _run([python, "-c", "import torch; print(torch.__version__)"]).stdout.strip()
    assert got.split("+")[0] == torch_version, f"pip replaced torch {torch_version} with {got}"
    where = "import pytest_graphbudget as p; print(p.__file__)"
    location = _run([python, "-c", where], cwd=tmp_path)  # not this checkout's folder
    assert str(env) in location.stdout, f"not the wheel: {location.stdout}"

    project = tmp_path / "project"
    project.mkdir()
    (project / "test_model.py").write_text(PROJECT)
    (project / "pyproject.toml").write_text('[project]\nname = "team-model"\nversion = "1.0"\n')
    done = subprocess.run(
        [python, "-m", "pytest", "--graph-budget", "-p", "no:cacheprovider"],
        cwd=project,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    # The gate ran and priced the model: 58 parameters (4x8 + 8 + 8x2 + 2).
    assert "graph budget" in done.stdout and "within budget" in done.stdout, done.stdout
    row = next(line for line in done.stdout.splitlines() if line.startswith("small_mlp"))
    assert "58/100" in row, row
