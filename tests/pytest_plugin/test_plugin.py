"""The pytest plugin, driven through real pytest runs (``pytester``).

Models here are tiny and counted by hand, so each expected figure is visible in the test:
``nn.Linear(64, 32)`` on a ``(4, 64)`` input does 4*64*32 = 8,192 MACs, and
2*8,192 + 4*32 (bias) = 16,512 FLOPs, with 64*32 + 32 = 2,080 parameters.
"""

from __future__ import annotations

import pytest

LINEAR_FLOPS = 2 * 4 * 64 * 32 + 4 * 32
LINEAR_PARAMS = 64 * 32 + 32

MODELS = """
import pytest, torch
from pytest_graphbudget import ModelCase

def linear(width=32):
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, width), (torch.randn(4, 64),), name=f"linear{width}")
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(models=MODELS)
    pytester.syspathinsert()
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--graph-budget", *args)


def outcomes(result: pytest.RunResult, *lines: str, **counts: int) -> None:
    """The run's outcomes are ``counts``, and its output has ``lines`` in that order."""
    result.assert_outcomes(**counts)
    result.stdout.fnmatch_lines(list(lines))


def test_each_marker_passes_at_and_fails_below_the_figure(project):
    project.makepyfile(
        test_markers=f"""
        import pytest
        from models import linear

        @pytest.fixture
        def model():
            return linear()

        @pytest.mark.flops_max({LINEAR_FLOPS})
        @pytest.mark.macs_max("8.192k")
        @pytest.mark.params_max({LINEAR_PARAMS})
        @pytest.mark.weights_max("8320B")
        @pytest.mark.memory_max("1MB")
        @pytest.mark.traffic_max("1MB")
        @pytest.mark.latency_max("1ms")
        @pytest.mark.intensity_min(0.1)
        def test_fits(model):
            pass

        @pytest.mark.flops_max({LINEAR_FLOPS - 1})
        def test_flops(model):
            pass

        @pytest.mark.macs_max("8k")
        def test_macs(model):
            pass

        @pytest.mark.params_max("2k")
        def test_params(model):
            pass

        @pytest.mark.weights_max("8KB")
        def test_weights(model):
            pass

        @pytest.mark.memory_max("1kB")
        def test_memory(model):
            pass

        @pytest.mark.traffic_max(100)
        def test_traffic(model):
            pass

        @pytest.mark.latency_max("1ns")
        def test_latency(model):
            pass

        @pytest.mark.intensity_min(1000)
        def test_intensity(model):
            pass

        @pytest.mark.bottleneck(compute_bound_min=1.0, by="flops")
        def test_bottleneck(model):
            pass
        """
    )
    result = run(project)
    result.assert_outcomes(passed=1, failed=9)
    result.stdout.fnmatch_lines(
        [
            "*FLOPs 16,512 exceeds flops_max 16,511 (0.0061% over); biggest subgraphs by FLOPs: "
            "<root> (linear) 16.5k",
            "*MACs 8.19k exceeds macs_max 8k (2.4% over)*",
            "*params 2.08k exceeds params_max 2k*",
            "*weights 8.32kB exceeds weights_max 8kB*",
            "*peak memory*exceeds memory_max 1kB*",
            "*estimated latency*exceeds latency_max 1ns*",
            "*arithmetic intensity 1.68 FLOPs/B is below intensity_min 1k FLOPs/B (99.8% under)*",
            "*compute-bound share by flops 0.0% is below compute_bound_min 100.0%*",
        ]
    )


