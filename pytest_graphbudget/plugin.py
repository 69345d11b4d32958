"""pytest hooks: markers, options, model fixtures, TOML budget items, verdicts.

Registered through the ``pytest11`` entry point. Without ``--graph-budget`` this module only
registers the markers and the options: nothing else runs and torch is never imported. With
it, a ``GraphBudget`` manager is registered in ``pytest_configure`` and does the work; its
state hangs off ``config.stash``.

The checks themselves are pure functions in ``budgets.py`` and ``baseline.py``; rendering
lives in ``reports/``.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_graphbudget import figures
from pytest_graphbudget.budgets import (
    BOTTLENECK_KEYS,
    LIMITS,
    MODEL_KEYS,
    Budget,
    build,
    check,
    coverage_findings,
)
from pytest_graphbudget.case import as_case
from pytest_graphbudget.errors import GraphBudgetError, one_line, toml_error

if TYPE_CHECKING:
    from pytest_graphbudget.baseline import Baseline, Entry
    from pytest_graphbudget.settings import Settings

MARKERS = {
    **figures.markers(),
    "bottleneck": "bottleneck(compute_bound_min=None, memory_bound_max=None, by='count'): "
    "bound the compute-/memory-bound mix (by 'count', 'flops' or 'time'); needs --graph-budget",
    "graph_budget": "graph_budget(hardware='generic', tolerance='1%', name=None, "
    "allow_unsupported=False): per-test settings of pytest-graphbudget",
}
STATE = pytest.StashKey["GraphBudget"]()
ITEM_MODELS = pytest.StashKey[list]()
ITEM_BUDGET = pytest.StashKey[Budget]()
ITEM_UNCHECKED = pytest.StashKey[list]()
ITEM_TYPOS = pytest.StashKey[list]()
ITEM_SENT = pytest.StashKey[int]()  # how many of ITEM_MODELS went out in a report
PROPERTY = "graph_budget"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graph-budget", "FLOP and memory budgets of PyTorch models")
    group.addoption("--graph-budget", action="store_true", help="profile models and check budgets")
    group.addoption(
        "--graph-budget-update",
        action="store_true",
        help="write the figures of every profiled model to the baseline file",
    )
    group.addoption(
        "--graph-budget-strict",
        action="store_true",
        help="fail a model whose graph has ops without a cost formula",
    )
    group.addoption("--graph-budget-junit", metavar="PATH", help="write a JUnit XML report")
    group.addoption("--graph-budget-json", metavar="PATH", help="write every profile as JSON")
    group.addoption(
        "--graph-budget-markdown", metavar="PATH", help="write the pull-request comment"
    )
    group.addoption(
        "--graph-budget-cache-clear", action="store_true", help="empty the profile cache first"
    )
    group.addoption("--graph-budget-no-cache", action="store_true", help="do not cache profiles")
    group.addoption(
        "--graph-budget-hardware", metavar="NAME", help="hardware profile for every model"
    )


def pytest_configure(config: pytest.Config) -> None:
    # Registered always, so that --strict-markers never breaks a run without --graph-budget.
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    if config.getoption("graph_budget"):
        manager = GraphBudget(config)
        config.stash[STATE] = manager
        config.pluginmanager.register(manager, "graph-budget")


@pytest.fixture
def graph_profile(request: pytest.FixtureRequest):
    """``graph_profile(model, inputs, kwargs=None, name=None, hardware=None)`` -> Profile.

    With ``--graph-budget`` the profile is also checked against the test's markers.
    """
    manager = request.config.stash.get(STATE, None)

    def run(
        model: Any,
        inputs: Any = (),
        kwargs: dict | None = None,
        *,
        name: str | None = None,
        hardware: str | None = None,
    ):
        if manager is None:
            from pytest_graphbudget.profile import profile_model

            return profile_model(model, inputs, kwargs, hardware=hardware or "generic", name=name)
        return manager.profile_for_item(request.node, model, inputs, kwargs, name, hardware)

    return run


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
    error: str | None = None
    source: str = "marker"  # "marker" or "toml"

    @property
    def failed(self) -> bool:
        return self.error is not None or any(f["severity"] == "fail" for f in self.findings)

    def message(self) -> str:
        lines = [f"graph budget failed for {self.label} ({self.id}):"]
        if self.error:
            lines += [f"  {line}" for line in self.error.splitlines()]
        lines += [f"  {f['message']}" for f in self.findings if f["severity"] == "fail"]
        return "\n".join(lines)


class BudgetFailure(Exception):
    """Raised by a TOML budget item whose model failed its budget; the message is the report."""


class GraphBudget:
    """The plugin's state and hooks while ``--graph-budget`` is on."""

    def __init__(self, config: pytest.Config):
        from pytest_graphbudget.cache import ProfileCache

        self.config = config
        self.settings = project_settings(config.rootpath)
        self.update = config.getoption("graph_budget_update")
        self.strict = config.getoption("graph_budget_strict") or self.settings.strict
        self.hardware = config.getoption("graph_budget_hardware")
        self.hardware_profiles = self.settings.hardware_profiles
        root = config.rootpath
        self.baseline_path = root / self.settings.baseline
        self.cache: ProfileCache | None = ProfileCache(root / self.settings.cache_dir)
        if config.getoption("graph_budget_cache_clear") and not _is_worker(config):
            self.cache.clear()
        if config.getoption("graph_budget_no_cache"):
            self.cache = None
        self.cache_counts: Counter[str] = Counter()
        self.cache_notes: list[str] = []  # why a model was not cached, shown at -v
        self.results: list[ModelResult] = []
        self.written: Any = None  # reports.Written, once the session has finished
        self.baseline_unwritten = False  # --graph-budget-update could not write the baseline
        self.collected: set[str] = set()
        self.registered: set[str] | None = None  # marker names pytest knows, read once
        self._baseline: Baseline | None = None
        self.defaults = self.settings.defaults
        add_budget_paths(config, self.budget_roots())

    # -- collection -----------------------------------------------------------------------

    def budget_roots(self) -> list[Path]:
        """The paths of ``[tool.graph_budget] budgets``, which every run collects."""
        return [self.config.rootpath / path for path in self.settings.budgets]

    @pytest.hookimpl
    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector):
        if file_path.suffix != ".toml" or file_path.name in ("baseline.toml", "pyproject.toml"):
            return None
        if file_path.resolve() == self.baseline_path.resolve():
            return None
        explicit = parent.session.isinitpath(file_path)  # named on the command line
        if explicit or is_budget_file(file_path, self.budget_roots()):
            return BudgetFile.from_parent(parent, path=file_path)
        return None

    @pytest.hookimpl
    def pytest_itemcollected(self, item: pytest.Item) -> None:
        self.collected.add(item.nodeid)
        if self.registered is None:
            self.registered = registered_markers(self.config)
        typos = [marker_typo(m.name, self.registered) for m in item.iter_markers()]
        if any(typos):  # reported when the test sets up: an error for that test alone
            item.stash[ITEM_TYPOS] = sorted({typo for typo in typos if typo})

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        # Under xdist the controller collects nothing itself: the workers tell it what they did.
        self.collected.update(ids)

    # -- running --------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if isinstance(item, BudgetItem):
            return
        try:
            check_marker_names(item)
            item.stash[ITEM_BUDGET] = budget_from_markers(item, self.defaults, self.hardware)
        except GraphBudgetError as exc:
            problem = str(exc)
        else:
            item.stash[ITEM_MODELS] = []
            return
        # A result too, so that the table and every report count the test as not checked.
        item.stash[ITEM_MODELS] = [self.error_result(item, None, problem)]
        pytest.fail(f"graph-budget usage error: {problem}", pytrace=False)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        if isinstance(item, BudgetItem) or ITEM_BUDGET not in item.stash:
            return (yield)
        try:
            outcome = yield
        except (Exception, pytest.fail.Exception) as exc:
            self.not_checked(item, exc)
            raise
        self.check_models(item)
        return outcome

    def check_models(self, item: pytest.Item) -> None:
        """Profile every model the test received; a test with budget markers that checked no
        model, or got a module it cannot profile, gets an error result instead of a pass."""
        from pytest_graphbudget.case import find_models

        found = find_models(getattr(item, "funcargs", {}))
        for label, case in found.cases:
            self.evaluate_case(item, case, label)
        results = item.stash[ITEM_MODELS]
        for label, kind in found.stray:
            results.append(self.error_result(item, label, bare_module_error(label, kind)))
        markers = budget_markers(item)
        if results or not markers:
            return
        for label, kind in found.bare:
            results.append(self.error_result(item, label, bare_module_error(label, kind)))
        if not found.bare:
            results.append(self.error_result(item, None, no_model_error(markers)))

    def not_checked(self, item: pytest.Item, exc: BaseException) -> None:
        """The test body raised before its models were profiled: each model it had, or its
        budget markers, become a "not checked" error (kept only if the test is reported failed:
        a skip or an xfail is no verdict on the budget)."""
        from pytest_graphbudget.case import find_models

        found = find_models(getattr(item, "funcargs", {}))
        budget = item.stash[ITEM_BUDGET]
        labels = [(label, case.name or budget.name) for label, case in found.cases]
        labels += [(label, None) for label, _ in found.stray]
        if not labels and budget_markers(item) and not item.stash.get(ITEM_MODELS, []):
            labels = [(label, None) for label, _ in found.bare] or [(None, None)]
        reason = one_line(exc, 200, typed=True)
        message = f"not checked: the test failed before its budget was checked ({reason})"
        item.stash[ITEM_UNCHECKED] = [
            self.error_result(item, label, message, name) for label, name in labels
        ]

    def error_result(
        self, item: pytest.Item, label: str | None, message: str, name: str | None = None
    ) -> ModelResult:
        """An error result for a model (or, with no label, a test) whose budget was not checked;
        ``name`` is the model's own name, when it has one, for the reports."""

        def fail(_hardware: str) -> Any:
            raise GraphBudgetError(message)

        model_id = f"{item.nodeid}::{label}" if label else item.nodeid
        budget = item.stash.get(ITEM_BUDGET, None) or self.defaults
        result, _ = self._evaluate(item, name or label or item.name, model_id, budget, fail)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        results = item.stash.get(ITEM_MODELS, [])
        if call.when == "call" and report.failed:  # the body raised before its check
            results = results + item.stash.get(ITEM_UNCHECKED, [])
        if report.failed and not results and is_budget(item, call):
            results = [self.unchecked(item, call)]
        item.stash[ITEM_MODELS] = results
        sent = item.stash.get(ITEM_SENT, 0)
        for result in results[sent:]:  # each result once, in the report of its phase
            report.user_properties.append((PROPERTY, json.dumps(asdict(result))))
        item.stash[ITEM_SENT] = len(results)
        if call.when != "call":
            return report
        if results:
            from pytest_graphbudget.reports.junit import pytest_properties

            # Read by pytest's --junitxml from the teardown report, which copies these.
            item.user_properties.extend(pytest_properties(results))
        failed = [r for r in results if r.failed]
        if failed and report.passed:
            report.outcome = "failed"
            report.longrepr = "\n".join(r.message() for r in failed)
        return report

    def unchecked(self, item: pytest.Item, call: pytest.CallInfo) -> ModelResult:
        """The result of a budget that failed before any model was checked (a bad key or
        unit, a malformed budget file, a marker used wrongly, a factory that raised): an
        error every report counts, never a model missing from the table."""
        fspath, lineno, _ = item.reportinfo()
        message = failure_text(call.excinfo) if call.excinfo else "failed before its check"
        if not isinstance(item, (BudgetItem, BrokenBudget)) and not ours(call.excinfo):
            message = (
                f"not checked: the test's {call.when} failed before its budget was checked "
                f"({message})"
            )
        lines = item.lines if isinstance(item, BudgetItem) else {}
        return ModelResult(
            item.nodeid,
            item.name if not item.name.startswith("<") else Path(str(fspath)).name,
            item.nodeid,
            _relative(str(fspath), self.config),
            key_line(message, lines) or (lineno or 0) + 1,
            budget_dict(self.defaults),
            error=message,
            source="toml" if isinstance(item, (BudgetItem, BrokenBudget)) else "marker",
        )

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector):
        report = yield
        if not report.failed or not isinstance(collector, BudgetFile):
            return report
        # A budget file that raised while read is one failing item, not a collection error
        # that would stop the whole run: the other files still run, and the reports count it.
        shown = _relative(str(collector.path), self.config)
        message = f"{shown}: cannot read the budget file: {error_line(report)}"
        broken = BrokenBudget.from_parent(collector, name="<file>", message=message)
        return pytest.CollectReport(report.nodeid, "passed", None, [broken], report.sections)

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # A budget file that cannot be collected is a result too, so the reports count it.
        file = report.nodeid.split("::", 1)[0]
        if not report.failed or not file.endswith(".toml"):
            return
        if any(r.id == report.nodeid for r in self.results):
            return
        message = error_line(report)
        self.results.append(
            ModelResult(
                report.nodeid,
                Path(file).name,
                report.nodeid,
                file,
                1,
                budget_dict(self.defaults),
                error=message,
                source="toml",
            )
        )

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # On the controller under xdist the worker's results arrive here, serialised.
        for name, value in report.user_properties:
            if name == PROPERTY:
                self.results.append(ModelResult(**json.loads(value)))

    # -- profiling ------------------------------------------------------------------------

    def baseline(self) -> dict[str, Entry]:
        return self.baseline_file().entries

    def baseline_file(self) -> Baseline:
        """The baseline as read once per run, with the problems of its entries."""
        from pytest_graphbudget import baseline as baseline_file

        if self._baseline is None:
            name = _relative(str(self.baseline_path), self.config)
            self._baseline = baseline_file.read(self.baseline_path, name)
        return self._baseline

    def target(self, hardware: str) -> Any:
        """The hardware profile of that name: built-in or from ``[tool.graph_budget]``."""
        from pytest_graphbudget import hardware as hw

        return hw.get(hardware, self.hardware_profiles)

    def cached(self, key: Any, compute: Any, name: str | None, values: Any = None) -> Any:
        """The profile stored under ``key()`` if there is a good one, else ``compute()``'s.

        A profile of one real forward's path (``cache.DATA_DEPENDENT`` tiers) depends on the
        values of inputs and weights, not only on the shapes in the key: its entry also holds
        ``values()``, and is used only while they are unchanged.
        """
        from pytest_graphbudget import cache as cache_keys
        from pytest_graphbudget.cache import Unfingerprintable
        from pytest_graphbudget.profile import profile_from_dict

        stored = None
        if self.cache is not None:
            try:
                stored = key()
            except Unfingerprintable as exc:  # profiled every time rather than ever stale
                self.cache_notes.append(
                    f"{name or 'a model'}: not cached, profiled every run: {exc}"
                )
                self.cache_counts["not cached"] += 1
        data = self.cache.get(stored) if stored else None
        if data is not None and "values" in data and (values is None or data["values"] != values()):
            data = None
        if data is not None:
            try:
                prof = profile_from_dict(data, self.hardware_profiles)
            except Exception:  # a corrupt or outdated entry is rebuilt
                prof = None
            if prof is not None:
                prof.model = name or prof.model
                self.cache_counts["reused"] += 1
                return prof
        prof = compute()
        if stored:
            data = prof.to_dict()
            if prof.trace.method in cache_keys.DATA_DEPENDENT:
                if values is None:
                    return prof  # no way to tell its values apart: never reused
                data["values"] = values()
            self.cache.put(stored, data)
            self.cache_counts["profiled and stored"] += 1
        return prof

    def profile(
        self, model: Any, inputs: Any, kwargs: dict | None, name: str | None, hardware: str
    ):
        """Profile a module through the cache (keyed by the module, inputs and hardware)."""
        from pytest_graphbudget import cache as cache_keys
        from pytest_graphbudget.case import ModelCase
        from pytest_graphbudget.profile import profile_model

        case = model if isinstance(model, ModelCase) else ModelCase(model, inputs, kwargs, name)
        target = self.target(hardware)
        return self.cached(
            lambda: cache_keys.module_key(case.model, case.inputs, case.kwargs, repr(target)),
            lambda: profile_model(case, hardware=target, name=name),
            name or case.name,
            lambda: cache_keys.values_digest(case.model, case.inputs, case.kwargs),
        )

    def profile_for_item(
        self,
        item: pytest.Item,
        model: Any,
        inputs: Any,
        kwargs: dict | None,
        name: str | None,
        hardware: str | None,
    ):
        """``graph_profile``: profile now, and check the test's markers after its body."""
        budget = item.stash.get(ITEM_BUDGET, None) or self.defaults
        label = name or budget.name or getattr(model, "name", None) or type(model).__name__
        result, prof = self._evaluate(
            item,
            label,
            f"{item.nodeid}::{label}",
            budget,
            lambda hw: self.profile(model, inputs, kwargs, label, hw),
            hardware,
        )
        item.stash.setdefault(ITEM_MODELS, []).append(result)
        if prof is None:
            pytest.fail(result.message(), pytrace=False)
        return prof

    def evaluate_case(self, item: pytest.Item, case: Any, argname: str) -> None:
        budget = item.stash[ITEM_BUDGET]
        label = case.name or budget.name or argname
        model_id = f"{item.nodeid}::{argname}"
        result, _ = self._evaluate(
            item, label, model_id, budget, lambda hw: self.profile(case, None, None, label, hw)
        )
        item.stash[ITEM_MODELS].append(result)

    def _evaluate(
        self,
        item: pytest.Item,
        label: str,
        model_id: str,
        budget: Budget,
        run,
        hardware: str | None = None,
        path: str | None = None,
        line: int = 0,
    ) -> tuple[ModelResult, Any]:
        """Profile, check the budget, compare with the baseline: one ``ModelResult``."""
        if path is None:
            fspath, lineno, _ = item.reportinfo()
            path, line = str(fspath), (lineno or 0) + 1
        hw = hardware or budget.hardware
        result = ModelResult(
            model_id,
            label,
            item.nodeid,
            _relative(path, self.config),
            line,
            budget_dict(budget),
            source="toml" if isinstance(item, BudgetItem) else "marker",
        )
        try:
            prof = run(hw)
        except GraphBudgetError as exc:
            result.error = str(exc)
            return result, None
        except Exception as exc:  # a bug of ours: still a result, never a missing row
            result.error = internal_error(exc)
            return result, None
        result.profile = prof.to_dict()
        findings = check(prof, budget)
        findings += coverage_findings(prof, budget, self.strict)
        base = self.baseline().get(model_id)
        problems = self.baseline_file().problems_of(model_id)
        if problems and not self.update:  # an entry it cannot trust would let regressions by
            result.error = "\n".join(problems)
        if base is not None:
            result.baseline = dict(base.figures)
            result.baseline_modules = dict(base.modules)
            result.baseline_by_module = {k: dict(v) for k, v in base.by_module.items()}
            if not self.update:
                from pytest_graphbudget import baseline as baseline_file

                current = baseline_file.entry_from(result.profile)
                path = _relative(str(self.baseline_path), self.config)
                findings += baseline_file.compare(current, base, budget.tolerance, path)
        result.findings = [asdict(f) for f in findings]
        return result, prof

    # -- the end --------------------------------------------------------------------------

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if _is_worker(self.config):
            return
        from pytest_graphbudget import baseline as baseline_file
        from pytest_graphbudget import reports

        stale = self.stale_entries()
        problems = []
        if self.update:
            entries = {
                r.id: baseline_file.entry_from(r.profile)
                for r in self.results
                if r.profile is not None
            }
            try:
                baseline_file.update(self.baseline_path, entries, remove=stale)
            except OSError as exc:
                shown = _relative(str(self.baseline_path), self.config)
                problems.append(reports.cannot_write(shown, exc))
                self.baseline_unwritten = True
        self.written = reports.write_all(self.config, self.results, stale)
        self.written.problems[:0] = problems
        if self.written.problems:
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.USAGE_ERROR
            if self.config.pluginmanager.get_plugin("terminalreporter") is None:
                sys.stderr.write("".join(f"{line}\n" for line in self.written.problems))

    def stale_entries(self) -> set[str]:
        """Baseline entries of budget files or test files run now whose model is gone."""
        files = {nodeid.split("::", 1)[0] for nodeid in self.collected}
        stale = set()
        for key in self.baseline_file().keys():
            if key.split("::", 1)[0] not in files:
                continue
            if key not in self.collected and key.rsplit("::", 1)[0] not in self.collected:
                stale.add(key)
        return stale

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any):
        # A wrapper around pytest's own, so that the section follows its short test summary.
        result = yield
        from pytest_graphbudget import reports

        reports.terminal(
            terminalreporter,
            self.results,
            self.stale_entries(),
            self.baseline_path if self.update and not self.baseline_unwritten else None,
            self.written,
        )
        if self.config.get_verbosity() > 0 and self.cache_counts:
            counts = ", ".join(f"{n} {what}" for what, n in sorted(self.cache_counts.items()))
            terminalreporter.write_line(f"graph budget cache: {counts}")
            for note in self.cache_notes:
                terminalreporter.write_line(f"  {note}")
        return result


