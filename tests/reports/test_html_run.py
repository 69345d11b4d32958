"""The budget run's HTML page draws each model's partitioned graph (issue 14), fresh, from the
cache and under xdist, and shows a timed model's measured runtime.

The models are counted by hand: ``mlp`` is ``Sequential(encoder=Linear(4, 8), act=ReLU(),
head=Linear(8, 2))`` and ``gate`` is ``Sequential(stem=Linear(4, 4), gate=Sigmoid())``; FX
names each graph node after the module it calls, so their graphs have 3 and 2 nodes, named
``encoder, act, head`` and ``stem, gate``. Graphviz's ``dot`` draws them: the drawing asserts
skip, saying so, only where it is not installed.
"""

from __future__ import annotations

import json
import re
import shutil
from html import escape, unescape

import pytest
from test_reports import not_in_github_actions as not_in_github_actions

MODELS = """
from collections import OrderedDict

import pytest, torch
from torch import nn
from pytest_graphbudget import ModelCase


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    layers = OrderedDict(encoder=nn.Linear(4, 8), act=nn.ReLU(), head=nn.Linear(8, 2))
    return ModelCase(nn.Sequential(layers), (torch.randn(1, 4),), name="mlp")


@pytest.fixture
def gate():
    torch.manual_seed(0)
    layers = OrderedDict(stem=nn.Linear(4, 4), gate=nn.Sigmoid())
    return ModelCase(nn.Sequential(layers), (torch.randn(1, 4),), name="gate")


@pytest.mark.flops_max("1M")
def test_mlp(mlp):
    pass


@pytest.mark.flops_max("1M")
def test_gate(gate):
    pass
"""
NODES = {"mlp": ["encoder", "act", "head"], "gate": ["stem", "gate"]}
needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None,
    reason="Graphviz's `dot` is not on PATH: the graph is not drawn (apt-get install graphviz)",
)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_models=MODELS)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--graph-budget", *args)


def graphs(text: str) -> dict[str, tuple[int, list[str], str]]:
    """Per model section: the node count the page shows, the graph nodes' names and the
    drawing itself."""
    found = {}
    for section in re.findall(r'<section class="model".*?</section>', text, flags=re.S):
        model = re.search(r'data-model="([^"]+)"', section).group(1)
        box = re.search(r'<div class="graph" data-nodes="(\d+)">(.*?)</div></div>', section, re.S)
        notes = re.findall(r'class="note">([^<]*)', section)
        assert box, f"{model}: no graph drawn: {notes}"
        nodes = int(box.group(1))
        assert f'<span class="nodes">{nodes} nodes</span>' in box.group(2)
        titles = re.findall(r'class="node">\s*<title>([^<]*)</title>', box.group(2))
        names = [unescape(t) for t in titles if not t.startswith(("in:", "__legend_"))]
        found[model] = (nodes, names, box.group(2))
    return found


def search(drawing: str, query: str) -> list[str]:
    """What the page's graph search outlines (``report.js``: each ``g.node``/``g.cluster``
    whose text holds the query): the titles of those groups."""
    groups = re.findall(r'<g id="[^"]+" class="(?:node|cluster)">(.*?)</g>', drawing, re.S)
    hits = [g for g in groups if query.lower() in unescape(re.sub("<[^>]+>", "", g)).lower()]
    return [unescape(re.search(r"<title>([^<]*)</title>", g).group(1)) for g in hits]


@needs_dot
@pytest.mark.slow  # an xdist run starts two workers that import torch
def test_run_page_draws_each_models_graph_under_xdist_and_from_the_cache(project):
    """A cache made without the HTML report keeps no nodes: the HTML run (two xdist workers)
    profiles again, draws on the workers and stores the nodes; the next run draws the same
    graphs from the cache alone."""
    pytest.importorskip("xdist")
    run(project).assert_outcomes(passed=2)  # the cache, without nodes
    entries = list((project.path / ".graph_budget_cache").rglob("*.json"))
    assert len(entries) == 2 and all("node_info" not in e.read_text() for e in entries)
    pages = []
    for args in (("-n", "2"), ("-v",)):
        html = ("--graph-budget-html=report.html", "--graph-budget-json=r.json")
        result = run(project, *args, *html)
        result.assert_outcomes(passed=2)
        text = (project.path / "report.html").read_text()
        drawn = graphs(text)
        assert {m: (n, names) for m, (n, names, _) in drawn.items()} == {
            m: (len(names), names) for m, names in NODES.items()
        }
        for model, names in NODES.items():
            for name in names:  # the search box finds each module's node in the drawing
                assert name in search(drawn[model][2], name), (model, name)
        report = json.loads((project.path / "r.json").read_text())
        # the JSON keeps what the page drew, so `graph-budget merge --html` of shards draws it
        svgs = [m["graph_svg"] for m in report["models"]]
        assert len(svgs) == 2 and all(svg.startswith("<svg") for svg in svgs)
        for names in NODES.values():
            assert any(all(name in svg for name in names) for svg in svgs), names
        pages.append(drawn)
    stored = [json.loads(e.read_text())["node_info"] for e in entries]  # rewritten by workers
    assert sorted([n["name"] for n in nodes] for nodes in stored) == sorted(NODES.values())
    result.stdout.fnmatch_lines(["graph budget cache: 2 reused"])
    assert pages[0] == pages[1]  # the cached profile draws the very same graph


