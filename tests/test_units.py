"""Budget values: the accepted forms parse exactly; anything else is a clear error."""

from __future__ import annotations

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
        (-1, "count"),
        (True, "count"),
        ([1], "bytes"),
        ("2 %%", "ratio"),
    ],
)
def test_rejected_forms_name_the_accepted_ones(value, kind):
    with pytest.raises(UnitError, match="expected") as info:
        parse(value, kind, where="flops_max in test_x")
    assert str(info.value).startswith("flops_max in test_x: cannot read")


def test_formatting_uses_decimal_prefixes():
    assert format_count(3_642_974_696) == "3.64G"
    assert format_count(11_689_512) == "11.7M"
    assert format_bytes(46_796_608) == "46.8MB"
    assert format_seconds(0.00312) == "3.12ms"
    assert format_ratio(0.0412) == "4.1%"
