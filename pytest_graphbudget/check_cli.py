"""``graph-budget check [PATHS...]``: the budget files' check without pytest.

The same check as ``pytest --graph-budget`` on the same files: the same model ids (node ids
relative to the project's root), findings, baseline comparison, reports and terminal table,
through the same functions (``budget_files.read``, ``check.check_table``, ``session.finish``).
Exit codes are the plugin's: 0 every budget passed, 1 a budget failed or could not be checked,
4 a usage error (bad settings, a path that does not exist, nothing to check, a report that
could not be written).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_graphbudget import budget_files
from pytest_graphbudget.check import (
    Checker,
    ModelResult,
    budget_dict,
    check_table,
    internal_error,
    relative,
)
from pytest_graphbudget.errors import GraphBudgetError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 4  # pytest's OK, TESTS_FAILED, USAGE_ERROR
PYTEST_INI = ("tool", "pytest", "ini_options")
PRUNED = ("node_modules", "venv", "build", "dist", "__pycache__")
"""Directories never searched for budget files (as pytest's ``norecursedirs``), with any
directory whose name starts with a dot."""


class UsageError(GraphBudgetError):
    """The command cannot run as asked: exit 4, one line."""


def add_parser(sub: Any, formatter: Any = argparse.HelpFormatter) -> argparse.ArgumentParser:
    """The ``check`` subcommand, for ``cli.build_parser``."""
    p = sub.add_parser(
        "check",
        formatter_class=formatter,
        help="check the TOML budget files, as pytest --graph-budget does",
        description='Check every [models."<name>"] table of the budget files in PATHS\n'
        "(default: [tool.graph_budget] budgets, else budgets/) against its limits and\n"
        "the baseline, as `pytest --graph-budget` does, without pytest.",
        epilog="Exit codes (pytest's): 0 every budget passed, 1 a budget failed or could\n"
        "not be checked, 4 a usage error.",
    )
    p.add_argument("paths", nargs="*", metavar="PATH", help="budget .toml files or directories")
    p.add_argument("--update", action="store_true", help="write the baseline from this run")
    p.add_argument("--strict", action="store_true", help="fail ops without a cost formula")
    p.add_argument("--hardware", metavar="NAME", help="hardware profile for every model")
    p.add_argument("--junit", metavar="PATH", help="write a JUnit XML report")
    p.add_argument("--json", metavar="PATH", help="write every profile as JSON")
    p.add_argument("--markdown", metavar="PATH", help="write the pull-request comment")
    p.add_argument("--html", metavar="PATH", help="write the interactive HTML report")
    p.add_argument("--no-cache", action="store_true", help="do not cache profiles")
    p.add_argument("--cache-clear", action="store_true", help="empty the profile cache first")
    p.set_defaults(func=command)
    return p


def command(args: argparse.Namespace, console: Any = None) -> int:
    """The handler ``cli.main`` calls."""
    return run(
        args.paths,
        update=args.update,
        strict=args.strict,
        hardware=args.hardware,
        junit=args.junit,
        json=args.json,
        markdown=args.markdown,
        html=args.html,
        cache=not args.no_cache,
        cache_clear=args.cache_clear,
    )


def run(
    paths: Sequence[str] = (),
    *,
    update: bool = False,
    strict: bool = False,
    hardware: str | None = None,
    junit: str | None = None,
    json: str | None = None,
    markdown: str | None = None,
    html: str | None = None,
    cache: bool = True,
    cache_clear: bool = False,
    cwd: Path | None = None,
) -> int:
    """Check the budget files in ``paths`` (relative to ``cwd``), print the table, write the
    reports asked for; the exit code."""
    from pytest_graphbudget import settings as project
    from pytest_graphbudget.profiler import Profiler
    from pytest_graphbudget.session import Outputs, finish, stale_entries

    here = Path(cwd or Path.cwd())
    root = project.find_root(here)
    try:
        conf = project.load(root)
        files = budget_paths(paths, here, root, conf.budgets, root / conf.baseline)
    except project.SettingsError as exc:
        return usage(*exc.problems)
    except UsageError as exc:
        return usage(str(exc))
    checker = Checker(
        root / conf.baseline,
        relative(str(root / conf.baseline), root),
        strict=strict or conf.strict,
        update=update,
        update_command="graph-budget check --update",
        draw=bool(html),
    )
    profiler = Profiler.open(root / conf.cache_dir, conf.hardware_profiles, cache_clear)
    profiler.nodes = checker.draw
    if not cache:
        profiler.cache = None
    results: list[ModelResult] = []
    collected: set[str] = set()
    # what models print stays off the table; factories import as they would under pytest
    with contextlib.redirect_stdout(sys.stderr), importable(import_paths(root)):
        for path in files:
            checked = check_file(path, root, conf.defaults, checker, profiler, hardware)
            collected.update(r.nodeid for r in checked)
            results += checked
    stale = stale_entries(checker.baseline.keys(), collected)
    outputs = Outputs(here, root, junit, json, markdown, html)
    written, unwritten = finish(results, stale, checker, outputs)
    updated = checker.baseline_path if update and not unwritten else None
    from pytest_graphbudget import reports

    for result in results:  # why each failed, as pytest's failure section says it
        if result.failed:
            print(result.message())
    reports.terminal(Lines(root), results, stale, updated, written)
    if any(r.failed for r in results):
        return EXIT_FAILED
    return EXIT_USAGE if written.problems else EXIT_OK


def import_paths(root: Path) -> list[str]:
    """Where ``factory = "package.module:function"`` is imported from, as under pytest: the
    project's root and the ``pythonpath`` entries of ``[tool.pytest.ini_options]``."""
    from pytest_graphbudget.settings import _tomllib, subtable

    path = root / "pyproject.toml"
    try:
        options = subtable(_tomllib().loads(path.read_text("utf-8")), PYTEST_INI, path)
    except Exception:  # no file, or one settings.load already reported
        options = {}
    entries = options.get("pythonpath", [])
    entries = entries.split() if isinstance(entries, str) else entries
    extra = [root / e for e in entries if isinstance(e, str)] if isinstance(entries, list) else []
    return [str(p.resolve()) for p in [*extra, root]]


@contextlib.contextmanager
def importable(paths: list[str]):
    """``paths`` first on ``sys.path`` while the budgets are checked, then as it was."""
    saved = list(sys.path)
    sys.path[:0] = [p for p in paths if p not in sys.path]
    try:
        yield
    finally:
        sys.path[:] = saved


def check_file(
    path: Path, root: Path, defaults: Any, checker: Checker, profiler: Any, hardware: str | None
) -> list[ModelResult]:
    """One result per table and per problem of the budget file, as the plugin's items give."""
    shown = relative(str(path), root)
    nodeid_file = shown.replace("\\", "/")
    results = []
    for entry in budget_files.read(path, shown, defaults):
        nodeid = f"{nodeid_file}::{entry.name}"
        label = path.name if entry.name.startswith("<") else entry.name
        if isinstance(entry, budget_files.Broken):
            line = entry.line or 1
            results.append(unchecked(nodeid, label, shown, line, defaults, entry.message))
            continue
        try:
            result = check_table(entry, nodeid, path, shown, checker, profiler, hardware)
        except GraphBudgetError as exc:
            line = budget_files.key_line(str(exc), entry.lines) or entry.lines.get("", 1)
            result = unchecked(nodeid, label, shown, line, defaults, str(exc))
        except Exception as exc:  # a bug of ours: still a result, never a missing row
            result = unchecked(nodeid, label, shown, entry.line(), defaults, internal_error(exc))
        results.append(result)
    return results


def unchecked(
    nodeid: str, label: str, shown: str, line: int, defaults: Any, message: str
) -> ModelResult:
    """The result of a budget that could not be checked: an error every report counts."""
    return ModelResult(
        nodeid, label, nodeid, shown, line, budget_dict(defaults), error=message, source="toml"
    )


def budget_paths(
    paths: Sequence[str], here: Path, root: Path, configured: list[str], baseline: Path
) -> list[Path]:
    """The budget files to check: those in ``paths``, else in the configured budget paths,
    else in ``budgets/``; raises ``UsageError`` for a path that does not exist or when there
    is nothing to check (a check of nothing must not pass)."""
    if paths:
        given = [here / p for p in paths]
    elif configured:
        given = [root / p for p in configured]
    elif (root / "budgets").is_dir():
        given = [root / "budgets"]
    else:
        raise UsageError(
            "nothing to check: give budget files or directories, or set "
            "[tool.graph_budget] budgets in pyproject.toml"
        )
    files: list[Path] = []
    for path in given:
        if not path.exists():
            raise UsageError(f"{path}: no such file or directory")
        if path.is_file():
            if path.name not in budget_files.SKIPPED:
                files.append(path)
            continue
        for found in sorted(path.rglob("*.toml")):
            parts = found.relative_to(path).parts[:-1]
            if any(p.startswith(".") or p in PRUNED for p in parts):
                continue
            if found.name in budget_files.SKIPPED or found.resolve() == baseline.resolve():
                continue
            files.append(found)
    unique = list(dict.fromkeys(f.resolve() for f in files))
    if not unique:
        shown = ", ".join(relative(str(p), root) for p in given)
        raise UsageError(f"no budget files (*.toml) in {shown}: nothing would be checked")
    return unique


def usage(*problems: str) -> int:
    for problem in problems:
        print(f"graph-budget check: error: {problem}", file=sys.stderr)
    return EXIT_USAGE


class Lines:
    """What ``reports.terminal`` writes to, on stdout: pytest's ``=== title ===`` rule, lines."""

    def __init__(self, root: Path, width: int | None = None):
        self.config = argparse.Namespace(rootpath=root)
        self.width = width or shutil.get_terminal_size((80, 24)).columns

    @property
    def _tw(self) -> Any:
        return argparse.Namespace(fullwidth=self.width)

    def write_sep(self, sep: str, title: str) -> None:
        # pytest's TerminalWriter.sep: the title between runs of ``sep``, filling the width.
        fill = sep * max((self.width - len(title) - 2) // (2 * len(sep)), 1)
        line = f"{fill} {title} {fill}"
        if len(line) + len(sep.rstrip()) <= self.width:
            line += sep.rstrip()
        print(line)

    def write_line(self, text: str, **markup: Any) -> None:
        print(text)
