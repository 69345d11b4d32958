"""Budget TOML files read into plain data: one ``Table`` per ``[models."<name>"]`` table and one
``Broken`` per problem of the file, so that every problem is reported and every valid table
still runs. The plugin (``pytest_plugin/collect.py``) makes pytest items of them;
``graph-budget check`` runs them directly. Nothing here imports pytest.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError, toml_error
from pytest_graphbudget.gate import toml_lines
from pytest_graphbudget.gate.budgets import BOTTLENECK_KEYS, LIMITS, MODEL_KEYS, Budget, build
from pytest_graphbudget.gate.factories import factory_problems
from pytest_graphbudget.gate.ignored import refuse_idle_optimizer, refuse_idle_runs
from pytest_graphbudget.modes.fit import growth_degree
from pytest_graphbudget.modes.sweep import AXES, SweepPoint, grid, points_of

GROWTH_KEY = "growth_max"

FILE_TABLES = '; a budget file has [defaults] and [models."<name>"] tables'
SKIPPED = ("baseline.toml", "pyproject.toml")
"""TOML files that are never budget files, wherever they are."""


@dataclass
class Broken:
    """A budget file or table that cannot be read: its message alone is its verdict."""

    name: str  # the table's name, or <file>, <defaults>, <models>, <key> for the file's own
    message: str
    line: int = 0  # of the problem in the file, 1-based; 0 when unknown


@dataclass
class Table:
    """One ``[models."<name>"]`` table, with ``[defaults]``' model keys merged in."""

    name: str
    table: dict[str, Any]
    defaults: Budget
    lines: dict[str, int] = field(default_factory=dict)  # key -> line; "" the header's
    inherited: list[str] = field(default_factory=list)
    """The problems of the ``[defaults]`` values it inherits: never judged without them."""

    def budget(self, where: str, hardware: str | None = None) -> Budget:
        """The table's budget; raises ``GraphBudgetError`` listing every bad key, its own and
        those it inherits from ``[defaults]``. A name's line breaks are escaped in ``where``,
        so that each problem stays one line (``[models."a\\nb"]``)."""
        where = where.replace("\r", "\\r").replace("\n", "\\n")
        budget, problems = build_all(self.table, where, self.defaults, MODEL_KEYS)
        problems += factory_problems(self.table, where, self.lines)
        problems += [f"inherits a broken [defaults] setting: {p}" for p in self.inherited]
        if problems:
            raise GraphBudgetError("\n".join(problems))
        refuse_idle_runs(self.table, budget, where)
        refuse_idle_optimizer(budget, where, 'mode = "train"')
        budget.lines = self.lines
        if hardware:
            budget.hardware = hardware
        return budget

    def line(self) -> int:
        """The line a result points at: its first limit, else its header."""
        first = min(
            (self.lines.get(k, 0) for k in (*LIMITS, *BOTTLENECK_KEYS) if k in self.table),
            default=0,
        )
        return first or self.lines.get("", 1)


def read(path: Path, shown: str, base: Budget) -> list[Broken | Table]:
    """The file's tables and problems, in file order; ``shown`` is its path in messages,
    ``base`` the project's defaults that ``[defaults]`` refines."""
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib().loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        return [Broken("<file>", f"{shown}: cannot read: {exc}")]
    except tomllib().TOMLDecodeError as exc:
        return [Broken("<file>", toml_error(shown, exc))]
    found: list[Broken | Table] = list(unknown_tables(data, text, shown))
    unknown = bool(found)
    defaults_table = data.get("defaults", {})
    broken: dict[str, str] = {}  # [defaults] key -> its problem ("": the whole table)
    if not isinstance(defaults_table, dict):
        broken[""] = f"{shown}: defaults must be a table ([defaults]), got {defaults_table!r}"
        found.append(Broken("<defaults>", broken[""]))
        defaults_table = {}
    where = f"[defaults] of {shown}"
    own = {"model", "factory"}  # which model a table checks: its own (else its name's)
    kept = {k: v for k, v in defaults_table.items() if k not in own}
    defaults, broken_keys = build_each(kept, where, base, MODEL_KEYS)
    for key in sorted(own & defaults_table.keys()):
        broken_keys[key] = f"{key} in {where}: [defaults] cannot say which model a table " + (
            "checks (its own, else the zoo model it is named after): set it in each table"
        )
    if broken_keys:  # reported once, and again by each table that inherits a broken key
        message = "\n".join(broken_keys.values())
        found.append(Broken("<defaults>", message, table_line(text, "defaults")))
    broken.update(broken_keys)
    models = data.get("models", {})
    if not isinstance(models, dict):
        message = f'{shown}: models must be tables ([models."<name>"]), got {models!r}'
        found.append(Broken("<models>", message))
        models = {}
    elif not models and not unknown:
        message = f'{shown}: no [models."<name>"] table, so it checks nothing'
        found.append(Broken("<models>", message))
    shared = {k: v for k, v in kept.items() if k in MODEL_KEYS}
    positions = toml_lines.key_lines(text)  # every key's line, read as TOML reads the key
    for name, table in models.items():
        if not isinstance(table, dict):
            found.append(Broken(name, f"{shown}: models.{name} must be a table, got {table!r}"))
            continue
        # a table left on a value [defaults] got wrong is an error, never judged without it
        # (on generic, eager, without that limit); a model key of [defaults] it checks itself
        skip = {*table, *shared, *(own if own & table.keys() else ())}  # set here, or its own
        inherited = [p for key, p in broken.items() if key not in skip]
        entry = Table(name, {**shared, **table}, defaults, key_lines(positions, name), inherited)
        found += expand(entry, shown)  # seq_len = [...]: a table a point
    return found