# -- TOML budgets -------------------------------------------------------------------------


def project_settings(root: Path) -> Settings:
    """The checked ``[tool.graph_budget]`` of the project; a problem there is a usage error
    (one line each, exit 4), never an INTERNALERROR."""
    from pytest_graphbudget import settings

    try:
        return settings.load(root)
    except settings.SettingsError as exc:
        raise pytest.UsageError(*exc.problems) from None


def add_budget_paths(config: pytest.Config, roots: list[Path]) -> None:
    """Collect the configured budget paths whatever ``testpaths`` or the command line names,
    so that a configured budget never goes unchecked. Not when the command line selects
    budgets or tests itself (a ``.toml`` file or a ``path::name`` node id), nor a path given
    to ``--ignore``."""
    if config.getoption("pyargs", False):
        return
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS
    if explicit and any("::" in arg or arg.endswith(".toml") for arg in config.args):
        return
    missing = [str(root) for root in roots if not root.exists()]
    if missing:
        raise pytest.UsageError(
            f"[tool.graph_budget] budgets: {', '.join(missing)} does not exist; "
            "fix the path in pyproject.toml or remove it"
        )
    here = config.invocation_params.dir
    ignored = [here / path for path in config.getoption("ignore") or ()]
    given = [here / arg for arg in config.args]
    for root in roots:
        # A path given inside a budget root selects part of it: adding the root would undo that.
        inside = any(_covered(path, [root]) for path in given)
        if not inside and not _covered(root, [*given, *ignored]):
            config.args.append(str(root))
            given.append(root)


