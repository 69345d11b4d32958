"""``--graph-budget-markdown``: the pull-request comment (and the Actions job summary).

It opens with the hidden marker ``<!-- graph-budget -->``, by which the workflow finds its one
comment and updates it instead of adding another. Then: a title with the verdict, a table of
the models that failed or came near a limit (figures with their limits and the change from
the baseline in percent), one section per failure with its messages, the layers that grew
most in each regressed figure (FLOPs, params, peak memory, traffic) and how to accept an
intended change, the figures that dropped (an improvement is news too), and the models within
budget folded in a ``<details>`` block, so that a run of fifty models still reads at a glance.
Right under the title, what a rename left (``gate/renames.py``): a check it may have skipped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_graphbudget.gate.check import NOT_COMPARED_KEY
from pytest_graphbudget.gate.renames import KEYS as RENAME_KEYS
from pytest_graphbudget.reports import common, places, tables

MARKER = "<!-- graph-budget -->"
MAX_CHARS = 60_000  # GitHub refuses comments over 65,536 characters
ICONS = {
    common.PASS: "✅",
    common.WARN: "⚠️",
    common.FAIL: "❌",
    common.ERROR: "💥",
    common.UNCHECKED: "ℹ️",
}
WORDS = {
    common.PASS: "pass",
    common.WARN: "warn",
    common.FAIL: "fail",
    common.ERROR: "error",
    common.UNCHECKED: "nothing checked yet",
}
COLUMNS = ("flops", "peak_memory_bytes", "params")
WARNINGS = {
    "": "Near a limit",
    **dict.fromkeys(common.UNPRICED_KEYS, "Ops without a cost formula"),
    NOT_COMPARED_KEY: "Not compared with the base",
}
"""The heading of each kind of warning by its key (``""``: the rest, figures near a limit)."""
RULE = (":--", "--:")  # the separator row's left and right alignment marks


def cell(text: str) -> str:
    """Text safe in a table cell or a list item: no pipes, no line breaks, and no ``<`` that
    GitHub would take for an HTML tag and drop (``<root>``)."""
    return text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def code(text: str) -> str:
    return "`" + common.one_line(text).replace("`", "'") + "`"


def fenced(text: str) -> list[str]:
    """``text`` in a code block whose fence is longer than any run of backticks in it: an
    error holding a fence of its own (a model's message, a test id) would otherwise close
    the block, and the rest of it would be read as markdown (a heading, an open
    ``<details>`` folding away the comment)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, text, fence]


def table(results: list[Any], names: dict[str, str]) -> list[str]:
    header = ["model"]
    for key in COLUMNS:
        header += [common.FIGURES[key].heading + " / limit", "vs base"]
    header.append("verdict")
    align = "l" + "r" * (len(header) - 2) + "l"
    lines = [tables.markdown_row(header, str), tables.markdown_rule(align, *RULE)]
    for result in results:
        cells = [code(names[result.id])]
        for key in COLUMNS:
            if result.profile is None:
                cells += ["-", ""]
            else:
                cells += [
                    common.figure_with_limit(result, key, " / "),
                    common.format_change(result, key),
                ]
        kind = common.verdict(result)
        cells.append(f"{ICONS[kind]} {WORDS[kind]}")
        # the name is a code span, where GitHub reads no HTML: no ``&lt;`` there, which
        # would show as written, only its pipes and line breaks escaped
        name = cells[0].replace("|", "\\|").replace("\n", " ")
        lines.append(tables.markdown_row([name, *map(cell, cells[1:])], str))
        extra = common.extra_limits(result, COLUMNS)
        if extra:
            blank = [""] * (len(header) - 2)
            lines.append("| ↳ " + cell(", ".join(extra)) + " | " + " | ".join(blank) + " | |")
    return lines


def where(result: Any, root: Path | None, line: int = 0, file: str = "") -> str:
    """``file:line`` (the budget's, by default) as code, linked on GitHub."""
    file, line = file or result.path, line or result.line
    place = f"{file}:{line}" if line else file
    link = places.source_link(result, root, line, file)
    return f"[{code(place)}]({link})" if link else code(place)


GREW = re.compile(r"; grew most: [^;]*")
ACCEPT = re.compile(r"; if intended, run (.+?) and commit (.+)$")


