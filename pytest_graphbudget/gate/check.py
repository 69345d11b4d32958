"""The check of one model: a profile against its budget and its baseline entry, as plain data.

The pytest plugin (``pytest_plugin/``) and ``graph-budget check`` (``cli/check_files.py``) call
``evaluate``: the same findings, the same ``ModelResult``, whichever runs it. Nothing here
imports pytest or torch; a ``Profile`` comes in, findings and a ``ModelResult`` go out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate.budget_files import GROWTH_KEY
from pytest_graphbudget.gate.budgets import (
    DEFAULT_TOLERANCE,
    REGRESSION_FIGURES,
    Budget,
    Finding,
    check,
    coverage_findings,
)
from pytest_graphbudget.modes.fit import GROWTH

if TYPE_CHECKING:
    from pytest_graphbudget.engine.profile import Profile
    from pytest_graphbudget.gate.baseline import Baseline, Entry


UNCHECKED_KEY = "unchecked"
"""The key of the finding that says a model's budget checks nothing (``reports.common``)."""
STRICT_NEW = "strict: a model without a baseline entry is an error"
NEW_KEY = "baseline.new"
"""The key of the notice of a model the baseline file has no entry for: its limits are
checked, its growth is not (a new model, or a deleted line: the title counts them)."""
NOT_COMPARED_KEY = "baseline.not_compared"
"""The key of the warning on a model the base run (``--graph-budget-base``) could not profile:
not new, and its growth not compared (the title counts them apart from new models)."""


