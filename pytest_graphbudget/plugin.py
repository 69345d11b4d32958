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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_graphbudget.budgets import (
    BOTTLENECK_KEYS,
    LIMITS,
    MODEL_KEYS,
    Budget,
    Finding,
    build,
    check,
)
from pytest_graphbudget.errors import GraphBudgetError

if TYPE_CHECKING:
    from pytest_graphbudget.baseline import Baseline, Entry

MARKERS = {
    **{
        key: f"{key}(limit): fail when the model's {limit.label} "
        f"{'exceeds' if limit.upper else 'falls below'} limit (e.g. "
        f"{ {'count': '22G', 'bytes': '500MB', 'seconds': '3ms'}[limit.kind]!r}); "
        "needs --graph-budget"
        for key, limit in LIMITS.items()
    },
    "bottleneck": "bottleneck(compute_bound_min=None, memory_bound_max=None, by='count'): "
    "bound the compute-/memory-bound mix (by 'count', 'flops' or 'time'); needs --graph-budget",
    "graph_budget": "graph_budget(hardware='generic', tolerance='1%', name=None): per-test "
    "settings of pytest-graphbudget",
}
STATE = pytest.StashKey["GraphBudget"]()
ITEM_MODELS = pytest.StashKey[list]()
ITEM_BUDGET = pytest.StashKey[Budget]()
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
        from pytest_graphbudget.cache import DIRECTORY, ProfileCache

        self.config = config
        self.settings = project_settings(config.rootpath)
        self.update = config.getoption("graph_budget_update")
        self.strict = config.getoption("graph_budget_strict") or bool(self.settings.get("strict"))
        self.hardware = config.getoption("graph_budget_hardware")
        from pytest_graphbudget.hardware import from_tables

        self.hardware_profiles = from_tables(self.settings.get("hardware_profiles", {}))
        root = config.rootpath
        self.baseline_path = root / self.settings.get("baseline", "budgets/baseline.toml")
        self.cache: ProfileCache | None = ProfileCache(
            root / self.settings.get("cache_dir", DIRECTORY)
        )
        if config.getoption("graph_budget_cache_clear") and not _is_worker(config):
            self.cache.clear()
        if config.getoption("graph_budget_no_cache"):
            self.cache = None
        self.results: list[ModelResult] = []
        self.collected: set[str] = set()
        self._baseline: Baseline | None = None
        self.defaults = build(
            {k: v for k, v in self.settings.items() if k in ("hardware", "tolerance")},
            "[tool.graph_budget] of pyproject.toml",
            hardware_profiles=self.hardware_profiles,
        )

    # -- collection -----------------------------------------------------------------------

    @pytest.hookimpl
    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector):
        if file_path.suffix == ".toml" and is_budget_file(
            file_path, self.settings, self.config.rootpath
        ):
            return BudgetFile.from_parent(parent, path=file_path)
        return None

    @pytest.hookimpl
    def pytest_itemcollected(self, item: pytest.Item) -> None:
        self.collected.add(item.nodeid)

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
            item.stash[ITEM_BUDGET] = budget_from_markers(item, self.defaults, self.hardware)
        except GraphBudgetError as exc:
            problem = str(exc)
        else:
            item.stash[ITEM_MODELS] = []
            return
        pytest.fail(f"graph-budget usage error: {problem}", pytrace=False)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        outcome = yield
        if isinstance(item, BudgetItem) or ITEM_BUDGET not in item.stash:
            return outcome
        funcargs = getattr(item, "funcargs", {})
        for argname, value in funcargs.items():
            case = as_case(value, argname)
            if case is not None:
                self.evaluate_case(item, case, argname)
        return outcome

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if call.when != "call":
            return report
        results = item.stash.get(ITEM_MODELS, [])
        for result in results:
            report.user_properties.append((PROPERTY, json.dumps(asdict(result))))
        if results:
            from pytest_graphbudget.reports.junit import pytest_properties

            # Read by pytest's --junitxml from the teardown report, which copies these.
            item.user_properties.extend(pytest_properties(results))
        failed = [r for r in results if r.failed]
        if failed and report.passed:
            report.outcome = "failed"
            report.longrepr = "\n".join(r.message() for r in failed)
        return report

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
        from pytest_graphbudget.profile import profile_from_dict

        stored = key() if self.cache is not None else None
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
                return prof
        prof = compute()
        if stored:
            data = prof.to_dict()
            if prof.trace.method in cache_keys.DATA_DEPENDENT:
                if values is None:
                    return prof  # no way to tell its values apart: never reused
                data["values"] = values()
            self.cache.put(stored, data)
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
        result.profile = prof.to_dict()
        findings = check(prof, budget)
        findings += self.coverage_findings(prof)
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

    def coverage_findings(self, prof: Any) -> list[Finding]:
        findings = []
        if prof.coverage.nodes == 0 or prof.flops == 0:
            findings.append(
                Finding(
                    "fail",
                    "coverage",
                    "no operation was counted: the graph is empty or every op lacks a formula",
                )
            )
        unsupported = prof.coverage.unsupported_ops
        if unsupported:
            ops = ", ".join(f"{op} x{n}" for op, n in sorted(unsupported.items()))
            severity = "fail" if self.strict else "warn"
            findings.append(Finding(severity, "coverage", f"ops without a cost formula: {ops}"))
        return findings

    # -- the end --------------------------------------------------------------------------

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if _is_worker(self.config):
            return
        from pytest_graphbudget import baseline as baseline_file

        stale = self.stale_entries()
        if self.update:
            entries = {
                r.id: baseline_file.entry_from(r.profile)
                for r in self.results
                if r.profile is not None
            }
            baseline_file.update(self.baseline_path, entries, remove=stale)
        from pytest_graphbudget import reports

        reports.write_all(self.config, self.results, stale)

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
            self.baseline_path if self.update else None,
        )
        return result


