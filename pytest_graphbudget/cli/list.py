"""``graph-budget list [PATTERN...]``: the model zoo by family; ``--check`` profiles each model
and says which tier traced it (exit 1 when one fails)."""

from __future__ import annotations

import argparse
import fnmatch
import math
import time
from collections.abc import Sequence
from typing import Any

from pytest_graphbudget.cli import loading, options
from pytest_graphbudget.cli.console import (
    EXIT_FAILED,
    EXIT_OK,
    PROG,
    Console,
    check_writable,
    format_of,
    stdout_to_stderr,
)
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.reports.tables import csv_text, json_text, markdown_table, text_table
from pytest_graphbudget.units import format_count


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "list",
        parents=[options.quiet(), options.model()],
        formatter_class=options.Formatter,
        help="the model zoo by family (--check profiles each one)",
        description="The models the zoo knows, by family. PATTERN filters names (a substring "
        "or a glob such as 'resnet*'). --check profiles each and says which tier traced it.",
    )
    p.add_argument("patterns", nargs="*", metavar="PATTERN")
    p.add_argument("--family", action="append", metavar="NAME", help="only this family")
    p.add_argument("--check", action="store_true", help="profile each model; exit 1 on failures")
    options.output_options(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, console: Console) -> int:
    fmt = format_of(args)  # as every command: -o list.json writes JSON; a contradiction fails
    check_writable(args.output)
    families = _filtered(_families(args.family, console), args.patterns)
    if not args.check:
        text = json_text(families) if fmt == "json" else _list_text(families, fmt)
        console.emit(text, args.output)
        return EXIT_OK

    hardware = loading.hardware(args)
    results = []
    everything = [(family, name) for family, names in families.items() for name in names]
    for i, (family, name) in enumerate(everything, 1):
        console.progress(f"[{i}/{len(everything)}] checking {name} ...")
        results.append(_check_one(family, name, args, hardware))
    failed = [r for r in results if r["status"] != "ok"]
    text = json_text(results) if fmt == "json" else _check_text(results, fmt)
    console.emit(text, args.output)
    if failed:
        console.failure(f"{len(failed)} of {len(results)} models failed to profile")
        return EXIT_FAILED
    return EXIT_OK


def _families(wanted: Sequence[str] | None, console: Console) -> dict[str, list[str]]:
    """The zoo's model names by family (only the ``wanted`` families), sorted."""
    from pytest_graphbudget import zoo

    loaders = zoo.loaders()
    if wanted:
        known = sorted({loader.family for loader in loaders})
        unknown = [f for f in wanted if f not in known]
        if unknown:
            raise GraphBudgetError(
                f"unknown family {', '.join(unknown)}; families: {', '.join(known)}"
            )
        loaders = [loader for loader in loaders if loader.family in wanted]
    console.progress("collecting model names ...")
    families: dict[str, list[str]] = {}
    with stdout_to_stderr():  # as zoo.list_models(), for the chosen families only
        for loader in loaders:
            names = loader.names()
            if names:
                families.setdefault(loader.family, []).extend(names)
    return {f: sorted(set(n), key=str.casefold) for f, n in families.items()}


def _filtered(families: dict[str, list[str]], patterns: Sequence[str]) -> dict[str, list[str]]:
    """The names ``patterns`` select: a model's exact name means that model; otherwise a
    pattern is a substring or a glob."""
    if not patterns:
        return families
    every = {n.casefold() for names in families.values() for n in names}
    exact = {p.casefold() for p in patterns if p.casefold() in every}
    loose = [p for p in patterns if p.casefold() not in every]
    families = {
        family: [n for n in names if n.casefold() in exact or _matches(n, loose)]
        for family, names in families.items()
    }
    families = {f: names for f, names in families.items() if names}
    if not families:
        raise GraphBudgetError(
            f"no model matches {' '.join(patterns)} (`{PROG} list` shows every name)"
        )
    return families


