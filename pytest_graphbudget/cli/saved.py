"""A profile saved by ``graph-budget profile --format json``, read back for ``compare``: every
field the comparison and its views read is checked, so a hand-edited or truncated file is a
one-line error naming what is wrong, never a traceback."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from pytest_graphbudget.cli.console import PROG
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate import figures
from pytest_graphbudget.gate.figures import Figure

PROFILE_SCHEMA = "graphbudget.profile/1"
COMPARED: tuple[Figure, ...] = figures.TABLE
"""The totals ``compare`` shows: every figure of a profile, named and written as the table
says (a figure added to ``figures.TABLE`` shows up here without an edit)."""
GROWTH_CHECKED: tuple[Figure, ...] = tuple(f for f in figures.TABLE if f.max_growth)
"""The totals ``--max-growth`` bounds (FLOPs, MACs, params, peak memory)."""


def read_profile_json(source: str) -> dict[str, Any]:
    """A profile saved by ``graph-budget profile --format json`` (or ``Profile.to_dict()``)."""
    try:
        with open(source, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise GraphBudgetError(f"{source}: no such file") from None
    except OSError as exc:
        raise GraphBudgetError(f"cannot read {source}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise GraphBudgetError(f"{source}: not a JSON profile (not text)") from None
    except json.JSONDecodeError as exc:
        raise GraphBudgetError(
            f"{source}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(data, dict) or data.get("schema") != PROFILE_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise GraphBudgetError(
            f"{source}: not a graph-budget profile (schema {found!r}, expected "
            f"{PROFILE_SCHEMA!r}; write one with `graph-budget profile MODEL --format json`)"
        )
    missing = [k for k in ("model", "inputs", "totals", "bottleneck", "modules") if k not in data]
    if missing:
        raise GraphBudgetError(f"{source}: profile lacks {', '.join(missing)}")
    check_figures(source, data)
    return data


def check_figures(source: str, data: dict[str, Any]) -> None:
    """Every figure ``compare`` reads is a number, and those ``--max-growth`` bounds are there:
    a hand-edited ``"flops": "20M"`` or ``null`` is a one-line error naming the key, never a
    traceback, nor a figure left out of the check."""
    totals = _table(source, data, "totals")
    for figure in COMPARED:
        if figure.key in totals or figure in GROWTH_CHECKED:
            _number(source, totals, "totals", figure.key)
    for label in ("compute_bound", "memory_bound"):
        shares = _table(source, _table(source, data, "bottleneck"), label, "bottleneck.")
        _number(source, shares, f"bottleneck.{label}", "share")
    name = _table(source, data, "hardware").get("name")
    if not isinstance(name, str):
        raise GraphBudgetError(f"{source}: profile's hardware.name is {json.dumps(name)}")
    modules = _table(source, data, "modules")
    for path in modules:
        module = _table(source, modules, path, "modules.")
        for key in ("flops", "macs", "params"):
            _number(source, module, f"modules.{path}", key)
    # a profile written by hand may leave out what only the HTML's roofline reads: none drawn
    data["hardware"].setdefault("ridge_point", 0.0)
    data.setdefault("subgraphs", [])
    _number(source, data["hardware"], "hardware", "ridge_point")
    for i, given in enumerate(_list(source, data, "inputs")):
        where = f"inputs[{i}]"
        if not isinstance(given, dict) or not isinstance(given.get("name"), str):
            raise GraphBudgetError(f"{source}: profile's {where} is {json.dumps(given)}")
        shape = given.get("shape")
        if not isinstance(shape, list) or not all(type(d) is int for d in shape):
            raise GraphBudgetError(f"{source}: profile's {where}.shape is {json.dumps(shape)}")
    for i, sub in enumerate(_list(source, data, "subgraphs")):  # the HTML's roofline reads them
        where = f"subgraphs[{i}]"
        if not isinstance(sub, dict) or not all(
            isinstance(sub.get(key), str) for key in ("module", "bottleneck")
        ):
            raise GraphBudgetError(f"{source}: profile's {where} lacks its module or bottleneck")
        for key in ("flops", "bytes_in", "bytes_out", "bytes_weights", "arithmetic_intensity"):
            _number(source, sub, where, key)


def _list(source: str, data: Mapping[str, Any], key: str) -> list[Any]:
    """``data[key]`` when it is a list (``inputs``, ``subgraphs``), else the one-line error."""
    value = data.get(key)
    if not isinstance(value, list):
        shown = "missing" if key not in data else f"{json.dumps(value)}, not a list"
        raise GraphBudgetError(f"{source}: profile's {key} is {shown}")
    return value


def _table(source: str, parent: Mapping[str, Any], key: str, within: str = "") -> Mapping[str, Any]:
    """``parent[key]`` when it is an object, else the one-line error naming it."""
    value = parent.get(key)
    if not isinstance(value, dict):
        shown = "missing" if key not in parent else f"{json.dumps(value)}, not an object"
        raise GraphBudgetError(f"{source}: profile's {within}{key} is {shown}")
    return value


def _number(source: str, table: Mapping[str, Any], name: str, key: str) -> None:
    """``table[key]`` is a finite number (not a string, null, a boolean or NaN, which every
    comparison would pass)."""
    value = table.get(key)
    if key not in table:
        raise GraphBudgetError(f"{source}: profile lacks {name}.{key}")
    plain = isinstance(value, int | float) and not isinstance(value, bool)
    if not plain or not math.isfinite(value) or value < 0:  # -5 FLOPs had read as a drop
        raise GraphBudgetError(
            f"{source}: profile's {name}.{key} is {json.dumps(value)}, not a number >= 0 (a "
            f"saved profile holds plain numbers: write it with `{PROG} profile MODEL --format "
            "json`)"
        )
