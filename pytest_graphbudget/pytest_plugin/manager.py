"""The plugin's state and hooks while ``--graph-budget`` is on: ``GraphBudget``.

It keeps the books of a run (which model each test checked, which failed before its check,
what was collected; what a shard collected and kept is ``shards.ShardBooks``) and hands the
work to plain functions: ``check.Checker`` judges a profile, ``profiler.Profiler`` profiles
through the cache, ``session.finish`` ends the run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_graphbudget.errors import GraphBudgetError, one_line
from pytest_graphbudget.gate.budget_files import key_line
from pytest_graphbudget.gate.budgets import Budget, how_run
from pytest_graphbudget.gate.check import ModelResult, budget_dict, relative
from pytest_graphbudget.pytest_plugin.base import baseline_of
from pytest_graphbudget.pytest_plugin.collect import (
    BrokenBudget,
    BudgetFile,
    BudgetItem,
    add_budget_paths,
    collects,
    error_line,
    failure_text,
    named_paths,
    ours,
    partly_run,
)
from pytest_graphbudget.pytest_plugin.items import is_budget, marked, received
from pytest_graphbudget.pytest_plugin.markers import (
    bare_module_error,
    budget_from_markers,
    budget_markers,
    marker_typo,
    no_model_error,
    registered_markers,
)
from pytest_graphbudget.pytest_plugin.shards import ShardBooks
from pytest_graphbudget.pytest_plugin.state import (
    ITEM_BUDGET,
    ITEM_MARKED,
    ITEM_MODELS,
    ITEM_SENT,
    ITEM_TYPOS,
    ITEM_UNCHECKED,
    PROPERTY,
    _is_worker,
    check_marker_names,
    check_report_paths,
    given_hardware,
    profile_budget,
    project_settings,
)


class GraphBudget:
    """The plugin's state and hooks while ``--graph-budget`` is on."""

    def __init__(self, config: pytest.Config):
        from pytest_graphbudget.gate.check import Checker
        from pytest_graphbudget.reports import html_graph
        from pytest_graphbudget.run.profiler import Profiler

        self.config = config
        self.settings = project_settings(config)
        check_report_paths(config)
        self.hardware = given_hardware(config, self.settings.hardware_profiles)
        root = config.rootpath
        self.collected: set[str] = set()
        self.checker = Checker(
            **baseline_of(config, self.settings),  # the file, or the base's (base.py)
            strict=config.getoption("graph_budget_strict") or self.settings.strict,
            update=config.getoption("graph_budget_update"),
            draw=html_graph.draw if config.getoption("graph_budget_html") else None,  # on workers
            collected=self.collected,  # complete before any test runs: renames.py
            partly=partly_run(config),
            root=root,
        )
        clear = config.getoption("graph_budget_cache_clear") and not _is_worker(config)
        cache = config.getoption("graph_budget_cache_dir") or root / self.settings.cache_dir
        self.profiler = Profiler.open(Path(cache), self.settings.hardware_profiles, clear)
        self.profiler.nodes = self.checker.draw is not None
        self.profiler.tier = "dynamo-breaks" if config.getoption("graph_budget_breaks") else None
        if config.getoption("graph_budget_no_cache"):
            self.profiler.cache = None
        self.results: list[ModelResult] = []
        self.written: Any = None  # reports.Written, once the session has finished
        self.baseline_unwritten = False  # --graph-budget-update could not write the baseline
        self.registered: set[str] | None = None  # marker names pytest knows, read once
        self.defaults = self.settings.defaults
        self.named = named_paths(config)  # before the configured budget paths join them
        add_budget_paths(config, self.budget_roots())
        self.shards = ShardBooks(config)  # for merge: the budgeted items collected and kept
        config.pluginmanager.register(self.shards, "graph-budget-shards")

    # -- collection -----------------------------------------------------------------------

    def budget_roots(self) -> list[Path]:
        """The paths of ``[tool.graph_budget] budgets``, which every run collects."""
        return [self.config.rootpath / path for path in self.settings.budgets]

    @pytest.hookimpl
    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector):
        baseline, roots = self.config.rootpath / self.settings.baseline, self.budget_roots()
        if collects(file_path, parent.session, baseline, roots, self.named):
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
            item.stash[ITEM_MODELS], item.stash[ITEM_MARKED] = [], marked(item)
            return
        # A result too, so that the table and every report count the test as not checked.
        item.stash[ITEM_MODELS] = [self.error_result(item, None, problem)]
        pytest.fail(f"graph-budget usage error: {problem}", pytrace=False)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        if isinstance(item, BudgetItem) or ITEM_BUDGET not in item.stash:
            return (yield)
        if marked(item) != item.stash.get(ITEM_MARKED, ()):  # a fixture added a budget marker
            self.pytest_runtest_setup(item)
        try:
            outcome = yield
        except (Exception, pytest.fail.Exception) as exc:
            self.not_checked(item, exc)  # and the models it profiled said as unchecked, new
            self.checker.rematch(item.stash.get(ITEM_MODELS, []), item.nodeid)
            raise
        self.check_models(item)
        return outcome

    def check_models(self, item: pytest.Item) -> None:
        """Profile every model the test received; a test with budget markers that checked no
        model, or got a module it cannot profile, gets an error result instead of a pass."""
        from pytest_graphbudget.case import find_models

        found = find_models(received(item))
        for label, case in found.cases:
            self.evaluate_case(item, case, label)
        results = item.stash[ITEM_MODELS]
        for label, kind in found.stray:
            results.append(self.error_result(item, label, bare_module_error(label, kind)))
        self.checker.rematch(results, item.nodeid)  # a renamed test, fixture or id
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

        found = find_models(received(item))
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
            report.user_properties.append((PROPERTY, result.to_json()))
        item.stash[ITEM_SENT] = len(results)
        if results and (call.when == "call" or call.when == "setup" and report.failed):
            from pytest_graphbudget.reports.junit import pytest_properties

            # Read by pytest's --junitxml from the teardown report, which copies these.
            item.user_properties.extend(pytest_properties(results))
        if call.when != "call":
            return report
        failed = [r for r in results if r.failed]
        if failed and report.passed:
            report.outcome = "failed"
            report.longrepr = "\n".join(r.message() for r in failed)
            if hasattr(report, "wasxfail"):  # pytest counts no xpass as failed: the exit was 0
                del report.wasxfail  # an xfail marker is no verdict on the budget (docs)
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
            relative(str(fspath), self.config.rootpath),
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
        shown = relative(str(collector.path), self.config.rootpath)
        message = f"{shown}: cannot read the budget file: {error_line(report)}"
        broken = BrokenBudget.from_parent(collector, name="<file>", message=message)
        return pytest.CollectReport(report.nodeid, "passed", None, [broken], report.sections)

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # A budget file or test module that cannot be collected is a result too, so that the
        # reports count it: its budgets were not checked (an import error may hide marked
        # tests; the reports said "within budget" while pytest exited 1 or 2).
        file = report.nodeid.split("::", 1)[0]
        toml = file.endswith(".toml")
        if not report.failed or not (toml or file.endswith(".py")):
            return
        if any(r.id == report.nodeid for r in self.results):
            return
        message = error_line(report)
        if not toml:
            message = f"not checked: the test file could not be collected ({message})"
        self.results.append(
            ModelResult(
                report.nodeid,
                Path(file).name,
                report.nodeid,
                file,
                1,
                budget_dict(self.defaults),
                error=message,
                source="toml" if toml else "marker",
            )
        )

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # On the controller under xdist the worker's results arrive here, serialised.
        for name, value in report.user_properties:
            if name == PROPERTY:
                self.results.append(ModelResult.from_json(value))

    # -- profiling ------------------------------------------------------------------------

    def profile_for_item(
        self,
        item: pytest.Item,
        model: Any,
        inputs: Any,
        kwargs: dict | None,
        name: str | None,
        hardware: str | None,
        how: dict[str, Any] | None = None,
        zoo: dict[str, Any] | None = None,
    ):
        """``graph_profile``: profile now (through the cache), and check the test's markers
        after its body; ``how`` (mode, optimizer, dtype, execution) overrides the markers'."""
        budget = item.stash.get(ITEM_BUDGET, None) or self.defaults
        budget = profile_budget(budget, how or {}, hardware, self.hardware, item.nodeid)
        named = model if isinstance(model, str) else getattr(model, "name", None)  # a zoo name
        label = name or budget.name or named or type(model).__name__
        result, prof = self._evaluate(
            item,
            label,
            f"{item.nodeid}::{label}",
            budget,
            lambda hw: self.profiler.profile(
                self.profiler.request(
                    model, inputs, kwargs, label, hw, budget.variant, *how_run(budget), zoo
                )
            ),
        )
        earlier = item.stash.setdefault(ITEM_MODELS, [])
        same = [r for r in earlier if r.id == result.id and r.profile and prof]
        if any(r.recorded() != result.recorded() for r in same):
            # one id, other figures: each model would be compared with the other's entry
            message = (
                f"graph_profile: a second model labelled {label!r} in this test, with other "
                f"figures; give each call its own name= (name='{label}-2'), so that each "
                "has its own baseline entry"
            )
            result, prof = self.error_result(item, f"{label}[{len(earlier)}]", message), None
        earlier.append(result)
        if prof is None:
            pytest.fail(result.message(), pytrace=False)
        return prof

    def evaluate_case(self, item: pytest.Item, case: Any, argname: str) -> None:
        budget = item.stash[ITEM_BUDGET]
        label = case.name or budget.name or argname
        model_id = f"{item.nodeid}::{argname}"
        result, _ = self._evaluate(
            item,
            label,
            model_id,
            budget,
            lambda hw: self.profiler.profile(
                self.profiler.request(case, None, None, label, hw, budget.variant, *how_run(budget))
            ),
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
    ) -> tuple[ModelResult, Any]:
        """Profile, check the budget, compare with the baseline: one ``ModelResult``."""
        fspath, lineno, _ = item.reportinfo()
        result = ModelResult(
            model_id,
            label,
            item.nodeid,
            relative(str(fspath), self.config.rootpath),
            (lineno or 0) + 1,
            budget_dict(budget),
        )
        return result, self.checker.evaluate(result, budget, run, hardware)

    # -- the end --------------------------------------------------------------------------

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if _is_worker(self.config):
            return
        from pytest_graphbudget.run.session import finish, not_run, outputs_of, stale_errors

        outputs = outputs_of(self.config, self.checker.strict)
        stale = stale_errors(self.stale_entries(), self.checker)  # errors under strict only
        crashed = "its test reported nothing (a crashed worker, or the run stopped first)"
        ran = {r.id for r in self.results} | {r.nodeid for r in self.results}  # lin@bfloat16
        lost = self.shards.halted(ran)  # its reports had said green
        self.results += stale + [not_run(i, crashed) for i in lost]
        self.written, self.baseline_unwritten = finish(
            self.results, self.stale_entries(), self.checker, outputs, self.shards.collection()
        )
        nothing = not self.results and self.checker.strict  # strict: an empty run fails
        if (stale or nothing) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # no test failed for them
        if self.written.problems:
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.USAGE_ERROR
            if self.config.pluginmanager.get_plugin("terminalreporter") is None:
                sys.stderr.write("".join(f"{line}\n" for line in self.written.problems))

    def stale_entries(self) -> set[str]:
        """Baseline entries of budget files or test files run now whose model is gone."""
        from pytest_graphbudget.gate.renames import stale_entries
        from pytest_graphbudget.run.session import checked_tests

        keys, root, tests = self.checker.baseline.keys(), self.config.rootpath, self.results
        seen = self.collected | self.shards.present  # xdist: what the workers deselected too
        return stale_entries(keys, seen, root, checked_tests(tests), self.checker.partly)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any):
        # A wrapper around pytest's own, so that the section follows its short test summary.
        result = yield
        from pytest_graphbudget import reports

        checker = self.checker
        updated = checker.baseline_path if checker.update and not self.baseline_unwritten else None
        reports.terminal(
            terminalreporter,
            self.results,
            self.stale_entries(),
            updated,
            self.written,
        )
        if self.config.get_verbosity() > 0:
            for line in self.profiler.summary():
                terminalreporter.write_line(line)
        return result