@dataclass
class ModelResult:
    """One profiled model's figures and verdict: what every report shows."""

    id: str
    label: str
    nodeid: str
    path: str
    line: int
    budget: dict[str, Any]
    findings: list[dict[str, Any]] = field(default_factory=list)
    profile: dict[str, Any] | None = None
    baseline: dict[str, float] | None = None
    baseline_modules: dict[str, int] | None = None  # own FLOPs per module, for "grew most"
    baseline_by_module: dict[str, dict[str, int]] | None = None  # params, memory, traffic
    baseline_entry: str | None = None  # the entry of another id it was compared with (renamed)
    error: str | None = None
    source: str = "marker"  # "marker" or "toml"
    graph_svg: str | None = None  # the partitioned graph, drawn only for an HTML report
    graph_note: str = ""  # why it was not drawn (no Graphviz, no nodes)
    layer_order: list[str] | None = None  # modules in the order they first run, when drawn
    no_baseline: bool = False  # the run had no baseline file: its regressions were not checked
    compared_with: str = ""  # the base it was compared with (``main@1a2b3c4``), not a file
    error_path: str = ""  # where the error is fixed when not at the budget: the baseline file
    error_line: int = 0  # and its line there (the entry's key or table), 0 when unknown

    @property
    def failed(self) -> bool:
        return self.error is not None or any(f["severity"] == "fail" for f in self.findings)

    def recorded(self) -> dict[str, Any] | None:
        """The figures its baseline entry would hold (``REGRESSION_FIGURES``), None without
        a profile: two models under one id with other figures would share one entry."""
        totals = (self.profile or {}).get("totals")
        return totals and {key: totals.get(key) for key in REGRESSION_FIGURES}

    def to_json(self) -> str:
        """The one serialised form that crosses xdist (a report property): every field, the
        profile as ``Profile.to_dict()`` wrote it. ``from_json`` is its inverse."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ModelResult:
        """The ``ModelResult`` that ``to_json`` wrote (on the controller, from a worker)."""
        return cls(**json.loads(text))

    def message(self) -> str:
        failed = any(f["severity"] == "fail" for f in self.findings)  # else an error alone
        said = "failed for" if failed or not self.error else "could not check"
        lines = [f"graph budget {said} {self.label} ({self.id}):"]
        if self.error:
            lines += [f"  {line}" for line in self.error.splitlines()]
        lines += [f"  {f['message']}" for f in self.findings if f["severity"] == "fail"]
        return "\n".join(lines)


@dataclass
class Checker:
    """What every check of one run shares: the baseline (read once, on first use) and the
    run's switches. ``update``: the baseline is being rewritten, so it judges nothing."""

    baseline_path: Path
    baseline_name: str  # the path as messages show it, relative to the project's root
    strict: bool = False
    update: bool = False
    update_command: str = "pytest --graph-budget --graph-budget-update"  # named by regressions
    draw: Callable[[ModelResult, Profile], None] | None = None
    """An HTML report is asked: draws each profile's graph where it is made
    (``reports.html_graph.draw``, given by the plugin or ``graph-budget check``)."""
    collected: set[str] | None = None  # the run's node ids once collected (None: no renames)
    partly: set[str] | None = field(default_factory=set)  # files run in part (renames.py)
    root: Path | None = None  # the project's root, that baseline ids are relative to
    baseline_from: str = ""  # where the baseline's path was configured; "" for the default
    compared_with: str = ""  # --graph-budget-base: the base the baseline holds, for the title
    base_errors: dict[str, str] = field(default_factory=dict)  # what the base could not profile
    _baseline: Baseline | None = field(default=None, repr=False)
    _orphans: set[str] | None = field(default=None, repr=False)

    @property
    def fix_command(self) -> str:
        """The command that rewrites the baseline, as hints name it; ``""`` against a base
        (``--graph-budget-base``), which has no file to rewrite."""
        return "" if self.compared_with else self.update_command

    @property
    def baseline(self) -> Baseline:
        """The baseline, read once. A configured one that does not exist is an error of
        every model (a misspelt path must not make every model new and the run green);
        without ``--update``, a missing default one is a run whose regressions go
        unchecked, which every report's title says."""
        from pytest_graphbudget.gate import baseline as baseline_file

        if self._baseline is None:
            self._baseline = baseline_file.read(self.baseline_path, self.baseline_name)
            if self._baseline.missing and self.baseline_from and not self.update:
                self._baseline.error = (
                    f"{self.baseline_name}: the baseline set in {self.baseline_from} does not "
                    f"exist; create it with {self.update_command} or fix the path"
                )
        return self._baseline

    def orphans(self) -> set[str]:
        """Entries whose model is gone (its test, table or file), read once the run is
        collected: what a renamed model may be compared with."""
        from pytest_graphbudget.gate.renames import stale_entries

        if self._orphans is None:
            keys = self.baseline.keys()
            collected = self.collected or set()
            self._orphans = stale_entries(keys, collected, self.root, partly=self.partly)
        return self._orphans

    def rematch(self, results: list[ModelResult], nodeid: str = "") -> None:
        """Once a test's (``nodeid``) or a table's models are judged: each with no entry of
        its own is compared with the one orphan entry that has its modules (``renames.py``),
        or the test's own entry that none of its models has (a renamed fixture). What is
        still compared with no entry then says so (``settle``)."""
        self._rematch(results, nodeid)
        for result in results:
            settle(result, self)

    def _rematch(self, results: list[ModelResult], nodeid: str = "") -> None:
        from pytest_graphbudget.gate import renames

        new = [r for r in results if r.profile is not None and r.baseline is None]
        if not new or self.update or self.collected is None or self.baseline.error:
            return
        pool = set(self.orphans())
        if nodeid:
            pool |= renames.orphans_of_test(self.baseline.keys(), nodeid, {r.id for r in results})
        known = self.baseline.entries
        orphans = {k: known[k] for k in pool if k in known and k not in self.baseline.problems}
        for result in new:
            renames.rematch(result, orphans, self)

    def evaluate(
        self,
        result: ModelResult,
        budget: Budget,
        run: Callable[[str], Profile],
        hardware: str | None = None,
    ) -> Profile | None:
        """Profile (``run(hardware)``) and judge into ``result``; the profile, or None when
        profiling failed (then ``result.error`` says why, in one line). The id and label of
        a model profiled in train mode or another dtype carry its ``variant`` (``m@train``):
        its baseline entry is its own."""
        result.id, result.label = budget.variant.tag(result.id), budget.variant.tag(result.label)
        result.no_baseline = self.baseline.missing and not (self.baseline.error or self.update)
        result.compared_with = self.compared_with
        try:
            prof = run(hardware or budget.hardware)
        except GraphBudgetError as exc:
            result.error = str(exc)
            return None
        except Exception as exc:  # a bug of ours: still a result, never a missing row
            result.error = internal_error(exc)
            return None
        judge(result, prof, budget, self)
        return prof


def findings(
    prof: Profile,
    budget: Budget,
    base: Entry | None = None,
    *,
    strict: bool = False,
    baseline_name: str = "budgets/baseline.toml",
    update_command: str = "pytest --graph-budget --graph-budget-update",
) -> list[Finding]:
    """Every finding on one profile: its limits, its ops without a formula (failures only
    with ``strict``) and, given a baseline entry, its growth beyond the budget's tolerance."""
    found = check(prof, budget) + coverage_findings(prof, budget, strict)
    if base is not None:
        from pytest_graphbudget.gate import baseline as baseline_file

        current = baseline_file.entry_from(prof)
        found += baseline_file.compare(
            current, base, budget.tolerance, baseline_name, update_command
        )
        found += wide_tolerance(current, base, budget.tolerance, found)
    return found


