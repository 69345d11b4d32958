"""Budget values: the accepted forms parse exactly; anything else is a clear error."""

from __future__ import annotations

import re

import pytest

from pytest_graphbudget.units import (
    UnitError,
    format_bytes,
    format_count,
    format_ratio,
    format_seconds,
    parse,
)


@pytest.mark.parametrize(
    ("value", "kind", "expected"),
    [
        ("22G", "count", 22e9),
        ("22 GFLOPs", "count", 22e9),
        (2.2e10, "count", 2.2e10),
        ("110M", "count", 110e6),
        ("3.7G", "count", 3.7e9),
        ("1.5k", "count", 1500),
        ("12M params", "count", 12e6),
        ("500MB", "bytes", 500e6),
        ("0.5GiB", "bytes", 2**29),
        ("120 MiB", "bytes", 120 * 2**20),
        (1024, "bytes", 1024),
        ("3ms", "seconds", 0.003),
        ("876 μs", "seconds", 876e-6),  # the Greek mu, beside the micro sign
        ("10µs", "seconds", 10e-6),
        ("250us", "seconds", 250e-6),
        ("1.5s", "seconds", 1.5),
        ("2%", "ratio", 0.02),
        (0.02, "ratio", 0.02),
    ],
)
def test_accepted_forms(value, kind, expected):
    assert parse(value, kind) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("22 gigaflops", "count"),
        ("22GB", "count"),
        ("500 MBs", "bytes"),
        ("fast", "seconds"),
        (True, "count"),
        ([1], "bytes"),
        ("2 %%", "ratio"),
    ],
)
def test_rejected_forms_name_the_accepted_ones(value, kind):
    with pytest.raises(UnitError, match="expected") as info:
        parse(value, kind, where="flops_max in test_x")
    assert str(info.value).startswith("flops_max in test_x: cannot read")


@pytest.mark.parametrize("value", [-1, -0.5, "-5M", " -2.5 GFLOPs"])
def test_a_negative_figure_says_so(value):
    """User trial: ``flops_max = -1`` read "cannot read -1", as if the form were wrong."""
    with pytest.raises(UnitError) as info:
        parse(value, "count", where="flops_max in test_x")
    assert (
        str(info.value) == f"flops_max in test_x: {value!r} is negative: a figure or limit is >= 0"
    )


@pytest.mark.parametrize(
    ("value", "meant"), [("1.2 GFLOPS", "1.2 GFLOPs"), ("3 GMACS", "3 GMACs"), ("22 GFLOPs", None)]
)
def test_the_unit_word_in_capitals_is_told_how_it_is_written(value, meant):
    """User trial: ``flops_max("1.2 GFLOPS")``, the common spelling, got no hint where "40m"
    and "1 Mb" get one."""
    if meant is None:
        assert parse(value, "count") == 22e9
        return
    with pytest.raises(UnitError, match=rf"cannot read '{value}' \(did you mean '{meant}'\?\)"):
        parse(value, "count")


def test_formatting_uses_decimal_prefixes():
    assert format_count(3_642_974_696) == "3.64G"
    assert format_count(11_689_512) == "11.7M"
    assert format_bytes(46_796_608) == "46.8MB"
    assert format_seconds(0.00312) == "3.12ms"
    assert format_ratio(0.0412) == "4.1%"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # Every binary prefix the pattern takes has its power of two (issue 22, item 7).
        ("1PiB", 2**50),
        ("2 PiB", 2 * 2**50),
        ("1.5TiB", 1.5 * 2**40),
        ("3kiB", 3 * 2**10),
        ("1PB", 1e15),
    ],
)
def test_every_byte_prefix_has_its_scale(value, expected):
    assert parse(value, "bytes") == expected


