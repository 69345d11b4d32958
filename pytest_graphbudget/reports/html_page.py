"""The HTML page itself: its shell (``page``: assets inlined, navigation, sections) and
one model's section (summary, grown layers, roofline, icicle, layer table, graph). ``html.py``
and ``html_sweep.py`` build their pages from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from importlib import resources
from typing import Any

from pytest_graphbudget.gate import figures
from pytest_graphbudget.reports import common
from pytest_graphbudget.reports.html_charts import icicle_figure, roofline_figure
from pytest_graphbudget.reports.html_graph import graph_block, runtime_facts

SUMMARY = tuple(common.FIGURES)
"""The figures each model's summary shows, in ``figures.TABLE``'s order."""
GROWN_SHOWN = 10
LAYER_COLUMNS = (
    ("flops", "FLOPs"),
    ("own", "own FLOPs"),
    ("macs", "MACs"),
    ("params", "params"),
    ("share", "share of FLOPs"),
)


@dataclass
class ModelView:
    """One model of the page: its profile's JSON and what a budget run adds to it."""

    name: str
    profile: dict[str, Any] | None
    verdict: str | None = None  # ``common.verdict``; None when no budget was checked
    status: str = ""  # ``within budget``, ``over budget`` ...
    messages: list[tuple[str, str]] = field(default_factory=list)  # (severity, one line)
    error: str | None = None
    changes: dict[str, str] = field(default_factory=dict)  # figure -> ``+4.1%`` vs baseline
    limits: dict[str, str] = field(default_factory=dict)  # figure -> its limit, formatted
    base_own: dict[str, int] | None = None  # baseline's own FLOPs per module
    base_label: str = "baseline"
    grown: dict[str, list[tuple[str, int, float | None]]] = field(default_factory=dict)
    """Other regressed figures (params, peak memory, traffic): the layers that grew most."""
    graph: str = ""  # the partitioned graph, inline SVG
    graph_note: str = ""  # why it is not drawn
    order: list[str] = field(default_factory=list)  # modules in the order they first run


@dataclass
class Section:
    """A part of the page that is not one model: an id (its anchor), a heading, HTML."""

    id: str
    title: str
    body: str


def _asset(name: str) -> str:
    return resources.files("pytest_graphbudget.reports").joinpath("assets", name).read_text("utf-8")


def page(
    title: str,
    models: Sequence[ModelView],
    sections: Iterable[Section] = (),
    verdict: str | None = None,
) -> str:
    """The whole HTML document: the sections first, then one section per model."""
    sections = list(sections)
    anchors = [(s.id, s.title) for s in sections]
    anchors += [(_anchor(i), m.name) for i, m in enumerate(models)]
    nav = "".join(f'<a href="#{a}">{escape(t)}</a>' for a, t in anchors)
    body = [f'<section id="{s.id}"><h2>{escape(s.title)}</h2>{s.body}</section>' for s in sections]
    body += [model_section(m, _anchor(i)) for i, m in enumerate(models)]
    shown = f' data-verdict="{verdict}"' if verdict else ""
    return _asset("page.html").format(
        title=escape(title),
        style=_asset("report.css"),
        script=_asset("report.js").replace("</", "<\\/"),
        header=f'<header{shown}><h1>{escape(title)}</h1><nav>{nav}</nav><div id="tip"></div>'
        "</header>",
        body="\n".join(body),
    )


def _anchor(index: int) -> str:
    return f"model-{index}"


def model_section(view: ModelView, anchor: str) -> str:
    verdict = f' data-verdict="{view.verdict}"' if view.verdict else ""
    badge = (
        f'<span class="badge {view.verdict}">{escape(view.status or view.verdict)}</span>'
        if view.verdict
        else '<span class="badge none">profile only, no budget checked</span>'
    )
    parts = [
        f'<section class="model" id="{anchor}" data-model="{escape(view.name)}"{verdict}>',
        f"<h2>{escape(view.name)} {badge}</h2>",
        _messages(view),
    ]
    if view.profile is not None:
        parts += [
            f'<div class="top"><div>{_summary(view)}{_grown(view)}</div>',
            f"{roofline_figure(view.profile)}</div>",
            icicle_figure(view.profile, anchor),
            _layers(view),
            graph_block(view.graph, view.graph_note, anchor),
        ]
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


