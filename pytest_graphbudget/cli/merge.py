"""``graph-budget merge A.json B.json ...``: the JSON reports of sharded runs (matrix jobs, each
``pytest --graph-budget --graph-budget-json``) merged into one verdict and one set of reports.

Each model is rebuilt as the ``ModelResult`` its shard wrote, and the reports come from the
same writers as a pytest run's (``reports.write_files``): no second implementation. A model in
two shards is one row when both entries agree, and an error when they differ. A model that
must have run and no report has (``merge_expect``: what ``--expect`` collects, else what the
shards collected before deselecting) is a ``not run`` error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from pytest_graphbudget.cli import merge_expect, options
from pytest_graphbudget.cli.console import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Console,
    refuse_reading_into,
)
from pytest_graphbudget.cli.saved import check_figures
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate import renames
from pytest_graphbudget.gate.check import ModelResult
from pytest_graphbudget.reports import json_report, names_a_folder, write_files

# What the JSON adds to a ModelResult (recomputed by the writers) or drops from it.
_DERIVED = {"verdict", "passed", "changes"}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "merge",
        parents=[options.quiet()],
        formatter_class=options.Formatter,
        help="merge the JSON reports of sharded runs into one verdict",
        description="Merge the --graph-budget-json reports of matrix jobs into one verdict "
        "and the reports of one unsharded run. Exit 0 all passed, 1 any failed, 2 usage.",
    )
    p.add_argument("reports", metavar="REPORT.json", nargs="+")
    p.add_argument(
        "--expect",
        metavar="PATH",
        action="append",
        default=[],
        help="a path the unsharded run is given (budgets/, tests/, a test file), collected "
        "as pytest --graph-budget collects it: a budget model there that no shard reported is "
        "an error (not run), never unchanged. Without it, every budgeted test that a shard "
        "collected before deselecting (pytest-split, -k) must have run in some shard",
    )
    p.add_argument("--json", metavar="OUT", help="write the merged JSON report")
    p.add_argument("--markdown", metavar="OUT", help="write the pull-request comment")
    p.add_argument("--junit", metavar="OUT", help="write the JUnit XML file")
    p.add_argument("--html", metavar="OUT", help="write the HTML report")
    p.add_argument(
        "--github",
        action="store_true",
        help="what one unsharded run does in GitHub Actions: the annotations on stdout and "
        "the comment appended to $GITHUB_STEP_SUMMARY",
    )
    p.set_defaults(func=run)
    return p


def read_report(path: str) -> dict[str, Any]:
    """One shard's document, or a one-line error saying why it is not one."""
    try:
        document = json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise GraphBudgetError(f"cannot read {path}: {exc}") from None
    if not isinstance(document, dict) or "schema" not in document:
        raise GraphBudgetError(f"{path} is not a graph-budget JSON report")
    if document["schema"] != json_report.SCHEMA:
        raise GraphBudgetError(
            f"{path} has schema {document['schema']!r}, expected {json_report.SCHEMA!r}"
        )
    models = document.get("models")
    if not isinstance(models, list) or not all(
        isinstance(m, dict) and isinstance(m.get("id"), str) for m in models
    ):
        raise GraphBudgetError(f"{path} is not a whole graph-budget JSON report: no models list")
    for model in models:  # a hand-edited NaN or "x" had been a traceback
        if isinstance(model.get("profile"), dict):
            check_figures(f"{path}: model {model['id']!r}", model["profile"])
    return document


def result_of(entry: dict[str, Any]) -> ModelResult:
    """The ``ModelResult`` a JSON model entry was written from."""
    names = {f.name for f in fields(ModelResult)}
    kept = {k: v for k, v in entry.items() if k in names and k not in _DERIVED}
    kept["findings"] = [{k: v for k, v in f.items() if k != "line"} for f in entry["findings"]]
    return ModelResult(**kept)


def _result_of(path: str, entry: dict[str, Any]) -> ModelResult:
    """``result_of``, or a one-line error naming the report whose entry is not one."""
    try:
        return result_of(entry)
    except (KeyError, TypeError, AttributeError) as exc:
        raise GraphBudgetError(
            f"{path}: model {entry['id']!r} is not a whole report entry ({type(exc).__name__}: "
            f"{exc})"
        ) from None


