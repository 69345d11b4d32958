"""``--graph-budget-history FILE``: one JSON line per run and model, appended, and read back.

A line (schema ``graphbudget.history/1``)::

    {"schema": "graphbudget.history/1", "commit": "1a2b3c...", "time": "2026-11-26T20:00:00Z",
     "environment": {"python": "3.12.3", "torch": "2.9.1", ...}, "model": "budgets/m.toml::m",
     "tolerance": 0.01, "figures": {"flops": 8192, ...},
     "layers": {"flops": {"fc": 8192}, "params": {...}, ...}}

``layers`` is each figure by top-level module (the baseline's own-values split, summed over
each top-level module's subtree), so that a figure that moved names the layer that moved it.
The file needs no server: it is plain text that a branch of the repository can keep. Lines
are appended once, at the end of the run (the controller's, under pytest-xdist), under a lock.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate.baseline import entry_from
from pytest_graphbudget.gate.budgets import REGRESSION_FIGURES, ROOT

SCHEMA = "graphbudget.history/1"


def commit_of(root: Path) -> str | None:
    """``git rev-parse HEAD`` of the repository ``root`` is in; None outside one."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def top_level(own: Mapping[str, int]) -> dict[str, int]:
    """Own values summed by top-level module (``encoder.0.fc`` -> ``encoder``)."""
    found: dict[str, int] = {}
    for path, value in own.items():
        top = path if path == ROOT else path.split(".", 1)[0]
        found[top] = found.get(top, 0) + int(value)
    return dict(sorted(found.items()))


def line_of(result: Any, commit: str | None, time: str, environment: Mapping[str, str]) -> dict:
    """The history line of one model of a run: its figures, or, when it could not be checked,
    none and its ``error`` (a commit that broke the model is a mark, not a gap)."""
    line = {
        "schema": SCHEMA,
        "commit": commit,
        "time": time,
        "environment": dict(environment),
        "model": result.id,
        "tolerance": result.budget.get("tolerance"),
    }
    if result.profile is None:
        return line | {"figures": {}, "error": (result.error or "").splitlines()[0][:500]}
    entry = entry_from(result.profile)
    layers = {"flops": top_level(entry.modules)}
    layers |= {figure: top_level(own) for figure, own in sorted(entry.by_module.items())}
    figures = {k: entry.figures[k] for k in REGRESSION_FIGURES if k in entry.figures}
    return line | {"figures": figures, "layers": layers}


def now() -> str:
    """The time of a line: UTC, ISO 8601, to the second."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def append(path: Path, results: list[Any], root: Path, environment: Mapping[str, str]) -> int:
    """Append the line of every profiled model of a run (sorted by id) to ``path``, under a
    lock shared by every process writing it; how many lines were appended."""
    from filelock import FileLock

    commit, time = commit_of(root), now()
    lines = [
        json.dumps(line_of(r, commit, time, environment), sort_keys=False, allow_nan=False)
        for r in sorted(results, key=lambda r: r.id)
        if r.profile is not None or r.error
    ]
    if not lines:
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    with FileLock(str(Path(tempfile.gettempdir()) / f"graph-budget-history-{digest}.lock")):
        with path.open("a", encoding="utf-8") as out:
            out.write("".join(f"{line}\n" for line in lines))
    return len(lines)


REQUIRED = {"model": str, "figures": dict}


def read(path: Path) -> list[dict[str, Any]]:
    """Every line of a history file; a missing file or a line that is not a history line is
    a ``GraphBudgetError`` that names it (``FILE:LINE: ...``)."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise GraphBudgetError(f"{path}: no such history file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise GraphBudgetError(f"{path}: cannot read the history ({reason})") from None
    found = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise GraphBudgetError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
        if not isinstance(record, dict) or record.get("schema") != SCHEMA:
            raise GraphBudgetError(f"{path}:{number}: not a {SCHEMA} line")
        for key, kind in REQUIRED.items():
            if not isinstance(record.get(key), kind):
                raise GraphBudgetError(f"{path}:{number}: {key} missing or not a {kind.__name__}")
        _check_values(path, number, record)
        found.append(record)
    if not found:
        raise GraphBudgetError(f"{path}: the history has no lines")
    return found