def unknown_tables(data: dict[str, Any], text: str, shown: str):
    """A problem for each top-level table or key other than defaults and models."""
    from pytest_graphbudget.errors import closest

    for key, value in data.items():
        if key in ("defaults", "models"):
            continue
        line = table_line(text, key)
        place = f"{shown}:{line}" if line else shown
        if isinstance(value, dict):
            hint = closest(key, ["defaults", "models"])
            message = f"{place}: unknown table [{key}]{hint or FILE_TABLES}"
        else:
            message = f"{place}: unknown top-level key {key!r}{FILE_TABLES}"
        yield Broken(f"<{key}>", message, line)


def build_all(
    values: dict[str, Any], where: str, base: Budget, extra_keys: tuple[str, ...]
) -> tuple[Budget, list[str]]:
    """Like ``build``, but every bad key is a problem of its own and the good ones apply."""
    budget, problems = build_each(values, where, base, extra_keys)
    return budget, list(problems.values())


def build_each(
    values: dict[str, Any], where: str, base: Budget, extra_keys: tuple[str, ...]
) -> tuple[Budget, dict[str, str]]:
    """``build_all``'s budget and each bad key's problem, by key."""
    budget, problems = build({}, where, base, extra_keys), {}
    for key, value in values.items():
        try:
            budget = build({key: value}, where, budget, extra_keys)
        except GraphBudgetError as exc:
            problems[key] = str(exc)
    return budget, problems


def table_line(text: str, key: str) -> int:
    """The line of a top-level ``[key]`` header (or ``key =``), 0 when not found."""
    name = re.escape(key)
    header = rf"""\[\s*(?:{name}|"{name}"|'{name}')\s*[\].]"""
    pattern = re.compile(rf"""^\s*(?:{header}|(?:{name}|"{name}"|'{name}')\s*[=.])""")
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return number
    return 0


def key_lines(positions: dict[tuple[str, ...], int], model: str) -> dict[str, int]:
    """Line numbers of the ``[models.<model>]`` header (key ``""``) and of its keys, from the
    file's ``toml_lines.key_lines``: a name with an escape (``"a\\"b"``), a unicode escape or
    a dotted key under ``[models]`` is the name TOML reads, not the text (a regular expression
    over the text lost their lines, and every problem pointed at line 1)."""
    lines = {"": positions[("models", model)]} if ("models", model) in positions else {}
    for path, number in positions.items():
        if len(path) == 3 and path[:2] == ("models", model):
            lines.setdefault(path[2], number)
    return lines


def key_line(message: str, lines: dict[str, int]) -> int:
    """The line of the table's key that an error names first, at its start (``flops_max in
    vision.toml::resnet: cannot read ...``) or quoted (``unknown budget key 'flop_max'``), so
    that its annotation marks that line; 0 when it names none."""
    named = []
    for key, line in lines.items():
        at = 0 if key and message.startswith(f"{key} ") else message.find(f"'{key}'")
        if key and at >= 0:
            named.append((at, line))
    return min(named)[1] if named else 0


def failing_line(findings: list[dict[str, Any]], lines: dict[str, int]) -> int:
    """The TOML line of the first failing key (for annotations), else 0."""
    for finding in findings:
        if finding["severity"] == "fail":
            key = finding["key"].removeprefix("baseline.")
            for candidate in (key, f"{key}_max"):
                if candidate in lines:
                    return lines[candidate]
    return 0


def covered(path: Path, paths: list[Path]) -> bool:
    """Whether ``path`` is one of ``paths`` or inside one of them."""
    resolved = path.resolve()
    return any(p.resolve() in (resolved, *resolved.parents) for p in paths)


def is_budget_file(path: Path, roots: list[Path]) -> bool:
    """A ``*.toml`` under a ``budgets`` directory, or under (or at) a configured budget path."""
    return "budgets" in path.parent.parts or covered(path, roots)


def looks_like_budget(path: Path) -> bool:
    """Whether a ``*.toml`` under a path named on the command line (``pytest --graph-budget
    perf/``) is a budget file: one that cannot be read as TOML (its error is then reported),
    or one with a top-level table that is, or nearly is, ``[models]`` or ``[defaults]``.
    Another tool's file there (``ruff.toml``, a data file) is left alone."""
    import difflib

    try:
        data = tomllib().loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # TOMLDecodeError and UnicodeDecodeError are ValueErrors
        return True
    tables = ("defaults", "models")
    return any(difflib.get_close_matches(str(key).lower(), tables, 1, 0.75) for key in data)