def _covered(path: Path, paths: list[Path]) -> bool:
    """Whether ``path`` is one of ``paths`` or inside one of them."""
    resolved = path.resolve()
    return any(p.resolve() in (resolved, *resolved.parents) for p in paths)


def is_budget_file(path: Path, roots: list[Path]) -> bool:
    """A ``*.toml`` under a ``budgets`` directory, or under (or at) a configured budget path."""
    return "budgets" in path.parent.parts or _covered(path, roots)


class BudgetFile(pytest.File):
    """A budget TOML file: one item per ``[models."<name>"]`` table, and one failing item per
    problem of the file (a table it does not know, bad ``[defaults]``), so that every problem
    is reported and every valid table still runs."""

    @property
    def shown(self) -> str:
        """The file's path as messages show it: relative to the project's root."""
        return _relative(str(self.path), self.config)

    def collect(self):
        try:
            text = self.path.read_text(encoding="utf-8")
            data = _tomllib().loads(text)
        except (OSError, UnicodeDecodeError) as exc:
            yield self.broken("<file>", f"{self.shown}: cannot read: {exc}")
            return
        except _tomllib().TOMLDecodeError as exc:
            yield self.broken("<file>", toml_error(self.shown, exc))
            return
        manager: GraphBudget = self.config.stash[STATE]
        unknown = list(self.unknown_tables(data, text))
        yield from unknown
        defaults_table = data.get("defaults", {})
        if not isinstance(defaults_table, dict):
            message = f"{self.shown}: defaults must be a table ([defaults]), got {defaults_table!r}"
            yield self.broken("<defaults>", message)
            defaults_table = {}
        where = f"[defaults] of {self.shown}"
        defaults, problems = build_all(defaults_table, where, manager.defaults, MODEL_KEYS)
        if problems:  # reported once; the tables run with the rest of [defaults]
            yield self.broken("<defaults>", "\n".join(problems), table_line(text, "defaults"))
        models = data.get("models", {})
        if not isinstance(models, dict):
            message = f'{self.shown}: models must be tables ([models."<name>"]), got {models!r}'
            yield self.broken("<models>", message)
            models = {}
        elif not models and not unknown:
            message = f'{self.shown}: no [models."<name>"] table, so it checks nothing'
            yield self.broken("<models>", message)
        shared = {k: v for k, v in defaults_table.items() if k in MODEL_KEYS}
        for name, table in models.items():
            if not isinstance(table, dict):
                message = f"{self.shown}: models.{name} must be a table, got {table!r}"
                yield self.broken(name, message)
                continue
            yield BudgetItem.from_parent(
                self,
                name=name,
                table={**shared, **table},
                defaults=defaults,
                lines=key_lines(text, name),
            )

    def unknown_tables(self, data: dict[str, Any], text: str):
        """A failing item for each top-level table or key other than defaults and models."""
        from pytest_graphbudget.budgets import closest

        for key, value in data.items():
            if key in ("defaults", "models"):
                continue
            line = table_line(text, key)
            place = f"{self.shown}:{line}" if line else self.shown
            if isinstance(value, dict):
                hint = closest(key, ["defaults", "models"])
                message = f"{place}: unknown table [{key}]{hint or FILE_TABLES}"
            else:
                message = f"{place}: unknown top-level key {key!r}{FILE_TABLES}"
            yield self.broken(f"<{key}>", message, line)

    def broken(self, name: str, message: str, line: int = 0) -> BrokenBudget:
        return BrokenBudget.from_parent(self, name=name, message=message, line=line)


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