def test_disabled_plugin_registers_markers_and_checks_nothing(project):
    project.makepyfile(
        test_off="""
        import pytest

        @pytest.mark.flops_max("1")
        @pytest.mark.bottleneck(compute_bound_min=0.5)
        @pytest.mark.graph_budget(hardware="a100", tolerance="2%")
        def test_untouched():
            pass
        """
    )
    result = project.runpytest("-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(passed=1)
    assert "graph budget" not in result.stdout.str()
    markers = project.runpytest("--markers").stdout.str()
    for name in ("flops_max", "memory_max", "intensity_min", "bottleneck", "graph_budget"):
        assert f"@pytest.mark.{name}" in markers


def test_disabled_plugin_does_not_import_torch(pytester: pytest.Pytester):
    pytester.makeconftest(
        """
        import sys

        def pytest_sessionfinish(session):
            assert "torch" not in sys.modules, "the plugin imported torch"
        """
    )
    pytester.makepyfile(test_plain="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.ret == 0


def test_a_warm_run_of_zoo_budgets_imports_no_torch(pytester: pytest.Pytester):
    """Budgets of zoo models in TOML are cached by name: a run the cache answers neither
    builds them nor imports torch. Their keys, the settings and the reports had imported it:
    3 s of a warm run of seven budgets that took 3.8 s (``benchmarks/plugin.py``)."""
    pytester.makeconftest(
        """
        import sys

        def pytest_unconfigure(config):  # after the reports are written
            print("torch imported:", "torch" in sys.modules)
        """
    )
    pytester.mkdir("budgets")
    # torchvision's published parameter count of mobilenet_v3_small: 2,542,856
    budget = '[models.mobilenet_v3_small]\nparams_max = "2.55M"\n'
    (pytester.path / "budgets" / "zoo.toml").write_text(budget)
    for imported in (True, False):  # cold, then warm
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "--graph-budget", "-s", "--graph-budget-json=out.json"
        )
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines([f"*torch imported: {imported}*"])
    import json

    import torch

    report = json.loads((pytester.path / "out.json").read_text())
    assert report["environment"]["torch"] == torch.__version__  # as an imported torch says


def test_fixture_forms_scopes_params_and_several_models(project):
    project.makepyfile(
        test_fixtures="""
        import pytest, torch
        from models import linear

        @pytest.fixture(scope="session")
        def shared():
            return linear()

        @pytest.fixture(params=[16, 64])
        def sized(request):
            return linear(request.param)

        @pytest.fixture
        def pair():
            return (torch.nn.Linear(64, 8), (torch.randn(4, 64),))

        @pytest.mark.flops_max(20_000)
        def test_session(shared):
            pass

        @pytest.mark.flops_max(20_000)
        def test_params(sized):
            pass

        @pytest.mark.flops_max(20_000)
        def test_two_models(shared, pair):
            pass
        """
    )
    result = run(project, "-v")
    # linear16: 2*4*64*16 + 4*16 = 8,256 passes; linear64: 33,024 fails.
    outcomes(
        result,
        "*test_params?64? FAILED*",
        "*graph budget failed for linear64 (test_fixtures.py::test_params?64?::sized)*",
        "*FLOPs 33.0k exceeds flops_max 20k*",
        passed=3,
        failed=1,
    )
    # Both models of test_two_models are profiled and named in the summary.
    result.stdout.fnmatch_lines(["*graph budget*", "*linear32*", "*pair*"])


def test_a_test_is_judged_on_the_models_it_receives_and_the_markers_it_ends_up_with(project):
    """User trial: a model fetched with ``request.getfixturevalue`` went unchecked (silently
    green), a marker a fixture added at set-up was never read, and a model another fixture
    used (a backbone) or an autouse fixture loaded (a teacher) was judged against the test's
    markers. linear16 does 8,256 FLOPs and linear64 33,024: only the fetched one and the one
    under the fixture's marker are over 20,000."""
    project.makepyfile(
        test_received="""
        import pytest
        from models import linear

        @pytest.fixture
        def wide():
            return linear(64)

        @pytest.mark.flops_max(20_000)
        def test_fetched(request):
            request.getfixturevalue("wide")

        @pytest.fixture
        def backbone():
            return linear(64)

        @pytest.fixture
        def head(backbone):
            return linear(16)

        @pytest.mark.flops_max(20_000)
        def test_head(head):
            pass

        class TestStudent:
            @pytest.fixture(autouse=True)
            def teacher(self):
                return linear(64)

            @pytest.mark.flops_max(20_000)
            def test_student(self, head):
                pass

        @pytest.fixture
        def budgeted(request):
            request.node.add_marker(pytest.mark.flops_max(20_000))
            return linear(64)

        def test_marked_by_its_fixture(budgeted):
            pass
        """
    )
    result = run(project, "-v")
    outcomes(
        result,
        "*test_fetched FAILED*",
        "*test_head PASSED*",
        "*test_student PASSED*",
        "*test_marked_by_its_fixture FAILED*",
        "*graph budget failed for linear64 (test_received.py::test_fetched::wide)*",
        passed=2,
        failed=2,
    )
    assert "backbone" not in result.stdout.str() and "teacher" not in result.stdout.str()


def test_graph_profile_fixture_profiles_and_is_checked(project):
    project.makepyfile(
        test_explicit=f"""
        import pytest, torch

        def test_returns_profile(graph_profile):
            prof = graph_profile(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name="lin")
            assert prof.flops == {LINEAR_FLOPS}
            assert prof.params == {LINEAR_PARAMS}

        @pytest.mark.flops_max(1000)
        def test_checked(graph_profile):
            graph_profile(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name="lin")
        """
    )
    result = run(project)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*graph budget failed for lin*", "*exceeds flops_max 1k*"])


ZOO_BY_NAME = """
import pytest, torch
from torchvision.models import MobileNet_V3_Small_Weights

OPS = MobileNet_V3_Small_Weights.DEFAULT.meta["_ops"]  # GMACs at 1x3x224x224, 3 decimals

def test_zoo(graph_profile):
    assert round(graph_profile("mobilenet_v3_small").macs / 1e9, 3) == OPS

def test_batch(graph_profile):
    assert round(graph_profile("mobilenet_v3_small", batch=2).macs / 2e9, 3) == OPS

@pytest.mark.parametrize("batch", [2, 3])
def test_inputs(graph_profile, batch):  # not the zoo's inputs, nor another's cached profile
    prof = graph_profile("mobilenet_v3_small", torch.zeros(batch, 3, 224, 224))
    assert round(prof.macs / batch / 1e9, 3) == OPS

def test_misplaced(graph_profile):
    graph_profile(torch.nn.Linear(2, 2), torch.zeros(1, 2), batch=2)
"""


@pytest.mark.parametrize("gate", [True, False])
def test_graph_profile_takes_a_zoo_name_with_the_zoos_options(project, gate):
    # models.md: "Anywhere pytest-graphbudget takes a model, a name works too"; the fixture
    # had wrapped the name as a module, "expected a torch.nn.Module, got str".
    pytest.importorskip("torchvision")  # the zoo names are torchvision's
    project.makepyfile(test_named=ZOO_BY_NAME)
    args = ("-p", "no:cacheprovider", "--graph-budget") if gate else ("-p", "no:cacheprovider")
    result = project.runpytest(*args)
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["*options batch only apply to zoo model names*"])
    if gate:  # each labelled by its name, in its own test
        result.stdout.fnmatch_lines(["*test_zoo::mobilenet_v3_small*"])


