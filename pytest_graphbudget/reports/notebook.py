"""``Profile._repr_html_``: a profile shown in a Jupyter cell, from the HTML report's own parts.

The summary, the roofline and the per-layer table (limited to the layers with the most FLOPs)
are drawn by the very functions the HTML report uses (``html_page``, ``html_charts``); only the
report's stylesheet goes along, inlined, never its script nor anything from the network: a
notebook output must stand on its own, and is often shown where scripts do not run. The
stylesheet is nested under the cell's own class (CSS nesting), so that it styles the cell and
not the notebook around it (its ``body`` and ``header`` rules then match nothing).

The engine's ``Profile`` may not import this module (imports only go down), so it asks the
package root for it: see ``pytest_graphbudget._profile_html``.
"""

from __future__ import annotations

from html import escape
from typing import Any

from pytest_graphbudget.reports.html import profile_view
from pytest_graphbudget.reports.html_charts import roofline_figure
from pytest_graphbudget.reports.html_page import _asset, _layers, _own_flops, _summary

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
    return (
        f'<div class="{SCOPE}"><style>{_scoped_css()}</style>'
        f"<h2>{escape(prof.model)}</h2>"
        f'<div class="top"><div>{_summary(view)}</div>{roofline_figure(profile)}</div>'
        f"{layers}</div>"
    )
