"""Exact polynomial fits of a figure over the points of a shape sweep (``sweep.py``).

A figure such as MACs is, for the models we profile, a polynomial in the sequence length and
the batch with integer coefficients (``12*s*h^2 + 2*s^2*h`` per BERT layer). ``fit`` finds the
lowest-degree polynomial with rational coefficients that reproduces every measured point, by
exact rational arithmetic (``fractions.Fraction``): never a least-squares guess. Points beyond
the coefficients it needs verify it (``held_out``); a fit that needs every point is exact on
them but unverified. On a grid, spare points can leave an axis unchecked: at ``s`` = 16 and 32,
any batches beside them, a line in ``s`` fits whatever the figure does between them. So a fit
is verified only when, along every axis, the points would also fix a fit one degree higher
in that axis (on a grid: more distinct values than the degree needs); the axes where they
would not are ``unverified``. No polynomial of degree ``MAX_DEGREE`` or less per axis: the
figure is not called polynomial (peak memory may be piecewise) rather than given an invented
formula.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from pytest_graphbudget.errors import GraphBudgetError

MAX_DEGREE = 3
"""The highest power of one axis a fit may use: cubic, the fastest growth a budget names."""

SYMBOLS = {"seq_len": "s", "batch": "b"}
"""How an axis is written in a formula."""

GROWTH = {"constant": 0, "linear": 1, "quadratic": 2, "cubic": 3}
"""``growth_max`` words and the degree each allows."""

Powers = tuple[int, ...]  # the power of each axis in one monomial, in the order of ``axes``


@dataclass
class Fit:
    """A figure as an exact polynomial in the swept axes, or why it is not one."""

    figure: str
    axes: tuple[str, ...]
    coefficients: dict[Powers, Fraction] = field(default_factory=dict)
    points: int = 0
    held_out: int = 0  # points it reproduces beyond those that determined it
    unverified: tuple[str, ...] = ()  # axes along which no point beyond those checks it
    polynomial: bool = True
    method: str = "interpolated"  # or "symbolic": from one trace at symbolic shapes
    note: str = ""  # why a symbolic derivation was not used, when one was tried

    @property
    def verified(self) -> bool:
        """Whether points beyond those that fixed it check it along every axis."""
        return self.held_out > 0 and not self.unverified

    def check(self) -> str:
        """What verified the fit, in words, axis by axis (``check_text``)."""
        return check_text(self.held_out, self.unverified, self.axes)

    def degree(self, axis: str) -> int:
        """The highest power of ``axis`` with a nonzero coefficient (0 for a constant)."""
        at = self.axes.index(axis)
        return max((p[at] for p, c in self.coefficients.items() if c), default=0)

    def __call__(self, **point: int) -> Fraction:
        """The figure at ``point`` (every axis given by name), exactly."""
        missing = [a for a in self.axes if a not in point]
        if missing or not self.polynomial:
            what = f"needs {', '.join(missing)}" if missing else "is not polynomial"
            raise GraphBudgetError(f"the fit of {self.figure} {what}")
        total = Fraction(0)
        for powers, coefficient in self.coefficients.items():
            term = coefficient
            for axis, power in zip(self.axes, powers, strict=True):
                term *= point[axis] ** power
            total += term
        return total

    def formula(self) -> str:
        """``macs = 1358954496*s + 1769472*s^2``: ascending powers, ``s`` seq_len, ``b`` batch."""
        if not self.polynomial:
            return f"{self.figure}: not polynomial"
        terms = []
        for powers in sorted(self.coefficients, key=lambda p: (sum(p), p)):
            coefficient = self.coefficients[powers]
            if coefficient:
                terms.append((coefficient, _monomial(self.axes, powers)))
        if not terms:
            return f"{self.figure} = 0"
        text = ""
        for i, (coefficient, monomial) in enumerate(terms):
            sign = "-" if coefficient < 0 else "+"
            size = abs(coefficient)
            body = str(size) if not monomial else (monomial if size == 1 else f"{size}*{monomial}")
            text += (f"-{body}" if sign == "-" else body) if i == 0 else f" {sign} {body}"
        return f"{self.figure} = {text}"

    def to_dict(self) -> dict[str, object]:
        """JSON: the formula, coefficients by monomial (integers, or ``"p/q"`` strings), the
        degree in each axis, how many points verified it and along which axes none did."""
        extra = {"method": self.method, **({"note": self.note} if self.note else {})}
        if not self.polynomial:
            return {
                **extra,
                "polynomial": False,
                "points": self.points,
                "reason": f"no polynomial of degree <= {MAX_DEGREE} per axis reproduces the "
                f"{self.points} points (the figure may be piecewise)",
            }
        return {
            **extra,
            "polynomial": True,
            "formula": self.formula(),
            "coefficients": {
                _monomial(self.axes, p) or "1": _number(c)
                for p, c in sorted(self.coefficients.items(), key=lambda i: (sum(i[0]), i[0]))
                if c
            },
            "degree": {axis: self.degree(axis) for axis in self.axes},
            "points": self.points,
            "held_out": self.held_out,
            "verified": self.verified,
            "unverified": list(self.unverified),
        }


def check_text(held_out: int, unverified: Sequence[str], axes: Sequence[str]) -> str:
    """``verified on 2 more points``, ``every point used; add one to verify it``, or, where
    the spare points vary only some axes, ``verified in batch on 2 more points; every seq_len
    used, add one to verify it``."""
    more = f"{held_out} more point{'s' * (held_out != 1)}"
    if not held_out:
        return "every point used; add one to verify it"
    if not unverified:
        return f"verified on {more}"
    checked = " and ".join(a for a in axes if a not in unverified)
    where = f"verified in {checked} on {more}" if checked else f"{more} verify no axis"
    return f"{where}; every {' and '.join(unverified)} used, add one to verify it"


def _monomial(axes: Sequence[str], powers: Powers) -> str:
    parts = []
    for axis, power in zip(axes, powers, strict=True):
        symbol = SYMBOLS.get(axis, axis)
        if power == 1:
            parts.append(symbol)
        elif power > 1:
            parts.append(f"{symbol}^{power}")
    return "*".join(parts)


def _number(value: Fraction) -> int | str:
    return value.numerator if value.denominator == 1 else str(value)


def fit(
    figure: str, axes: Sequence[str], points: Sequence[Mapping[str, int]], values: Sequence[int]
) -> Fit:
    """The lowest-degree exact polynomial through ``values`` at ``points`` (each a mapping of
    every axis to its value), trying degrees per axis up to ``MAX_DEGREE`` in order of total
    degree; a ``Fit`` with ``polynomial=False`` when none reproduces every point."""
    axes = tuple(axes)
    rows = [tuple(int(p[a]) for a in axes) for p in points]
    if len(set(rows)) != len(rows) or len(rows) != len(values):
        raise GraphBudgetError(f"fit of {figure}: each point once, with one value each")
    targets = [Fraction(v) for v in values]
    distinct = [len({r[i] for r in rows}) for i in range(len(axes))]
    limits = [min(n - 1, MAX_DEGREE) for n in distinct]
    candidates = sorted(
        itertools.product(*(range(n + 1) for n in limits)), key=lambda d: (sum(d), d)
    )
    for degrees in candidates:
        monomials = list(itertools.product(*(range(d + 1) for d in degrees)))
        if len(monomials) > len(rows):
            continue
        solution = _solve(
            [[_power(row, m) for m in monomials] for row in rows], targets, len(monomials)
        )
        if solution is not None:
            coefficients = dict(zip(monomials, solution, strict=True))
            held_out = len(rows) - len(monomials)
            unverified = tuple(
                axis
                for i, axis in enumerate(axes)
                if not _determined(rows, tuple(d + (j == i) for j, d in enumerate(degrees)))
            )
            return Fit(figure, axes, coefficients, len(rows), held_out, unverified)
    return Fit(figure, axes, points=len(rows), polynomial=False)


def _determined(rows: list[Powers], degrees: Powers) -> bool:
    """Whether the points fix every coefficient of a polynomial of ``degrees`` per axis. A fit
    one degree short of it along an axis is then checked there: any term it lacks in that axis
    shows at some point. On a grid: the axis has more distinct values than the fit's degree
    in it needs (``s`` at 16 and 32 fixes a line in ``s`` and checks nothing in ``s``)."""
    monomials = list(itertools.product(*(range(d + 1) for d in degrees)))
    if len(monomials) > len(rows):
        return False
    matrix = [[_power(row, m) for m in monomials] for row in rows]
    return _solve(matrix, [Fraction(0)] * len(rows), len(monomials)) is not None


def _power(row: Powers, powers: Powers) -> Fraction:
    value = Fraction(1)
    for x, p in zip(row, powers, strict=True):
        value *= x**p
    return value


def _solve(matrix: list[list[Fraction]], targets: list[Fraction], unknowns: int):
    """The unique exact solution of ``matrix @ x = targets`` (more equations than unknowns
    allowed), or None when it has none or more than one."""
    rows = [[*row, t] for row, t in zip(matrix, targets, strict=True)]
    pivot_row = 0
    for column in range(unknowns):
        found = next((r for r in range(pivot_row, len(rows)) if rows[r][column]), None)
        if found is None:
            return None  # not unique: this set of monomials cannot be told apart here
        rows[pivot_row], rows[found] = rows[found], rows[pivot_row]
        pivot = rows[pivot_row]
        for r in range(len(rows)):
            if r != pivot_row and rows[r][column]:
                factor = rows[r][column] / pivot[column]
                rows[r] = [a - factor * b for a, b in zip(rows[r], pivot, strict=True)]
        pivot_row += 1
    if any(row[-1] for row in rows[unknowns:]):
        return None  # an equation left over disagrees: no polynomial of these monomials
    return [rows[i][-1] / rows[i][i] for i in range(unknowns)]


def growth_degree(word: str, where: str) -> int:
    """The degree a ``growth_max`` word allows; one-line error for any other word."""
    if not isinstance(word, str) or word not in GROWTH:
        raise GraphBudgetError(f"{where}: one of {', '.join(map(repr, GROWTH))}, got {word!r}")
    return GROWTH[word]