def test_bad_marker_value_is_a_usage_error_that_spares_other_tests(project):
    project.makepyfile(
        test_bad="""
        import pytest
        from models import linear

        @pytest.fixture
        def model():
            return linear()

        @pytest.mark.memory_max("lots")
        def test_bad(model):
            pass

        @pytest.mark.bottleneck(compute_bound=0.5)
        def test_bad_keyword(model):
            pass

        @pytest.mark.flops_max("1G")
        def test_good(model):
            pass
        """
    )
    result = run(project)
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*memory_max in @pytest.mark.memory_max on test_bad.py::test_bad: cannot read 'lots'; "
            'expected a number of bytes or a string: 5e8, "500MB", "0.5GiB"*',
            "*@pytest.mark.bottleneck on test_bad.py::test_bad_keyword: unknown keyword "
            "'compute_bound' (did you mean 'compute_bound_min'?)*",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_a_marker_given_two_limits_shows_an_example_in_its_own_unit(project):
    """``latency_max("1ms", hardware=...)`` was answered ``e.g. latency_max('22G')``: a count
    where a time goes."""
    project.makepyfile(
        test_two="""
        import pytest
        from models import linear

        @pytest.fixture
        def model():
            return linear()

        @pytest.mark.latency_max("1ms", hardware="t4")
        def test_latency(model):
            pass

        @pytest.mark.memory_max("1MB", "2MB")
        def test_memory(model):
            pass
        """
    )
    result = run(project)
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.latency_max on test_two.py::test_latency: takes one limit, "
            "e.g. latency_max('3ms'); hardware= goes in @pytest.mark.graph_budget(hardware=...)",
            "*@pytest.mark.memory_max on test_two.py::test_memory: takes one limit, "
            "e.g. memory_max('500MB')",
        ]
    )