@pytest.mark.parametrize("kind", ["count", "bytes", "seconds", "ratio"])
@pytest.mark.parametrize("value", [10**400, -(10**400), 2**1024], ids=["1e400", "-1e400", "2^1024"])
def test_an_integer_beyond_a_float_is_refused_in_one_short_line(value, kind):
    """Legal TOML (issue 22, item 8): ``flops_max = 1`` followed by 400 zeros."""
    with pytest.raises(UnitError) as info:
        parse(value, kind, where="flops_max in budgets/x.toml")
    message = str(info.value)
    assert "\n" not in message and len(message) < 250, message
    read = "" if value < 0 else "cannot read "  # a negative one says so
    assert message.startswith(f"flops_max in budgets/x.toml: {read}{str(value)[:6]}")
    assert f"({len(str(abs(value)))} digits)" in message


@pytest.mark.parametrize(
    ("value", "text", "back"),
    [
        # A ratio printed as a percentage must read back (issue 22, item 11): 1e307 * 100 is
        # beyond a float, so it is written as the fraction itself.
        (1e307, "1e+307", 1e307),
        (1.7976931348623157e308, "1.7976931348623157e+308", 1.7976931348623157e308),
        # 1e304 = 1e306 %: three significant digits, not 307 of them.
        (1e304, "1e+306%", 1e304),
        (123_456.7, "1.23e+07%", 123_000),  # 12,345,670 % to three digits
        (9999.99, "999999.0%", 9999.99),  # below a million percent: one decimal, as before
    ],
)
def test_huge_ratios_print_what_reads_back(value, text, back):
    assert format_ratio(value) == text
    assert parse(format_ratio(value), "ratio") == pytest.approx(back, rel=1e-12)


def test_closest_folds_case_and_dashes_before_matching():
    from pytest_graphbudget.errors import closest

    keys = ("flops_max", "memory_max", "params_max")
    assert closest("FLOPS_MAX", keys) == " (did you mean 'flops_max'?)"
    assert closest("flops-max", keys) == " (did you mean 'flops_max'?)"
    assert closest("flops_mx", keys) == " (did you mean 'flops_max'?)"
    assert closest("latency", keys) == ""


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        (
            "macs_max",
            "70k FLOPs",
            "is in FLOPs, and this limit counts MACs: write it in MACs (1 MAC",
        ),
        (
            "flops_max",
            "1 GMACs",
            "is in MACs, and this limit counts FLOPs: write it in FLOPs (1 MAC",
        ),
        ("params_max", "10k MACs", "is in MACs, and this limit counts params: write it in params"),
        ("flops_max", "200k FLOPs/B", "is in FLOPs/B, and this limit counts FLOPs"),
        ("intensity_min", "20 FLOPs", "is in FLOPs, and this limit counts FLOPs/B"),
    ],
)
def test_a_unit_word_of_another_figure_is_refused(key, value, says):
    """User trial: ``macs_max("70k FLOPs")`` passed a model of 65.5k MACs (131k FLOPs): the
    word was read as decoration, so a limit pasted from the other figure was 2x off."""
    from pytest_graphbudget.errors import GraphBudgetError
    from pytest_graphbudget.gate.budgets import build

    with pytest.raises(GraphBudgetError, match=re.escape(f"{key} in m: {value!r} {says}")):
        build({key: value}, "m")
    # its own words, and none, read as before
    for fits in ("22 GFLOPs", "22G", "22 Gops") if key == "flops_max" else ():
        assert build({key: fits}, "m").limits[key] == 22e9
    if key == "macs_max":
        assert build({key: "5 GMACs"}, "m").limits[key] == 5e9


def test_exact_figures_keep_their_unit_and_a_share_below_one_never_reads_100_percent():
    """User trial: where rounding hid a figure's difference from its limit, the warning had
    written bare numbers (peak memory 17,152, latency 1.7152e-07), and a pass at 8,256 of
    8,260 FLOPs (99.95%) read "is at 100.0% of flops_max"."""
    from pytest_graphbudget.units import format_exact, format_share

    assert format_exact(17_152, "peak_memory_bytes") == "17,152B"
    assert format_exact(1.7152e-07, "est_latency_s") == "171.52ns"
    assert format_exact(0.0123456789, "latency_measured_s") == "12.3457ms"
    assert format_exact(8_256, "flops") == "8,256"
    assert format_share(8_256 / 8_260) == "99.95%"
    assert format_share(0.971) == "97.1%"