def wide_tolerance(current: Entry, base: Entry, tolerance: float, found: list) -> list[Finding]:
    """One notice naming the figures grown past the default tolerance yet within the budget's
    wider one, and that tolerance: ``tolerance = 0.5`` is 50% (0.5% may have been meant), and
    a +21% regression had passed without a word."""
    from pytest_graphbudget.gate import figures
    from pytest_graphbudget.units import format_ratio

    failed = {f.key for f in found if f.severity == "fail"}
    grown = []
    for name in REGRESSION_FIGURES if tolerance > DEFAULT_TOLERANCE else ():
        old, new = base.figures.get(name), current.figures.get(name)
        if old and new is not None and f"baseline.{name}" not in failed:
            if figures.grew_beyond(old, new, DEFAULT_TOLERANCE):
                grown.append((name, f"{figures.get(name).label} +{format_ratio(new / old - 1)}"))
    if not grown:
        return []
    said = f"grew within tolerance {format_ratio(tolerance)}: {', '.join(g for _, g in grown)}"
    name = grown[0][0]
    return [Finding("notice", f"baseline.{name}", said, current.figures[name], base.figures[name])]


def judge(result: ModelResult, prof: Profile, budget: Budget, checker: Checker) -> ModelResult:
    """Fill ``result`` from a profile: its figures, findings and baseline entry. A baseline
    entry it cannot trust is the model's error (it would let regressions by)."""
    result.profile = prof.to_dict()
    base = checker.baseline.entries.get(result.id)
    if not checker.update:
        entry_problems(result, prof, base, checker)
    if base is not None:
        result.baseline = dict(base.figures)
        result.baseline_modules = dict(base.modules)
        result.baseline_by_module = {k: dict(v) for k, v in base.by_module.items()}
    compared = None if checker.update else base
    found = findings(
        prof,
        budget,
        compared,
        strict=checker.strict,
        baseline_name=checker.baseline_name,
        update_command=checker.fix_command,
    )
    moved = [f for f in found if f.key.startswith("baseline.")]
    if moved:
        from pytest_graphbudget.gate.environment import counter_moved, current

        counter = counter_moved(checker.baseline.environment, current(checker.root))
        if counter:  # said before any layer is blamed, in the clause a JUnit message keeps
            change, _, rest = moved[0].message.partition("; ")
            moved[0].message = f"{change}: {counter} since the baseline" + (rest and f"; {rest}")
    result.findings = [asdict(f) for f in found]
    if checker.draw is not None:
        checker.draw(result, prof)
    return result


def entry_problems(
    result: ModelResult, prof: Profile, base: Entry | None, checker: Checker
) -> None:
    """What the model's baseline entry cannot be trusted with (a figure or a module's line
    deleted, a bad value) as its error, located at the baseline's line, where it is fixed."""
    from pytest_graphbudget.gate import baseline as baseline_file
    from pytest_graphbudget.gate import module_gaps

    problems = checker.baseline.problems_of(result.id)
    if base is not None:
        current, name = baseline_file.entry_from(prof), checker.baseline_name
        fix, path = baseline_file.FIX, checker.baseline_path
        problems += module_gaps.problems(result.id, current, base, path, name, fix)
    if not problems:
        return
    result.error = "\n".join(problems)
    place = re.match(rf"{re.escape(checker.baseline_name)}:(\d+):", problems[0])
    if place and not checker.compared_with:  # a base's label names no file
        result.error_path, result.error_line = checker.baseline_name, int(place[1])