def test_an_estimated_latency_names_its_hardware_and_execution_everywhere(project):
    """The failure said ``estimated latency 80.0us exceeds latency_max 1us`` and the reports
    ``est. latency 70.0us/1ms``, naming neither the profile nor the execution priced."""
    project.makepyfile(
        test_priced="""
        import pytest
        from models import linear

        @pytest.fixture
        def model():
            return linear()

        @pytest.mark.latency_max("1ns")
        @pytest.mark.graph_budget(hardware="t4", execution="compiled")
        def test_tight(model):
            pass

        @pytest.mark.latency_max("1s")
        @pytest.mark.graph_budget(hardware="a100-80gb")
        def test_roomy(model):
            pass
        """
    )
    result = run(project, "--graph-budget-markdown=r.md", "--graph-budget-junit=r.xml")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*estimated latency * on t4, compiled exceeds latency_max 1ns (*"])
    result.stdout.fnmatch_lines(["*est. latency */1ns on t4, compiled"])
    result.stdout.fnmatch_lines(["*est. latency */1s on a100, eager"])
    markdown = project.path.joinpath("r.md").read_text()
    assert "/1ns on t4, compiled |" in markdown and "/1s on a100, eager |" in markdown
    junit = project.path.joinpath("r.xml").read_text()
    assert "est. latency: " in junit and " / limit 1s on a100, eager" in junit


@pytest.mark.parametrize("name", ["", "h10"])
def test_an_unknown_or_empty_graph_budget_hardware_is_a_usage_error(project, name):
    """``--graph-budget-hardware ""`` fell back to each budget's hardware without a word, and
    ``h10`` failed every model on its own: both are one usage error before any model."""
    project.mkdir("budgets")
    project.path.joinpath("budgets", "tiny.toml").write_text(BUDGET)
    result = run(project, "budgets/", f"--graph-budget-hardware={name}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --graph-budget-hardware: unknown hardware {name!r}*; known profiles: a100, *"]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("report", ["json", "junit", "markdown", "html", "history"])
def test_an_empty_report_path_is_a_usage_error(project, report):
    """``--graph-budget-json="$OUT"`` with ``OUT`` unset: the run wrote no report and exited
    0 without a word, and CI's later step read a stale or missing file."""
    project.mkdir("budgets")
    project.path.joinpath("budgets", "tiny.toml").write_text(BUDGET)
    result = run(project, "budgets/", f"--graph-budget-{report}=")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --graph-budget-{report}: the path is empty (*"])


def test_a_model_whose_forward_raises_fails_alone(project):
    project.makepyfile(
        test_raise="""
        import pytest, torch
        from pytest_graphbudget import ModelCase
        from models import linear

        class Broken(torch.nn.Module):
            def forward(self, x):
                raise RuntimeError("shape mismatch in my model")

        @pytest.fixture
        def broken():
            return ModelCase(Broken(), (torch.randn(2),), name="broken")

        @pytest.mark.flops_max("1G")
        def test_broken(broken):
            pass

        @pytest.fixture
        def fine():
            return linear()

        @pytest.mark.flops_max("1G")
        def test_fine(fine):
            pass
        """
    )
    result = run(project)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            # an error, not a failure of the budget: as the table's ERROR says
            "*graph budget could not check broken*",
            "*the model's forward raised RuntimeError: shape mismatch in my model*",
        ]
    )