FILE_TABLES = '; a budget file has [defaults] and [models."<name>"] tables'


def build_all(
    values: dict[str, Any], where: str, base: Budget, extra_keys: tuple[str, ...]
) -> tuple[Budget, list[str]]:
    """Like ``build``, but every bad key is a problem of its own and the good ones apply."""
    budget, problems = build({}, where, base, extra_keys), []
    for key, value in values.items():
        try:
            budget = build({key: value}, where, budget, extra_keys)
        except GraphBudgetError as exc:
            problems.append(str(exc))
    return budget, problems


def table_line(text: str, key: str) -> int:
    """The line of a top-level ``[key]`` header (or ``key =``), 0 when not found."""
    import re

    name = re.escape(key)
    header = rf"""\[\s*(?:{name}|"{name}"|'{name}')\s*[\].]"""
    pattern = re.compile(rf"""^\s*(?:{header}|(?:{name}|"{name}"|'{name}')\s*[=.])""")
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return number
    return 0


def _tomllib() -> Any:
    """tomllib, imported when a budget file is read (never on a disabled run)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib


def key_lines(text: str, model: str) -> dict[str, int]:
    """Line numbers of the ``[models.<model>]`` header (key ``""``) and of its keys."""
    import re

    lines: dict[str, int] = {}
    header = re.compile(r'^\s*\[\s*models\s*\.\s*(?:"([^"]+)"|\'([^\']+)\'|([\w.-]+))\s*\]')
    inside = False
    for number, line in enumerate(text.splitlines(), start=1):
        match = header.match(line)
        if match:
            inside = model in match.groups()
            if inside:
                lines[""] = number
            continue
        if line.lstrip().startswith("["):
            inside = False
        elif inside and "=" in line:
            lines.setdefault(line.split("=", 1)[0].strip().strip('"'), number)
    return lines


class BrokenBudget(pytest.Item):
    """Stands in for a budget file or table that cannot be read: fails with its message alone,
    so that the other budgets still run."""

    def __init__(self, *, message: str, line: int = 0, **kwargs: Any):
        super().__init__(**kwargs)
        self.message = message
        self.line = line  # of the problem in the file, 1-based; 0 when unknown

    def runtest(self) -> None:
        raise GraphBudgetError(self.message)

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        return str(excinfo.value)

    def reportinfo(self):
        return self.path, max(self.line - 1, 0), f"budget file {self.path.name} {self.name}"


class BudgetItem(pytest.Item):
    """One ``[models."<name>"]`` table: build the model, profile it, check its budget."""

    def __init__(
        self, *, table: dict[str, Any], defaults: Budget, lines: dict[str, int], **kwargs: Any
    ):
        super().__init__(**kwargs)
        self.table = table
        self.defaults = defaults
        self.lines = lines

    def runtest(self) -> None:
        manager: GraphBudget = self.config.stash[STATE]
        where = f"{self.path.name}::{self.name}"
        budget, problems = build_all(self.table, where, self.defaults, MODEL_KEYS)
        if problems:
            raise GraphBudgetError("\n".join(problems))
        budget.lines = self.lines
        if manager.hardware:
            budget.hardware = manager.hardware
        first_bad = min(
            (self.lines.get(k, 0) for k in (*LIMITS, *BOTTLENECK_KEYS) if k in self.table),
            default=0,
        )
        result, _ = manager._evaluate(
            self,
            budget.name or self.name,
            self.nodeid,
            budget,
            lambda hw: self.profile(manager, hw),
            path=str(self.path),
            line=first_bad or self.lines.get("", 1),
        )
        result.line = failing_line(result, self.lines) or result.line
        self.stash[ITEM_MODELS] = [result]
        if result.failed:
            raise BudgetFailure(result.message())

    def profile(self, manager: GraphBudget, hardware: str):
        """Build the model (zoo name or factory) and profile it; zoo models are cached by name,
        so a warm run does not even build them."""
        from pytest_graphbudget import cache as cache_keys
        from pytest_graphbudget.profile import profile_model

        options = {
            k: self.table[k]
            for k in ("input_shape", "seq_len", "batch", "meta", "trust_pickle")
            if k in self.table
        }
        if "factory" in self.table:
            case = load_factory(str(self.table["factory"]), self.name, options)
            return manager.profile(case, None, None, self.name, hardware)
        from pytest_graphbudget import zoo

        model_name = str(self.table.get("model", self.name))
        target = manager.target(hardware)
        key = (
            cache_keys.name_key(model_name, options, repr(target))
            if manager.cache is not None
            else None
        )
        if key is None:  # no cache, or a name that says too little: key it by what it builds
            case = zoo.resolve(model_name, **options)
            return manager.profile(case, None, None, self.name, hardware)
        return manager.cached(
            lambda: key,
            lambda: profile_model(
                zoo.resolve(model_name, **options), hardware=target, name=self.name
            ),
            self.name,
            # A zoo name builds the same values every time (seeded weights, fixed inputs).
            lambda: "zoo",
        )

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        if isinstance(excinfo.value, (BudgetFailure, GraphBudgetError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, self.lines.get("", 1) - 1, f"budget {self.name}"


def failing_line(result: ModelResult, lines: dict[str, int]) -> int:
    """The TOML line of the first failing key (for annotations), else 0."""
    for finding in result.findings:
        if finding["severity"] == "fail":
            key = finding["key"].removeprefix("baseline.")
            for candidate in (key, f"{key}_max"):
                if candidate in lines:
                    return lines[candidate]
    return 0


def load_factory(spec: str, name: str, options: dict[str, Any]) -> Any:
    """``factory = "package.module:function"``: the function returns a ModelCase, a
    ``(module, inputs)`` pair, or a module (fed ``torch.randn(input_shape)``)."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise GraphBudgetError(f"factory {spec!r} for {name}: expected 'package.module:function'")
    try:
        function = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise GraphBudgetError(f"factory {spec!r} for {name}: {exc}") from None
    built = function()
    case = as_case(built, name)
    if case is None:
        import torch

        if not isinstance(built, torch.nn.Module):
            raise GraphBudgetError(
                f"factory {spec!r} returned {type(built).__name__}, not a "
                "model, a (model, inputs) pair or a ModelCase"
            )
        if "input_shape" not in options:
            raise GraphBudgetError(f"factory {spec!r} returned a bare module: give input_shape")
        from pytest_graphbudget.case import ModelCase

        case = ModelCase(built, (torch.randn(*options["input_shape"]),), name=name)
    return case


