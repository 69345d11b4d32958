"""``graph-budget check [PATHS...]``: the budget files' check without pytest.

The same check as ``pytest --graph-budget`` on the same files: the same model ids (node ids
relative to the project's root), findings, baseline comparison, reports and terminal table,
through the same functions (``budget_files.read``, ``table_check.check_table``, ``session.finish``).
Exit codes are the command line's: 0 every budget passed, 1 a budget failed or could not be
checked, 2 a usage error (bad settings, a path that does not exist, nothing to check, a report
that could not be written), as every other ``graph-budget`` command.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_graphbudget.cli.console import refuse_reading_into
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate import budget_files
from pytest_graphbudget.gate.check import (
    Checker,
    ModelResult,
    budget_dict,
    internal_error,
    relative,
)
from pytest_graphbudget.run.import_paths import import_paths, importable
from pytest_graphbudget.run.table_check import check_table

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2  # the command line's: 2 for every usage error
PRUNED = ("node_modules", "venv", "build", "dist", "__pycache__")
"""Directories never searched for budget files (as pytest's ``norecursedirs``), with any
directory whose name starts with a dot."""


class UsageError(GraphBudgetError):
    """The command cannot run as asked: exit 2, one line."""


def add_parser(
    sub: Any, formatter: Any = argparse.HelpFormatter, parents: Sequence[Any] = ()
) -> argparse.ArgumentParser:
    """The ``check`` subcommand, for ``cli.build_parser`` (which adds ``-q``/``-v`` as
    ``parents``, as every command has them)."""
    p = sub.add_parser(
        "check",
        parents=list(parents),
        formatter_class=formatter,
        help="check the TOML budget files, as pytest --graph-budget does",
        description='Check every [models."<name>"] table of the budget files in PATHS\n'
        "(default: [tool.graph_budget] budgets, else budgets/) against its limits and\n"
        "the baseline, as `pytest --graph-budget` does, without pytest.",
        epilog="Exit codes: 0 every budget passed, 1 a budget failed or could not be\n"
        "checked, 2 a usage error (as every graph-budget command).",
    )
    p.add_argument("paths", nargs="*", metavar="PATH", help="budget .toml files or directories")
    p.add_argument("--update", action="store_true", help="write the baseline from this run")
    p.add_argument(
        "--strict",
        action="store_true",
        help="a closed gate: unpriced ops, models without a baseline entry and stale entries fail",
    )
    p.add_argument("--hardware", metavar="NAME", help="hardware profile for every model")
    p.add_argument(
        "--breaks",
        action="store_true",
        help="price models FX cannot trace through Dynamo with graph breaks, each break reported",
    )
    p.add_argument("--junit", metavar="PATH", help="write a JUnit XML report")
    p.add_argument("--json", metavar="PATH", help="write every profile as JSON")
    p.add_argument("--markdown", metavar="PATH", help="write the pull-request comment")
    p.add_argument("--html", metavar="PATH", help="write the interactive HTML report")
    p.add_argument(
        "--history", metavar="FILE", help="append one JSON line per model to a history file"
    )
    p.add_argument("--no-cache", action="store_true", help="do not cache profiles")
    p.add_argument("--cache-clear", action="store_true", help="empty the profile cache first")
    p.add_argument(
        "--base",
        metavar="REF",
        help="compare with the models at git merge-base REF HEAD instead of the baseline file",
    )
    p.add_argument("--cache-dir", help=argparse.SUPPRESS)  # the base's run: HEAD's cache
    p.set_defaults(func=command)
    return p


def command(args: argparse.Namespace, console: Any = None) -> int:
    """The handler ``cli.main`` calls. A check of the project's budget files (no path named)
    says which test files hold budget markers, which only ``pytest --graph-budget`` runs: a
    user reading "within budget" must not think them checked."""
    code = run(
        args.paths,
        update=args.update,
        strict=args.strict,
        hardware=args.hardware,
        breaks=args.breaks,
        junit=args.junit,
        json=args.json,
        markdown=args.markdown,
        html=args.html,
        history=args.history,
        cache=not args.no_cache,
        cache_clear=args.cache_clear,
        quiet=getattr(args, "quiet", False),
        base=args.base,
        cache_dir=args.cache_dir,
    )
    if console is not None and not args.paths and code != EXIT_USAGE:
        from pytest_graphbudget.cli.check_notes import unchecked_notes

        for note in unchecked_notes(Path.cwd(), PRUNED):
            console.note(note)
    return code


def run(
    paths: Sequence[str] = (),
    *,
    update: bool = False,
    strict: bool = False,
    hardware: str | None = None,
    breaks: bool = False,
    junit: str | None = None,
    json: str | None = None,
    markdown: str | None = None,
    html: str | None = None,
    history: str | None = None,
    cache: bool = True,
    cache_clear: bool = False,
    cwd: Path | None = None,
    quiet: bool = False,
    base: str | None = None,
    cache_dir: str | None = None,
) -> int:
    """Check the budget files in ``paths`` (relative to ``cwd``), print the table, write the
    reports asked for; the exit code. ``quiet``: what the models print while they are built
    is dropped (else it goes to stderr), so stderr carries only errors. ``base``: compare
    with the models at the merge base of that ref and HEAD (``run/base_ref.py``) instead of
    the baseline file; ``cache_dir``: the profile cache's, instead of the settings'.
    ``breaks``: models FX cannot trace go through Dynamo with graph breaks (the base too)."""
    from pytest_graphbudget.gate.renames import stale_entries
    from pytest_graphbudget.reports import html_graph
    from pytest_graphbudget.run import settings as project
    from pytest_graphbudget.run.session import Outputs, checked_tests, finish, stale_errors

    here = Path(cwd or Path.cwd())
    try:  # pytest's rootdir and configuration file for `pytest --graph-budget PATHS` here
        found, conf = project.for_directory(here, paths)
        root = found.root
        files = budget_paths(paths, here, root, conf.budgets, root / conf.baseline)
        hardware = known_hardware(hardware, conf.hardware_profiles)
        reports = {"--junit": junit, "--json": json, "--markdown": markdown, "--html": html}
        check_outputs(reports | {"--history": history}, [*files, root / conf.baseline], here)
    except project.SettingsError as exc:
        return usage(*exc.problems)
    except GraphBudgetError as exc:  # a UsageError too
        return usage(str(exc))
    cache_at = Path(cache_dir) if cache_dir else root / conf.cache_dir
    with contextlib.ExitStack() as scratch:  # the base's baseline file, removed at the end
        try:
            flags = [
                *(["--hardware", hardware] if hardware is not None else []),
                *(["--breaks"] if breaks else []),
            ]
            against = compared(base, paths, here, root, conf, cache_at, flags, update, scratch)
        except GraphBudgetError as exc:
            return usage(str(exc))
        checker = Checker(
            **against,
            strict=strict or conf.strict,
            update=update,
            update_command="graph-budget check --update",
            draw=html_graph.draw if html else None,
        )
        profiler = open_profiler(cache_at, conf, cache_clear, checker, breaks, cache)
        results = check_files(files, root, found.ini, conf, checker, profiler, hardware, quiet)
        checked = checked_tests(results)  # a table given a dtype: its untagged entry is stale
        stale = stale_entries(checker.baseline.keys(), checker.collected, root, checked)
        results += stale_errors(stale, checker)
        outputs = Outputs(here, root, junit, json, markdown, html, history)
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


def open_profiler(
    at: Path, conf: Any, clear: bool, checker: Checker, breaks: bool, cache: bool
) -> Any:
    """The run's profiler: its cache at ``at`` (none without ``cache``), the graph's nodes
    kept for an HTML report, Dynamo's graph breaks for ``breaks``."""
    from pytest_graphbudget.run.profiler import Profiler

    profiler = Profiler.open(at, conf.hardware_profiles, clear)
    profiler.nodes = checker.draw is not None
    profiler.tier = "dynamo-breaks" if breaks else None
    profiler.cache = profiler.cache if cache else None
    return profiler


def check_outputs(outputs: dict[str, str | None], read: list[Path], here: Path) -> None:
    """Every report path, before any model is profiled: none may be a file the check reads
    (``--json budgets/a.toml`` had replaced the budget) nor a directory, nor lie under a file
    (which had been said on stdout once every model was profiled). A missing folder is made."""
    from pytest_graphbudget.reports import names_a_folder

    refuse_reading_into(outputs, read, here)
    for option, path in outputs.items():
        target = here / path if path else None
        if path and names_a_folder(path):
            raise UsageError(f"{option} {path} names a folder: give a file name in it")
        if target is not None and target.is_dir():
            raise UsageError(f"{option} {path} is a directory")
        above = next((p for p in (target.parents if target else ()) if p.exists()), None)
        if above is not None and not above.is_dir():
            raise UsageError(f"{option} {path}: {above} is a file, not a folder")


def check_files(
    files: list[Path],
    root: Path,
    ini: dict[str, Any],
    conf: Any,
    checker: Checker,
    profiler: Any,
    hardware: str | None,
    quiet: bool,
) -> list[ModelResult]:
    """Every table of every file checked, with the project importable as under pytest."""
    results: list[ModelResult] = []
    tables = {
        path: budget_files.read(path, relative(str(path), root), conf.defaults) for path in files
    }
    # every id is known before the first check, as under pytest: a renamed table is matched
    checker.collected = {node_id(path, root, e.name) for path in files for e in tables[path]}
    checker.root = root
    # what models print stays off the table; factories import as they would under pytest
    printed = open(os.devnull, "w") if quiet else contextlib.nullcontext(sys.stderr)
    with printed as sink, contextlib.redirect_stdout(sink), importable(import_paths(root, ini)):
        for path in files:
            results += check_file(
                path, tables[path], root, conf.defaults, checker, profiler, hardware
            )
    from pytest_graphbudget.run.base_ref import report_stray_imports

    report_stray_imports()  # a --base run: the project's modules it read from elsewhere
    return results


def compared(
    base: str | None,
    paths: Sequence[str],
    here: Path,
    root: Path,
    conf: Any,
    cache: Path,
    flags: list[str],
    update: bool,
    scratch: contextlib.ExitStack,
) -> dict[str, Any]:
    """The checker's baseline: the settings' file, or with ``base`` the base's figures
    (profiled by this command with ``--update`` in a worktree of the merge base, sharing
    ``cache`` and this run's ``flags``), the title naming the base and whether a baseline
    file was ignored."""
    from pytest_graphbudget.run.base_ref import REPORT, checker_baseline, profile_base

    committed = root / conf.baseline
    if base is None:
        return checker_baseline(committed, root, conf.baseline_from, None, "--base")
    if update:
        raise UsageError(
            "--base compares with the base and --update rewrites the baseline file: use one"
        )
    command = ["-m", "pytest_graphbudget.cli", "check", "--update", "-q"]
    command += ["--cache-dir", str(cache.resolve()), *flags]
    out = Path(scratch.enter_context(tempfile.TemporaryDirectory())) / "baseline.toml"
    command += ["--json", str(out.parent / REPORT)]  # what the base could not profile
    found = profile_base(base, root, here, [*command, *paths], out, flag="--base")
    return checker_baseline(committed, root, conf.baseline_from, found, "--base")


def node_id(path: Path, root: Path, name: str) -> str:
    """A table's id, as pytest's node id: ``budgets/vision.toml::resnet18``."""
    return f"{relative(str(path), root).replace(chr(92), '/')}::{name}"


def check_file(
    path: Path,
    entries: list[Any],
    root: Path,
    defaults: Any,
    checker: Checker,
    profiler: Any,
    hardware: str | None,
) -> list[ModelResult]:
    """One result per table and per problem of the budget file (``entries``, as
    ``budget_files.read`` gives them), as the plugin's items give."""
    shown = relative(str(path), root)
    results = []
    for entry in entries:
        nodeid = node_id(path, root, entry.name)
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
    if not paths:  # a budget/ folder, misspelt: its budgets would never be checked
        from pytest_graphbudget.gate.stray import stray_folders

        if stray := stray_folders(root, given):
            raise UsageError(stray[0])
    files: list[Path] = []
    roots = [root / p for p in configured]
    for path in given:
        if not path.exists():
            raise UsageError(f"{path}: no such file or directory")
        if path.is_file():
            if path.name not in budget_files.SKIPPED:
                files.append(not_a_budget_file(path, baseline))
            continue
        if not path.is_dir():
            raise UsageError(f"{path}: not a budget file (*.toml) nor a directory")
        for found in sorted(path.rglob("*.toml")):
            parts = found.relative_to(path).parts[:-1]
            if any(p.startswith(".") or p in PRUNED for p in parts):
                continue
            if found.name in budget_files.SKIPPED or found.resolve() == baseline.resolve():
                continue
            # a folder named on the command line may hold other tools' files (as in pytest)
            named = paths and not budget_files.is_budget_file(found, roots)
            if named and not budget_files.looks_like_budget(found):
                continue
            files.append(found)
    unique = list(dict.fromkeys(f.resolve() for f in files))
    if not unique:
        shown = ", ".join(relative(str(p), root) for p in given)
        raise UsageError(f"no budget files (*.toml) in {shown}: nothing would be checked")
    return unique


def not_a_budget_file(path: Path, baseline: Path) -> Path:
    """``path``, a budget file named on the command line; a Python module or the baseline
    read as budget TOML was an exit 1 on a parse error, a check that should not have run."""
    if path.suffix != ".toml":  # as pytest --graph-budget collects them
        raise UsageError(
            f"{path}: not a budget file (*.toml); check reads TOML budget files and "
            "directories of them (tests with budget markers run under pytest --graph-budget)"
        )
    if path.resolve() == baseline.resolve():
        raise UsageError(f"{path} is the baseline file, not a budget file")
    return path


def known_hardware(name: str | None, profiles: dict[str, Any]) -> str | None:
    """``--hardware``'s profile name, checked before any model is built: an unknown name
    (or ``""``) is a usage error, never an error per model nor the tables' own hardware."""
    from pytest_graphbudget import hardware as hw

    if name is None:
        return None
    try:
        return hw.get(name, profiles).name
    except GraphBudgetError as exc:
        raise UsageError(f"--hardware: {exc}") from None


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