BUDGET = """
[defaults]
tolerance = "2%"

[models.small]
factory = "models:linear"
flops_max = "20k"
params_max = 2080

[models.tight]
factory = "models:linear"
flops_max = 16000
"""


def test_toml_budgets_are_items_named_after_file_and_key(project):
    project.mkdir("budgets")
    project.path.joinpath("budgets", "tiny.toml").write_text(BUDGET)
    result = run(project, "budgets/", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*budgets/tiny.toml::small PASSED*",
            "*budgets/tiny.toml::tight FAILED*",
            "*graph budget failed for tight (budgets/tiny.toml::tight)*",
            "*FLOPs 16.5k exceeds flops_max 16k (3.2% over)*",
        ]
    )


def test_toml_errors_name_file_line_column_and_closest_key(project):
    project.mkdir("budgets")
    project.path.joinpath("budgets", "broken.toml").write_text('[models.a]\nflops_max = "1G\n')
    project.path.joinpath("budgets", "typo.toml").write_text(
        '[models.a]\nfactory = "models:linear"\nflop_max = "1G"\n'
        '[models.b]\nfactory = "models:linear"\nflops_max = "1G"\n'
    )
    result = run(project, "budgets/")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*budgets/broken.toml:2:*: *",
            "*unknown budget key 'flop_max' in budgets/typo.toml::a (did you mean 'flops_max'?)*",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_project_defaults_and_hardware_profiles_from_pyproject(project):
    project.makepyprojecttoml(
        '[tool.graph_budget]\nhardware = "a100"\n'
        "[tool.graph_budget.hardware_profiles.edge]\n"
        "peak_tflops = {float32 = 2.0}\nbandwidth_gbs = 50\n"
    )
    project.makepyfile(
        test_hw="""
        import pytest, torch

        def test_default(graph_profile):
            prof = graph_profile(torch.nn.Linear(4, 4), (torch.randn(1, 4),))
            assert prof.hardware.name == "a100"

        @pytest.mark.graph_budget(hardware="edge")
        def test_custom(graph_profile):
            prof = graph_profile(torch.nn.Linear(4, 4), (torch.randn(1, 4),))
            hardware = prof.to_dict()["hardware"]
            hardware.pop("pricing")
            assert hardware == {
                "name": "edge",
                "ridge_point": 2e12 / 50e9,
                "peak_flops_per_s": 2e12,
                "bandwidth_bytes_per_s": 50e9,
            }

        @pytest.mark.graph_budget(hardware="edgy")
        def test_unknown(graph_profile):
            pass
        """
    )
    result = run(project)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*unknown hardware 'edgy' (did you mean 'edge'?); known profiles: a100, *, edge, *"]
    )


def test_graph_profile_without_the_gate_prices_on_its_projects_profiles(project):
    """Run from a folder whose own pyproject.toml has a profile of the same name, the fixture
    (gate off) priced on that one, where the gate priced on the project pytest runs."""
    card = "peak_tflops = {{ float32 = {} }}\nbandwidth_gbs = 100\n"
    project.makepyprojecttoml("[tool.graph_budget.hardware_profiles.plain]\n" + card.format(2))
    inner = project.mkdir("inner")
    (inner / "pyproject.toml").write_text(
        "[tool.pytest.ini_options]\n[tool.graph_budget.hardware_profiles.plain]\n" + card.format(20)
    )
    (inner / "test_gp.py").write_text(
        "import torch\n\n"
        "def test_gp(graph_profile):\n"
        "    prof = graph_profile(torch.nn.Linear(4, 4), (torch.ones(1, 4),), hardware='plain')\n"
        "    assert prof.hardware.peak('float32') == 20e12\n"
    )
    for gate in ((), ("--graph-budget",)):
        project.runpytest("-p", "no:cacheprovider", *gate, "inner/test_gp.py").assert_outcomes(
            passed=1
        )
    # the project's profiles cannot be read: the test fails in one line, no traceback
    with (inner / "pyproject.toml").open("a") as pyproject:
        pyproject.write("[tool.graph_budget.hardware_profiles.PLAIN]\n" + card.format(3))
    result = project.runpytest("-p", "no:cacheprovider", "inner/test_gp.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*'plain' and 'PLAIN': names are matched in any case*"])
    assert "Traceback" not in result.stdout.str() and "state.py" not in result.stdout.str()


