"""Property-based tests: no budget input, however malformed, crashes the gate or passes silently.

Each property states what must hold for *every* input hypothesis can build: a value is either
read exactly or refused with one line naming the accepted forms; never a traceback, never an
infinite or negative limit that could not fail. Example counts are bounded so ``make test``
stays fast; raise them locally with ``--hypothesis-profile=thorough``.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pytest_graphbudget import units
from pytest_graphbudget.errors import GraphBudgetError

settings.register_profile("thorough", max_examples=2000)
KINDS = ("count", "bytes", "seconds", "ratio")
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Anything a TOML file or a marker argument can hold, and a little more.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
# Strings that look like budget values: a number, an optional prefix, an optional unit.
numbers = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**20).map(str),
    st.floats(min_value=-1e6, max_value=1e300, allow_nan=False).map(repr),
    st.sampled_from(["1e999", "-0", ".5", "5.", "1e-400", "nan", "inf", "0x10", "1_000"]),
)
unitlike = st.builds(
    lambda n, space, prefix, unit: f"{n}{space}{prefix}{unit}",
    numbers,
    st.sampled_from(["", " ", "  "]),
    st.sampled_from(["", "k", "K", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "m", "u", "µ", "X"]),
    st.sampled_from(
        ["", "B", "bytes", "FLOPs", "MACs", "params", "s", "ms", "us", "%", "min", "h"]
    ),
)


def assert_read_or_refused(value: object, kind: str) -> None:
    """The one rule for budget values: a finite, non-negative number, or a one-line refusal."""
    try:
        number = units.parse(value, kind, "flops_max in budgets/x.toml")
    except units.UnitError as exc:
        message = str(exc)
        assert "\n" not in message
        assert message.startswith("flops_max in budgets/x.toml: cannot read ")
        assert units.FORMS[kind] in message
    else:
        assert isinstance(number, float)
        assert math.isfinite(number) and number >= 0, f"{value!r} read as {number}"


@FAST
@given(value=st.one_of(values, unitlike), kind=st.sampled_from(KINDS))
def test_any_value_is_read_as_a_finite_figure_or_refused_in_one_line(value, kind):
    assert_read_or_refused(value, kind)


@FAST
@given(
    mantissa=st.integers(min_value=0, max_value=10**6),
    prefix=st.sampled_from(sorted(units.DECIMAL)),
    unit=st.sampled_from(["", "FLOPs", "MACs", "params"]),
)
def test_a_count_with_a_decimal_prefix_means_that_many(mantissa, prefix, unit):
    assert units.parse(f"{mantissa}{prefix}{unit}", "count") == mantissa * units.DECIMAL[prefix]


@FAST
@given(
    mantissa=st.integers(min_value=0, max_value=10**6),
    prefix=st.sampled_from(["Ki", "Mi", "Gi", "Ti"]),
)
def test_binary_byte_prefixes_are_powers_of_two(mantissa, prefix):
    power = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40}[prefix]
    assert units.parse(f"{mantissa} {prefix}B", "bytes") == mantissa * 2**power


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "1e999", "1e999G", -1, "-1k"])
@pytest.mark.parametrize("kind", KINDS)
def test_limits_that_could_never_fail_or_never_pass_are_refused(value, kind):
    with pytest.raises(units.UnitError):
        units.parse(value, kind)


# What the tool prints must read back as (almost) what it measured: a figure copied from a
# report into a budget means what the report said. Three significant digits: within 0.5%.
@FAST
@given(value=st.floats(min_value=0, max_value=1e17))
def test_printed_counts_and_bytes_read_back(value):
    for text, kind in ((units.format_count(value), "count"), (units.format_bytes(value), "bytes")):
        assert units.parse(text, kind) == pytest.approx(value, rel=5e-3, abs=5e-3), text


@FAST
@given(value=st.floats(min_value=1e-9, max_value=1e4))
def test_printed_seconds_read_back(value):
    text = units.format_seconds(value)
    assert units.parse(text, "seconds") == pytest.approx(value, rel=5e-3), text


@FAST
@given(value=st.floats(min_value=0, max_value=10))
def test_printed_ratios_read_back(value):
    text = units.format_ratio(value)
    assert units.parse(text, "ratio") == pytest.approx(value, abs=5e-4, rel=5e-2), text


def test_unit_errors_are_graph_budget_errors():
    """The plugin turns GraphBudgetError into a one-line error; UnitError must be one."""
    assert issubclass(units.UnitError, GraphBudgetError)


# --------------------------------------------------------------------------------------------
# Budget tables: whatever keys and values a marker or a TOML table holds


budget_keys = st.one_of(
    st.sampled_from(
        [
            *__import__("pytest_graphbudget.budgets", fromlist=["x"]).valid_keys(),
            "flop_max",
            "Flops_max",
        ]
    ),
    st.text(max_size=12),
)


@FAST
@given(table=st.dictionaries(budget_keys, st.one_of(values, unitlike), max_size=6))
def test_any_budget_table_builds_a_checkable_budget_or_is_refused_in_one_line(table):
    from pytest_graphbudget import budgets

    try:
        budget = budgets.build(table, "budgets/x.toml [models.m]")
    except GraphBudgetError as exc:
        assert "\n" not in str(exc) and "budgets/x.toml [models.m]" in str(exc)
    else:
        for key, limit in budget.limits.items():
            assert math.isfinite(limit) and limit >= 0, (key, limit)
        assert 0 <= budget.tolerance and math.isfinite(budget.tolerance)
        assert all(0 <= share <= 1 for share in budget.bottleneck.values())


# --------------------------------------------------------------------------------------------
# End to end: whatever a budget file holds, the other models keep their results


GOOD_MODELS = """
import torch
from torch import nn
from pytest_graphbudget import ModelCase

