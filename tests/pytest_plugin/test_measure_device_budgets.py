"""``measure_device`` in a marker and a budget table (issue 26): where ``latency_measured_max``
times the model. The references are the machine itself (``torch.cuda.is_available()``) and the
limits: 60 s is more than any tiny forward takes, so a failure can only come from the device.
"""

from __future__ import annotations

import pytest
import torch

from pytest_graphbudget import cli

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")

TESTS = """
import pytest, torch
from pytest_graphbudget import ModelCase

@pytest.fixture
def net():
    return ModelCase(torch.nn.Linear(2, 2), (torch.randn(1, 2),))

@pytest.mark.latency_measured_max("60s")
@pytest.mark.graph_budget(measure_device="cpu", measure_runs=2)
def test_cpu(net): ...

@pytest.mark.latency_measured_max("60s")
@pytest.mark.graph_budget(measure_device="cuda", measure_runs=2)
def test_cuda(net): ...
"""


@NO_CUDA
def test_a_marker_asking_for_cuda_fails_its_test_alone(pytester):
    pytester.makepyfile(TESTS)
    run = pytester.runpytest("-p", "no:cacheprovider", "--graph-budget")
    run.assert_outcomes(passed=1, failed=1)
    run.stdout.fnmatch_lines(["*test_cuda*torch.cuda.is_available() is False*"])


def test_measure_device_without_a_latency_limit_is_a_usage_error(pytester):
    pytester.makepyfile(
        """
        import pytest, torch
        from pytest_graphbudget import ModelCase

        @pytest.fixture
        def net():
            return ModelCase(torch.nn.Linear(2, 2), (torch.randn(1, 2),))

        @pytest.mark.flops_max("1G")
        @pytest.mark.graph_budget(measure_device="cpu")
        def test_a(net): ...
        """
    )
    run = pytester.runpytest("-p", "no:cacheprovider", "--graph-budget")
    run.assert_outcomes(errors=1)
    run.stdout.fnmatch_lines(["*measure_device in @pytest.mark.graph_budget on *has no effect*"])


def check(tmp_path, monkeypatch, capsys, table: str) -> tuple[int, str]:
    """``graph-budget check`` on one budget file in a fresh project; (exit code, stdout)."""
    (tmp_path / "pyproject.toml").write_text("[tool.graph_budget]\n")
    (tmp_path / "budgets").mkdir()
    (tmp_path / "budgets" / "dev.toml").write_text('[models.r]\nmodel = "squeezenet1_1"\n' + table)
    monkeypatch.chdir(tmp_path)
    code = cli.main(["check", "--no-cache", "budgets"])
    return code, capsys.readouterr().out


def test_a_device_torch_cannot_name_is_refused_in_a_table(tmp_path, monkeypatch, capsys):
    code, out = check(
        tmp_path, monkeypatch, capsys, 'latency_measured_max = "60s"\nmeasure_device = "gpu"\n'
    )
    assert code == 1
    assert "measure_device in " in out and "cpu, cuda or cuda:N, got 'gpu'" in out


def test_a_projects_measure_device_leaves_the_budgets_that_time_nothing_alone(pytester):
    """User trial: ``measure_device = "cpu"`` in ``[tool.graph_budget]``, as docs/budgets.md
    allows for the whole project, made every budget without ``latency_measured_max`` an
    error in the Python API's words ("add measure=True"); only the timed one passed."""
    pytester.makepyprojecttoml('[tool.graph_budget]\nmeasure_device = "cpu"\n')
    pytester.makepyfile(
        """
        import pytest, torch
        from pytest_graphbudget import ModelCase

        @pytest.fixture
        def net():
            return ModelCase(torch.nn.Linear(2, 2), (torch.randn(1, 2),))

        @pytest.mark.flops_max("1G")
        def test_flops(net): ...

        @pytest.mark.latency_measured_max("60s")
        @pytest.mark.graph_budget(measure_runs=2)
        def test_timed(net): ...
        """
    )
    pytester.runpytest("-p", "no:cacheprovider", "--graph-budget").assert_outcomes(passed=2)