def test_baseline_update_regression_notice_and_stale_entries(project):
    project.mkdir("budgets")
    budget = project.path / "budgets" / "tiny.toml"
    budget.write_text('[models.net]\nfactory = "models:linear"\nflops_max = "1M"\n')
    result = run(project, "budgets/", "--graph-budget-update")
    result.assert_outcomes(passed=1)
    baseline = (project.path / "budgets" / "baseline.toml").read_text()
    assert '[models."budgets/tiny.toml::net"]' in baseline
    assert f"flops = {LINEAR_FLOPS}" in baseline
    assert f'"<root>" = {LINEAR_FLOPS}' in baseline

    # The model grows from 32 to 48 outputs: under its maximum, but +50% over the baseline.
    project.makepyfile(models=MODELS.replace("width=32", "width=48"))
    result = run(project, "budgets/")
    result.assert_outcomes(failed=1)
    grown = 2 * 4 * 64 * 48 + 4 * 48
    result.stdout.fnmatch_lines(
        [
            f"*FLOPs regressed +{100 * (grown / LINEAR_FLOPS - 1):.1f}% (16.5k -> 24.8k, "
            "tolerance 1.0%); grew most: <root> +8.26k*",
        ]
    )

    # It shrinks instead: a notice to tighten the baseline, not a failure.
    project.makepyfile(models=MODELS.replace("width=32", "width=16"))
    result = run(project, "budgets/")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*notice: net: FLOPs dropped -50.0% (16.5k -> 8.26k, tolerance 1.0%)*"]
    )

    # The model is removed from the budget file: its baseline entry is reported as stale.
    budget.write_text('[models.other]\nfactory = "models:linear"\nflops_max = "1M"\n')
    result = run(project, "budgets/")
    result.stdout.fnmatch_lines(["*stale baseline entry*budgets/tiny.toml::net*"])
    run(project, "budgets/", "--graph-budget-update")
    assert "tiny.toml::net" not in (project.path / "budgets" / "baseline.toml").read_text()


def test_a_run_of_some_tests_by_node_id_or_lf_keeps_the_other_tests_entries(project):
    """A model a ``path::name`` argument or ``--lf`` left out was not removed: its baseline
    entry is not stale, and an update keeps it (``--graph-budget-update --lf``, accepting
    the one failing model, had deleted every other entry of its file)."""
    project.mkdir("budgets")
    budget = project.path / "budgets" / "tiny.toml"
    budget.write_text(
        '[models.net]\nfactory = "models:linear"\nflops_max = "1M"\n'
        '[models.other]\nfactory = "models:linear"\nflops_max = "1M"\n'
    )
    project.makepyfile(
        test_two="""
        import pytest
        from models import linear

        @pytest.fixture
        def small():
            return linear()

        @pytest.fixture
        def wide():
            return linear(48)

        @pytest.mark.flops_max("1M")
        def test_a(small):
            pass

        @pytest.mark.flops_max("100k")
        def test_b(wide):
            pass
        """
    )
    baseline = project.path / "budgets" / "baseline.toml"
    gate = ("--graph-budget", "--graph-budget-update")
    project.runpytest(*gate, "budgets/", "test_two.py").assert_outcomes(passed=4)
    entries = baseline.read_text()
    for one in ("budgets/tiny.toml::net", "budgets/tiny.toml::other", "test_two.py::test_b"):
        assert one in entries
    for only in ("budgets/tiny.toml::net", "test_two.py::test_a"):
        result = project.runpytest("--graph-budget", only)
        result.assert_outcomes(passed=1)
        assert "stale" not in result.stdout.str()
        project.runpytest(*gate, only).assert_outcomes(passed=1)
        assert baseline.read_text() == entries
    # -k under xdist: the controller collects nothing, the workers deselected test_b
    project.runpytest(*gate, "-n", "2", "-k", "test_a", "test_two.py").assert_outcomes(passed=1)
    assert baseline.read_text() == entries
    # test_b fails its limit; --lf runs it alone, and its update keeps test_a's entry
    project.makepyfile(test_two=(project.path / "test_two.py").read_text().replace("(48)", "(480)"))
    project.runpytest("--graph-budget", "test_two.py").assert_outcomes(passed=1, failed=1)
    project.runpytest(*gate, "--lf", "test_two.py").assert_outcomes(failed=1, deselected=1)
    assert "test_two.py::test_a" in baseline.read_text()