def tomllib() -> Any:
    """tomllib, imported when a budget file is read (never on a disabled run)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib


@dataclass
class GrowthTable(Table):
    """The ``<name>[growth]`` check of a swept table: its points' tables and allowed degrees."""

    points: list[Table] = field(default_factory=list)
    axes: dict[str, list[int]] = field(default_factory=dict)
    growth: dict[str, str] = field(default_factory=dict)  # axis -> "linear", ...


def expand(entry: Table, shown: str) -> list[Broken | Table]:
    """``entry`` as it is when it sweeps nothing, else one table per point (and its growth
    table); a ``Broken`` with a one-line message for a sweep key it cannot read."""
    where = f"{shown}::{entry.name}"
    swept = [axis for axis in AXES if isinstance(entry.table.get(axis), list)]
    try:
        if not swept:
            _refuse_point_keys(entry.table, where)
            return [entry]
        return _expand(entry, where)
    except GraphBudgetError as exc:
        return [Broken(entry.name, str(exc), entry.line())]


def _refuse_point_keys(table: dict[str, Any], where: str) -> None:
    for key, value in table.items():
        if key == GROWTH_KEY or (key in LIMITS and isinstance(value, dict)):
            raise GraphBudgetError(
                f"{key} in {where}: {'growth' if key == GROWTH_KEY else 'a limit per point'} "
                "needs a sweep: seq_len = [...] or batch = [...]"
            )


def _expand(entry: Table, where: str) -> list[Broken | Table]:
    table = entry.table
    if "factory" in table:
        raise GraphBudgetError(
            f"{where}: a sweep rebuilds the model at every point, which a factory cannot; "
            "name a zoo model (model = ...) or sweep in Python with profile_sweep"
        )
    axes = grid(*(table[a] if isinstance(table.get(a), list) else None for a in AXES))
    points = points_of(axes)
    labels = [SweepPoint(point, None).label() for point in points]
    per_point = {
        key: _per_point(key, value, axes, labels, where)
        for key, value in table.items()
        if key in LIMITS and isinstance(value, dict)
    }
    tables: list[Broken | Table] = []
    for i, (point, label) in enumerate(zip(points, labels, strict=True)):
        values = {k: v for k, v in table.items() if k != GROWTH_KEY}
        values.update(point)
        values.setdefault("model", entry.name)
        values.update({key: limits[i] for key, limits in per_point.items()})
        if "name" in values:
            values["name"] = f"{values['name']}[{label}]"
        at = Table(f"{entry.name}[{label}]", values, entry.defaults, entry.lines)
        at.inherited = entry.inherited  # a broken default is every point's
        tables.append(at)
    if GROWTH_KEY in table:
        growth = _growth(table[GROWTH_KEY], axes, where)
        tables.append(
            GrowthTable(
                f"{entry.name}[growth]",
                {k: v for k, v in table.items() if k not in LIMITS and k != GROWTH_KEY},
                entry.defaults,
                entry.lines,
                entry.inherited,
                points=[t for t in tables if isinstance(t, Table)],
                axes=axes,
                growth=growth,
            )
        )
    return tables


def _per_point(
    key: str, value: dict[str, Any], axes: dict[str, list[int]], labels: list[str], where: str
) -> list[Any]:
    """A limit's value at each point, from a table keyed by axis value or point name."""
    names = {label: label for label in labels}
    shown = ", ".join(labels)
    if len(axes) == 1:
        (axis,) = axes
        names.update({str(v): f"{axis}={v}" for v in axes[axis]})
        shown = ", ".join(str(v) for v in axes[axis])
    unknown = [k for k in value if k not in names]
    if unknown:
        raise GraphBudgetError(
            f"{key} in {where}: {unknown[0]!r} is not a point of the sweep; keys are {shown}"
        )
    by_label = {names[k]: v for k, v in value.items()}
    missing = [label for label in labels if label not in by_label]
    if missing:
        raise GraphBudgetError(
            f"{key} in {where}: no limit for {missing[0]}; give one per point ({shown})"
        )
    return [by_label[label] for label in labels]


def _growth(value: Any, axes: dict[str, list[int]], where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not value:
        raise GraphBudgetError(
            f'{GROWTH_KEY} in {where}: a table such as {{seq_len = "quadratic"}}, got {value!r}'
        )
    for axis, word in value.items():
        if axis not in axes:
            raise GraphBudgetError(
                f"{GROWTH_KEY} in {where}: {axis!r} is not swept; sweep it ({axis} = [...]) or "
                f"bound one of {', '.join(axes)}"
            )
        degree = growth_degree(word, f"{GROWTH_KEY} {axis} in {where}")
        if len(axes[axis]) < degree + 2:
            raise GraphBudgetError(
                f"{GROWTH_KEY} {axis} = {word!r} in {where}: telling {word} from faster growth "
                f"takes {degree + 2} values of {axis}, got {len(axes[axis])}"
            )
    return dict(value)
