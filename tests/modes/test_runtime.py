"""Measured runtime (issue 12): the model run for real, next to its static figures.

The references are the clock and the model's own code: a module that sleeps 30 ms in its
forward cannot run in less (``time.sleep`` sleeps at least that long), so a 5 ms limit fails it
by a margin no noise can cross, and a 5 s limit passes it whatever the runner's load (the
fastest of the runs is compared). Statistics are checked against their definitions over the
same runs; a zoo file's load time against the wall clock around ``profile_model``.
"""

from __future__ import annotations

import json
import time

import pytest
import torch

from pytest_graphbudget import ModelCase
from pytest_graphbudget.api import profile_model
from pytest_graphbudget.engine.profile import profile_from_dict
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate import figures
from pytest_graphbudget.gate.budgets import build, check

SLEEP_S = 0.03


class Sleepy(torch.nn.Module):
    """A linear layer that takes at least ``SLEEP_S`` per forward."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(SLEEP_S)
        return self.fc(x)


@pytest.fixture(scope="module")
def sleepy():
    """One measured profile of ``Sleepy`` at batch 6, 3 timed runs (about 0.2 s)."""
    return profile_model(Sleepy(), torch.randn(6, 8), measure=3)


def test_runtime_statistics_follow_their_definitions(sleepy):
    rt = sleepy.runtime
    assert (rt.runs, rt.warmup, rt.batch, rt.device) == (3, 3, 6, "cpu")
    assert SLEEP_S <= rt.min_s <= rt.median_s <= rt.max_s
    assert rt.min_s <= rt.mean_s <= rt.max_s and rt.std_s >= 0
    assert rt.throughput == pytest.approx(6 / rt.mean_s)
    assert rt.roofline_ratio == pytest.approx(sleepy.est_latency_s / rt.min_s)
    assert rt.load_s is None  # a module given directly was not loaded by us: never a fake 0
    assert rt.rss_bytes > 10_000_000  # this process holds torch: tens of MB at the least


def test_runtime_is_in_the_json_and_reads_back(sleepy):
    data = json.loads(json.dumps(sleepy.to_dict()))
    assert data["runtime"]["min_s"] == data["totals"]["latency_measured_s"] >= SLEEP_S
    assert data["runtime"]["load_s"] is None
    assert profile_from_dict(data).runtime == sleepy.runtime
    plain = profile_model(torch.nn.Linear(8, 4), torch.randn(6, 8))
    assert plain.runtime is None
    assert "runtime" not in plain.to_dict()
    assert "latency_measured_s" not in plain.to_dict()["totals"]


def test_a_zoo_file_records_its_load_time(tmp_path):
    """An exported program saved to a file: the zoo loads it (timed), and it is run as
    exported (its module refuses ``eval()``: the graph fixed its mode at export)."""
    path = tmp_path / "tiny.pt2"
    linear = torch.nn.Sequential(torch.nn.Linear(8, 4)).eval()
    torch.export.save(torch.export.export(linear, (torch.randn(3, 8),)), path)
    start = time.perf_counter()
    prof = profile_model(str(path), measure=2)
    wall = time.perf_counter() - start
    rt = prof.runtime
    assert 0 < rt.load_s < wall  # torch.export.load of the file, inside the call
    assert rt.batch == 3 and rt.rss_bytes > 0


def test_measuring_refuses_what_it_cannot_run():
    with pytest.raises(GraphBudgetError, match="meta device") as info:
        profile_model(torch.nn.Linear(4, 4, device="meta"), torch.randn(1, 4), measure=True)
    assert "\n" not in str(info.value)
    for runs in (-1, 2.5, "3"):
        with pytest.raises(GraphBudgetError, match="positive number of timed runs"):
            profile_model(torch.nn.Linear(4, 4), torch.randn(1, 4), measure=runs)
    with pytest.raises(GraphBudgetError, match="measure times one eval forward"):
        profile_model(torch.nn.Linear(4, 4), torch.randn(1, 4), measure=True, mode="train")


class FailsWhenTimed(torch.nn.Module):
    """Profiles fine; raises when run for real (timing runs under inference mode)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_inference_mode_enabled():
            raise RuntimeError("boom\nsecond line")
        return x * 2


def test_a_model_that_raises_while_timed_is_its_error_in_one_line():
    with pytest.raises(GraphBudgetError) as info:
        profile_model(FailsWhenTimed(), torch.randn(2, 3), measure=1)
    assert str(info.value) == "the model raised while being timed: RuntimeError: boom"