def test_a_malformed_baseline_is_reported_and_rewritten_by_update(project):
    project.mkdir("budgets")
    project.path.joinpath("budgets", "tiny.toml").write_text(
        '[models.net]\nfactory = "models:linear"\nflops_max = "1M"\n'
    )
    baseline = project.path / "budgets" / "baseline.toml"
    baseline.write_text("[models.\n")
    result = run(project, "budgets/")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*baseline.toml:1: malformed baseline*--graph-budget-update*"])
    assert "Traceback" not in result.stdout.str()
    run(project, "budgets/", "--graph-budget-update").assert_outcomes(passed=1)
    assert f"flops = {LINEAR_FLOPS}" in baseline.read_text()


def test_cache_is_reused_and_a_corrupt_entry_is_rebuilt(project):
    project.makepyfile(
        test_cached="""
        import pytest
        from models import linear

        @pytest.fixture
        def model():
            return linear()

        @pytest.mark.flops_max("1M")
        def test_model(model):
            pass
        """
    )
    run(project).assert_outcomes(passed=1)
    entries = list((project.path / ".graph_budget_cache").rglob("*.json"))
    assert len(entries) == 1
    first = entries[0].stat().st_mtime_ns
    run(project).assert_outcomes(passed=1)
    assert entries[0].stat().st_mtime_ns == first  # a hit: not rewritten
    entries[0].write_text("{not json")
    run(project).assert_outcomes(passed=1)
    assert entries[0].read_text().startswith("{") and '"totals"' in entries[0].read_text()
    # A changed model (another width) is a different key: a second entry.
    project.makepyfile(models=MODELS.replace("width=32", "width=33"))
    run(project).assert_outcomes(passed=1)
    assert len(list((project.path / ".graph_budget_cache").rglob("*.json"))) == 2
    run(project, "--graph-budget-cache-clear", "--graph-budget-no-cache").assert_outcomes(passed=1)
    assert not (project.path / ".graph_budget_cache").exists()


def test_strict_fails_on_ops_without_a_formula(project):
    project.makepyfile(
        test_strict="""
        import pytest, torch
        from pytest_graphbudget import ModelCase

        @torch.library.custom_op("gbstrict::odd", mutates_args=(), schema="(Tensor x) -> Tensor")
        def odd_op(x):
            return x * 2

        @odd_op.register_fake
        def _(x):
            return torch.empty_like(x)

        class Odd(torch.nn.Module):
            def forward(self, x):
                return odd_op(x) + x

        @pytest.fixture
        def odd():
            return ModelCase(Odd(), (torch.randn(8),), name="odd")

        @pytest.mark.flops_max("1G")
        def test_odd(odd):
            pass
        """
    )
    run(project).assert_outcomes(passed=1)
    result = run(project, "--graph-budget-strict")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ops without a cost formula: gbstrict.odd x1*"])


GRAPH_PROFILE_EXECUTION = """
import pytest, torch

def conv_relu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    return model, (torch.randn(1, 3, 16, 16),)

def test_compiled(graph_profile):
    eager = graph_profile(*conv_relu(), hardware="h100", name="eager")
    fused = graph_profile(*conv_relu(), hardware="h100", execution="compiled", name="fused")
    assert (eager.execution, fused.execution) == ("eager", "compiled")
    assert fused.to_dict()["execution"] == "compiled"
    assert fused.est_latency_s < eager.est_latency_s  # one fused kernel, not two launches

@pytest.mark.graph_budget(execution="compiled")
def test_over_the_marker(graph_profile):
    assert graph_profile(*conv_relu()).execution == "compiled"
    assert graph_profile(*conv_relu(), execution="eager").execution == "eager"

def test_misspelt(graph_profile):
    graph_profile(*conv_relu(), execution="compield")
"""