def _check_values(path: Path, number: int, record: Mapping[str, Any]) -> None:
    """What the moves and the chart read: figures and layers are numbers, the environment a
    table of strings (a hand-edited ``"flops": "big"`` or ``"environment": "x"`` had been a
    traceback)."""
    where = f"{path}:{number}:"
    for key, value in record["figures"].items():  # NaN, Infinity and -5 as any string
        if not _figure(value):
            raise GraphBudgetError(f"{where} figures.{key} is {json.dumps(value)}, not a number")
    tolerance = record.get("tolerance")
    if tolerance is not None and not _figure(tolerance):  # "abc" had fallen back to 1%
        raise GraphBudgetError(f"{where} tolerance is {json.dumps(tolerance)}, not a number")
    layers = record.get("layers", {})
    if not isinstance(layers, dict) or not all(
        isinstance(v, dict) and all(_figure(n) for n in v.values()) for v in layers.values()
    ):
        raise GraphBudgetError(f"{where} layers is not a table of numbers by figure and module")
    if not isinstance(record.get("error", ""), str):
        raise GraphBudgetError(f"{where} error is {json.dumps(record['error'])}, not a string")
    environment = record.get("environment", {})
    versions = environment.values() if isinstance(environment, dict) else [environment]
    if not isinstance(environment, dict) or not all(isinstance(v, str | None) for v in versions):
        raise GraphBudgetError(f"{where} environment is not a table of versions")


def _figure(value: Any) -> bool:
    """A finite number, not negative: what a figure is."""
    plain = isinstance(value, int | float) and not isinstance(value, bool)
    return plain and math.isfinite(value) and value >= 0


@dataclass
class Move:
    """A figure of one model that moved past the tolerance from one line to the next."""

    model: str
    index: int  # of the line, among the model's lines
    commit: str | None
    figure: str
    old: float
    new: float
    layer: str  # the top-level module whose share moved most; "" when not recorded
    counter: str  # "counter may have changed: ..." when torch or this package moved too


def moves(records: list[dict[str, Any]], tolerance: float | None = None) -> list[Move]:
    """Every figure that moved past the tolerance between two consecutive lines of a model
    (``tolerance``: the lines' own when None), with the layer that moved it most."""
    from pytest_graphbudget.gate.budgets import DEFAULT_TOLERANCE
    from pytest_graphbudget.gate.environment import counter_moved

    found = []
    for model, lines in by_model(records).items():
        measured = [i for i, line in enumerate(lines) if line["figures"]]  # not the errors
        for last, index in zip(measured, measured[1:], strict=False):
            before, after = lines[last], lines[index]
            allowed = tolerance
            if allowed is None:
                allowed = after.get("tolerance")
                allowed = DEFAULT_TOLERANCE if not isinstance(allowed, (int, float)) else allowed
            counter = counter_moved(before.get("environment", {}), after.get("environment", {}))
            for figure, new in after["figures"].items():
                old = before["figures"].get(figure)
                if old is None or abs(new - old) <= abs(old) * allowed:
                    continue
                layer = _moved_layer(before, after, figure)
                found.append(
                    Move(model, index, after.get("commit"), figure, old, new, layer, counter)
                )
    return found


def _moved_layer(before: Mapping[str, Any], after: Mapping[str, Any], figure: str) -> str:
    old = before.get("layers", {}).get(figure, {})
    new = after.get("layers", {}).get(figure, {})
    deltas = sorted(((abs(new.get(m, 0) - old.get(m, 0)), m) for m in {*old, *new}), reverse=True)
    return deltas[0][1] if deltas and deltas[0][0] > 0 else ""


def by_model(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The lines of each model, in file order (the order runs appended them), models sorted."""
    found: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        found.setdefault(record["model"], []).append(record)
    return dict(sorted(found.items()))