def _messages(view: ModelView) -> str:
    lines = [("error", view.error)] if view.error else []
    lines += view.messages
    if not lines:
        return ""
    items = "".join(f'<li class="{k}">{escape(text)}</li>' for k, text in lines)
    return f'<ul class="findings">{items}</ul>'


def _step_facts(totals: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A training step's FLOPs by phase and optimizer state (absent from an eval profile)."""
    split = [(p, totals.get(f"{p}_flops")) for p in ("forward", "backward", "optimizer")]
    shown = ", ".join(f"{p} {common.FIGURES['flops'].format(v)}" for p, v in split if v)
    facts = [("FLOPs by phase", shown)] if shown else []
    if totals.get("optimizer_state_bytes"):
        state = common.FIGURES["weights_bytes"].format(totals["optimizer_state_bytes"])
        facts.append(("optimizer state", state))
    return facts


def _summary(view: ModelView) -> str:
    profile = view.profile or {}
    totals = profile["totals"]
    rows = []
    for key in SUMMARY:
        fig = common.FIGURES[key]
        change = view.changes.get(key, "")
        grew = " grew" if change.startswith("+") else ""
        rows.append(
            f'<tr data-figure="{key}"><th>{escape(fig.label)}</th>'
            f"<td>{escape(fig.format(totals.get(key)))}</td>"
            f"<td>{escape(view.limits.get(key, ''))}</td>"
            f'<td class="change{grew}">{escape(change)}</td></tr>'
        )
    mix = profile["bottleneck"]
    inputs = ", ".join(
        f"{i['name']} {'x'.join(map(str, i['shape']))} {i['dtype']}" for i in profile["inputs"]
    )
    facts = [
        ("inputs", inputs),
        ("pass", f"{profile.get('mode', 'eval')}, {profile.get('dtype', 'float32')}"),
        ("trace", f"{profile['trace']['method']}, {profile['trace']['nodes']} nodes"),
        ("subgraphs", str(len(profile["subgraphs"]))),
        (  # what the estimated latency was priced for: the profile, and how the model runs
            "hardware",
            ", ".join(
                [profile["hardware"]["name"]]
                + ([profile["execution"]] if profile.get("execution") else [])
                + [f"ridge {profile['hardware']['ridge_point']:.3g} FLOPs/B"]
            ),
        ),
        (
            "compute-bound",
            f"{mix['compute_bound']['share']:.0%} of subgraphs, "
            f"{mix['compute_bound']['flops_share']:.0%} of FLOPs, "
            f"{mix['compute_bound']['time_share']:.0%} of time",
        ),
    ]
    facts += _step_facts(totals) + runtime_facts(profile)
    unpriced = profile["coverage"].get("unsupported_ops") or {}
    if unpriced:
        facts.append(("no formula", ", ".join(f"{op} x{n}" for op, n in unpriced.items())))
    fact_rows = "".join(f"<tr><th>{k}</th><td>{escape(v)}</td></tr>" for k, v in facts)
    head = f"<tr><th>figure</th><th>value</th><th>limit</th><th>vs {escape(view.base_label)}</th>"
    return (
        '<div class="summary"><table class="figures">'
        f"{head}</tr>{''.join(rows)}</table>"
        f'<table class="facts">{fact_rows}</table></div>'
    )


def _own_flops(profile: Mapping[str, Any]) -> dict[str, int]:
    from pytest_graphbudget.gate.baseline import entry_from

    return entry_from(profile).modules


def _grown(view: ModelView) -> str:
    """The layers whose own FLOPs grew most since the baseline (or since A in a comparison)."""
    if view.base_own is None or view.profile is None:
        return ""
    from pytest_graphbudget.gate.module_gaps import grew_most

    grown = grew_most(_own_flops(view.profile), view.base_own, GROWN_SHOWN)
    if not grown:
        return f'<p class="grown none">No layer grew since the {escape(view.base_label)}.</p>'
    flops = figures.get("flops")
    items = []
    for module, delta in grown:
        before = view.base_own.get(module, 0)
        share = f" ({delta / before:+.1%})" if before else " (new)"
        items.append(
            f'<li><a href="#" data-find="{escape(module)}">'
            f"{escape(common.layer_name(view.profile, module))}</a> "
            f"+{flops.format(delta)} FLOPs{share}</li>"
        )
    title = f"Layers that grew since the {escape(view.base_label)}"
    more = ""
    for key, layers in view.grown.items():
        if key == "flops":
            continue
        fig = figures.get(key)
        listed = ", ".join(
            f"{escape(common.layer_name(view.profile, m))} +{fig.format(d)} "
            f"({'new' if r is None else f'{r:+.1%}'})"
            for m, d, r in layers
        )
        more += f'<p class="grown-more" data-figure="{key}">{escape(fig.label)}: {listed}</p>'
    return f'<div class="grown"><h3>{title}</h3><ol>{"".join(items)}</ol>{more}</div>'


def _natural(path: str) -> list[Any]:
    return [(0, int(p)) if p.isdigit() else (1, p) for p in path.split(".")]


def _layer_paths(modules: Iterable[str], order: Sequence[str]) -> list[str]:
    """The per-layer table's rows in execution order, as the CLI's table; the modules that
    order does not know (a saved JSON profile keeps no nodes) by name, after them."""
    known = set(modules)
    first = [path for path in order if path in known]
    return first + sorted(known - set(first), key=_natural)


def _layers(
    view: ModelView,
    title: str = "Per-layer profile",
    tools: bool = True,
    own: dict[str, float] | None = None,
) -> str:
    """The per-layer table: every module (FLOPs of it and below, and of its own ops), with
    the change of its own FLOPs when there is a baseline. ``tools``: the filter box, which
    needs the page's script (a notebook cell goes without it). ``own``: each module's own
    FLOPs, when the view holds only some modules (their children's FLOPs are not all there)."""
    profile = view.profile or {}
    own = _own_flops(profile) if own is None else own
    total = profile["totals"]["flops"] or 1
    columns = list(LAYER_COLUMNS) + ([("delta", "change")] if view.base_own is not None else [])
    head = '<th data-sort="module">module</th>' + "".join(
        f'<th data-sort="{key}" class="num">{label}</th>' for key, label in columns
    )
    count = figures.get("flops").format
    rows = []
    for path in _layer_paths(profile["modules"], view.order):
        m = profile["modules"][path]
        values = {**m, "own": own.get(path, 0), "share": m["flops"] / total}
        shown = {k: count(values[k]) for k in ("flops", "own", "macs", "params")}
        shown["share"] = f"{values['share']:.1%}"
        grew = ""
        if view.base_own is not None:
            delta = own.get(path, 0) - view.base_own.get(path, 0)
            values["delta"] = delta
            shown["delta"] = "=" if not delta else ("+" if delta > 0 else "-") + count(abs(delta))
            grew = " grew" if delta > 0 else ""
        data = "".join(f' data-{k}="{values[k]}"' for k, _ in columns)
        depth = path.count(".")
        cells = "".join(f'<td class="num">{escape(shown[k])}</td>' for k, _ in columns)
        rows.append(
            f'<tr class="layer{grew}" data-module="{escape(path)}"{data}>'
            f'<td style="padding-left:{0.4 + depth * 0.9:.1f}em">{escape(path)}</td>{cells}</tr>'
        )
    box = (
        '<p class="tools"><input type="search" class="filter" placeholder="filter modules'
        f' (e.g. layer4 or conv)"> <span class="count">{len(rows)} modules</span></p>'
    )
    return (
        f'<div class="layer-box"><h3>{escape(title)}</h3>{box if tools else ""}'
        f'<div class="scroll"><table class="layers"><thead><tr>{head}</tr></thead><tbody>'
        + "\n".join(rows)
        + "</tbody></table></div></div>"
    )