def linear():
    return ModelCase(nn.Linear(64, 32), (torch.randn(4, 64),), name="linear")
"""
# nn.Linear(64, 32) on (4, 64): 2*4*64*32 multiply-adds' FLOPs + 4*32 bias adds.
GOOD_FLOPS = 2 * 4 * 64 * 32 + 4 * 32
GOOD_BUDGET = '[models.good]\nfactory = "models:linear"\nflops_max = "20k"\n'

toml_values = st.recursive(
    st.one_of(
        st.booleans(),
        st.integers(min_value=-(10**12), max_value=10**12),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
        st.sampled_from(["models:linear", "models:missing", "nope:x", "3.7G", "2%", "generic"]),
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=2)
    ),
    max_leaves=4,
)
tables = st.dictionaries(
    st.one_of(budget_keys, st.sampled_from(["factory", "model", "input_shape", "seq_len"])),
    toml_values,
    max_size=4,
)


def budget_text(draw_tables: dict, raw: str) -> str:
    """A budget file from random tables (sometimes under wrong headings), then random text."""
    import tomlkit

    doc = tomlkit.document()
    for section, content in draw_tables.items():
        doc[section] = content
    return tomlkit.dumps(doc) + raw


files = st.builds(
    budget_text,
    st.dictionaries(
        st.sampled_from(["defaults", "default", "models", "model", "extra"]),
        st.one_of(
            tables, st.dictionaries(st.sampled_from(["a", "b", "linear"]), tables, max_size=2)
        ),
        max_size=3,
    ),
    st.one_of(
        st.just(""), st.text(max_size=30), st.sampled_from(["[models.x", "= 1", "[[models]]"])
    ),
)


@settings(
    max_examples=12,
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),  # shrinking a pytest run takes minutes
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(text=files)
def test_no_budget_file_costs_another_model_its_result(pytester, text):
    """A bad budget file is its own error: no traceback, and the good model is still checked."""
    import json

    pytester.makepyfile(models=GOOD_MODELS)
    pytester.syspathinsert()
    budgets_dir = pytester.path / "budgets"
    budgets_dir.mkdir(exist_ok=True)
    (budgets_dir / "good.toml").write_text(GOOD_BUDGET)
    (budgets_dir / "random.toml").write_text(text)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "budgets/", "--graph-budget-json=out.json"
    )
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    assert result.ret in (0, 1), output
    report = json.loads((pytester.path / "out.json").read_text())
    good = {m["id"]: m for m in report["models"]}["budgets/good.toml::good"]
    assert good["error"] is None and good["profile"]["totals"]["flops"] == GOOD_FLOPS, good
    assert report["passed"] == (result.ret == 0), (report["passed"], output)