def test_run_page_says_why_without_graphviz(project, monkeypatch, tmp_path):
    from pytest_graphbudget.reports.html_graph import NO_DOT

    monkeypatch.setenv("PATH", str(tmp_path))  # no Graphviz on PATH
    run(project, "--graph-budget-no-cache", "--graph-budget-html=report.html")
    text = (project.path / "report.html").read_text()
    assert text.count(f'<p class="note">{escape(NO_DOT)}</p>') == 2
    assert 'class="graph-search"' not in text


def test_run_page_shows_the_measured_runtime(pytester):
    """A model timed for ``latency_measured_max``: its summary shows the runtime the JSON
    report holds (the fastest and the median run, throughput, roofline ratio)."""
    pytester.makepyfile(
        test_timed="""
        import pytest, torch
        from pytest_graphbudget import ModelCase

        @pytest.fixture
        def timed():
            return ModelCase(torch.nn.Linear(4, 4), (torch.randn(3, 4),), name="timed")

        @pytest.mark.latency_measured_max("10s")
        def test_timed(timed):
            pass
        """
    )
    args = ("--graph-budget-no-cache", "--graph-budget-html=p.html", "--graph-budget-json=r.json")
    run(pytester, *args).assert_outcomes(passed=1)
    (model,) = json.loads((pytester.path / "r.json").read_text())["models"]
    measured = model["profile"]["runtime"]
    text = (pytester.path / "p.html").read_text()
    facts = dict(re.findall(r"<tr><th>([^<]+)</th><td>([^<]*)</td></tr>", text))
    assert facts["measured"] == (
        f"min {measured['min_s'] * 1e3:.3g} ms, median {measured['median_s'] * 1e3:.3g} ms "
        f"over {measured['runs']} runs on cpu ({measured['threads']} threads)"
    )
    assert facts["throughput"] == f"{measured['throughput']:.4g} samples/s (batch 3)"
    assert facts["roofline ratio"].startswith(f"{measured['roofline_ratio']:.3g} ")


@needs_dot
def test_graph_budget_check_draws_the_graph_fresh_and_from_the_cache(tmp_path, monkeypatch, capsys):
    """``graph-budget check --html``: the same drawing, and from its cache on the second run."""
    from pytest_graphbudget import cli

    (tmp_path / "graphcheck_models.py").write_text(
        "from collections import OrderedDict\nimport torch\nfrom torch import nn\n"
        "from pytest_graphbudget import ModelCase\n\n"
        "def gate():\n    torch.manual_seed(0)\n"
        "    layers = OrderedDict(stem=nn.Linear(4, 4), gate=nn.Sigmoid())\n"
        "    return ModelCase(nn.Sequential(layers), (torch.randn(1, 4),), name='gate')\n"
    )
    (tmp_path / "budgets").mkdir()
    (tmp_path / "budgets" / "nets.toml").write_text(
        '[models.gate]\nfactory = "graphcheck_models:gate"\nflops_max = "1M"\n'
    )
    (tmp_path / "pyproject.toml").write_text("[tool.graph_budget]\ncache_dir = '.cache'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    pages = []
    for _ in range(2):
        assert cli.main(["check", "--html", "report.html"]) == 0
        pages.append(graphs((tmp_path / "report.html").read_text()))
    assert {m: names for m, (_, names, _) in pages[0].items()} == {"gate": NODES["gate"]}
    assert pages[0] == pages[1]
    (entry,) = (tmp_path / ".cache").rglob("*.json")
    assert [n["name"] for n in json.loads(entry.read_text())["node_info"]] == NODES["gate"]