def failure_section(result: Any, name: str, root: Path | None) -> list[str]:
    kind = common.verdict(result)
    heading = places.error_place(result)  # a bad baseline entry: the baseline's line
    lines = [f"#### {ICONS[kind]} {code(name)} · {where(result, root, *heading[::-1])}", ""]
    if result.error is not None:
        if result.profile is None:
            lines += ["Could not be checked:", "", *fenced(result.error.strip()), ""]
            return lines
        lines += [*fenced(result.error.strip()), ""]  # e.g. a bad baseline entry
    grown = grown_by_figure(result)
    commit = update = ""
    for finding in common.findings(result, "fail"):
        message = finding["message"]
        if grown:
            message = GREW.sub("", message)  # the table below says it better
        accept = ACCEPT.search(message)
        if accept:  # said once, below
            message, update, commit = message[: accept.start()], *accept.groups()
        line = places.finding_line(result, finding)
        at = f" ({where(result, root, line)})" if (result.path, line) != heading else ""
        lines.append(f"- {cell(message)}{at}")
    lines.append("")
    if grown:
        table = grown_table(grown, profile=result.profile)
        lines += ["Layers that grew most since the baseline:", "", *table, ""]
    elif result.baseline is None and result.profile is not None:
        heading, rows = common.biggest_subgraphs(result)
        top = ", ".join(f"{code(label)} {v}" for label, v in rows)
        if top:
            lines += [f"No baseline to compare with; the {heading}: {top}.", ""]
    lines += rank_table((result.profile or {}).get("parallel"))
    if commit:
        lines += [
            f"If the change is intended, run {code(update)} and commit {code(commit)}.",
            "",
        ]
    return lines


def rank_table(parallel: dict[str, Any] | None) -> list[str]:
    """A sharded step's peak per rank and its parts, one row per run of equal ranks."""
    from pytest_graphbudget.reports.tables import RANK_PARTS, rank_groups
    from pytest_graphbudget.units import format_bytes

    if not parallel:
        return []
    heads = ["ranks", "peak", *(p.replace("_", " ") for p in RANK_PARTS)]
    mixed = parallel.get("precision", "")
    mixed = f", {mixed}" if mixed.startswith("mixed") else ""
    lines = [f"Per rank, {code(parallel['parallel'])} ({parallel['world']} ranks{mixed}):", ""]
    lines += ["| " + " | ".join(heads) + " |", "|" + " --- |" * len(heads)]
    for label, r in rank_groups(parallel["ranks"]):
        cells = [format_bytes(r.get(f"{p}_bytes", 0)) for p in ("peak", *RANK_PARTS)]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def grown_by_figure(result: Any) -> dict[str, list[tuple[str, int, float | None]]]:
    """For each figure that regressed, in the order of its failure, the layers that grew."""
    grown = {}
    for finding in common.findings(result, "fail"):
        figure = finding["key"].removeprefix("baseline.")
        if finding["key"].startswith("baseline.") and figure not in grown:
            layers = common.grown_layers(result, 5, figure)
            if layers:
                grown[figure] = layers
    return grown


def grown_table(
    grown: dict[str, list[tuple[str, int, float | None]]],
    rows: int = 8,
    profile: Mapping[str, Any] | None = None,
) -> list[str]:
    """One row per layer (those that grew most in the first figure first), one column per
    figure: ``+8.26k (+50.0%)``, ``+1.2kB (new)``, or empty where it did not grow. A layer is
    named as ``common.layer_name`` names it in ``profile``."""
    modules: list[str] = []
    for layers in grown.values():
        modules += [m for m, _, _ in layers if m not in modules]
    figures = list(grown)
    header = ["layer", *(common.FIGURES[f].heading for f in figures)]
    lines = [
        tables.markdown_row(header, str),
        tables.markdown_rule("l" + "r" * len(figures), *RULE),
    ]
    for module in modules[:rows]:
        cells = []
        for figure in figures:
            found = next((g for g in grown[figure] if g[0] == module), None)
            if found is None:
                cells.append("")
                continue
            share = "new" if found[2] is None else f"{found[2] * 100:+.1f}%"
            cells.append(f"+{common.FIGURES[figure].format(found[1])} ({share})")
        name = code(common.layer_name(profile, module))
        lines.append(tables.markdown_row([name, *cells], str))  # unescaped, as before
    return lines


