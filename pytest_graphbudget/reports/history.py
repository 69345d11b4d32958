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
import os
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError, closest
from pytest_graphbudget.gate.baseline import BY_MODULE, entry_from
from pytest_graphbudget.gate.budgets import REGRESSION_FIGURES, ROOT

SCHEMA = "graphbudget.history/1"


def prefix_of(root: Path) -> str | None:
    """``root`` relative to the top of its repository (``"proj"``, ``""`` at the top); None
    outside one: where a merge on another runner finds the files the reports point at."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--show-prefix"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip().rstrip("/") if done.returncode == 0 else None


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
        "tolerance": recorded_tolerance(result.budget.get("tolerance")),
    }
    if result.profile is None:
        return line | {"figures": {}, "error": (result.error or "").splitlines()[0][:500]}
    entry = entry_from(result.profile)
    layers = {"flops": top_level(entry.modules)}
    layers |= {figure: top_level(own) for figure, own in sorted(entry.by_module.items())}
    figures = {k: entry.figures[k] for k in REGRESSION_FIGURES if k in entry.figures}
    return line | {"figures": figures, "layers": layers}


def recorded_tolerance(tolerance: float | None) -> float | str | None:
    """A tolerance as a line records it: a share (0.02), or, from 100% up, the percentage
    (``"150%"``), as a budget writes it: ``read`` refuses a bare 1.5, which reads as 150%."""
    return tolerance if tolerance is None or tolerance < 1 else f"{tolerance * 100:g}%"


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
        with path.open("a+b") as out:  # writes at the end, wherever it read
            end = out.seek(0, os.SEEK_END)
            if end:
                out.seek(end - 1)
            # a file edited by hand may end without its newline: the line had been glued on
            lead = "\n" if end and out.read(1) != b"\n" else ""
            out.write((lead + "".join(f"{line}\n" for line in lines)).encode("utf-8"))
    return len(lines)


REQUIRED = {"model": str, "figures": dict}
LAYERED = ("flops", *BY_MODULE)
"""The figures a line splits by top-level module (``line_of``'s ``layers``)."""


def read(path: Path) -> list[dict[str, Any]]:
    """Every line of a history file, each tolerance as a share; a missing file or a line that
    is not a history line is a ``GraphBudgetError`` that names it (``FILE:LINE: ...``)."""
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
        except ValueError as exc:  # also an integer of over 4,300 digits, which Python refuses
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "an integer too long"
            raise GraphBudgetError(f"{path}:{number}: not a JSON line ({reason})") from None
        if not isinstance(record, dict) or record.get("schema") != SCHEMA:
            raise GraphBudgetError(f"{path}:{number}: not a {SCHEMA} line")
        for key, kind in REQUIRED.items():
            if not isinstance(record.get(key), kind):
                raise GraphBudgetError(f"{path}:{number}: {key} missing or not a {kind.__name__}")
        _check_values(path, number, record)
        if record.get("tolerance") is not None:
            record["tolerance"] = _tolerance(f"{path}:{number}:", record["tolerance"])
        found.append(record)
    if not found:
        raise GraphBudgetError(f"{path}: the history has no lines")
    return found


def _check_values(path: Path, number: int, record: Mapping[str, Any]) -> None:
    """What the moves and the chart read: the commit a string, figures and layers numbers
    under the names ``line_of`` writes, the environment a table of strings (a hand-edited
    ``"flops": "big"`` had been a traceback, a misspelt ``"flop"`` a move never reported)."""
    where = f"{path}:{number}:"
    if not isinstance(record.get("commit"), str | None):  # the commit's [:7] had raised
        shown = _shown(record["commit"])
        raise GraphBudgetError(f"{where} commit is {shown}, not a string or null")
    if not isinstance(record.get("error", ""), str):
        raise GraphBudgetError(f"{where} error is {_shown(record['error'])}, not a string")
    if not record["figures"] and "error" not in record:  # a gap the moves skip, unexplained
        raise GraphBudgetError(
            f"{where} figures is empty and no error says why (only a model that could not be "
            "checked has no figures)"
        )
    for key, value in record["figures"].items():  # NaN, Infinity and -5 as any string
        if key not in REGRESSION_FIGURES:
            raise GraphBudgetError(f"{where} {_unknown(f'figures.{key}', REGRESSION_FIGURES)}")
        if reason := _not_a_figure(value):
            raise GraphBudgetError(f"{where} figures.{key} is {_shown(value)}, {reason}")
    layers = record.get("layers", {})
    if not isinstance(layers, dict) or not all(
        isinstance(v, dict) and all(_figure(n) for n in v.values()) for v in layers.values()
    ):
        raise GraphBudgetError(f"{where} layers is not a table of numbers by figure and module")
    for key in layers:
        if key not in LAYERED:
            raise GraphBudgetError(f"{where} {_unknown(f'layers.{key}', LAYERED)}")
    environment = record.get("environment", {})
    versions = environment.values() if isinstance(environment, dict) else [environment]
    if not isinstance(environment, dict) or not all(isinstance(v, str | None) for v in versions):
        raise GraphBudgetError(f"{where} environment is not a table of versions")


def _tolerance(where: str, value: Any) -> float:
    """A line's tolerance as ``--tolerance`` reads it: a share, or a percentage (``"150%"``);
    a bare 2 would be 200% (every move short of tripling hidden) and is refused, as there."""
    from pytest_graphbudget.units import share

    percent = isinstance(value, str) and value.strip().endswith("%")
    if not percent and (reason := _not_a_figure(value)):  # "abc" had fallen back to 1%
        raise GraphBudgetError(f"{where} tolerance is {_shown(value)}, {reason}")
    try:
        return share(value, "tolerance")
    except GraphBudgetError as exc:
        raise GraphBudgetError(f"{where} {exc}") from None


def _unknown(key: str, known: tuple[str, ...]) -> str:
    """``figures.flop is not a figure (did you mean 'flops'?); the figures are ...``."""
    name = key.split(".", 1)[1]
    return f"{key} is not a figure{closest(name, known)}; the figures are {', '.join(known)}"


def _not_a_figure(value: Any) -> str:
    """Why ``value`` is no figure (a finite number, not negative), or ``""``."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "not a number"
    try:
        number = float(value)
    except OverflowError:  # an integer of 400 digits is legal JSON
        return "beyond a float's range"
    if not math.isfinite(number):
        return "not a number"
    return "negative: a figure is >= 0" if number < 0 else ""


def _figure(value: Any) -> bool:
    """A finite number, not negative: what a figure is."""
    return not _not_a_figure(value)


def _shown(value: Any) -> str:
    """``value`` as JSON writes it, cut short: an integer of 400 digits is legal JSON."""
    text = json.dumps(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


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
