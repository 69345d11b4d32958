"""No model and no marker left unchecked (issue 9, items 1 and 5).

A test with budget markers must end with every model it names checked, or fail saying why: a
bare ``nn.Module``, a list of ``ModelCase``s, no model at all, a body that raised first, or a
misspelt marker. Each case is a real pytest run (pytester, in-process) whose verdicts are read
from pytest's outcome, the terminal table and the JSON report.

Models are ``nn.Linear(64, w)`` on a ``(4, 64)`` input, counted by hand:
2*4*64*w MAC FLOPs + 4*w bias adds, so w=16 gives 8,256 FLOPs and w=64 gives 33,024.
"""

from __future__ import annotations

import json

import pytest


def flops(width: int) -> int:
    return 2 * 4 * 64 * width + 4 * width


MODELS = """
import torch
from pytest_graphbudget import ModelCase

def linear(width=32, name=None):
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, width), (torch.randn(4, 64),), name=name)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(models=MODELS)
    pytester.syspathinsert()
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    """A budget run with a JSON report; returns the run and the report's models by id."""
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "--graph-budget-json=out.json", *args
    )
    report = json.loads((pytester.path / "out.json").read_text())
    return result, report


def by_id(report: dict) -> dict[str, dict]:
    return {model["id"]: model for model in report["models"]}


def test_a_bare_module_fixture_fails_and_says_how_to_wrap_it(project):
    project.makepyfile(
        test_bare="""
        import pytest, torch
        from models import linear

        @pytest.fixture
        def net():
            return torch.nn.Linear(64, 16)

        @pytest.fixture
        def criterion():
            return torch.nn.MSELoss()

        @pytest.fixture
        def model():
            return linear(16, name="lin16")

        @pytest.mark.flops_max("1G")
        def test_bare(net):
            pass

        @pytest.mark.flops_max("1G")
        def test_with_a_loss_module(model, criterion):
            pass

        def test_no_budget_claimed(net):
            pass
        """
    )
    result, report = run(project, "-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_bare.py::test_bare FAILED*",
            "*'net' is a bare torch.nn.Module (Linear): nothing says what inputs to profile it at; "
            "return a ModelCase from the fixture, e.g. "
            "return ModelCase(model, (torch.randn(1, 3, 224, 224),))*",
        ]
    )
    models = by_id(report)
    bare = models["test_bare.py::test_bare::net"]
    assert bare["passed"] is False and bare["verdict"] == "error"
    assert bare["profile"] is None
    assert "bare torch.nn.Module" in bare["error"]
    # The loss module is not a model under test: the ModelCase beside it is what is checked.
    assert models["test_bare.py::test_with_a_loss_module::model"]["profile"]["totals"][
        "flops"
    ] == flops(16)
    assert not any("criterion" in key or "no_budget" in key for key in models)
    assert report["passed"] is False
    assert "Traceback" not in result.stdout.str()


def test_budget_markers_without_a_model_fail(project):
    project.makepyfile(
        test_nomodel="""
        import pytest, torch
        from models import linear

        @pytest.mark.flops_max("1k")
        @pytest.mark.params_max(100)
        def test_nothing():
            pass

        @pytest.mark.flops_max("1G")
        def test_profile_never_called(graph_profile):
            if False:
                graph_profile(torch.nn.Linear(2, 2), (torch.randn(1, 2),))

        @pytest.mark.flops_max("1G")
        def test_profiled(graph_profile):
            graph_profile(torch.nn.Linear(64, 16), (torch.randn(4, 64),), name="lin")
        """
    )
    result, report = run(project, "-v")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*the test has @pytest.mark.flops_max, @pytest.mark.params_max but no model was "
            "checked: give the test a fixture that returns ModelCase(model, *), or call "
            "graph_profile(model, inputs) in its body*",
        ]
    )
    models = by_id(report)
    for nodeid in ("test_nomodel.py::test_nothing", "test_nomodel.py::test_profile_never_called"):
        assert models[nodeid]["verdict"] == "error"
        assert "no model was checked" in models[nodeid]["error"]
    assert models["test_nomodel.py::test_profiled::lin"]["profile"]["totals"]["flops"] == flops(16)
    result.stdout.fnmatch_lines(["*graph budget*", "*test_nothing*ERROR*"])