def comparable(entry: dict[str, Any]) -> dict[str, Any]:
    """A model entry less what two runs of the same model may differ in: the wall-clock time
    of its trace (another runner) and whether its graph was drawn (an HTML report asked)."""
    kept = {k: v for k, v in entry.items() if k not in json_report.GRAPH_KEYS}
    if kept.get("profile"):
        trace = {k: v for k, v in kept["profile"]["trace"].items() if k != "seconds"}
        kept["profile"] = kept["profile"] | {"trace": trace}
    return kept


def merge(documents: dict[str, dict[str, Any]]) -> tuple[list[ModelResult], set[str]]:
    """Every shard's models, one row per id; identical duplicates merge, others are an error."""
    entries: dict[str, tuple[str, dict[str, Any]]] = {}
    stale: set[str] = set()
    for path, document in documents.items():
        stale.update(document.get("stale_baseline", []))
        for entry in document["models"]:
            seen = entries.get(entry["id"])
            if seen and comparable(seen[1]) != comparable(entry):
                raise GraphBudgetError(f"{entry['id']} differs between {seen[0]} and {path}")
            if not seen or "graph_svg" in entry and "graph_svg" not in seen[1]:
                entries[entry["id"]] = (path, entry)  # the copy with its graph drawn, if any
    results = [_result_of(path, entry) for path, entry in entries.values()]
    return sorted(results, key=lambda r: r.id), stale - set(entries)


def environment_of(documents: dict[str, dict[str, Any]]) -> dict[str, str] | None:
    """What the shards' figures were measured in, for the merged reports (not the merging
    machine's). Shards whose counters differ (torch, pytest-graphbudget) cannot be one
    report: their figures may differ for that reason alone."""
    from pytest_graphbudget.gate.environment import COUNTERS

    found = {path: d["environment"] for path, d in documents.items() if d.get("environment")}
    if not found:
        return None
    (first, seen), *others = found.items()
    for path, environment in others:
        for name in COUNTERS:
            if seen.get(name) != environment.get(name):
                raise GraphBudgetError(
                    f"{first} was measured with {name} {seen.get(name)} and {path} with "
                    f"{environment.get(name)}: shards must run the same versions"
                )
    return seen


def shards_agree(documents: dict[str, dict[str, Any]], key: str, what: str) -> Any:
    """The ``commit`` (or ``root``) the shards ran at, for the merged report. Shards of two
    commits (a re-run's shard beside the last push's) are no one run: each model's verdict
    would be another code's, and a model made heavier could pass on the old shard's figures."""
    found = {path: d[key] for path, d in documents.items() if key in d}
    if not found:
        return None
    (first, seen), *others = found.items()
    for path, value in others:
        if value != seen:
            raise GraphBudgetError(
                f"{first} ran at {what} {str(seen)[:12]} and {path} at {str(value)[:12]}: "
                f"shards must run at one {what}"
            )
    return seen


FLAGS = {
    "strict": "--graph-budget-strict",
    "hardware": "--graph-budget-hardware",
    "breaks": "--graph-budget-breaks",
    "base": "--graph-budget-base",
}
"""The JSON's ``settings`` and the flags that set them, for the message."""


