"""One table of figures (``pytest_graphbudget.figures``): every budget key, marker, baseline
figure and report column comes from it, and every figure's written value reads back.

The profile is a real one of ``nn.Linear(64, 32)`` on a ``(4, 64)`` input, counted by hand:
2*4*64*32 + 4*32 = 16,512 FLOPs, 4*64*32 = 8,192 MACs, 64*32 + 32 = 2,080 parameters.
"""

from __future__ import annotations

import re

import pytest

from pytest_graphbudget import units
from pytest_graphbudget.gate import baseline, budgets, figures
from pytest_graphbudget.reports import common

LINEAR_FLOPS = 2 * 4 * 64 * 32 + 4 * 32
LINEAR_MACS = 4 * 64 * 32
LINEAR_PARAMS = 64 * 32 + 32


@pytest.fixture(scope="module")
def linear_profile():
    import torch

    from pytest_graphbudget.api import profile_model
    from pytest_graphbudget.case import ModelCase

    torch.manual_seed(0)
    prof = profile_model(ModelCase(torch.nn.Linear(64, 32), (torch.randn(4, 64),)))
    assert (prof.flops, prof.macs, prof.params) == (LINEAR_FLOPS, LINEAR_MACS, LINEAR_PARAMS)
    return prof


def test_every_figure_is_a_total_of_a_real_profile(linear_profile):
    """A figure the table names but the profile lacks would be a budget that never checks."""
    totals = linear_profile.to_dict()["totals"]
    missing = [
        f.key for f in figures.TABLE if f.key not in totals and not (f.measured or f.sharded)
    ]
    assert not missing, f"figures.TABLE names totals a profile does not have: {missing}"
    # A measured figure is there once the model has run (its budget runs it), and only then.
    assert not [f.key for f in figures.TABLE if f.measured and f.key in totals]
    totals = measured(linear_profile).to_dict()["totals"]
    assert not [f.key for f in figures.TABLE if f.key not in totals and not f.sharded]
    assert len({f.key for f in figures.TABLE}) == len(figures.TABLE), "a figure is listed twice"
    assert all(f.unit in units.FORMS for f in figures.TABLE)


def measured(prof):
    """The profile of ``nn.Linear(64, 32)`` with its runtime: the layer timed here once."""
    import dataclasses

    import torch

    from pytest_graphbudget.modes import runtime

    linear, x = torch.nn.Linear(64, 32), torch.randn(4, 64)
    timed = runtime.measure(linear, (x,), {}, prof.est_latency_s, runs=1, warmup=0)
    return dataclasses.replace(prof, runtime=timed)


def test_budget_keys_are_the_tables():
    table = {f.budget: f for f in figures.TABLE if f.budget}
    assert list(budgets.LIMITS) == list(table)  # same keys, same order (error hints, markers)
    assert all(budgets.LIMITS[key] is figure for key, figure in table.items())
    assert set(table) <= set(budgets.valid_keys())
    # Each key is parsed with its figure's unit: "500MB" is a memory limit, not a count; the
    # example a marker's help and errors show is such a limit.
    for key, figure in table.items():
        value = figure.example
        built = budgets.build({key: value}, "test")
        assert built.limits[key] == units.parse(value, figure.unit)


def test_init_budgets_the_tables_initial_figures(linear_profile):
    """`graph-budget init` writes one limit per ``init=True`` figure, each at or above today's
    value plus headroom and within the readable rounding (at most 5% more)."""
    from pytest_graphbudget.cli.init import budget_table

    entry = budget_table(linear_profile, 0.10)
    written = [key for key in entry if key in budgets.LIMITS]
    assert written == [f.budget for f in figures.INITIAL]
    assert {"flops_max", "macs_max", "params_max", "memory_max"} <= set(written)
    for figure in figures.INITIAL:
        today = getattr(linear_profile, figure.key)
        limit = units.parse(entry[figure.budget], figure.unit)
        assert today * 1.10 <= limit <= today * 1.10 * 1.05, figure.key


def test_markers_are_registered_from_the_table(pytester: pytest.Pytester):
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    shown = pytester.runpytest("-p", "no:cacheprovider", "--markers").stdout.str()
    for figure in figures.TABLE:
        if figure.budget:
            side = "exceeds" if figure.upper else "falls below"
            key = figure.budget
            line = f"@pytest.mark.{key}: {key}(limit): fail when the model's {figure.label} {side}"
            assert line in shown, f"{figure.budget} is not registered as a marker"
    assert len(re.findall(r"@pytest\.mark\.(\w+): \1\(limit\)", shown)) == len(budgets.LIMITS)