def settle(result: ModelResult, checker: Checker) -> None:
    """A judged model that was compared with no baseline entry (none of its own, none it was
    matched with as renamed) says what that leaves unchecked: a notice, so that no report
    calls a budget without limits "within budget", or under ``strict`` an error."""
    if result.profile is None or result.error is not None or result.baseline is not None:
        return
    gap = None if checker.update else unbaselined(result.budget, checker)
    errors = checker.base_errors  # a table's id, or the test's whose fixture raised
    failed = errors.get(result.id, errors.get(result.id.rsplit("::", 1)[0]))
    if failed is not None:  # not new: the base's run could not profile it
        why = failed or "an error"
        gap = f"not compared: {checker.baseline_name} could not profile it ({why})"
        if not checker.strict:
            result.findings.append(asdict(Finding("warn", NOT_COMPARED_KEY, gap)))
            return
    if gap and checker.strict:  # a closed gate: every model compared with its baseline
        result.error = f"{gap} ({STRICT_NEW})"
    elif gap:
        result.findings.append(asdict(Finding("notice", UNCHECKED_KEY, gap)))
    elif checker.compared_with and not checker.update:  # the title counts it, as below
        new = f"not in {checker.baseline_name}: its growth is not checked (new on this branch?)"
        result.findings.append(asdict(Finding("notice", NEW_KEY, new)))
    elif not (checker.update or checker.baseline.missing):
        name = checker.baseline_name
        new = (
            f"not in {name}: its growth is not checked (a new model, or a deleted line?); "
            f"record it with {checker.update_command} and commit {name}"
        )
        result.findings.append(asdict(Finding("notice", NEW_KEY, new)))


def unbaselined(budget: dict[str, Any], checker: Checker) -> str | None:
    """What a model without a baseline entry misses (``budget`` as ``budget_dict`` gives it):
    with no limit either, everything ("nothing checked yet"); with limits, its regressions
    (said only under ``strict``)."""
    if checker.compared_with:  # no file to record it in: the base has it once merged
        where = f"not in {checker.baseline_name} (new on this branch?)"
        if not budget["limits"] and not budget["bottleneck"]:
            return (
                f"nothing checked yet: no limit, and {where}; give it a limit such as "
                "flops_max, or it is compared once the base has it"
            )
        if checker.strict:
            return f"{where}, so its regressions are not checked"
        return None
    record = f"record it with {checker.update_command} and commit {checker.baseline_name}"
    if not budget["limits"] and not budget["bottleneck"]:
        return (
            f"nothing checked yet: no limit and no entry in {checker.baseline_name}; "
            f"{record}, or give it a limit such as flops_max"
        )
    if checker.strict:
        return f"no entry in {checker.baseline_name}, so its regressions are not checked; {record}"
    return None


def budget_dict(budget: Budget) -> dict[str, Any]:
    """The budget as the reports read it (plain JSON)."""
    return {
        "limits": dict(budget.limits),
        "bottleneck": dict(budget.bottleneck),
        "by": budget.bottleneck_by,
        "hardware": budget.hardware,
        "execution": budget.execution,
        "tolerance": budget.tolerance,
        "allow_unsupported": _allowed(budget.allow_unsupported),
        "lines": dict(budget.lines),
    }


def _allowed(allowed: bool | tuple[str, ...]) -> bool | list[str]:
    """``allow_unsupported`` as JSON: true, false or the list of op names."""
    return list(allowed) if isinstance(allowed, tuple) else allowed


def internal_error(exc: BaseException) -> str:
    """One line for an exception our own code raised: what, where, and that it is our bug."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    what = " ".join(str(exc).split())[:200]
    return (
        f"internal error in pytest-graphbudget: {type(exc).__name__}: {what}{where}; "
        "this is a bug, please report it"
    )


def relative(path: str, root: Path) -> str:
    """``path`` relative to the project's root, as messages and reports show it."""
    try:
        return str(Path(path).resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return path


def _judge(fits: dict[str, Any], axis: str, word: str) -> list[dict[str, Any]]:
    from pytest_graphbudget.gate import figures

    allowed = GROWTH[word]
    found = []
    for name, fitted in fits.items():
        label = figures.get(name).label
        if not fitted.polynomial:
            message = (
                f"{label} is not a polynomial over the points, so its growth in {axis} was not "
                f"judged against {GROWTH_KEY} {axis} = {word!r}"
            )
            found.append(_finding("warn", message))
            continue
        degree = fitted.degree(axis)
        if degree > allowed:
            grows = next(w for w, d in GROWTH.items() if d == degree)
            checked = fitted.held_out and axis not in fitted.unverified
            spare = "" if checked else "; no point to spare verified the degree"
            message = (
                f"{label} grows with {axis} to degree {degree} ({grows}: {fitted.formula()}"
                f"{spare}), faster than {GROWTH_KEY} {axis} = {word!r}"
            )
            found.append(_finding("fail", message, degree, allowed))
    return found


def _finding(severity: str, message: str, value: int | None = None, limit: int | None = None):
    return {
        "severity": severity,
        "key": GROWTH_KEY,
        "message": message,
        "value": value,
        "limit": limit,
    }