def test_every_model_of_a_list_or_dict_is_profiled(project):
    project.makepyfile(
        test_lists="""
        import pytest, torch
        from models import linear

        @pytest.fixture
        def named():
            return [linear(16, name="small"), linear(64, name="big")]

        @pytest.fixture
        def unnamed():
            return (linear(16), (torch.nn.Linear(64, 64), (torch.randn(4, 64),)))

        @pytest.fixture
        def keyed():
            return {"a": linear(16)}

        @pytest.fixture
        def mixed():
            return [linear(16), torch.nn.Linear(64, 16)]

        @pytest.mark.flops_max(20_000)
        def test_named(named):
            pass

        @pytest.mark.flops_max(20_000)
        def test_unnamed(unnamed):
            pass

        @pytest.mark.flops_max(20_000)
        def test_keyed(keyed):
            pass

        @pytest.mark.flops_max(20_000)
        def test_mixed(mixed):
            pass
        """
    )
    result, report = run(project, "-v")
    result.assert_outcomes(passed=1, failed=3)
    models = by_id(report)
    figures = {
        key: (m["profile"] or {}).get("totals", {}).get("flops") for key, m in models.items()
    }
    assert figures == {
        # Named cases are keyed by name, so reordering the list keeps their baseline entries.
        "test_lists.py::test_named::named[small]": flops(16),
        "test_lists.py::test_named::named[big]": flops(64),
        "test_lists.py::test_unnamed::unnamed[0]": flops(16),
        "test_lists.py::test_unnamed::unnamed[1]": flops(64),
        "test_lists.py::test_keyed::keyed[a]": flops(16),
        "test_lists.py::test_mixed::mixed[0]": flops(16),
        "test_lists.py::test_mixed::mixed[1]": None,  # a bare module in a list of models
    }
    assert models["test_lists.py::test_named::named[big]"]["verdict"] == "fail"
    assert models["test_lists.py::test_named::named[small]"]["verdict"] == "pass"
    assert "bare torch.nn.Module (Linear)" in models["test_lists.py::test_mixed::mixed[1]"]["error"]
    result.stdout.fnmatch_lines(["*graph budget failed for big*", "*exceeds flops_max 20k*"])


def test_a_body_that_raises_leaves_its_model_reported_as_not_checked(project):
    project.makepyfile(
        test_raise="""
        import pytest
        from models import linear

        @pytest.fixture
        def model():
            return linear(16, name="lin16")

        @pytest.mark.flops_max("1G")
        def test_raises(model):
            raise ValueError("accuracy dropped\\nsecond line")

        @pytest.mark.flops_max("1G")
        def test_no_model_raises():
            assert 1 == 2

        @pytest.mark.flops_max("1G")
        def test_skipped(model):
            pytest.skip("no GPU here")

        @pytest.mark.xfail(reason="known")
        @pytest.mark.flops_max("1G")
        def test_expected_to_fail(model):
            raise ValueError("known")

        @pytest.mark.flops_max("1G")
        def test_fine(model):
            pass
        """
    )
    result, report = run(project, "-v")
    result.assert_outcomes(passed=1, failed=2, skipped=1, xfailed=1)
    models = by_id(report)
    assert set(models) == {
        "test_raise.py::test_raises::model",
        "test_raise.py::test_no_model_raises",
        "test_raise.py::test_fine::model",
    }
    raised = models["test_raise.py::test_raises::model"]
    assert raised["passed"] is False and raised["verdict"] == "error"
    assert raised["error"] == (
        "not checked: the test failed before its budget was checked (ValueError: accuracy dropped)"
    )
    assert models["test_raise.py::test_no_model_raises"]["error"].startswith(
        "not checked: the test failed before its budget was checked (AssertionError: assert 1 == 2"
    )
    assert models["test_raise.py::test_fine::model"]["verdict"] == "pass"
    assert report["passed"] is False
    result.stdout.fnmatch_lines(["*graph budget*", "test_raises::lin16 * ERROR"])


