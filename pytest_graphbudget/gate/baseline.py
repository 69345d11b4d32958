"""The baseline: every model's figures and per-module FLOPs, in ``budgets/baseline.toml``.

It is written sorted and stable so that a pull request's diff of the file shows what changed.
Writes take a file lock (in the temporary directory, never beside the baseline) and replace the
file atomically, so that pytest-xdist workers updating it at once never lose each other's entries
or leave a half-written file.

A hand-edited entry is checked when it is read (``read``): a value the check cannot use is a
one-line problem that names the file and line, reported as that model's error.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_graphbudget.engine.profile import layer_label
from pytest_graphbudget.errors import GraphBudgetError, closest, toml_position
from pytest_graphbudget.gate import environment, figures, module_gaps
from pytest_graphbudget.gate.budgets import (
    REGRESSION_FIGURES,
    ROOT,
    Finding,
    own_values,
    owned_weights,
    subgraph_value,
)
from pytest_graphbudget.gate.toml_lines import key_lines
from pytest_graphbudget.units import UnitError, format_ratio, parse

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HEADER = """\
Written by `pytest --graph-budget --graph-budget-update`. Commit it: a model whose figures grow
beyond the tolerance above these fails even under its maximum. Do not edit by hand.
"""
BY_MODULE = tuple(f.key for f in figures.TABLE if f.baseline and f.by_module and f.key != "flops")
"""Figures recorded per module besides FLOPs (which are ``modules``), so that their growth
names the layers too; ``Figure.by_module`` says how each is attributed."""


@dataclass
class Entry:
    """One model's recorded figures, the FLOPs of each module's own ops (``modules``), and
    its own params, memory live at the peak and traffic by module (``by_module``)."""

    figures: dict[str, float]
    modules: dict[str, int] = field(default_factory=dict)
    by_module: dict[str, dict[str, int]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict, compare=False)  # classes, to name

    def layers(self, figure: str) -> dict[str, int]:
        """A figure by module (own share, children excluded); empty when not recorded."""
        return self.modules if figure == "flops" else self.by_module.get(figure, {})


def by_subgraph_module(data: Mapping[str, Any], figure: str) -> dict:
    """A figure of a profile by the module each subgraph is named after (its anchor's), peak
    memory's weights once by owner (``owned_weights``); the rest is ``<root>``'s (inputs)."""
    found = owned_weights(data) if figure == "peak_memory_bytes" else {}
    for s in data["subgraphs"]:
        value = subgraph_value(s, figure, weights=figure != "peak_memory_bytes")
        found[s["module"] or ROOT] = found.get(s["module"] or ROOT, 0) + int(value)
    found = {m: v for m, v in found.items() if v > 0}
    unattributed = int(data["totals"][figure]) - sum(found.values())
    if unattributed > 0:
        found[ROOT] = found.get(ROOT, 0) + unattributed
    return found


def entry_from(profile: Any) -> Entry:
    """The baseline entry of a profile (a ``Profile`` or its ``to_dict()``)."""
    data = profile if isinstance(profile, Mapping) else profile.to_dict()
    totals = data["totals"]
    recorded = {name: totals[name] for name in REGRESSION_FIGURES}
    modules = own_values(data["modules"], "flops", totals["flops"])
    by_module = {
        key: own_values(data["modules"], key, totals[key])
        if figures.get(key).by_module == figures.MODULES
        else by_subgraph_module(data, key)
        for key in BY_MODULE
    }
    return Entry(
        recorded,
        {m: int(v) for m, v in sorted(modules.items())},
        {f: {m: int(v) for m, v in sorted(layers.items())} for f, layers in by_module.items()},
        {path: m["type"] for path, m in data["modules"].items() if m.get("type")},
    )


def load(path: Path) -> dict[str, Entry]:
    """Entries by model id; an absent file is an empty baseline, a malformed one an error.
    A file with bad values gives what could be read of them (``read`` says what is wrong)."""
    found = read(path)
    if found.error:
        raise GraphBudgetError(found.error)
    return found.entries


@dataclass
class Baseline:
    """A baseline file as read: the entries, and one line per problem with each of them.

    A hand-edited value the check cannot use (a typo in a key, a negative or unreadable
    figure) must not switch the check off without a word: it is a problem of that model,
    which the plugin reports as an error. The other models are checked as usual.
    """

    entries: dict[str, Entry] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)  # model id -> messages
    raw: dict[str, Any] = field(default_factory=dict)  # the tables of models with problems
    error: str = ""  # a problem of the whole file: no model can trust its entry
    missing: bool = False  # there is no file: nothing is compared (the caller says if it may)
    environment: dict[str, str] = field(default_factory=dict)  # measured in; {} in old files

    def keys(self) -> set[str]:
        """Every model the file has an entry for, readable or not."""
        return set(self.entries) | set(self.problems)

    def problems_of(self, model: str) -> list[str]:
        """What the check of ``model`` cannot trust: the file's problem, or its entry's."""
        return [self.error] if self.error else list(self.problems.get(model, []))


ENTRY_KEYS = (*REGRESSION_FIGURES, "modules", "by_module")
FIX = "fix it or rewrite it with --graph-budget-update"


def read(path: Path, name: str | None = None) -> Baseline:
    """Read and check a baseline file; ``name`` is how messages name it (default: ``path``).

    Never raises for what the file holds: a malformed file is ``error``, a bad entry is in
    ``problems`` (``file:line: [model] key: what is wrong``) and the rest of it still counts.
    """
    name = name or str(path)
    if not path.exists():
        return Baseline(missing=True)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        return Baseline(error=f"{name}: cannot read the baseline ({reason}); {FIX}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return Baseline(error=_syntax_error(name, exc))
    found = Baseline()
    lines: dict[tuple[str, ...], int] | None = None

    def where(*keys: str) -> str:
        nonlocal lines
        if lines is None:  # only a file with a problem is searched for lines
            lines = key_lines(text)
        for end in range(len(keys), 0, -1):
            if keys[:end] in lines:
                return f"{name}:{lines[keys[:end]]}"
        return name

    unknown = [key for key in data if key not in ("models", "environment")]
    if unknown:
        key = unknown[0]
        found.error = f"{where(key)}: unknown table {key!r}{closest(key, ['models'])}; {FIX}"
    found.environment, bad = environment.recorded(data.get("environment", {}))  # context
    found.error = f"{where('environment', *bad[0])}: {bad[1]}; {FIX}" if bad else found.error
    models = data.get("models", {})
    if not isinstance(models, dict):
        found.error = f"{where('models')}: models must be a table of models; {FIX}"
        return found
    for model, table in models.items():
        entry, problems = _entry(table, lambda *keys, m=model: where("models", m, *keys))
        if entry is not None:
            found.entries[model] = entry
        if problems:
            found.problems[model] = [f"{at}: [{model}] {what}" for at, what in problems]
            found.raw[model] = table
    return found


def _entry(table: Any, where: Any) -> tuple[Entry | None, list[tuple[str, str]]]:
    """One model's entry, with what could be read of it, and its problems as
    (``file:line``, ``key: what is wrong``); ``where(*keys)`` finds the line of a key."""
    problems: list[tuple[str, str]] = []

    def problem(message: str, *keys: str) -> None:
        shown = ".".join(_toml_key(k) for k in keys)
        problems.append((where(*keys), f"{shown + ': ' if keys else ''}{message}; {FIX}"))

    if not isinstance(table, dict):
        problem(f"must be a table of figures, got {_type_name(table)}")
        return None, problems
    recorded: dict[str, float] = {}
    modules: dict[str, int] = {}
    by_module: dict[str, dict[str, int]] = {}
    for key, value in table.items():
        if key in REGRESSION_FIGURES:
            number = _figure(value, figures.get(key).unit, lambda m, k=key: problem(m, k))
            if number is not None:
                recorded[key] = number
        elif key == "modules":
            modules = _layers(value, "flops", problem, key)
        elif key == "by_module":
            if not isinstance(value, dict):
                problem(f"must be a table of figures by module, got {_type_name(value)}", key)
                continue
            for figure, layers in value.items():
                if figure in BY_MODULE:
                    by_module[figure] = _layers(layers, figure, problem, key, figure)
                else:
                    problem(f"unknown figure{closest(figure, BY_MODULE)}", key, figure)
        else:
            problem(f"unknown key{closest(key, ENTRY_KEYS)}", key)
    missing = [key for key in REGRESSION_FIGURES if key not in table]
    if missing:  # a figure the entry does not record would never be compared
        problem(f"no {', '.join(missing)}: a figure missing from the entry is not checked")
    return Entry(recorded, modules, by_module), problems


def _layers(value: Any, figure: str, problem: Any, *keys: str) -> dict[str, int]:
    """A table of one figure by module, with what could be read of it."""
    if not isinstance(value, dict):
        problem(f"must be a table of modules, got {_type_name(value)}", *keys)
        return {}
    stray = [key for key in value if key in REGRESSION_FIGURES]
    if len(stray) > 1:  # the next entry's figures, its [models."..."] line deleted above them
        lost = 'are a model\'s figures, not modules: was the [models."..."] line above deleted?'
        problem(f"{', '.join(stray)} {lost}", *keys, stray[0])
    found = {}
    for module, v in value.items():
        number = _figure(v, figures.get(figure).unit, lambda m, x=module: problem(m, *keys, x))
        if number is not None:
            found[str(module)] = int(number)
    return found


def _figure(value: Any, kind: str, problem: Any) -> float | None:
    """A figure as the check uses it, or None after ``problem(message)``: a number that is
    finite and not negative, or a string with a unit as a budget writes it (``"635M"``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        problem(f"expected a number, got {_type_name(value)}")
        return None
    if isinstance(value, str):
        try:
            number = parse(value, kind)
        except UnitError as exc:
            problem(str(exc))
            return None
    elif isinstance(value, int) and abs(value) >= 2**63:
        problem(f"{value} is beyond a 64-bit integer")
        return None
    else:
        number = value
    if math.isnan(number) or math.isinf(number):
        problem(f"expected a finite number, got {value!r}")
        return None
    if number < 0:
        problem(f"a figure cannot be negative, got {value!r}")
        return None
    return number


def _type_name(value: Any) -> str:
    """How TOML calls the type of a value: ``true`` is a boolean, ``[1]`` an array."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    names = {dict: "a table", list: "an array", int: "an integer", float: "a float"}
    return names.get(type(value), f"a {type(value).__name__}")


def _toml_key(key: str) -> str:
    """A key as TOML writes it: bare when it can be, quoted otherwise."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f'"{key}"'


def _syntax_error(name: str, exc: Exception) -> str:
    """``file:line: malformed baseline (message)`` for a TOML syntax error."""
    position = toml_position(exc)
    if position:
        message, line, _ = position
        return f"{name}:{line}: malformed baseline ({message}); {FIX}"
    return f"{name}: malformed baseline ({exc}); {FIX}"


def update(
    path: Path,
    entries: Mapping[str, Entry],
    remove: set[str] = frozenset(),
    environment: Mapping[str, str] | None = None,
) -> None:
    """Merge ``entries`` into the baseline (dropping ``remove``) under a lock, atomically;
    ``environment`` (what they were measured in) replaces the file's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path):
        found = read(path)  # malformed: rewritten from this run's figures alone
        merged = {k: v for k, v in found.entries.items() if k not in found.raw}
        merged.update(entries)
        # An entry this run neither rewrote nor removed is kept as written even where it is
        # wrong: dropping it would switch its model's check off without a word.
        kept = {k: v for k, v in found.raw.items() if k not in entries and k not in remove}
        for key in remove:
            merged.pop(key, None)
        text = dumps(merged, kept, environment or found.environment)
        handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "w") as out:
                out.write(text)
            os.chmod(temp, 0o666 & ~_umask())  # mkstemp makes it private; a baseline is not
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise


@contextmanager
def locked(baseline: Path, timeout: float = 120.0) -> Iterator[None]:
    """Hold the baseline's lock while the block runs. The lock file lives in the temporary
    directory, named after the baseline's resolved path: every process writing this baseline
    shares it, and nothing is left beside the baseline for ``git status`` to show."""
    from filelock import FileLock, Timeout

    digest = hashlib.sha256(str(Path(baseline).resolve()).encode()).hexdigest()[:16]
    lock = Path(tempfile.gettempdir()) / f"graph-budget-{digest}.lock"
    try:
        with FileLock(str(lock), timeout=timeout):
            yield
    except Timeout:
        raise GraphBudgetError(
            f"{baseline}: another run has held the baseline's lock ({lock}) for {timeout:.0f}s"
        ) from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def dumps(
    entries: Mapping[str, Entry], kept: Mapping[str, Any] | None = None, environment: Any = None
) -> str:
    """The baseline file's text: models and modules sorted, integers exact; ``kept`` holds
    tables written back as they were read (entries with problems that no run replaced)."""
    import tomlkit

    doc = tomlkit.document()
    for line in HEADER.splitlines():
        doc.add(tomlkit.comment(line))
    if environment:
        doc["environment"] = dict(sorted(environment.items()))
    models = tomlkit.table(is_super_table=True)
    kept = kept or {}
    for key in sorted({*entries, *kept}):
        if key not in entries:
            models[key] = kept[key]
            continue
        entry = entries[key]
        table = tomlkit.table()
        for name in sorted(entry.figures):
            value = entry.figures[name]
            table[name] = int(value) if float(value).is_integer() else float(value)
        modules = tomlkit.table()
        for module in sorted(entry.modules):
            modules[module] = int(entry.modules[module])
        table["modules"] = modules
        if entry.by_module:
            by_module = tomlkit.table(is_super_table=True)
            for figure in sorted(entry.by_module):
                layers = tomlkit.table()
                for module in sorted(entry.by_module[figure]):
                    layers[module] = int(entry.by_module[figure][module])
                by_module[figure] = layers
            table["by_module"] = by_module
        models[key] = table
    doc["models"] = models
    return tomlkit.dumps(doc)


UPDATE = "pytest --graph-budget --graph-budget-update"
"""The command that rewrites the baseline, as the plugin's messages name it."""


def accept_hint(baseline: str = "budgets/baseline.toml", update: str = UPDATE) -> str:
    """How to accept an intended change: the end of every model's regression message. No
    ``update`` command: compared with a base (``baseline`` names it), not a file."""
    if not update:
        return f"if intended, say so in review: compared with {baseline}, no file to update"
    return f"if intended, run {update} and commit {baseline}"


def compare(
    current: Entry,
    base: Entry,
    tolerance: float,
    baseline: str = "budgets/baseline.toml",
    update: str = UPDATE,
    entry: str = "",
) -> list[Finding]:
    """Figures beyond baseline x (1 + tolerance) fail, naming the modules that grew most and
    ending with how to accept the change (``baseline`` is the file to commit, ``update`` the
    command that rewrites it); drops beyond tolerance are notices. A figure recorded as 0
    fails as soon as it is not. ``entry`` names the entry compared with when it is not the
    model's own (a renamed model, ``renames.py``)."""
    findings = []
    for name in REGRESSION_FIGURES:
        if name not in base.figures or name not in current.figures:
            continue
        old, new = base.figures[name], current.figures[name]
        figure = figures.get(name)
        label = figure.label
        shown = (
            f"({figure.format(old)} -> {figure.format(new)}, tolerance {format_ratio(tolerance)})"
        )
        if entry and not findings:  # said once, in the first finding
            shown += f" against baseline entry {entry!r} (renamed?)"
        if figures.grew_beyond(old, new, tolerance):
            growth = f"+{format_ratio(new / old - 1)}" if old else "from 0"
            message = f"{label} regressed {growth} {shown}"
            # Without the baseline's own split (or with a line of it deleted), every module it
            # lacks would look grown by its whole value.
            before, layers = base.layers(name), current.layers(name)
            whole = before and not module_gaps.lost(layers, before, old)
            grown = module_gaps.grew_most(layers, before) if whole else []
            if grown:
                message += "; grew most: " + ", ".join(
                    f"{layer_label(m, current.types.get(m))} +{figure.format(d)}" for m, d in grown
                )
            findings.append(Finding("fail", f"baseline.{name}", message, new, old))
        elif old and new < old * (1 - tolerance):
            tighten = f"the baseline with {update.split()[-1]}" if update else "its limits"
            message = f"{label} dropped -{format_ratio(1 - new / old)} {shown}: tighten {tighten}"
            findings.append(Finding("notice", f"baseline.{name}", message, new, old))
    failed = [f for f in findings if f.severity == "fail"]
    if failed:
        failed[-1].message += f"; {accept_hint(baseline, update)}"
    return findings
