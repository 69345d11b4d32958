"""Property-based tests: no budget input, however malformed, crashes the gate or passes silently.

Each property states what must hold for *every* input hypothesis can build: a value is either
read exactly or refused with one line naming the accepted forms; never a traceback, never an
infinite or negative limit that could not fail. Example counts are bounded so ``make test``
stays fast; raise them locally with ``--hypothesis-profile=thorough``.
"""

from __future__ import annotations

import math
import re
import string
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pytest_graphbudget import units
from pytest_graphbudget.errors import GraphBudgetError

settings.register_profile("thorough", max_examples=2000)
KINDS = ("count", "bytes", "seconds", "ratio")
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Every string a unit pattern accepts is the contract, not the prefixes we thought of ("1PiB"
# was a KeyError: the pattern took "Pi", the table had no scale for it).
PATTERNS = {
    "count": units._COUNT,
    "bytes": units._BYTES,
    "seconds": units._SECONDS,
    "ratio": units._RATIO,
}
LETTERS = string.ascii_letters + "µ"


def accepted_prefixes(kind: str) -> list[str]:
    """Every prefix of up to two letters that the pattern of ``kind`` takes after a number."""
    candidates = ["", *LETTERS, *(a + b for a in LETTERS for b in LETTERS)]
    found = []
    for prefix in candidates:
        match = PATTERNS[kind].fullmatch(f"1{prefix}")
        if match and match["prefix"] == prefix:
            found.append(prefix)
    return found


# The ASCII reading of each pattern: Python's \d and \s also match other scripts' digits and
# spaces, which would spend the examples far from the forms budgets are written in.
accepted = st.sampled_from(KINDS).flatmap(
    lambda kind: st.tuples(
        st.from_regex(re.compile(PATTERNS[kind].pattern, re.ASCII), fullmatch=True),
        st.just(kind),
    )
)
# Integers TOML holds and a float does not: ``flops_max = 1`` followed by 400 zeros is legal.
huge_integers = st.one_of(
    st.sampled_from([10**400, -(10**400), 2**1024, 2**1024 - 1]),
    st.integers(min_value=2**1024, max_value=10**1000),
    st.integers(min_value=-(10**1000), max_value=-(2**1024)),
)
# Anything a TOML file or a marker argument can hold, and a little more: TOML's dates and
# times too (tomllib reads them as datetime objects).
scalars = st.one_of(
    huge_integers,
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.datetimes(),
    st.dates(),
    st.times(),
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
    st.sampled_from(
        sorted({*accepted_prefixes("count"), *accepted_prefixes("bytes"), "m", "u", "µ", "X"})
    ),
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
        if message.endswith(" is negative: a figure or limit is >= 0"):  # read, but below 0
            return
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
@given(text_kind=accepted)
def test_every_string_a_pattern_accepts_is_read_or_refused_in_one_line(text_kind):
    text, kind = text_kind
    assert_read_or_refused(text, kind)


POWERS = {"k": 1, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
"""The power of 1000 (decimal) or 1024 (binary, with an ``i``) each prefix letter means."""


@pytest.mark.parametrize("kind", ["count", "bytes"])
def test_every_prefix_a_pattern_accepts_has_its_scale(kind):
    prefixes = accepted_prefixes(kind)
    assert "" in prefixes and "G" in prefixes  # the enumeration sees the pattern at all
    for prefix in prefixes:
        base = 1024 if prefix.endswith("i") else 1000
        power = POWERS[prefix[0]] if prefix else 0
        assert units.parse(f"1{prefix}", kind) == base**power, prefix


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
    prefix=st.sampled_from(["Ki", "Mi", "Gi", "Ti", "Pi"]),
)
def test_binary_byte_prefixes_are_powers_of_two(mantissa, prefix):
    power = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50}[prefix]
    assert units.parse(f"{mantissa} {prefix}B", "bytes") == mantissa * 2**power


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "1e999", "1e999G", -1, "-1k"])
@pytest.mark.parametrize("kind", KINDS)
def test_limits_that_could_never_fail_or_never_pass_are_refused(value, kind):
    with pytest.raises(units.UnitError):
        units.parse(value, kind)


# What the tool prints must read back as (almost) what it measured: a figure copied from a
# report into a budget means what the report said. Three significant digits: within 0.5%;
# below 1, two decimals: within half a hundredth (0.125 prints 0.12, 0.005 off once floats
# round; hypothesis found it).
@FAST
@given(value=st.floats(min_value=0, max_value=1e17))
def test_printed_counts_and_bytes_read_back(value):
    for text, kind in ((units.format_count(value), "count"), (units.format_bytes(value), "bytes")):
        assert units.parse(text, kind) == pytest.approx(value, rel=5e-3, abs=5e-3 + 1e-12), text


@FAST
@given(value=st.floats(min_value=1e-9, max_value=1e4))
def test_printed_seconds_read_back(value):
    text = units.format_seconds(value)
    assert units.parse(text, "seconds") == pytest.approx(value, rel=5e-3), text


@FAST
@given(value=st.floats(min_value=0, max_value=10) | st.floats(min_value=0, max_value=1.7e308))
def test_printed_ratios_read_back(value):
    text = units.format_ratio(value)  # 1e307 was "inf%", which no budget reads
    assert units.parse(text, "ratio") == pytest.approx(value, abs=5e-4, rel=5e-2), text


def test_unit_errors_are_graph_budget_errors():
    """The plugin turns GraphBudgetError into a one-line error; UnitError must be one."""
    assert issubclass(units.UnitError, GraphBudgetError)


