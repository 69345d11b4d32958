"""The ``graph budget`` section of pytest's terminal summary: one row per profiled model."""

from __future__ import annotations

from typing import Any

from pytest_graphbudget.units import format_bytes, format_count


def _change(result: Any) -> str:
    if not result.baseline or not result.profile:
        return "new" if result.profile else ""
    old = result.baseline.get("flops")
    new = result.profile["totals"]["flops"]
    if not old:
        return ""
    delta = new / old - 1
    return "=" if abs(delta) < 0.0005 else f"{delta * 100:+.1f}%"


def _limit(result: Any, key: str, formatter) -> str:
    limit = result.budget["limits"].get(key)
    return "" if limit is None else f"/{formatter(limit)}"


def rows(results: list[Any]) -> list[list[str]]:
    """Model, FLOPs/limit, memory/limit, params, change in FLOPs from baseline, verdict."""
    table = []
    for r in sorted(results, key=lambda r: (not r.failed, r.id)):
        if r.profile is None:
            table.append([r.label, "-", "-", "-", "", "ERROR"])
            continue
        totals = r.profile["totals"]
        verdict = (
            "FAIL"
            if r.failed
            else ("warn" if any(f["severity"] == "warn" for f in r.findings) else "ok")
        )
        table.append(
            [
                r.label,
                format_count(totals["flops"]) + _limit(r, "flops_max", format_count),
                format_bytes(totals["peak_memory_bytes"]) + _limit(r, "memory_max", format_bytes),
                format_count(totals["params"]),
                _change(r),
                verdict,
            ]
        )
    return table


def terminal(reporter: Any, results: list[Any], stale: set[str], updated: Any) -> None:
    """Write the section (fits 80 columns: long model names are shortened)."""
    if not results and not stale:
        return
    reporter.write_sep("=", "graph budget")
    header = ["model", "FLOPs/limit", "memory/limit", "params", "vs base", "verdict"]
    body = rows(results)
    width = 24
    for row in body:
        if len(row[0]) > width:
            row[0] = row[0][: width - 3] + "..."
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    for row in [header, *body]:
        reporter.write_line("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    for r in results:
        for f in r.findings:
            if f["severity"] == "notice":
                reporter.write_line(f"notice: {r.label}: {f['message']}")
    for key in sorted(stale):
        reporter.write_line(f"stale baseline entry (model no longer exists): {key}")
    if updated:
        reporter.write_line(f"baseline written: {updated}")
