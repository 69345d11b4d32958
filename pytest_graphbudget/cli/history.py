"""``graph-budget history FILE --html OUT``: the figures that ``--graph-budget-history FILE``
appended over runs, drawn per model over commits, with the commits where a figure moved past
the tolerance and the layer that moved it. Without ``--html`` it lists those moves."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pytest_graphbudget.cli import options
from pytest_graphbudget.cli.console import EXIT_OK, Console, check_writable, refuse_reading_into
from pytest_graphbudget.errors import GraphBudgetError


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "history",
        parents=[options.quiet()],
        formatter_class=options.Formatter,
        help="draw the figures of a history file over commits",
        description="Read a --graph-budget-history file (one JSON line per run and model) and "
        "list, or draw with --html, each model's figures over commits, marking where a figure "
        "moved past the tolerance. Exit 0, or 2 for a missing or malformed file.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("--html", metavar="OUT", help="write the self-contained HTML page")
    p.add_argument(
        "--tolerance",
        metavar="SHARE",
        help="a move past this share is marked (0.01 or 1%%; default: each line's own, "
        "the model's budget tolerance when it was recorded)",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, console: Console) -> int:
    from pytest_graphbudget.reports import history
    from pytest_graphbudget.reports.html_history import history_page, move_text
    from pytest_graphbudget.units import share

    tolerance = (
        None
        if args.tolerance is None
        else share(args.tolerance, "--tolerance", "--tolerance", option=True)
    )
    check_writable(args.html, "--html")  # as profile and compare: a missing folder is a typo
    refuse_reading_into({"--html": args.html}, [args.file])
    records = history.read(Path(args.file))
    found = history.moves(records, tolerance)
    if args.html:
        from pytest_graphbudget.reports import html

        try:
            html.write(args.html, history_page(records, tolerance))
        except OSError as exc:
            raise GraphBudgetError(f"cannot write {args.html}: {exc.strerror or exc}") from None
        console.note(f"wrote {args.html}")
    else:
        for move in found:
            print(f"{move.model}: {move_text(move)}")
        for record in records:  # a commit where the model could not be checked: no figures
            if "error" in record:
                where = (record.get("commit") or "no commit")[:7]
                print(f"{record['model']}: {where}: could not be checked: {record['error']}")
        print(summary(records, len(found)))  # never silent: an empty list reads as "no file"
    return EXIT_OK


def summary(records: list[dict[str, Any]], moved: int) -> str:
    """``1 model over 3 commits (3 lines): nothing moved past the tolerance``; the lines of a
    model that could not be checked are counted apart (all of them had read as nothing moved)."""
    models = len({r.get("model") for r in records})
    commits = len({r.get("commit") for r in records})
    what = f"{moved} move{'s' if moved != 1 else ''}" if moved else "nothing moved"
    errors = sum(1 for r in records if r.get("error"))
    lines = f"{len(records)} line{'s' if len(records) != 1 else ''}"
    lines += f", {errors} could not be checked" if errors else ""
    return (
        f"{models} model{'s' if models != 1 else ''} over {commits} "
        f"commit{'s' if commits != 1 else ''} ({lines}): {what} past the tolerance"
    )