# --------------------------------------------------------------------------------------------
# Budget tables: whatever keys and values a marker or a TOML table holds


budget_keys = st.one_of(
    st.sampled_from(
        [
            *__import__("pytest_graphbudget.gate.budgets", fromlist=["x"]).valid_keys(),
            "flop_max",
            "Flops_max",
        ]
    ),
    st.text(max_size=12),
)


@FAST
@given(table=st.dictionaries(budget_keys, st.one_of(huge_integers, unitlike, values), max_size=6))
def test_any_budget_table_builds_a_checkable_budget_or_is_refused_in_one_line(table):
    from pytest_graphbudget.gate import budgets

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
        huge_integers,
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


# --------------------------------------------------------------------------------------------
# Without a model: whatever a budget file, pyproject.toml or a hardware profile holds, it is
# read, or each of its problems is one line; never another exception


def one_line_problems(exc: GraphBudgetError) -> list[str]:
    """The problems an error reports, each of which must be one line (a budget table's error
    lists one problem a line; a SettingsError has them in ``problems``)."""
    problems = getattr(exc, "problems", None) or str(exc).split("\n")
    assert problems and all(p.strip() for p in problems), problems
    assert all("\n" not in p for p in problems), problems
    return problems


@FAST
@given(text=files)
def test_any_budget_file_reads_as_budgets_or_one_line_problems(text):
    from pytest_graphbudget.gate import budget_files
    from pytest_graphbudget.gate.budgets import Budget

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.toml"
        path.write_text(text, encoding="utf-8")
        entries = budget_files.read(path, "budgets/x.toml", Budget())
    for entry in entries:
        if isinstance(entry, budget_files.Broken):
            assert entry.message.strip()
            continue
        try:
            budget = entry.budget(f"budgets/x.toml::{entry.name}")
        except GraphBudgetError as exc:
            one_line_problems(exc)
        else:
            assert all(math.isfinite(v) and v >= 0 for v in budget.limits.values())


numbers_in_toml = st.one_of(
    huge_integers,
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
)
peaks = st.dictionaries(
    st.sampled_from(["float32", "bfloat16", "int8"]) | st.text(max_size=4),
    numbers_in_toml | toml_values,
    max_size=3,
)
hardware_tables = st.fixed_dictionaries(
    {},
    optional={
        "peak_tflops": peaks | toml_values,
        "peak_flops": peaks | toml_values,
        "bandwidth_gbs": numbers_in_toml | toml_values,
        "bandwidth": numbers_in_toml | toml_values,
        "description": toml_values,
        "family": st.sampled_from(["ada", "blackwell", "adaa"]) | toml_values,
        "matmul_tflops": numbers_in_toml | toml_values,
    },
)
hardware_profiles = st.dictionaries(st.text(max_size=5), hardware_tables | toml_values, max_size=2)


@FAST
@given(tables=hardware_profiles)
def test_any_hardware_tables_are_profiles_with_a_ridge_point_or_one_line(tables):
    """``--hardware-file``'s ``[hardware.<name>]`` tables (a peak of 400 digits was an
    OverflowError)."""
    from pytest_graphbudget import hardware

    try:
        found = hardware.from_tables(tables)
    except GraphBudgetError as exc:
        one_line_problems(exc)
    else:
        for profile in found.values():
            figures = [*profile.peak_flops.values(), profile.bandwidth]
            assert all(math.isfinite(v) and v > 0 for v in figures), figures
            assert 0 < profile.ridge_point() < math.inf


graph_budget_tables = st.fixed_dictionaries(
    {},
    optional={
        "hardware_profiles": hardware_profiles | toml_values,
        "hardware": st.sampled_from(["generic", "a100", "npu"]) | toml_values,
        "tolerance": numbers_in_toml | toml_values,
        "measure_runs": numbers_in_toml,
        "budgets": toml_values,
        "strict": toml_values,
    },
)
ini_options = st.dictionaries(
    st.sampled_from(["pythonpath", "graph_budget_hardware", "graph_budget_tolerance"])
    | st.sampled_from(["graph_budget_budgets", "graph_budget_strict", "testpaths"]),
    toml_values,
    max_size=3,
)
pytest_tables = st.fixed_dictionaries({}, optional={"ini_options": ini_options | toml_values})
tool_tables = st.fixed_dictionaries(
    {},
    optional={
        "graph_budget": graph_budget_tables | toml_values,
        "pytest": pytest_tables | toml_values,
        "ruff": toml_values,
    },
)
# ``tool = 0`` and ``[tool] pytest = "x"`` are legal TOML (and tracebacks until issue 22).
pyprojects = st.fixed_dictionaries({}, optional={"tool": tool_tables | toml_values})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=pyprojects)
def test_any_pyproject_gives_settings_or_one_line_problems(document):
    """What the plugin (its own ini values) and the command line (``[tool.pytest.ini_options]``
    read here, and the paths ``check`` imports factories from) make of any pyproject.toml."""
    import tomlkit

    from pytest_graphbudget.cli import check_files as check_cli
    from pytest_graphbudget.run import settings as project

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "pyproject.toml").write_text(tomlkit.dumps(document), encoding="utf-8")
        for ini in (None, {}):
            try:
                found = project.load(root, ini)
            except project.SettingsError as exc:
                one_line_problems(exc)
            else:
                assert math.isfinite(found.tolerance) and found.tolerance >= 0
        try:
            found = project.discover(root)
        except project.SettingsError as exc:
            one_line_problems(exc)
        else:
            paths = check_cli.import_paths(found.root, found.ini)
            assert paths[-1] == str(found.root) and all(isinstance(p, str) for p in paths)