def _matches(name: str, patterns: Sequence[str]) -> bool:
    folded = name.casefold()
    for pattern in patterns:
        p = pattern.casefold()
        if any(c in p for c in "*?[") and fnmatch.fnmatchcase(folded, p):
            return True
        if p in folded:
            return True
    return False


def _check_one(family: str, name: str, args: argparse.Namespace, hardware: Any) -> dict:
    from pytest_graphbudget import zoo
    from pytest_graphbudget.modes import dispatch

    start = time.perf_counter()
    record: dict[str, Any] = {"model": name, "family": family}
    try:
        with stdout_to_stderr():
            case = zoo.resolve(name, **loading.zoo_options(args))
            request = dispatch.request(case, hardware=hardware, **loading.variant(args))
            prof = dispatch.profile(request)
    except Exception as exc:  # one model's failure is reported; the sweep goes on
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not isinstance(exc, GraphBudgetError):
            reason = f"{type(exc).__name__}: {reason}"
        record.update(status="failed", reason=reason)
    else:
        record.update(
            status="ok",
            tier=prof.trace.method,
            failed_tiers=dict(prof.trace.failures),
            flops=prof.flops,
            params=prof.params,
            unsupported_ops=dict(prof.coverage.unsupported_ops),
        )
    record["seconds"] = round(time.perf_counter() - start, 2)
    return record


def _columns(names: Sequence[str], width: int = 100) -> list[str]:
    """Names in as many columns as fit in ``width``, filled down the columns like ``ls``."""
    cell = max(len(n) for n in names) + 2
    ncols = max(1, width // cell)
    nrows = math.ceil(len(names) / ncols)
    rows = []
    for r in range(nrows):
        row = [names[c * nrows + r] for c in range(ncols) if c * nrows + r < len(names)]
        rows.append("  " + "".join(n.ljust(cell) for n in row).rstrip())
    return rows


def _list_text(families: dict[str, list[str]], fmt: str) -> str:
    if fmt == "csv":
        rows = [[family, name] for family, names in families.items() for name in names]
        return csv_text(["family", "model"], rows)
    lines: list[str] = []
    for family, names in families.items():
        if fmt == "markdown":
            lines += [f"### {family} ({len(names)})", "", ", ".join(f"`{n}`" for n in names), ""]
        else:
            lines += [f"{family} ({len(names)})", *_columns(names), ""]
    total = sum(len(n) for n in families.values())
    lines.append(
        f"{total} model{'s' if total != 1 else ''}. Also: a .pt/.pth/.pt2 file, a YOLO .yaml, "
        "or a folder with config.json."
    )
    return "\n".join(lines) + "\n"


def _clip(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


CHECK_HEADERS = ["model", "family", "status", "tier", "FLOPs", "params", "seconds", "note"]


def _check_row(r: dict[str, Any]) -> list[str]:
    seconds = f"{r['seconds']:.1f}"
    if r["status"] != "ok":
        return [r["model"], r["family"], "FAILED", "-", "-", "-", seconds, r["reason"]]
    notes = [f"{t} failed: {_clip(why)}" for t, why in r["failed_tiers"].items()]
    if r["unsupported_ops"]:
        notes.append("no formula: " + ", ".join(sorted(r["unsupported_ops"])))
    return [
        r["model"],
        r["family"],
        "ok",
        r["tier"],
        format_count(r["flops"]),
        format_count(r["params"]),
        seconds,
        "; ".join(notes),
    ]


def _check_text(results: list[dict[str, Any]], fmt: str) -> str:
    rows = [_check_row(r) for r in results]
    if fmt == "csv":
        return csv_text(CHECK_HEADERS, rows)
    if fmt == "markdown":
        return "\n".join(markdown_table(CHECK_HEADERS, rows, "llllrrrl")) + "\n"
    ok = sum(1 for r in results if r["status"] == "ok")
    lines = text_table(CHECK_HEADERS, rows, "llllrrrl")
    lines += ["", f"{ok} of {len(results)} models profiled"]
    return "\n".join(lines) + "\n"