# -- helpers ------------------------------------------------------------------------------


def registered_markers(config: pytest.Config) -> set[str]:
    """Names of the markers registered with pytest (``markers`` ini lines, plugins')."""
    import re

    return {re.split(r"[:(]", line, maxsplit=1)[0].strip() for line in config.getini("markers")}


def marker_typo(name: str, registered: set[str]) -> str | None:
    """The problem with a marker that looks like one of ours but is not (``flop_max``,
    ``bottlenek``), else None. Markers registered by the project or a plugin are theirs."""
    import difflib

    if name in MARKERS or name in registered:
        return None
    ours = list(MARKERS)
    if not (
        name.endswith(("_max", "_min"))
        or name.startswith(("graph_budget", "graphbudget"))
        or difflib.get_close_matches(name, ours, n=1, cutoff=0.75)
    ):
        return None
    match = difflib.get_close_matches(name, ours, n=1, cutoff=0.7)
    hint = f" (did you mean {match[0]!r}?)" if match else f" (budget markers: {', '.join(ours)})"
    return f"unknown marker @pytest.mark.{name}{hint}: it would check nothing"


def check_marker_names(item: pytest.Item) -> None:
    """Raise the marker typos found when the test was collected."""
    typos = item.stash.get(ITEM_TYPOS, [])
    if typos:
        raise GraphBudgetError(f"{'; '.join(typos)} (on {item.nodeid})")


