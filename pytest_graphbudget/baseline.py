"""The baseline: every model's figures and per-module FLOPs, in ``budgets/baseline.toml``.

It is written sorted and stable so that a pull request's diff of the file shows what changed.
Writes take a file lock and replace the file atomically, so that pytest-xdist workers updating
it at once never lose each other's entries or leave a half-written file.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_graphbudget.budgets import LIMITS, REGRESSION_FIGURES, Finding
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.units import format_count, format_ratio

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HEADER = """\
Written by `pytest --graph-budget --graph-budget-update`. Commit it: a model whose figures grow
beyond the tolerance above these fails even under its maximum. Do not edit by hand.
"""
ROOT = "<root>"
LABELS = {limit.figure: limit for limit in LIMITS.values()}


@dataclass
class Entry:
    """One model's recorded figures and the FLOPs of each module's own ops."""

    figures: dict[str, float]
    modules: dict[str, int] = field(default_factory=dict)


def own_flops(modules: Mapping[str, Any]) -> dict[str, int]:
    """Per-module FLOPs of the module's own ops (children excluded), from inclusive figures."""
    inclusive = {path: _flops(entry) for path, entry in modules.items()}
    own = dict(inclusive)
    for path, flops in inclusive.items():
        parent = path.rpartition(".")[0] if "." in path else None
        if parent is not None and parent in own:
            own[parent] -= flops
    return {path or ROOT: flops for path, flops in own.items() if flops > 0}


def _flops(entry: Any) -> int:
    return entry["flops"] if isinstance(entry, Mapping) else entry.flops


def entry_from(profile: Any) -> Entry:
    """The baseline entry of a profile (a ``Profile`` or its ``to_dict()``)."""
    data = profile if isinstance(profile, Mapping) else profile.to_dict()
    totals = data["totals"]
    figures = {name: totals[name] for name in REGRESSION_FIGURES}
    modules = own_flops(data["modules"])
    unattributed = totals["flops"] - sum(modules.values())
    if unattributed > 0:
        modules[ROOT] = modules.get(ROOT, 0) + unattributed
    return Entry(figures, dict(sorted(modules.items())))


def load(path: Path) -> dict[str, Entry]:
    """Entries by model id; an absent file is an empty baseline."""
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise GraphBudgetError(
            f"{path}: malformed baseline ({exc}); fix it or rewrite it with --graph-budget-update"
        ) from None
    entries = {}
    for key, table in data.get("models", {}).items():
        table = dict(table)
        modules = {str(k): int(v) for k, v in dict(table.pop("modules", {})).items()}
        entries[key] = Entry(
            {k: v for k, v in table.items() if isinstance(v, (int, float))}, modules
        )
    return entries


def update(path: Path, entries: Mapping[str, Entry], remove: set[str] = frozenset()) -> None:
    """Merge ``entries`` into the baseline (dropping ``remove``) under a lock, atomically."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=120):
        try:
            merged = load(path)
        except GraphBudgetError:  # unreadable: rewritten from this run's figures alone
            merged = {}
        merged.update(entries)
        for key in remove:
            merged.pop(key, None)
        text = dumps(merged)
        handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "w") as out:
                out.write(text)
            os.chmod(temp, 0o666 & ~_umask())  # mkstemp makes it private; a baseline is not
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def dumps(entries: Mapping[str, Entry]) -> str:
    """The baseline file's text: models and modules sorted, integers exact."""
    import tomlkit

    doc = tomlkit.document()
    for line in HEADER.splitlines():
        doc.add(tomlkit.comment(line))
    models = tomlkit.table(is_super_table=True)
    for key in sorted(entries):
        entry = entries[key]
        table = tomlkit.table()
        for name in sorted(entry.figures):
            value = entry.figures[name]
            table[name] = int(value) if float(value).is_integer() else float(value)
        modules = tomlkit.table()
        for module in sorted(entry.modules):
            modules[module] = int(entry.modules[module])
        table["modules"] = modules
        models[key] = table
    doc["models"] = models
    return tomlkit.dumps(doc)


def compare(current: Entry, base: Entry, tolerance: float) -> list[Finding]:
    """Figures beyond baseline x (1 + tolerance) fail; drops beyond tolerance are notices."""
    findings = []
    for name in REGRESSION_FIGURES:
        if name not in base.figures or name not in current.figures:
            continue
        old, new = base.figures[name], current.figures[name]
        label = LABELS[name].label if name in LABELS else name
        shown = (
            f"({LABELS[name].format(old)} -> {LABELS[name].format(new)}, "
            f"tolerance {format_ratio(tolerance)})"
        )
        if old and new > old * (1 + tolerance):
            growth = f"+{format_ratio(new / old - 1)}"
            message = f"{label} regressed {growth} {shown}"
            if name == "flops":
                grown = grew_most(current.modules, base.modules)
                if grown:
                    message += "; grew most: " + ", ".join(
                        f"{m} +{format_count(d)}" for m, d in grown
                    )
            findings.append(Finding("fail", f"baseline.{name}", message, new, old))
        elif old and new < old * (1 - tolerance):
            message = (
                f"{label} dropped -{format_ratio(1 - new / old)} {shown}: tighten the "
                f"baseline with --graph-budget-update"
            )
            findings.append(Finding("notice", f"baseline.{name}", message, new, old))
    return findings


def grew_most(
    current: Mapping[str, int], base: Mapping[str, int], n: int = 3
) -> list[tuple[str, int]]:
    """The modules whose own FLOPs grew most, largest first."""
    deltas = [(m, current.get(m, 0) - base.get(m, 0)) for m in set(current) | set(base)]
    return sorted([d for d in deltas if d[1] > 0], key=lambda d: (-d[1], d[0]))[:n]