def test_a_misspelt_marker_is_an_error_for_its_test_alone(project):
    project.makeini(
        """
        [pytest]
        markers =
            slow_max: a marker of the project's own
        """
    )
    project.makepyfile(
        test_typos="""
        import pytest
        from models import linear

        @pytest.fixture
        def model():
            return linear(16)

        @pytest.mark.flop_max("1k")
        def test_flop(model):
            pass

        @pytest.mark.bottlenek(compute_bound_min=0.5)
        def test_bottleneck(model):
            pass

        @pytest.mark.gpu_time_max("1ms")
        def test_unknown_limit(model):
            pass

        @pytest.mark.max_flops("1k")
        def test_reordered(model):
            pass

        @pytest.mark.execution("compiled")
        def test_setting(model):
            pass

        @pytest.mark.compute_bound_min(0.5)
        def test_bottleneck_keyword(model):
            pass

        @pytest.mark.slow_max(3)
        @pytest.mark.slow
        @pytest.mark.flops_max("1G")
        def test_registered_and_unrelated(model):
            pass

        @pytest.mark.flops_max("1G")
        def test_good(model):
            pass
        """
    )
    result, report = run(project, "-v", "-W", "ignore::pytest.PytestUnknownMarkWarning")
    result.assert_outcomes(passed=2, errors=6)
    result.stdout.fnmatch_lines_random(
        [
            "*test_typos.py::test_flop ERROR*",
            "*test_typos.py::test_good PASSED*",
            "*test_typos.py::test_registered_and_unrelated PASSED*",
            "*graph-budget usage error: unknown marker @pytest.mark.flop_max "
            "(did you mean 'flops_max'?): it would check nothing (on test_typos.py::test_flop)",
            "*unknown marker @pytest.mark.bottlenek (did you mean 'bottleneck'?)*",
            "*unknown marker @pytest.mark.gpu_time_max (budget markers: flops_max, macs_max,*",
            # a figure and a bound reordered: a green "ok" once a baseline held its figures
            "*unknown marker @pytest.mark.max_flops (did you mean 'flops_max'?)*",
            # a setting as a marker of its own: the test would run eager, unsaid
            "*unknown marker @pytest.mark.execution (did you mean "
            "@pytest.mark.graph_budget(execution=...)?): it would set nothing*",
            "*unknown marker @pytest.mark.compute_bound_min (did you mean "
            "@pytest.mark.bottleneck(compute_bound_min=...)?)*",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    models = by_id(report)
    assert report["passed"] is False
    assert models["test_typos.py::test_flop"]["verdict"] == "error"
    assert "did you mean 'flops_max'?" in models["test_typos.py::test_flop"]["error"]
    assert models["test_typos.py::test_unknown_limit"]["passed"] is False
    assert models["test_typos.py::test_good::model"]["verdict"] == "pass"
    result.stdout.fnmatch_lines(["*graph budget*", "test_flop * ERROR"])


def test_a_limit_in_every_unit_the_parser_takes_is_read_and_a_huge_integer_is_one_line(project):
    """Issue 22, items 7 and 8: ``memory_max("1PiB")`` (2**50 bytes) is read, and
    ``flops_max(10**400)`` (legal TOML too: an integer beyond any float) errors its own test
    in one line; linear(16) is 8,256 FLOPs, under both good tests' limits."""
    project.makepyfile(
        test_units_in_markers="""
        import pytest
        from models import linear

        @pytest.fixture
        def model():
            return linear(16)

        @pytest.mark.memory_max("1PiB")
        def test_pebibyte(model):
            pass

        @pytest.mark.flops_max(10**400)
        def test_beyond_a_float(model):
            pass

        @pytest.mark.flops_max("10k")
        def test_good(model):
            pass
        """
    )
    result, report = run(project, "-v")
    result.assert_outcomes(passed=2, errors=1)
    output = result.stdout.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output
    result.stdout.fnmatch_lines(
        [
            "*graph-budget usage error: flops_max in @pytest.mark.flops_max on "
            "test_units_in_markers.py::test_beyond_a_float: cannot read 1000000000* (401 digits)*"
        ]
    )
    models = by_id(report)
    pebibyte = models["test_units_in_markers.py::test_pebibyte::model"]
    assert pebibyte["verdict"] == "pass" and pebibyte["budget"]["limits"]["memory_max"] == 2**50
    assert models["test_units_in_markers.py::test_good::model"]["verdict"] == "pass"


def test_execution_is_a_marker_keyword_and_a_toml_key_and_a_bad_one_is_one_line(project):
    """``graph_budget(execution="compiled")`` and a budget table's ``execution`` reach the
    profile (its JSON says which); ``execution="jit"`` is a usage error of its own test."""
    project.makepyfile(
        test_execution_keyword="""
        import pytest
        from models import linear

        @pytest.fixture
        def model():
            return linear(16)

        @pytest.mark.graph_budget(execution="compiled")
        @pytest.mark.latency_max("1s")
        def test_compiled(model):
            pass

        @pytest.mark.latency_max("1s")
        def test_eager(model):
            pass

        @pytest.mark.graph_budget(execution="jit")
        @pytest.mark.latency_max("1s")
        def test_bad(model):
            pass
        """
    )
    project.path.joinpath("budgets.toml").write_text(
        '[models.linear]\nfactory = "models:linear"\nexecution = "compiled"\nflops_max = "1M"\n'
    )
    result, report = run(project, "budgets.toml", "test_execution_keyword.py")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*execution in @pytest.mark.graph_budget on *test_bad "
            "must be 'eager' or 'compiled', got 'jit'"
        ]
    )
    models = by_id(report)
    ran = {
        key.split("::")[1]: m["profile"]["execution"]
        for key, m in models.items()
        if m.get("profile")
    }
    assert ran == {"test_compiled": "compiled", "test_eager": "eager", "linear": "compiled"}


