"""The figures of a profile, in one table: what each is called, how it is written and checked.

Every place that names a figure derives from ``TABLE``: the budget keys of markers and TOML
tables (``budgets.LIMITS``), the markers registered with pytest (``markers``), the figures the
baseline records and compares (``budgets.REGRESSION_FIGURES``,
``baseline.BY_MODULE``), the reports' columns (``reports.common.FIGURES``) and the CLI's
``compare``. Adding a figure is one ``Figure(...)`` line here (and its value in
``Profile.totals``); nothing else lists figures.

A figure's value is written by one formatter, ``Figure.format``, whose output reads back
through ``units.parse`` with the figure's ``unit``: a number copied from a report into a budget
means what the report said.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_graphbudget import units

MODULES, SUBGRAPHS = "modules", "subgraphs"
"""How growth of a figure is attributed: the module's own share of ``Profile.modules``'
inclusive figures, or the figure summed over the subgraphs named after each module."""

EXAMPLES = {"count": "22G", "bytes": "500MB", "seconds": "3ms", "ratio": "2%"}
"""A limit of each unit, as the marker help shows it."""


@dataclass(frozen=True)
class Figure:
    """One total of a profile (``Profile.<key>``, ``to_dict()["totals"][key]``)."""

    key: str
    label: str  # how a message names it: "peak memory", "estimated latency"
    unit: str  # units.parse kind: count, bytes, seconds, ratio
    short: str = ""  # a report column's heading when shorter than the label
    suffix: str = ""  # written after the value: " FLOPs/B"
    budget: str | None = None  # the budget key (and marker) that bounds it: "flops_max"
    upper: bool = True  # the budget is a maximum (True) or a minimum (False)
    baseline: bool = False  # recorded in the baseline; growth beyond tolerance fails
    by_module: str | None = None  # MODULES, SUBGRAPHS or None: who grew, when it grows
    ranked_by: str | None = None  # what a failure's top contributors are ranked by
    reported: bool = True  # a row of the reports (JUnit output, limits beside the table)
    max_growth: bool = False  # gated by ``graph-budget compare --max-growth``
    measured: bool = False  # in the totals only when the model was run (``Profile.runtime``)
    init: bool = False  # budgeted by ``graph-budget init``: today's value plus headroom
    sharded: bool = False  # in the totals only of a sharded training step (``parallel=``)
    sample: str = ""  # a limit as help and errors show it, where its unit's EXAMPLES is odd

    @property
    def example(self) -> str:
        """A limit in the figure's own unit (``'3ms'`` for a latency), for help and errors."""
        return self.sample or EXAMPLES[self.unit]

    @property
    def words(self) -> tuple[str, ...]:
        """The unit words a limit of this count may be written in (``"22 GFLOPs"``), the
        first the one to write: another figure's (``"70k FLOPs"`` for MACs) is refused."""
        return COUNT_WORDS.get(self.key, ())

    @property
    def heading(self) -> str:
        return self.short or self.label

    def format(self, value: float | None) -> str:
        """``46.8MB``, ``3.12ms``, ``1.68 FLOPs/B``; ``-`` for no value. Reads back through
        ``units.parse(text, self.unit)`` (within the three significant digits shown)."""
        if value is None:
            return "-"
        return units.format_as(value, self.unit) + self.suffix


def grew_beyond(old: float, new: float, tolerance: float) -> bool:
    """``new > old * (1 + tolerance)``, exactly: 113 params against 100 at 13% is at the
    limit, not over it, though in floats 100 * 1.13 is 112.99999999999999. The tolerance is
    taken as its decimal (``13%`` is 13/100)."""
    from fractions import Fraction

    return Fraction(new) > Fraction(old) * (1 + Fraction(repr(float(tolerance))))


COUNT_WORDS = {
    "flops": ("FLOPs", "FLOP", "ops", "op"),
    "macs": ("MACs", "MAC", "ops", "op"),
    "params": ("params", "param"),
    "arithmetic_intensity": ("FLOPs/B", "FLOP/B", "FLOPs/byte", "FLOP/byte"),  # as printed
}
"""The unit words of the counts (``units.parse``'s ``words``)."""


TABLE: tuple[Figure, ...] = (
    Figure(
        "flops", "FLOPs", "count", budget="flops_max", baseline=True, by_module=MODULES,
        ranked_by="FLOPs", max_growth=True, init=True,
    ),
    Figure(
        "macs", "MACs", "count", budget="macs_max", baseline=True, ranked_by="MACs",
        max_growth=True, init=True,
    ),
    Figure("flops_contraction", "FLOPs of contractions", "count", reported=False),
    Figure(
        "params", "params", "count", budget="params_max", baseline=True, by_module=MODULES,
        ranked_by="params", max_growth=True, init=True,
    ),
    Figure(
        "peak_memory_bytes", "peak memory", "bytes", budget="memory_max", baseline=True,
        by_module=SUBGRAPHS, ranked_by="memory live at the peak", max_growth=True,
        init=True,
    ),
    Figure(
        "peak_memory_per_rank_bytes", "peak memory per rank", "bytes", short="peak per rank",
        budget="memory_per_rank_max", sharded=True,
    ),
    Figure(
        "weights_bytes", "weights", "bytes", budget="weights_max", baseline=True,
        ranked_by="weights",
    ),
    Figure(
        "traffic_bytes", "traffic", "bytes", budget="traffic_max", baseline=True,
        by_module=SUBGRAPHS, ranked_by="traffic",
    ),
    Figure("activation_peak_bytes", "activation peak", "bytes"),
    Figure(
        "est_latency_s", "estimated latency", "seconds", short="est. latency",
        budget="latency_max", ranked_by="estimated time",
    ),
    Figure(
        "latency_measured_s", "measured latency", "seconds", short="measured",
        budget="latency_measured_max", measured=True,
    ),
    Figure(
        "arithmetic_intensity", "arithmetic intensity", "count", short="intensity",
        suffix=" FLOPs/B", budget="intensity_min", upper=False, sample="20",
    ),
)  # fmt: skip

BY_KEY: dict[str, Figure] = {f.key: f for f in TABLE}
BY_BUDGET: dict[str, Figure] = {f.budget: f for f in TABLE if f.budget}
"""Budget key -> its figure, in the table's order (``flops_max`` -> FLOPs)."""
BASELINE: tuple[str, ...] = tuple(f.key for f in TABLE if f.baseline)
"""Figures compared with the baseline: a growth beyond tolerance fails even under the limit."""
REPORTED: dict[str, Figure] = {f.key: f for f in TABLE if f.reported}
INITIAL: tuple[Figure, ...] = tuple(f for f in TABLE if f.init and f.budget)
"""The figures ``graph-budget init`` budgets, at today's value plus headroom."""


def get(key: str) -> Figure:
    """A figure by its key; an unknown key is a programming error (KeyError names it)."""
    return BY_KEY[key]


def format_value(key: str, value: float) -> str:
    """A figure's value as its budget writes it; a figure not in the table as a count."""
    figure = BY_KEY.get(key)
    return figure.format(value) if figure else units.format_as(value, "count")


def markers() -> dict[str, str]:
    """The help of each budget marker, as ``pytest --markers`` lists it."""
    return {
        f.budget: f"{f.budget}(limit): fail when the model's {f.label} "
        f"{'exceeds' if f.upper else 'falls below'} limit (e.g. {f.example!r}); "
        "needs --graph-budget"
        for f in TABLE
        if f.budget
    }