@pytest.mark.parametrize("gate", [True, False], ids=["gate", "no-gate"])
def test_graph_profile_takes_execution(project, gate):
    """``graph_profile(..., execution=...)`` prices the estimate as the keyword says, over
    the marker's, with or without ``--graph-budget``; a misspelt value is one line."""
    project.makepyfile(test_execution=GRAPH_PROFILE_EXECUTION)
    args = ("-p", "no:cacheprovider", "test_execution.py")
    if gate:
        result = run(project, "test_execution.py")
    else:
        result = project.runpytest(*args, "-k", "not marker")
    result.assert_outcomes(passed=2 if gate else 1, failed=1)
    result.stdout.fnmatch_lines(["*execution* must be 'eager' or 'compiled', got 'compield'*"])
    assert "unexpected keyword" not in result.stdout.str()


def test_a_graph_budget_marker_keeps_the_keys_its_module_and_class_give(project):
    """A test's ``graph_budget(execution="compiled")`` dropped its module's
    ``graph_budget(hardware="h100")`` and its class's ``tolerance``: it was priced on the
    project's hardware, silently. A closer marker overrides the keys it gives, no others."""
    import json

    project.makepyfile(
        test_levels="""
        import pytest
        from models import linear

        pytestmark = pytest.mark.graph_budget(hardware="h100")

        @pytest.fixture
        def net():
            return linear()

        @pytest.mark.graph_budget(tolerance="5%")
        class TestC:
            @pytest.mark.latency_max("1s")
            @pytest.mark.graph_budget(execution="compiled")
            def test_in_class(self, net): ...

            @pytest.mark.latency_max("1s")
            @pytest.mark.graph_budget(hardware="a100", tolerance="2%")
            def test_own(self, net): ...
        """
    )
    result = run(project, "--graph-budget-json=out.json")
    result.assert_outcomes(passed=2)
    models = json.loads((project.path / "out.json").read_text())["models"]
    got = {
        m["nodeid"].split("::")[-1]: (
            m["budget"]["hardware"],
            m["budget"]["execution"],
            m["budget"]["tolerance"],
        )
        for m in models
    }
    assert got == {"test_in_class": ("h100", "compiled", 0.05), "test_own": ("a100", "eager", 0.02)}


def test_graph_profile_s_hardware_is_the_budget_s_and_the_command_line_s_is_over_it(project):
    """``graph_profile(..., hardware="a100")`` under ``graph_budget(hardware="h100")`` priced
    on a100 while the JSON's budget said h100; and it beat ``--graph-budget-hardware``, which
    the docs say overrides them all. A misspelt keyword is one line, no traceback."""
    import json

    project.makepyfile(
        test_body="""
        import pytest
        from models import linear

        @pytest.mark.latency_max("1s")
        @pytest.mark.graph_budget(hardware="h100")
        def test_keyword(graph_profile):
            case = linear()
            graph_profile(case.model, case.inputs, name="b", hardware="a100")

        @pytest.mark.latency_max("1s")
        def test_typo(graph_profile):
            case = linear()
            graph_profile(case.model, case.inputs, name="c", execution="compild")
        """
    )

    def priced(*args: str) -> dict[str, str]:
        result = run(project, "--graph-budget-json=out.json", *args)
        result.assert_outcomes(passed=1, failed=1)
        assert "Traceback" not in result.stdout.str()
        result.stdout.fnmatch_lines(["execution in graph_profile in *test_typo must be*'compild'*"])
        models = json.loads((project.path / "out.json").read_text())["models"]
        priced = [m for m in models if m["profile"]]  # test_typo: an error, never priced
        return {
            m["label"]: (m["budget"]["hardware"], m["profile"]["hardware"]["name"]) for m in priced
        }

    assert priced() == {"b": ("a100", "a100")}
    assert priced("--graph-budget-hardware", "t4") == {"b": ("t4", "t4")}