def test_latency_measured_max_compares_the_fastest_run(sleepy):
    figure = figures.BY_BUDGET["latency_measured_max"]
    assert (figure.key, figure.unit, figure.baseline) == ("latency_measured_s", "seconds", False)
    tight = build({"latency_measured_max": "5ms", "measure_runs": 7}, "test")
    assert (tight.limits["latency_measured_max"], tight.measure_runs) == (0.005, 7)
    [failure] = check(sleepy, tight)
    assert failure.severity == "fail" and failure.value == sleepy.runtime.min_s
    assert "measured latency" in failure.message and "fastest of 3 runs on cpu" in failure.message
    assert check(sleepy, build({"latency_measured_max": "5s"}, "test")) == []
    assert check(sleepy.to_dict(), build({"latency_measured_max": "5s"}, "test")) == []


def test_a_latency_limit_on_an_unmeasured_profile_fails_loudly():
    plain = profile_model(torch.nn.Linear(8, 4), torch.randn(6, 8))
    for prof in (plain, plain.to_dict()):
        [failure] = check(prof, build({"latency_measured_max": "1s"}, "test"))
        assert failure.severity == "fail" and "was not run" in failure.message


def test_measure_runs_is_checked_where_it_is_written():
    with pytest.raises(GraphBudgetError, match="measure_runs in budgets.toml"):
        build({"measure_runs": "many"}, "budgets.toml")


def test_the_measured_latency_stays_out_of_the_baseline(sleepy):
    from pytest_graphbudget.gate.baseline import entry_from

    assert "latency_measured_s" not in entry_from(sleepy).figures


SLEEPY_MODELS = f"""
import time
import torch
from pytest_graphbudget import ModelCase


class Sleepy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        time.sleep({SLEEP_S})
        return self.fc(x)


def sleepy():
    return ModelCase(Sleepy(), (torch.randn(2, 8),), name="sleepy")
"""


def test_markers_and_budget_files_time_the_model(pytester: pytest.Pytester):
    """One pytest run: the markers' limits and a budget file's, each failing by a margin noise
    cannot cross or passing by one; ``measure_runs`` sets the number of runs."""
    pytester.makepyfile(models=SLEEPY_MODELS)
    pytester.syspathinsert()
    pytester.makepyfile(
        test_timed="""
        import pytest
        from models import sleepy

        @pytest.fixture
        def model():
            return sleepy()

        @pytest.mark.latency_measured_max("5ms")
        @pytest.mark.graph_budget(measure_runs=2)
        def test_too_slow(model):
            pass

        @pytest.mark.latency_measured_max("5s")
        @pytest.mark.graph_budget(measure_runs=2)
        def test_fast_enough(model):
            pass

        @pytest.mark.flops_max("1G")
        def test_not_timed(model):
            pass
        """
    )
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets" / "timed.toml").write_text(
        '[defaults]\nmeasure_runs = 2\n\n[models.slow]\nfactory = "models:sleepy"\n'
        'latency_measured_max = "5ms"\n'
    )
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "--graph-budget-json=out.json"
    )
    result.assert_outcomes(passed=2, failed=2)
    report = {m["id"]: m for m in json.loads((pytester.path / "out.json").read_text())["models"]}
    slow = report["test_timed.py::test_too_slow::model"]["profile"]
    assert slow["runtime"]["runs"] == 2 and slow["totals"]["latency_measured_s"] >= SLEEP_S
    assert "runtime" not in report["test_timed.py::test_not_timed::model"]["profile"]
    toml = report["budgets/timed.toml::slow"]
    assert toml["profile"]["runtime"]["runs"] == 2
    result.stdout.fnmatch_lines(["*measured latency * exceeds latency_measured_max 5ms*"])


