"""``--graph-budget-html``, ``graph-budget profile --html``, ``compare --html``: one
self-contained, interactive HTML page.

Per model: the summary figures (with limits and changes from the baseline), the roofline and
the module icicle (``html_charts``), the layers that grew, the per-layer table (sortable and
filterable) and the partitioned graph drawn by Graphviz (``html_graph``) with a search box.
Everything is inlined (``assets/report.css`` and ``report.js`` hold the style and the script):
the page makes no network request, so it opens from disk and from a CI artifact.

Stable hooks for tests and scripts: each roofline point has ``data-subgraph="<id>"``, each row
of a per-layer table ``data-module="<path>"``, each checked model ``data-verdict``.

The page is models plus ``Section``s: a run's overview, a comparison's totals and a shape
sweep's growth curves (``html_sweep``) each go in as a ``Section`` of their own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from pytest_graphbudget.gate import figures
from pytest_graphbudget.reports import common, compare_rows, markdown
from pytest_graphbudget.reports.html_graph import NO_DOT as NO_DOT
from pytest_graphbudget.reports.html_graph import (
    NO_NODES,
    execution_order,
    graph_svg,
)
from pytest_graphbudget.reports.html_page import (
    SUMMARY,
    ModelView,
    Section,
    _anchor,
    _own_flops,
    page,
)

# ---------------------------------------------------------------------------------------------
# The page


# ---------------------------------------------------------------------------------------------
# The three reports


def profile_view(prof: Any) -> ModelView:
    """A ``graph-budget profile`` model: the profile and its graph, no budget."""
    graph, note = graph_svg(prof)
    order = execution_order(prof)
    return ModelView(prof.model, prof.to_dict(), graph=graph, graph_note=note, order=order)


def profile_page(prof: Any) -> str:
    return page(f"{prof.model}: graph-budget profile", [profile_view(prof)])


def profiles_page(title: str, named: Sequence[tuple[str, Any]]) -> str:
    """Several profiles of one command on one page (a decode step beside its prefill)."""
    views = [profile_view(prof) for _, prof in named]
    for view, (name, _) in zip(views, named, strict=True):
        view.name = f"{name}: {view.name}"
    return page(title, views)


def result_view(result: Any, name: str) -> ModelView:
    """A model of a budget run: verdict, findings, limits and the changes from the baseline."""
    profile = result.profile
    changes, limits = {}, {}
    if profile is not None:
        for key in SUMMARY:
            changes[key] = common.format_change(result, key)
            bound = common.limit(result, key)
            if bound is not None:
                limits[key] = common.FIGURES[key].format(bound)
    label = profile["model"] if profile else result.label
    return ModelView(
        name,
        profile,
        verdict=common.verdict(result),
        status=common.STATUS_WORDS[common.status(result)],
        messages=[(f["severity"], f["message"]) for f in result.findings],
        error=result.error,
        changes=changes,
        limits=limits,
        base_own=result.baseline_modules if result.baseline else None,
        grown=markdown.grown_by_figure(result),
        graph=result.graph_svg or "",
        graph_note=result.graph_note or NO_NODES.replace("{model}", label),
        order=result.layer_order or [],
    )


def run_page(
    results: list[Any], stale: set[str], environment: Mapping[str, str] | None = None
) -> str:
    """The page of a budget run: an overview of every model (and what its figures were
    measured in), then each model."""
    ordered = common.ordered(results)
    names = common.names(ordered)
    views = [result_view(r, names[r.id]) for r in ordered]
    rows = []
    for i, (result, view) in enumerate(zip(ordered, views, strict=True)):
        flops = common.figure_with_limit(result, "flops") if result.profile else "-"
        rows.append(
            f'<tr data-verdict="{view.verdict}"><td><a href="#{_anchor(i)}">'
            f"{escape(view.name)}</a></td><td>{escape(flops)}</td>"
            f"<td>{escape(common.format_change(result, 'flops'))}</td>"
            f'<td><span class="badge {view.verdict}">{escape(view.status)}</span></td></tr>'
        )
    notes = common.rename_notes(ordered, stale, names)
    overview = "".join(f'<p class="renamed">{escape(note)}</p>' for note in notes) + (
        '<table class="overview"><tr><th>model</th><th>FLOPs / limit</th><th>vs baseline</th>'
        f"<th>verdict</th></tr>{''.join(rows)}</table>"
    )
    if stale:
        gone = "".join(f"<li>{escape(k)}</li>" for k in sorted(stale))
        overview += f"<p>Baseline entries whose model is gone:</p><ul>{gone}</ul>"
    if environment:
        measured = ", ".join(f"{name} {version}" for name, version in environment.items())
        overview += f'<p class="measured">Measured with {escape(measured)}.</p>'
    worst = common.verdict(ordered[0]) if ordered else None
    from pytest_graphbudget.reports.html_sweep import run_sweeps  # it builds on this module

    sections = [Section("overview", "Overview", overview), *run_sweeps(results)]
    return page(f"graph budget: {common.title(results, stale)}", views, sections, worst)


def compare_page(a: Any, b: Any, result: Mapping[str, Any]) -> str:
    """``compare A B``: the totals side by side, then A, then B with the layers that grew
    since A highlighted. ``a``/``b`` are ``Profile``s (graph drawn) or saved JSON. The totals'
    labels and changes are the text view's (``compare_rows``)."""
    view_a = profile_view(a) if not isinstance(a, Mapping) else ModelView(a["model"], dict(a))
    view_b = profile_view(b) if not isinstance(b, Mapping) else ModelView(b["model"], dict(b))
    for view in (view_a, view_b):
        view.graph_note = view.graph_note or "A saved JSON profile keeps no per-node graph."
    view_a.name, view_b.name = f"A: {view_a.name}", f"B: {view_b.name}"
    view_b.base_own, view_b.base_label = _own_flops(view_a.profile or {}), "A"
    rows = []
    for key, (label, shown_a, shown_b, change) in compare_rows.total_rows(result):
        if key in figures.BY_KEY:  # B's summary: a figure's change, as the table writes it
            view_b.changes[key] = change
        rows.append(
            f'<tr data-figure="{key}"><th>{escape(label)}</th><td>{escape(shown_a)}</td>'
            f"<td>{escape(shown_b)}</td><td>{escape(change)}</td></tr>"
        )
    verdict, said = _growth_verdict(result)
    body = (
        '<table class="compare"><tr><th>figure</th><th>A</th><th>B</th><th>change</th></tr>'
        f"{''.join(rows)}</table>{said}<p>{result['modules_changed']} modules differ.</p>"
    )
    title = f"{result['a']['model']} vs {result['b']['model']}: graph-budget compare"
    return page(title, [view_a, view_b], [Section("comparison", "A vs B", body)], verdict)


def _growth_verdict(result: Mapping[str, Any]) -> tuple[str | None, str]:
    """``--max-growth``'s verdict (the page's) and its lines, as the markdown says them:
    each figure that grew too much, or within, then each side's unpriced ops; none without."""
    if "failures" not in result:
        return None, ""
    within = f"within --max-growth {result['max_growth']:.1%}"
    said = [(common.FAIL, f) for f in result["failures"]] or [(common.PASS, within)]
    said += [(common.WARN, w) for w in result.get("warnings", ())]
    warned = common.WARN if result.get("warnings") else common.PASS
    verdict = common.FAIL if result["failures"] else warned
    items = "".join(f'<li class="{kind}">{escape(text)}</li>' for kind, text in said)
    return verdict, f'<ul class="findings growth">{items}</ul>'


def write(path: str | os.PathLike[str], text: str) -> Path:
    """Write the page (UTF-8), making its directory; an ``OSError`` is the caller's to report."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target