def settings_agree(documents: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The run settings the shards share. One shard priced on another ``--graph-budget-
    hardware``, or gated loosely beside strict ones, would judge its models by other rules
    than the rest and merge green; a report without them (an earlier version's) is not
    compared."""
    found = {path: d["settings"] for path, d in documents.items() if d.get("settings")}
    if not found:
        return None
    (first, seen), *others = found.items()
    for path, settings in others:
        for key in sorted(set(seen) | set(settings)):
            if seen.get(key) != settings.get(key):
                flag = FLAGS.get(key, key)
                raise GraphBudgetError(
                    f"{first} ran with {flag} {seen.get(key)!r} and {path} with "
                    f"{settings.get(key)!r}: shards must run with the same settings"
                )
    return seen


def reports_root(prefix: Any, here: Path) -> Path:
    """Where the shards' paths are relative to, on this runner: their root's place in the
    repository under ``$GITHUB_WORKSPACE`` (the checkout), else the merge's own folder (the
    annotations had named files relative to wherever merge ran)."""
    workspace = os.environ.get("GITHUB_WORKSPACE")
    if workspace and isinstance(prefix, str):
        return Path(workspace) / prefix
    return here


def run(args: argparse.Namespace, console: Console) -> int:
    if args.github and not os.environ.get("GITHUB_STEP_SUMMARY"):
        raise GraphBudgetError("--github: $GITHUB_STEP_SUMMARY is not set (not in Actions?)")
    outputs = {"--json": args.json, "--junit": args.junit, "--markdown": args.markdown}
    refuse_reading_into({**outputs, "--html": args.html}, args.reports)
    for option, path in {**outputs, "--html": args.html}.items():
        if path and names_a_folder(path):
            raise GraphBudgetError(f"{option} {path} names a folder: give a file name in it")
    documents = {path: read_report(path) for path in args.reports}
    results, stale = merge(documents)
    # a model one shard ran as new, whose entry another shard found stale (a renamed test)
    records = [d["stale_entries"] for d in documents.values() if d.get("stale_entries")]
    orphans = renames.rematch_merged(results, records, stale)
    environment = environment_of(documents)
    commit = shards_agree(documents, "commit", "commit")
    prefix = shards_agree(documents, "root", "root")
    settings = settings_agree(documents)
    seen = {r.id for r in results}
    collection = merge_expect.collection_of(documents)
    left = merge_expect.never_ran(collection, {r.nodeid for r in results}, seen)
    ran = seen | {r.nodeid for r in results}  # a table's variant, lin@bfloat16, is its item's
    stopped = merge_expect.halted(documents, ran)  # a shard whose run stopped before its tests
    for path, ids in stopped.items():
        console.error(merge_expect.halted_line(path, ids))
    if args.expect:  # what must run, named: the shards' own lists are not needed
        wanted = merge_expect.expected(args.expect)
        skipped = collection.skipped if collection and collection.skipped else frozenset()
        lost = [i for i in wanted if not merge_expect.reported(i, seen) and i not in skipped]
        if lost:
            console.error(merge_expect.expected_line(lost, args.expect, list(documents)))
    else:
        lost = left
        if lost:
            console.error(merge_expect.never_ran_line(lost, list(documents)))
    halted = frozenset().union(*stopped.values())  # kept by a shard, so never in ``left``
    lost = sorted(halted.union(lost))
    from pytest_graphbudget.run.session import not_run

    lost_shard = "no shard reported this model (a missing or failed shard?)"
    results = sorted(results + [not_run(i, lost_shard) for i in lost], key=lambda r: r.id)
    if collection is not None:  # the merged run's: what the shards collected, and left unrun
        collection = json_report.Collection(
            collection.collected, halted.union(left), collection.skipped
        )
    here = Path.cwd()
    root = reports_root(prefix, here)
    done = write_files(
        results,
        stale,
        here=here,
        root=root,
        junit=args.junit,
        json=args.json,
        markdown=args.markdown,
        html=args.html,
        github=args.github,
        environment=environment,
        collection=collection,
        orphans=orphans,
        commit=commit,
        prefix=prefix,
        settings=settings,
    )
    for problem in done.problems:  # already "graph-budget: cannot write ...", one line
        print(problem, file=sys.stderr, flush=True)
    from pytest_graphbudget.reports import common, github

    if args.github or os.environ.get("GITHUB_ACTIONS") == "true":  # as the terminal reporter
        for command in github.annotations(results, root):
            print(command, flush=True)
    console.note(common.title(results, stale))
    if not results and not stale:  # every shard's run checked nothing: a gate that gated nothing
        console.error(
            f"no model was checked in {', '.join(documents)}: no shard ran a budgeted test or "
            "a budget file (are the budget paths and markers where the shards' pytest looks?)"
        )
        return EXIT_FAILED
    if any(r.failed for r in results):
        return EXIT_FAILED
    return EXIT_USAGE if done.problems else EXIT_OK