def render(
    results: list[Any],
    stale: set[str] = frozenset(),
    root: Path | None = None,
    environment: Mapping[str, str] | None = None,
) -> str:
    """The comment's markdown; its footer names the ``environment`` the figures were measured
    in (a counter change reads as one, not as a model's)."""
    ordered = common.ordered(results)
    names = common.names(results)
    verdicts = [common.verdict(r) for r in ordered]
    bad = [r for r, v in zip(ordered, verdicts, strict=True) if v in (common.FAIL, common.ERROR)]
    near = [r for r, v in zip(ordered, verdicts, strict=True) if v == common.WARN]
    good = [r for r, v in zip(ordered, verdicts, strict=True) if v == common.PASS]

    icon, title = common.title_icon(ordered, stale), common.title(ordered, stale)
    lines = [MARKER, f"### {icon} Graph budget: {title}", ""]
    notes = common.rename_notes(ordered, stale, names, code)
    if not ordered and not stale:
        notes = [common.NOTHING_CHECKED.replace("graph_profile", code("graph_profile"))]
    if notes:  # a rename may have skipped a regression check: said before anything else
        lines += [*(f"- {note}" for note in notes), ""]
    if bad or near:
        lines += [*table(bad + near, names), ""]
    for result in bad:
        lines += failure_section(result, names[result.id], root)
    for heading in WARNINGS.values():
        items = [
            f"- {code(names[r.id])}: {cell(f['message'])}"
            for r in near
            for f in common.findings(r, "warn")
            if WARNINGS.get(f["key"], WARNINGS[""]) == heading
        ]
        if items:
            lines += [f"#### ⚠️ {heading}", "", *items, ""]
    lines += unchecked_section(ordered, names) + notice_sections(ordered, names)
    # What renames left, in full (the lines under the title say it in short).
    notices = [(r, f) for r in ordered for f in r.findings if f["key"] in RENAME_KEYS]
    body = "\n".join(lines)
    folded = []
    if good:
        folded += [
            "<details>",
            f"<summary>✅ {len(good)} model{'s' if len(good) != 1 else ''} within budget</summary>",
            "",
            *table(good, names),
            "",
            "</details>",
            "",
        ]
    if notices or stale:
        folded += ["<details>", "<summary>ℹ️ Baseline notices</summary>", ""]
        folded += [f"- {code(names[r.id])}: {cell(f['message'])}" for r, f in notices]
        folded += [f"- stale entry, its model is gone: {code(key)}" for key in sorted(stale)]
        folded += ["", "</details>", ""]
    tail = "\n".join(folded)
    if len(body) + len(tail) > MAX_CHARS:
        tail = (
            f"_{len(good)} models within budget and the baseline notices are left out: "
            "the comment would be too long for GitHub. The JSON report has them all._\n"
        )
    if len(body) > MAX_CHARS:
        # at the last section's heading: a cut inside a code block would leave it open, and
        # the note and footer after it would read as code
        cut = body[:MAX_CHARS]
        cut = cut[: cut.rfind("\n#### ")] if "\n#### " in cut else cut
        body = cut + "\n\n_… cut: the JSON report has every failure._\n"
    footer = (
        "<sub>vs base: change from the recorded baseline (`new`: none recorded yet); "
        "limits follow the figure after the slash. By pytest-graphbudget.</sub>"
    )
    if environment:
        measured = ", ".join(f"{name} {version}" for name, version in environment.items())
        footer = footer.replace("By pytest-graphbudget.", f"Measured with {cell(measured)}.")
    return body.rstrip("\n") + "\n\n" + (tail + "\n" if tail else "") + footer + "\n"


def notice_sections(ordered: list[Any], names: dict[str, str]) -> list[str]:
    """The lighter models (an improvement is news too, not only a folded notice), then the
    notes on how models were priced, unfolded."""
    lines = []
    for heading, of in (
        ("📉 Lighter than the baseline", common.drops),
        ("ℹ️ How they were priced", common.remarks),
    ):
        items = [f"- {code(names[r.id])}: {cell(f['message'])}" for r in ordered for f in of(r)]
        lines += [f"#### {heading}", "", *items, ""] if items else []
    return lines


def unchecked_section(ordered: list[Any], names: dict[str, str]) -> list[str]:
    """The models whose budget checked nothing yet (no limit, no baseline entry), unfolded:
    they are not within budget, and the fix (a baseline or a limit) is the reviewer's call."""
    items = [
        f"- {code(names[r.id])}: {cell(common.unchecked_message(r) or '')}"
        for r in ordered
        if common.verdict(r) == common.UNCHECKED
    ]
    return ["#### ℹ️ Nothing checked yet", "", *items, ""] if items else []


def save(path: Path, text: str) -> None:
    """Write the comment (``render``'s text), making its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, "utf-8")
