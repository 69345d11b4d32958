"""``Profile._repr_html_``: a profile shown in a Jupyter cell, from the HTML report's own parts.

The summary, the roofline and the per-layer table (limited to the layers with the most FLOPs)
are drawn by the very functions the HTML report uses (``html_page``, ``html_charts``); only the
report's stylesheet goes along, inlined, never its script nor anything from the network: a
notebook output must stand on its own, and is often shown where scripts do not run. The
stylesheet is nested under the cell's own class (CSS nesting), so that it styles the cell and
not the notebook around it (its ``body`` and ``header`` rules then match nothing).

A ``Sweep`` is shown as ``graph-budget profile --seq-len ... --html`` draws it (each fitted
figure's growth and formula, the points as a table), a ``DecodeProfile`` as its prefill beside
its decode step, in the same stylesheet.

The engine's ``Profile`` and the modes' ``Sweep`` and ``DecodeProfile`` may not import this
module (imports only go down), so they ask the package root for it: see
``pytest_graphbudget._profile_html``.
"""

from __future__ import annotations

from html import escape
from typing import Any

from pytest_graphbudget.gate import figures
from pytest_graphbudget.reports.html import profile_view
from pytest_graphbudget.reports.html_charts import roofline_figure
from pytest_graphbudget.reports.html_page import _asset, _layers, _own_flops, _summary
from pytest_graphbudget.reports.html_sweep import sweep_section
from pytest_graphbudget.units import format_bytes, format_count, format_seconds

TOP_LAYERS = 10
SCOPE = "graph-budget-notebook"


def _scoped_css() -> str:
    """The report's stylesheet, nested under ``.SCOPE``; its ``:root`` variables on the cell."""
    return f".{SCOPE} {{ {_asset('report.css').replace(':root', '&')} }}"


def profile_html(prof: Any) -> str:
    """One self-contained ``<div>``: summary, roofline and the ``TOP_LAYERS`` largest layers."""
    view = profile_view(prof)
    profile = view.profile or {}
    modules = profile.get("modules", {})
    top = sorted(modules, key=lambda path: -modules[path]["flops"])[:TOP_LAYERS]
    own = _own_flops(profile)  # of every module: the top ones' children are not all kept
    view.profile = {**profile, "modules": {path: modules[path] for path in top}}
    view.order = top
    layers = _layers(view, title=f"Top {len(top)} layers by FLOPs", tools=False, own=own)
    notes = "".join(f'<p class="note">Note: {escape(n)}</p>' for n in getattr(prof, "notes", []))
    return _cell(
        prof.model,
        f'{notes}<div class="top"><div>{_summary(view)}</div>{roofline_figure(profile)}</div>'
        f"{layers}",
    )


def _cell(title: str, body: str) -> str:
    """One self-contained ``<div>``: the scoped stylesheet, a heading and ``body``."""
    return (
        f'<div class="{SCOPE}"><style>{_scoped_css()}</style><h2>{escape(title)}</h2>{body}</div>'
    )


def sweep_html(sweep: Any) -> str:
    """A sweep: each fitted figure's growth chart and formula, then the points as a table."""
    data = sweep.to_dict()["sweep"]
    keys = [key for key in data["fit"]["figures"] if key in figures.BY_KEY] or ["flops"]
    where = f"{data['mode']}, {data['dtype']}" if data["dtype"] else data["mode"]
    return _cell(f"{sweep.model} ({where})", sweep_section(data, keys).body)


def decode_html(result: Any) -> str:
    """A decode profile: the prefill beside one decode step, and the step's roofline."""
    pre, dec = result.prefill, result.decode
    step = result.roofline(dec.hardware)
    rows = [
        ("FLOPs", format_count(pre.flops), format_count(dec.flops)),
        ("MACs", format_count(pre.macs), format_count(dec.macs)),
        ("params", format_count(pre.params), format_count(dec.params)),
        ("KV cache", format_bytes(result.kv_cache_bytes), format_bytes(result.kv_cache_bytes)),
        ("bytes read (weights + KV cache)", "", format_bytes(result.bytes_read)),
        ("peak memory", format_bytes(pre.peak_memory_bytes), format_bytes(dec.peak_memory_bytes)),
        ("est. latency", format_seconds(pre.est_latency_s), format_seconds(dec.est_latency_s)),
        ("est. time (bytes read)", "", format_seconds(step.est_latency_s)),
        ("tokens/s", "", f"{step.tokens_per_s:,.0f}"),
    ]
    batch = f"{result.batch} x " if result.batch > 1 else ""
    head = (
        f'<tr><th></th><th class="num">prefill ({batch}{result.context} tokens)</th>'
        f'<th class="num">decode ({batch}1 token)</th></tr>'
    )
    body = "".join(
        f'<tr><th>{escape(label)}</th><td class="num">{escape(before)}</td>'
        f'<td class="num">{escape(after)}</td></tr>'
        for label, before, after in rows
    )
    bound = step.bottleneck.replace("_", "-")
    title = f"{result.model}: one generated token after {result.context} positions"
    facts = f"<p>{escape(bound)} on {escape(step.hardware)}, {escape(dec.dtype)}</p>"
    return _cell(title, f'{facts}<table class="decode">{head}{body}</table>')