def test_an_xfail_marker_does_not_excuse_a_budget(project, tmp_path):
    """Non-strict xfail: the body passed (an xpass), the budget failed. The table and JSON
    said FAIL while pytest exited 0 and its JUnit said "skipped": pytest counts no report
    carrying ``wasxfail`` as failed. linear(16): 8,256 FLOPs by hand, over a 1k limit."""
    project.makepyfile(
        test_xfail="""
        import pytest
        from models import linear

        @pytest.fixture
        def model():
            return linear(16, name="lin16")

        @pytest.mark.xfail(reason="known")
        @pytest.mark.flops_max("1k")
        def test_over(model):
            pass

        @pytest.mark.xfail(reason="known")
        @pytest.mark.flops_max("1G")
        def test_within(model):
            pass
        """
    )
    result, report = run(project, f"--junitxml={tmp_path / 'junit.xml'}")
    result.assert_outcomes(failed=1, xpassed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    models = by_id(report)
    assert models["test_xfail.py::test_over::model"]["verdict"] == "fail"
    assert models["test_xfail.py::test_within::model"]["verdict"] == "pass"
    junit = (tmp_path / "junit.xml").read_text()
    assert 'failures="1"' in junit and "exceeds flops_max 1k" in junit


def test_two_graph_profile_calls_under_one_label_are_an_error(project):
    """A loop over widths labelled every model ``Linear``: one id, so after an update the
    baseline held one of them, and the other was compared with it (+242% reported as a
    drop). The second call fails in one line; the first model is still checked. The same
    model profiled again on other hardware that counts its figures alike (two cards of one
    compute capability) has the same entry: no error."""
    project.makepyfile(
        test_loop="""
        import pytest, torch

        @pytest.mark.flops_max("1G")
        def test_loop(graph_profile):
            for width in (8, 16):
                graph_profile(torch.nn.Linear(width, width), (torch.randn(1, width),))

        @pytest.mark.flops_max("1G")
        def test_again(graph_profile):
            for hardware in ("h100", "h200"):
                graph_profile(torch.nn.Linear(8, 8), (torch.randn(1, 8),), hardware=hardware)

        @pytest.mark.flops_max("1G")
        def test_named(graph_profile):
            for w in (8, 16):
                graph_profile(torch.nn.Linear(w, w), (torch.randn(1, w),), name=f"w{w}")
        """
    )
    result, report = run(project)
    result.assert_outcomes(passed=2, failed=1)
    models = by_id(report)
    assert models["test_loop.py::test_loop::Linear"]["verdict"] == "pass"
    second = models["test_loop.py::test_loop::Linear[1]"]
    assert second["verdict"] == "error" and "a second model labelled 'Linear'" in second["error"]
    assert "test_loop.py::test_again::Linear[1]" not in models
    assert {"test_loop.py::test_named::w8", "test_loop.py::test_named::w16"} <= set(models)
    result.stdout.fnmatch_lines(["*give each call its own name=*"])


def test_the_markers_name_labels_a_pair_fixture_as_it_does_a_model_case(project):
    """User trial: ``graph_budget(name="bar")`` on a fixture returning ``(module, inputs)``
    was labelled with the fixture's name (``pair``), unlike a ``ModelCase`` fixture."""
    project.makepyfile(
        test_pairs="""
        import pytest, torch

        @pytest.fixture
        def pair():
            return torch.nn.Linear(16, 16), (torch.randn(4, 16),)

        @pytest.mark.graph_budget(name="bar")
        @pytest.mark.flops_max("1G")
        def test_named(pair):
            pass

        @pytest.mark.flops_max("1G")
        def test_unnamed(pair):
            pass
        """
    )
    result, report = run(project)
    result.assert_outcomes(passed=2)
    models = by_id(report)
    assert models["test_pairs.py::test_named::pair"]["label"] == "bar"
    assert models["test_pairs.py::test_unnamed::pair"]["label"] == "pair"


def test_a_test_module_that_cannot_be_collected_is_no_pass(project, tmp_path):
    """An import error hides whatever budgets the module held: pytest exits 2 (1 with
    --continue-on-collection-errors), and the JSON said ``passed: true`` and "within budget".
    The module is an error row in every report."""
    project.makepyfile(
        test_fine="""
        import pytest
        from models import linear

        @pytest.fixture
        def model():
            return linear(16, name="lin16")

        @pytest.mark.flops_max("1G")
        def test_fits(model):
            pass
        """,
        test_broken="import no_such_module_here\n",
    )
    result, report = run(project)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert report["passed"] is False
    broken = by_id(report)["test_broken.py"]
    assert broken["verdict"] == "error"
    assert broken["error"] == (
        "not checked: the test file could not be collected "
        "(ModuleNotFoundError: No module named 'no_such_module_here')"
    )
    junit = tmp_path / "junit.xml"
    args = ("--continue-on-collection-errors", f"--graph-budget-junit={junit}")
    result, report = run(project, *args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert report["passed"] is False and by_id(report)["test_fine.py::test_fits::model"]["passed"]
    assert 'errors="1"' in junit.read_text()


def test_a_body_that_fails_after_graph_profile_leaves_no_green_of_nothing_checked(project):
    """The model profiled, then ``assert False``: a budget with no limit and no baseline
    entry read "1 model within budget" (even under strict), as the failing body skipped the
    end of the test where an unchecked model is said."""
    project.makepyfile(
        test_after="""
        import pytest, torch

        @pytest.mark.graph_budget(name="nolimit")
        def test_then_fails(graph_profile):
            graph_profile(torch.nn.Linear(8, 8), (torch.randn(1, 8),))
            assert False
        """
    )
    result, report = run(project)
    result.assert_outcomes(failed=1)
    model = by_id(report)["test_after.py::test_then_fails::nolimit"]
    assert model["verdict"] == "unchecked" and "nothing checked yet" in str(model["findings"])
    assert "within budget" not in report["title"]
    result, report = run(project, "--graph-budget-strict")
    assert by_id(report)["test_after.py::test_then_fails::nolimit"]["verdict"] == "error"


def test_a_run_that_checks_no_model_says_so_everywhere(project, monkeypatch):
    """Tests ran with --graph-budget, none with a budget (the budget files in a folder pytest
    was not given): the run had printed nothing of ours, written no job summary and said
    "passed": true, a green gate that gated nothing."""
    project.makepyfile(test_plain="def test_plain():\n    assert True\n")
    summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result, report = run(project)
    assert result.ret == 0  # a shard may hold no budgeted test: said, not failed
    result.stdout.fnmatch_lines(
        [
            "*= graph budget =*",
            "warning: no model was checked: no test that ran has a budget marker or uses "
            "graph_profile, and no budget file was collected*",
            "::warning title=Graph budget%3A no model::no model was checked*",
        ]
    )
    assert report["passed"] is None and report["title"] == "no model was checked"
    assert "### ℹ️ Graph budget: no model was checked" in summary.read_text()
    strict, _ = run(project, "--graph-budget-strict")
    assert strict.ret == 1


def test_a_memory_max_on_a_gpu_profile_checks_what_that_gpus_allocator_would_hold(project):
    """On a CPU runner, ``memory_max`` on ``h100`` had been checked against the tensors' own
    bytes (432 B for this layer), and passed; on the card, cuBLAS's workspace alone is 33
    MiB. The same layer on ``generic`` is still counted as on the host."""
    project.makepyfile(
        test_gpu_memory="""
        import pytest, torch

        @pytest.mark.memory_max("1MB")
        @pytest.mark.graph_budget(hardware="h100")
        def test_on_the_card(graph_profile):
            graph_profile(torch.nn.Linear(16, 4), torch.randn(2, 16), name="card")

        @pytest.mark.memory_max("1MB")
        def test_on_the_host(graph_profile):
            graph_profile(torch.nn.Linear(16, 4), torch.randn(2, 16), name="host")
        """
    )
    result, report = run(project)
    result.assert_outcomes(passed=1, failed=1)
    models = by_id(report)
    card = models["test_gpu_memory.py::test_on_the_card::card"]
    # weights 256 + 16 B, input 128 B, output 32 B: four 512 B blocks; cuBLAS 32 MiB, and
    # cuBLASLt's 1 MiB for a layer with a bias (tests/engine/test_allocator.py counts why)
    assert card["profile"]["totals"]["peak_memory_bytes"] == 4 * 512 + 33 * 2**20
    assert card["profile"]["cuda_memory"]["compute_capability"] == "9.0"
    host = models["test_gpu_memory.py::test_on_the_host::host"]
    assert host["verdict"] == "pass" and "cuda_memory" not in host["profile"]
    assert host["profile"]["totals"]["peak_memory_bytes"] == 256 + 16 + 128 + 32
    result.stdout.fnmatch_lines(
        [
            "*peak memory 34.6MB (as a compute capability 9.0 GPU's CUDA caching allocator "
            "holds it, cuBLAS workspace 34.6MB) exceeds memory_max 1MB*"
        ]
    )


def test_a_gpu_training_steps_memory_max_says_its_peak_is_the_hosts(project):
    """A training step priced for a GPU keeps the host's peak (the allocator's replay is held
    to a GPU on forwards only). Its failed memory_max had said nothing of it, as if the step
    had been counted as the card holds it: the note is now in the message."""
    project.makepyfile(
        test_gpu_step="""
        import pytest, torch

        @pytest.mark.memory_max("200B")
        @pytest.mark.graph_budget(hardware="h100", mode="train")
        def test_step(graph_profile):
            graph_profile(torch.nn.Linear(16, 4), torch.randn(2, 16), name="step")
        """
    )
    result, _ = run(project)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*peak memory * (counted as on the host, not as h100's CUDA caching allocator "
            "would hold it: its rules and workspaces are applied to forwards only) exceeds "
            "memory_max 200B*"
        ]
    )