def test_baseline_records_and_reads_the_tables_figures(linear_profile, tmp_path):
    tracked = [f.key for f in figures.TABLE if f.baseline]
    assert list(budgets.REGRESSION_FIGURES) == tracked
    entry = baseline.entry_from(linear_profile)
    assert list(entry.figures) == tracked
    assert entry.figures["flops"] == LINEAR_FLOPS and entry.figures["params"] == LINEAR_PARAMS
    by_module = {f.key for f in figures.TABLE if f.baseline and f.by_module} - {"flops"}
    assert set(entry.by_module) == by_module == set(baseline.BY_MODULE)
    assert entry.modules == {budgets.ROOT: LINEAR_FLOPS}  # the Linear is the model itself
    assert entry.by_module["params"] == {budgets.ROOT: LINEAR_PARAMS}
    # Written and read back: every tracked figure, with its unit ("2.08k" params reads back).
    path = tmp_path / "baseline.toml"
    baseline.update(path, {"linear": entry})
    assert baseline.load(path)["linear"].figures == entry.figures
    path.write_text('[models.linear]\nflops = "16.5k"\nweights_bytes = "8.32kB"\n')
    read = baseline.read(path)
    assert read.entries["linear"].figures == {"flops": 16_500, "weights_bytes": 8_320}
    # Every tracked figure the entry leaves out is that entry's problem, by name.
    missing = [key for key in tracked if key not in ("flops", "weights_bytes")]
    assert f"no {', '.join(missing)}: " in read.problems["linear"][0]
    path.write_text("[models.linear]\nest_latency_s = 1\n")  # budgeted, not tracked
    assert "unknown key" in baseline.read(path).problems["linear"][0]


def test_reports_show_the_tables_figures():
    assert list(common.FIGURES) == [f.key for f in figures.TABLE if f.reported]
    assert common.LIMIT_OF == {f.key: f.budget for f in figures.TABLE if f.budget}


VALUES = {
    "count": [0, 1, 7.5, 999, 1_234, 16_512, 3_642_974_696, 1.7e15],
    "bytes": [0, 1, 999, 8_320, 46_796_608, 2**40],
    "seconds": [1e-9, 2.5e-7, 0.00312, 1, 42.0],
    "ratio": [0, 0.0412, 0.5, 1],
}


@pytest.mark.parametrize("figure", figures.TABLE, ids=lambda f: f.key)
def test_each_figure_reads_back_as_written(figure):
    """What a report or a message prints, pasted into a budget, means what it said."""
    for value in VALUES[figure.unit]:
        text = figure.format(value)
        assert units.parse(text, figure.unit) == pytest.approx(value, rel=5e-3), text
    assert figure.format(None) == "-"


def test_intensity_is_written_with_its_unit_and_reads_back():
    intensity = figures.get("arithmetic_intensity")
    assert intensity.format(1_000) == "1k FLOPs/B"
    assert units.parse("1k FLOPs/B", "count") == 1_000
    assert budgets.build({"intensity_min": "20 FLOPs/B"}, "test").limits == {"intensity_min": 20}
    # as graph-budget profile and explore print it: "arithmetic intensity 3.0 FLOPs/byte"
    assert budgets.build({"intensity_min": "3.0 FLOPs/byte"}, "t").limits == {"intensity_min": 3}


def test_limit_messages_read_back(linear_profile):
    """Each number a limit's failure prints reads back through its figure's unit."""
    prof = measured(linear_profile)
    for key, figure in budgets.LIMITS.items():
        if figure.sharded:  # a sharded step's: tests/modes/test_parallel.py reads it back
            continue
        value = budgets.figure(prof, figure.key)
        limit = value * (0.5 if figure.upper else 2)
        (finding,) = budgets.check(prof, budgets.Budget(limits={key: limit}))
        # an estimated latency says what it was priced for: "... 98.6ns on generic, eager"
        pattern = rf"{figure.label} (.+?)(?: on \S+, \w+)? (?:exceeds|is below) {key} (.+?) \("
        shown = re.search(pattern, finding.message)
        assert shown, finding.message
        if figure.key == "est_latency_s":
            assert " on generic, eager exceeds " in finding.message, finding.message
        printed, bound = (units.parse(text, figure.unit) for text in shown.groups())
        assert printed == pytest.approx(value, rel=5e-3), finding.message
        assert bound == pytest.approx(limit, rel=5e-3), finding.message


# --------------------------------------------------------------------------------------------
# One "exception as one line" for every message that must stay one line (errors.one_line)


def test_one_line_is_the_first_line_or_the_type():
    from pytest_graphbudget.errors import one_line

    assert one_line(ValueError("\n  bad shape (4, 3)\n  Traceback-like detail\n")) == (
        "bad shape (4, 3)"
    )
    assert one_line(KeyError()) == "KeyError"
    assert one_line(RuntimeError("x" * 400)) == "x" * 297 + "..."
    assert one_line(RuntimeError("x" * 400), 50, typed=True) == "RuntimeError: " + "x" * 47 + "..."
    assert one_line(OSError("disk full"), typed=True) == "OSError: disk full"
    assert one_line(OSError(), typed=True) == "OSError"


def raising(exc: Exception):
    """A model whose forward raises ``exc``: the user's error, which we report in one line."""
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            raise exc

    return Model()


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (ValueError(), "the model's forward raised ValueError"),
        (ValueError("bad input\n  more lines"), "the model's forward raised ValueError: bad input"),
    ],
)
def test_a_forward_that_raises_is_one_line_naming_the_type_once(exc, expected):
    import torch

    from pytest_graphbudget.api import profile_model
    from pytest_graphbudget.errors import GraphBudgetError

    with pytest.raises(GraphBudgetError) as raised:
        profile_model(raising(exc), (torch.randn(2, 3),))
    assert str(raised.value) == expected
