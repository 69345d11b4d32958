"""Budget TOML files as pytest items: one ``BudgetItem`` per ``[models."<name>"]`` table and one
failing ``BrokenBudget`` per problem of the file (read by ``budget_files.read``), and the
configured budget paths added to every run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate import budget_files
from pytest_graphbudget.gate.check import relative
from pytest_graphbudget.pytest_plugin.state import manager_of

if TYPE_CHECKING:
    pass


class BudgetFailure(Exception):
    """Raised by a TOML budget item whose model failed its budget; the message is the report."""


def add_budget_paths(config: pytest.Config, roots: list[Path]) -> None:
    """Collect the configured budget paths whatever ``testpaths`` or the command line names,
    so that a configured budget never goes unchecked. Not when the command line selects
    budgets or tests itself (a ``.toml`` file or a ``path::name`` node id), nor a path given
    to ``--ignore``. With none configured, a run that names no path (``pytest
    --graph-budget``, what the CI action runs) also collects the root's ``budgets/``, as
    ``graph-budget check`` does: ``testpaths = ["tests"]`` must not leave it unchecked."""
    if config.getoption("pyargs", False):
        return
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS
    default = config.rootpath / "budgets"
    if not roots and not explicit and default.is_dir():
        roots = [default]
    if explicit and any("::" in arg or arg.endswith(".toml") for arg in config.args):
        return
    missing = [str(root) for root in roots if not root.exists()]
    if missing:
        raise pytest.UsageError(
            f"[tool.graph_budget] budgets: {', '.join(missing)} does not exist; "
            "fix the path in pyproject.toml or remove it"
        )
    if not explicit:  # a budget/ folder, misspelt: its budgets would never be checked
        from pytest_graphbudget.gate.stray import stray_folders

        if stray := stray_folders(config.rootpath, roots or [default]):
            raise pytest.UsageError(*stray)
    here = config.invocation_params.dir
    ignored = [here / path for path in config.getoption("ignore") or ()]
    given = [here / arg for arg in config.args]
    for root in roots:
        # A path given inside a budget root selects part of it: adding the root would undo that.
        inside = any(budget_files.covered(path, [root]) for path in given)
        if not inside and not budget_files.covered(root, [*given, *ignored]):
            config.args.append(str(root))
            given.append(root)


def named_paths(config: pytest.Config) -> list[Path]:
    """The paths the command line names (``perf/``, ``budgets_extra/x.toml::m`` gives its
    file); none when pytest took its paths from ``testpaths`` or the current directory. Read
    before ``add_budget_paths`` adds the configured ones."""
    if config.getoption("pyargs", False) or config.args_source != pytest.Config.ArgsSource.ARGS:
        return []
    here = config.invocation_params.dir
    return [here / arg.split("::", 1)[0] for arg in config.args]


def partly_run(config: pytest.Config) -> set[str] | None:
    """The files (node-id paths) whose tests or tables this run selects only some of: those a
    ``path::name`` argument names. A model of theirs that was not collected was not selected,
    not removed, so its baseline entry is not stale (``--graph-budget-update`` had dropped the
    other tests' entries of ``pytest --graph-budget tests/test_nets.py::test_a``). None under
    ``--lf`` or ``--sw``, which leave out what passed before, and ``--pyargs``: any file may
    be partly run."""
    if any(config.getoption(flag, False) for flag in ("lf", "stepwise", "pyargs")):
        return None  # --pyargs: a node id names a module, not the file the entries name
    here, found = config.invocation_params.dir, set()
    for arg in config.args:
        if "::" in arg:
            path = (here / arg.split("::", 1)[0]).resolve()
            try:
                found.add(path.relative_to(config.rootpath.resolve()).as_posix())
            except ValueError:  # outside the root: no baseline entry is keyed by it
                continue
    return found


def collects(
    path: Path, session: pytest.Session, baseline: Path, roots: list[Path], named: list[Path]
) -> bool:
    """Whether a file is a budget file of this run: a ``*.toml`` (never the baseline nor a
    ``pyproject.toml``) named on the command line, under a ``budgets`` directory or a
    configured budget path, or a budget file (``looks_like_budget``) under a folder the
    command line names (``pytest --graph-budget perf/``, as ``graph-budget check perf/``)."""
    if path.suffix != ".toml" or path.name in budget_files.SKIPPED:
        return False
    if path.resolve() == baseline.resolve():
        return False
    if session.isinitpath(path) or budget_files.is_budget_file(path, roots):
        return True
    return budget_files.covered(path, named) and budget_files.looks_like_budget(path)


class BudgetFile(pytest.File):
    """A budget TOML file: one item per ``[models."<name>"]`` table, and one failing item per
    problem of the file (a table it does not know, bad ``[defaults]``), so that every problem
    is reported and every valid table still runs."""

    @property
    def shown(self) -> str:
        """The file's path as messages show it: relative to the project's root."""
        return relative(str(self.path), self.config.rootpath)

    def collect(self):
        defaults = manager_of(self.config).defaults
        for entry in budget_files.read(self.path, self.shown, defaults):
            if isinstance(entry, budget_files.Broken):
                yield self.broken(entry.name, entry.message, entry.line)
            else:
                yield BudgetItem.from_parent(self, name=entry.name, entry=entry)

    def broken(self, name: str, message: str, line: int = 0) -> BrokenBudget:
        return BrokenBudget.from_parent(self, name=name, message=message, line=line)


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

    def __init__(self, *, entry: budget_files.Table, **kwargs: Any):
        super().__init__(**kwargs)
        self.entry = entry

    @property
    def table(self) -> dict[str, Any]:
        return self.entry.table

    @property
    def lines(self) -> dict[str, int]:
        return self.entry.lines

    def runtest(self) -> None:
        from pytest_graphbudget.pytest_plugin.state import ITEM_MODELS
        from pytest_graphbudget.run.import_paths import import_paths, importable
        from pytest_graphbudget.run.table_check import check_table

        manager = manager_of(self.config)
        # a factory imports from the project's root, as under graph-budget check (pytest
        # itself puts only its pythonpath entries, and a root conftest's folder, on sys.path)
        with importable(import_paths(self.config.rootpath, {})):
            result = check_table(
                self.entry,
                self.nodeid,
                self.path,
                relative(str(self.path), self.config.rootpath),
                manager.checker,
                manager.profiler,
                manager.hardware,
            )
        self.stash[ITEM_MODELS] = [result]
        if result.failed:
            raise BudgetFailure(result.message())

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        if isinstance(excinfo.value, (BudgetFailure, GraphBudgetError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, self.lines.get("", 1) - 1, f"budget {self.name}"


# -- failures, as the reports tell them -------------------------------------------------


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


def failure_text(excinfo: Any) -> str:
    """A failure's message as pytest would print it, without the traceback."""
    exc = excinfo.value
    if isinstance(exc, (GraphBudgetError, BudgetFailure)):
        return str(exc)
    if isinstance(exc, pytest.fail.Exception):
        return str(exc.msg)
    return excinfo.exconly()