# -- TOML budgets -------------------------------------------------------------------------


def project_settings(root: Path) -> dict[str, Any]:
    """``[tool.graph_budget]`` of the project's pyproject.toml (empty when absent)."""
    path = root / "pyproject.toml"
    if not path.exists():
        return {}
    try:
        data = _tomllib().loads(path.read_text())
    except _tomllib().TOMLDecodeError as exc:
        raise pytest.UsageError(f"{path}: {exc}") from None
    return dict(data.get("tool", {}).get("graph_budget", {}))


def is_budget_file(path: Path, settings: dict[str, Any], root: Path) -> bool:
    """A ``*.toml`` under a ``budgets`` directory (or a budget path configured in
    ``[tool.graph_budget] budgets``, relative to the project's root)."""
    if path.name in ("baseline.toml", "pyproject.toml"):
        return False
    roots = settings.get("budgets", [])
    roots = [roots] if isinstance(roots, str) else list(roots)
    if "budgets" in path.parent.parts:
        return True
    resolved = path.resolve()
    return any((root / r).resolve() in (resolved, *resolved.parents) for r in roots)


class BudgetFile(pytest.File):
    """A budget TOML file: one item per ``[models."<name>"]`` table."""

    def collect(self):
        text = self.path.read_text()
        try:
            data = _tomllib().loads(text)
        except _tomllib().TOMLDecodeError as exc:
            yield BrokenBudget.from_parent(self, name="<file>", message=toml_error(self.path, exc))
            return
        manager: GraphBudget = self.config.stash[STATE]
        unknown = [k for k in data if k not in ("defaults", "models")]
        if unknown:
            from pytest_graphbudget.budgets import closest

            key = unknown[0]
            hint = closest(key, ["defaults", "models"])
            yield BrokenBudget.from_parent(
                self, name="<file>", message=f"{self.path}: unknown table {key!r}{hint}"
            )
            return
        where = f"[defaults] of {self.path.name}"
        try:
            defaults = build(data.get("defaults", {}), where, manager.defaults, MODEL_KEYS)
        except GraphBudgetError as exc:
            yield BrokenBudget.from_parent(self, name="<defaults>", message=str(exc))
            return
        shared = {k: v for k, v in data.get("defaults", {}).items() if k in MODEL_KEYS}
        for name, table in data.get("models", {}).items():
            if not isinstance(table, dict):
                message = f"{self.path}: models.{name} must be a table"
                yield BrokenBudget.from_parent(self, name=name, message=message)
                continue
            yield BudgetItem.from_parent(
                self,
                name=name,
                table={**shared, **table},
                defaults=defaults,
                lines=key_lines(text, name),
            )


def _tomllib() -> Any:
    """tomllib, imported when a budget file is read (never on a disabled run)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib


def toml_error(path: Path, exc: Exception) -> str:
    """``file:line:column: message`` for a TOML syntax error."""
    import re

    text = str(exc)
    found = re.search(r"\(at line (\d+), column (\d+)\)", text)
    if found:
        message = text[: found.start()].strip()
        return f"{path}:{found.group(1)}:{found.group(2)}: {message}"
    return f"{path}: {text}"


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

    def __init__(self, *, message: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        raise GraphBudgetError(self.message)

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        return str(excinfo.value)

    def reportinfo(self):
        return self.path, 0, f"budget file {self.path.name}"


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
        budget = build(self.table, where, self.defaults, MODEL_KEYS)
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
            k: self.table[k] for k in ("input_shape", "seq_len", "batch", "meta") if k in self.table
        }
        if "factory" in self.table:
            case = load_factory(str(self.table["factory"]), self.name, options)
            return manager.profile(case, None, None, self.name, hardware)
        from pytest_graphbudget import zoo

        model_name = str(self.table.get("model", self.name))
        target = manager.target(hardware)
        return manager.cached(
            lambda: cache_keys.name_key(model_name, options, repr(target)),
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


def as_case(value: Any, name: str) -> Any:
    """A fixture value as a ModelCase, when it is one or a ``(module, inputs)`` pair."""
    from pytest_graphbudget.case import ModelCase

    if isinstance(value, ModelCase):
        return value
    if isinstance(value, tuple) and len(value) == 2 and "torch" in sys.modules:
        import torch

        module, inputs = value
        if isinstance(module, torch.nn.Module):
            return ModelCase(module, inputs, name=name)
    return None


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
        ("graph_budget", ("hardware", "tolerance", "name")),
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


def budget_dict(budget: Budget) -> dict[str, Any]:
    return {
        "limits": dict(budget.limits),
        "bottleneck": dict(budget.bottleneck),
        "by": budget.bottleneck_by,
        "hardware": budget.hardware,
        "tolerance": budget.tolerance,
        "lines": dict(budget.lines),
    }


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _relative(path: str, config: pytest.Config) -> str:
    try:
        return str(Path(path).resolve().relative_to(config.rootpath.resolve()))
    except ValueError:
        return path