def budget_markers(item: pytest.Item) -> list[str]:
    """Names of this plugin's markers on the test: each is a claim that some model is checked."""
    return sorted({marker.name for marker in item.iter_markers() if marker.name in MARKERS})


def bare_module_error(label: str, kind: str) -> str:
    return (
        f"{label!r} is a bare torch.nn.Module ({kind}): nothing says what inputs to profile it "
        "at; return a ModelCase from the fixture, e.g. "
        "return ModelCase(model, (torch.randn(1, 3, 224, 224),))"
    )


def no_model_error(markers: list[str]) -> str:
    names = ", ".join(f"@pytest.mark.{name}" for name in markers)
    return (
        f"the test has {names} but no model was checked: give the test a fixture that returns "
        "ModelCase(model, (torch.randn(1, 3, 224, 224),)), or call "
        "graph_profile(model, inputs) in its body"
    )


def budget_from_markers(item: pytest.Item, defaults: Budget, hardware: str | None) -> Budget:
    """The test's budget from its markers, over the project's defaults."""
    where = f"@pytest.mark.{{}} on {item.nodeid}"
    budget = defaults
    for key in LIMITS:
        marker = item.get_closest_marker(key)
        if marker is not None:
            if len(marker.args) != 1 or marker.kwargs:
                raise GraphBudgetError(f"{where.format(key)}: takes one limit, e.g. {key}('22G')")
            budget = build({key: marker.args[0]}, where.format(key), budget)
    for name, allowed in (
        ("bottleneck", ("compute_bound_min", "memory_bound_max", "by")),
        ("graph_budget", ("hardware", "tolerance", "name", "allow_unsupported")),
    ):
        marker = item.get_closest_marker(name)
        if marker is None:
            continue
        if marker.args:
            raise GraphBudgetError(f"{where.format(name)}: takes keywords {', '.join(allowed)}")
        for key in marker.kwargs:
            if key not in allowed:
                from pytest_graphbudget.budgets import closest

                raise GraphBudgetError(
                    f"{where.format(name)}: unknown keyword {key!r}{closest(key, allowed)}"
                )
        budget = build(marker.kwargs, where.format(name), budget)
    if hardware:
        budget.hardware = hardware
    return budget