def test_cli_profile_measure(tmp_path, capsys):
    from pytest_graphbudget import cli

    path = tmp_path / "tiny.pt"
    torch.save(torch.nn.Sequential(torch.nn.Linear(8, 4)), path)
    common = [str(path), "--trust-pickle", "--input-shape", "3,8", "-q"]
    assert cli.main(["profile", *common, "--measure-runs", "4", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runtime"]["runs"] == 4 and data["runtime"]["batch"] == 3
    assert data["runtime"]["load_s"] > 0
    assert cli.main(["profile", *common, "--measure"]) == 0
    text = capsys.readouterr().out
    assert "Measured on this machine" in text and "(20 runs after 3 warm-up, " in text
    assert cli.main(["profile", *common, "--measure-runs", "2", "--format", "markdown"]) == 0
    assert "### Measured on this machine" in capsys.readouterr().out
    assert cli.main(["profile", *common, "--measure-runs", "2", "--format", "csv"]) == 0
    assert "measured runtime is in the other formats" in capsys.readouterr().err
    assert cli.main(["profile", *common, "--measure", "--meta"]) == 2
    assert "--meta" in capsys.readouterr().err
    sweep = ["profile", "bert-base-uncased", "--seq-len", "8,16", "--measure", "-q"]
    assert cli.main(sweep) == 2  # refused before anything is built
    assert "not a sweep or --decode" in capsys.readouterr().err


def test_a_case_keeps_its_inputs_when_measured():
    case = ModelCase(torch.nn.Linear(8, 4), (torch.randn(5, 8),), name="lin")
    prof = profile_model(case, measure=2)
    assert prof.model == "lin" and prof.runtime.batch == 5


def test_timed_models_are_built_with_real_weights():
    """The zoo builds models over 300M parameters on the meta device unless told: a timed
    run tells it, and an explicit --meta still wins (and is refused with --measure)."""
    import argparse

    from pytest_graphbudget.cli.loading import zoo_options

    def meta(**given) -> bool | None:
        defaults = {"measure": False, "measure_runs": None, "meta": False}
        return zoo_options(argparse.Namespace(**{**defaults, **given}))["meta"]

    assert meta() is None
    assert meta(measure=True) is False and meta(measure=3) is False
    assert meta(meta=True, measure=True) is True


def test_measure_runs_for_the_whole_project():
    from pytest_graphbudget.run import settings

    assert settings.check({"measure_runs": 5}).defaults.measure_runs == 5
    with pytest.raises(settings.SettingsError, match="measure_runs in .tool.graph_budget."):
        settings.check({"measure_runs": 0})


def test_a_compiled_estimate_says_the_measured_latency_ran_eager(tmp_path, capsys):
    """``--execution compiled --measure`` timed eager forwards and set the compiled estimate
    against them without a word (user trial 36): the CLI notes it, the roofline / measured
    row names both, and so does a latency_measured_max verdict and its report line."""
    from pytest_graphbudget import cli
    from pytest_graphbudget.gate.check import ModelResult
    from pytest_graphbudget.reports.common import figure_with_limit
    from pytest_graphbudget.reports.html_graph import runtime_facts

    path = tmp_path / "tiny.pt"
    torch.save(torch.nn.Sequential(torch.nn.Linear(8, 4)), path)
    common = [str(path), "--trust-pickle", "--input-shape", "3,8", "-q", "--measure-runs", "2"]
    assert cli.main(["profile", *common, "--execution", "compiled"]) == 0
    out, err = capsys.readouterr()
    assert err.strip() == (
        "graph-budget: note: --measure times eager forwards (no torch.compile): the measured "
        "latency and roofline / measured set an eager run against the estimate priced compiled"
    )
    assert "(est. latency on generic, compiled / min latency of eager runs, not compiled;" in out
    assert cli.main(["profile", *common, "--format", "markdown"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "(est. latency on generic, eager / min latency; 1 means" in out

    compiled = profile_model(Sleepy(), torch.randn(6, 8), measure=1, execution="compiled")
    data = compiled.to_dict()
    assert (data["execution"], data["runtime"]["execution"]) == ("compiled", "eager")
    budget = build({"latency_measured_max": "5ms", "execution": "compiled"}, "test")
    for prof in (compiled, compiled.to_dict()):
        [failure] = check(prof, budget)
        assert failure.message.startswith("measured latency ")
        assert " (eager runs, not compiled) exceeds latency_measured_max 5ms" in failure.message
    result = ModelResult("t::s", "s", "t::s", "t.py", 1, {"limits": {}}, profile=compiled.to_dict())
    assert figure_with_limit(result, "latency_measured_s").endswith(" (eager runs, not compiled)")
    ratio = dict(runtime_facts(compiled.to_dict()))["roofline ratio"]
    assert ratio.endswith("(estimate / fastest eager run, not compiled)")
    eager = profile_model(Sleepy(), torch.randn(6, 8), measure=1)
    [failure] = check(eager, budget)
    assert "not compiled" not in failure.message
    result = ModelResult("t::s", "s", "t::s", "t.py", 1, {"limits": {}}, profile=eager.to_dict())
    assert "not compiled" not in figure_with_limit(result, "latency_measured_s")