def is_budget(item: pytest.Item, call: pytest.CallInfo) -> bool:
    """Whether a failure of this phase of the item is a budget that went unchecked: every
    phase of a budget file's item; the set-up of a test with budget markers, or one that
    failed with one of our errors (a marker that looks like ours, say)."""
    if isinstance(item, (BudgetItem, BrokenBudget)):
        return True
    if call.when != "setup":
        return False
    return bool(budget_markers(item)) or ours(call.excinfo)


def error_line(report: pytest.CollectReport) -> str:
    """The exception line of a failed collection (``ValueError: bad``), without its traceback."""
    lines = [line for line in report.longreprtext.splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return (errors or lines or ["could not be collected"])[-1].strip()


def ours(excinfo: Any) -> bool:
    """Whether a failure is one of this plugin's errors (a GraphBudgetError, or a message
    that starts with ``graph-budget``), not the test's own."""
    return excinfo is not None and (
        isinstance(excinfo.value, (GraphBudgetError, BudgetFailure))
        or failure_text(excinfo).startswith("graph-budget")
    )


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


def failure_text(excinfo: Any) -> str:
    """A failure's message as pytest would print it, without the traceback."""
    exc = excinfo.value
    if isinstance(exc, (GraphBudgetError, BudgetFailure)):
        return str(exc)
    if isinstance(exc, pytest.fail.Exception):
        return str(exc.msg)
    return excinfo.exconly()


def budget_dict(budget: Budget) -> dict[str, Any]:
    return {
        "limits": dict(budget.limits),
        "bottleneck": dict(budget.bottleneck),
        "by": budget.bottleneck_by,
        "hardware": budget.hardware,
        "tolerance": budget.tolerance,
        "allow_unsupported": _allowed(budget.allow_unsupported),
        "lines": dict(budget.lines),
    }


def _allowed(allowed: bool | tuple[str, ...]) -> bool | list[str]:
    """``allow_unsupported`` as JSON: true, false or the list of op names."""
    return list(allowed) if isinstance(allowed, tuple) else allowed


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _relative(path: str, config: pytest.Config) -> str:
    try:
        return str(Path(path).resolve().relative_to(config.rootpath.resolve()))
    except ValueError:
        return path
