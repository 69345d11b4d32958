"""The HTML report (issue 14): its structure from real profiles and runs, then the page itself in
headless Chromium with the network cut off.

The models are counted by hand. ``TINY`` is ``Linear(4, 8)``, ReLU, ``Linear(8, 32)``, ReLU,
``Linear(32, 2)`` on a ``(1, 4)`` input: a linear layer does 2*in*out FLOPs plus one per output
for its bias, a ReLU one per element, so 72, 8, 544, 32 and 130 FLOPs (786 in all), and the
partitioner fuses it into three kernels (linear+relu, linear+relu, linear). Layer ``2`` is the
biggest and not the first. The pytest runs reuse ``test_reports.py``'s MLP, whose counts that
file derives.

The browser is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
messages separated by NUL bytes on file descriptors 3 and 4), so no websocket library is needed.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from html import escape
from html import unescape as html_unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_reports import BROKEN, MLP_FLOPS, MODELS, linear_flops, mlp_flops
from test_reports import not_in_github_actions as not_in_github_actions
from test_reports import project as project
from test_reports import run as run_pytest

TINY_FLOPS = {"0": 72, "1": 8, "2": 544, "3": 32, "4": 130}
TINY_SUBGRAPHS = ["linear+relu", "linear+relu", "linear"]


def tiny(width: int = 32):
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, width), nn.ReLU())
    model.append(nn.Linear(width, 2))
    return model, (torch.randn(1, 4),)


@pytest.fixture(scope="module")
def profiles():
    """The tiny model, and the same with layer 2 twice as wide (64 outputs)."""
    from pytest_graphbudget.api import profile_model

    return (
        profile_model(*tiny(), name="tiny"),
        profile_model(*tiny(64), name="tiny-wide"),
    )


class Elements(HTMLParser):
    """Every start tag of a page: (tag, attributes)."""

    def __init__(self, text: str):
        super().__init__()
        self.found: list[tuple[str, dict[str, str]]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, {k: v or "" for k, v in attrs}))

    def having(self, attribute: str) -> list[dict[str, str]]:
        return [a for _, a in self.found if attribute in a]


def model_sections(text: str) -> list[str]:
    return re.findall(r'<section class="model".*?</section>', text, flags=re.S)


# ---------------------------------------------------------------------------------------------
# The page's structure, without a browser


def test_profile_page_hooks_match_the_hand_counted_model(profiles):
    from pytest_graphbudget.reports import html

    page = Elements(html.profile_page(profiles[0]))
    points = page.having("data-subgraph")
    assert [p["data-subgraph"] for p in points] == ["0", "1", "2"]
    assert [s.kind for s in profiles[0].subgraphs] == TINY_SUBGRAPHS
    assert [p["data-bottleneck"] for p in points] == [s.bottleneck for s in profiles[0].subgraphs]
    rows = {r["data-module"]: int(r["data-flops"]) for r in page.having("data-module")}
    assert rows == TINY_FLOPS
    # A profile checks no budget: no verdict is claimed.
    assert not page.having("data-verdict")


def test_page_asks_nothing_of_the_network(profiles):
    from pytest_graphbudget.reports import html

    text = html.profile_page(profiles[0])
    page = Elements(text)
    tags = {tag for tag, _ in page.found}
    assert not tags & {"link", "img", "iframe", "object", "embed"}
    assert all("src" not in attrs for _, attrs in page.found)
    assert all(a["href"].startswith("#") for a in page.having("href"))
    policy = next(a["content"] for a in page.having("http-equiv"))
    assert policy.startswith("default-src 'none';")  # the browser refuses any fetch


@pytest.mark.parametrize("execution", ["compiled", "eager"])
def test_roofline_points_sit_on_or_under_the_generic_roof(execution):
    """``generic`` is 1 TFLOP/s over 100 GB/s. Compiled, a subgraph is one kernel priced on the
    roofline: every point sits on the roof's line at its intensity. Eager, each op is its own
    launch, reading and writing what a fused kernel keeps inside: at or under the roof."""
    from pytest_graphbudget.api import profile_model
    from pytest_graphbudget.reports import html, html_charts

    profile = profile_model(*tiny(), name="tiny", execution=execution).to_dict()
    assert html_charts.roof_of(profile) == html_charts.Roof(1e12, 1e11)
    svg = html_charts.roofline_svg(profile)
    roof = [
        tuple(map(float, xy.split(",")))
        for xy in re.search(r'class="roof" points="([^"]+)"', svg).group(1).split()
    ]
    points = re.findall(r'cx="([\d.]+)" cy="([\d.]+)"', svg)
    assert len(points) == len(profile["subgraphs"])
    under = 0
    for cx, cy in ((float(x), float(y)) for x, y in points):
        (x0, y0), (x1, y1) = next(
            (a, b) for a, b in zip(roof, roof[1:], strict=False) if a[0] <= cx <= b[0]
        )
        on_roof = y0 + (y1 - y0) * (cx - x0) / (x1 - x0)
        assert cy > on_roof - 0.3, (cx, cy, on_roof)  # SVG's y grows downward: never above
        under += cy > on_roof + 0.3
    if execution == "compiled":
        assert under == 0
    else:  # a linear and its ReLU: the ReLU's own launch reads and writes what fusion keeps
        assert under > 0
    # the page says what its latency was priced for, as every other report does
    page = html.profile_page(profile_model(*tiny(), name="tiny", execution=execution))
    assert f"<th>hardware</th><td>generic, {execution}, ridge 10 FLOPs/B</td>" in page


def test_icicle_sizes_modules_by_flops_params_and_memory(profiles):
    from pytest_graphbudget.reports import html

    text = html.profile_page(profiles[0])
    figures = re.findall(r'<svg class="icicle" data-figure="(\w+)"', text)
    assert figures == ["flops", "params", "peak_memory_bytes"]
    icicle = '<svg class="icicle" data-figure='
    flops = text[text.index(icicle + '"flops"') : text.index(icicle + '"params"')]

    def width(path: str) -> float:
        cell = re.search(rf'data-path="{path}">.*?width="([\d.]+)"', flops, flags=re.S)
        return float(cell.group(1)) + 1  # cells are drawn 1px narrower, as a gap

    assert width("2") / width("") == pytest.approx(544 / 786, abs=0.002)


def test_graph_is_drawn_by_dot_and_its_absence_is_said(profiles, monkeypatch, tmp_path):
    from pytest_graphbudget.reports import html

    if shutil.which("dot"):
        drawn = html.profile_page(profiles[0])
        assert 'class="graph-search"' in drawn and '<g id="model-0-node1" class="node">' in drawn
    monkeypatch.setenv("PATH", str(tmp_path))  # no Graphviz on PATH
    page = html.profile_page(profiles[0])
    assert escape(html.NO_DOT) in page and 'class="graph-search"' not in page


def test_run_report_has_verdicts_and_the_layers_that_grew(project):
    run_pytest(project, ".", "--graph-budget-update")
    project.makepyfile(models=MODELS.replace("HIDDEN = 32", "HIDDEN = 48"), test_broken=BROKEN)
    result = run_pytest(project, ".", "--graph-budget-html=out/report.html")
    result.stdout.fnmatch_lines(["*reports written: HTML out/report.html*"])
    text = (project.path / "out" / "report.html").read_text()
    verdicts = dict(
        re.findall(r'class="model" id="[^"]+" data-model="([^"]+)" data-verdict="(\w+)"', text)
    )
    assert verdicts == {
        "broken": "error",
        "mlp": "fail",
        "tight": "fail",
        "test_over::linear32": "fail",
        "test_near::linear32": "warn",
        "test_fits::linear32": "pass",
    }
    assert '<header data-verdict="error"><h1>graph budget: 6 models: 1 could not be' in text
    import platform

    import torch

    assert f"Measured with python {platform.python_version()}, torch {torch.__version__}" in text
    (broken,) = (s for s in model_sections(text) if 'data-model="broken"' in s)
    assert "shape mismatch in my model" in broken and "data-subgraph" not in broken
    mlp = next(s for s in model_sections(text) if 'data-model="mlp"' in s)
    rows = {a["data-module"]: a for a in Elements(mlp).having("data-module")}
    assert int(rows["encoder"]["data-delta"]) == linear_flops(64, 48) - linear_flops(64, 32)
    assert int(rows["head"]["data-delta"]) == linear_flops(48, 8) - linear_flops(32, 8)
    assert "grew" in rows["encoder"]["class"] and "grew" in rows["head"]["class"]
    grown = re.findall(r'<li><a href="#" data-find="([^"]+)">', mlp)
    assert grown == ["encoder", "head", "&lt;root&gt;"]  # largest first; the ReLU is the root's
    # Params regressed too: 64*16 + 16 more in the encoder, 16*8 in the head.
    params = re.search(r'<p class="grown-more" data-figure="params">([^<]*)</p>', mlp).group(1)
    assert params == "params: encoder +1.04k (+50.0%), head +128 (+48.5%)"
    growth = mlp_flops(48) / MLP_FLOPS - 1
    assert f'<li class="fail">FLOPs regressed +{growth:.1%} (18.7k -&gt; 28.1k' in mlp


def test_profile_and_compare_write_html_from_the_command_line(tmp_path, profiles, capsys):
    import torch

    from pytest_graphbudget import cli

    torch.save(tiny()[0], tmp_path / "tiny.pt")
    out = tmp_path / "tiny.html"
    args = ["profile", str(tmp_path / "tiny.pt"), "--input-shape", "1,4", "--trust-pickle"]
    assert cli.main([*args, "--html", str(tmp_path / "missing" / "x.html")]) == 2
    assert "--html" in capsys.readouterr().err
    assert cli.main([*args, "--html", str(out), "-q"]) == 0
    rows = {
        a["data-module"]: int(a["data-flops"])
        for a in Elements(out.read_text()).having("data-module")
    }
    assert rows == TINY_FLOPS

    for name, prof in zip("ab", profiles, strict=True):
        (tmp_path / f"{name}.json").write_text(json.dumps(prof.to_dict()))
    compared = tmp_path / "compare.html"
    code = cli.main(
        ["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--html", str(compared)]
    )
    assert code == 0
    text = compared.read_text()
    a, b = model_sections(text)
    assert 'data-model="A: tiny"' in a and 'data-model="B: tiny-wide"' in b
    rows = {r["data-module"]: r for r in Elements(b).having("data-module")}
    # Layer 2 goes from 8x32 to 8x64 outputs, its ReLU (3) from 32 to 64 elements.
    assert int(rows["2"]["data-delta"]) == (2 * 8 * 64 + 64) - 544
    assert int(rows["3"]["data-delta"]) == 32
    assert int(rows["4"]["data-delta"]) == (2 * 64 * 2 + 2) - 130
    assert "grew" not in rows["0"]["class"]


# ---------------------------------------------------------------------------------------------
# In a real browser: headless Chromium, the network cut off, driven over the DevTools protocol

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class Chromium:
    """Headless Chromium driven over ``--remote-debugging-pipe``: its fd 3 reads our commands,
    its fd 4 writes replies and events, each a JSON message ended by a NUL byte."""

    def __init__(self, executable: str, profile_dir: Path):
        # Our ends stay ours (os.pipe's are not inherited); its ends go above 9, so that
        # bash's redirections onto 3 and 4 never overwrite one another (dash reads one digit
        # only). No preexec_fn: it is unsafe in a process with threads, as an xdist worker is.
        to_it, self._to_it = os.pipe()
        self._from_it, from_it = os.pipe()
        read, write = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_it, from_it))
        os.close(to_it)
        os.close(from_it)
        arguments = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile_dir}",
            # Nowhere to go: every host is unresolvable, every proxied request refused.
            "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "about:blank",
        ]
        redirect = f'exec "$0" "$@" 3<&{read} 4>&{write} {read}<&- {write}>&-'
        self.process = subprocess.Popen(
            [shutil.which("bash") or "/bin/bash", "-c", redirect, executable, *arguments],
            pass_fds=(read, write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(read)
        os.close(write)
        self._buffer, self._next_id, self.events = b"", 0, []
        self.session: str | None = None

    def send(self, method: str, timeout: float = 30, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        os.write(self._to_it, json.dumps(message).encode() + b"\0")
        reply = self.wait(lambda m: m.get("id") == self._next_id, timeout)
        assert "error" not in reply, f"{method}: {reply['error']}"
        return reply.get("result", {})

    def wait(self, done, timeout: float = 30) -> dict:
        """Read messages until ``done(message)``; events on the way are kept in ``events``."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self._buffer:
                assert time.monotonic() < deadline, "Chromium did not answer in time"
                chunk = os.read(self._from_it, 1 << 16)
                assert chunk, "Chromium closed its DevTools pipe"
                self._buffer += chunk
            raw, _, self._buffer = self._buffer.partition(b"\0")
            message = json.loads(raw)
            if "method" in message:
                self.events.append(message)
            if done(message):
                return message

    def open(self, url: str, width: int = 1400, height: int = 1000) -> None:
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.send("Page.navigate", url=url)
        self.wait(lambda m: m.get("method") == "Page.loadEventFired")

    def js(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, and the browser's own log errors
        (a refused request or a blocked resource lands there)."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(params["exceptionDetails"].get("text", "exception"))
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "warning"):
                found.append(" ".join(str(a.get("value", "")) for a in params["args"]))
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                found.append(params["entry"]["text"])
        return found

    def requests(self) -> list[str]:
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e["method"] == "Network.requestWillBeSent"
        ]

    def close(self) -> None:
        """Ask the browser to quit (its helper processes go with it); kill it if it hangs."""
        self.session = None
        try:
            self.send("Browser.close", timeout=5)
        except (AssertionError, OSError):
            pass  # it may close the pipe before it answers
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        os.close(self._to_it)
        os.close(self._from_it)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    executable = next(filter(None, map(shutil.which, BROWSERS)), None)
    if executable is None:
        pytest.skip(
            "headless Chromium is not installed: `make tools` installs Debian's chromium as root "
            "(or: apt-get install chromium)"
        )
    chromium = Chromium(executable, tmp_path_factory.mktemp("chromium-profile"))
    yield chromium
    chromium.close()


def test_report_in_headless_chromium(browser, profiles, tmp_path):
    """``compare`` of the tiny model and its wider twin, both drawn: no console error, no
    request leaves the file, one point per subgraph, sorting by FLOPs puts layer 2 first,
    the filter, the search, the icicle switch and the tooltip all work, and a screenshot."""
    from pytest_graphbudget.cli.compare import compare
    from pytest_graphbudget.reports import html

    a, b = profiles
    page = tmp_path / "report.html"
    html.write(page, html.compare_page(a, b, compare(a.to_dict(), b.to_dict())))
    browser.open(page.as_uri())

    points = browser.js(
        "[...document.querySelectorAll('section.model')].map("
        "s => s.querySelectorAll('svg.roofline [data-subgraph]').length)"
    )
    assert points == [len(a.subgraphs), len(b.subgraphs)] == [3, 3]

    first_rows = browser.js(
        "(() => { const t = document.querySelector('#model-0 table.layers');"
        " t.querySelector('th[data-sort=flops]').click();"
        " return [...t.tBodies[0].rows].map(r => r.dataset.module); })()"
    )
    assert first_rows == sorted(TINY_FLOPS, key=TINY_FLOPS.get, reverse=True)  # 2 first

    shown = browser.js(
        "(() => { const f = document.querySelector('#model-1 input.filter');"
        " f.value = '4'; f.dispatchEvent(new Event('input'));"
        " return [...document.querySelectorAll('#model-1 tr[data-module]')]"
        ".filter(r => r.style.display !== 'none').map(r => r.dataset.module); })()"
    )
    assert shown == ["4"]
    if shutil.which("dot"):
        found = browser.js(
            "(() => { const s = document.querySelector('#model-0 input.graph-search');"
            " s.value = 'linear+relu'; s.dispatchEvent(new Event('input'));"
            " return document.querySelectorAll('#model-0 .graph-box g.hit').length; })()"
        )
        assert found == 2  # the two linear+relu clusters
        fitted = browser.js(
            "(() => { const g = document.querySelector('#model-0 .graph');"
            " g.querySelector('button[data-zoom=fit]').click();"
            " const box = g.querySelector('.graph-box');"
            " return [box.querySelector('svg').getBoundingClientRect().width, box.clientWidth];"
            " })()"
        )
        assert fitted[1] - 6 < fitted[0] <= fitted[1]
    visible = browser.js(
        "(() => { document.querySelector('#model-0 input[value=params]').click();"
        " return [...document.querySelectorAll('#model-0 svg.icicle')]"
        ".filter(s => s.style.display !== 'none').map(s => s.dataset.figure); })()"
    )
    assert visible == ["params"]
    tip = browser.js(
        "(() => { const p = document.querySelector('#model-1 [data-subgraph=\"1\"]');"
        " p.dispatchEvent(new MouseEvent('mousemove', {clientX: 50, clientY: 50}));"
        " const t = document.getElementById('tip');"
        " return [t.style.display, t.textContent]; })()"
    )
    # Layer 2 of the wide model and its ReLU: 2*8*64 + 64 + 64 = 1,152 FLOPs.
    assert tip[0] == "block" and tip[1].startswith("#1 linear+relu - 2\nFLOPs 1.15k, bytes")

    assert browser.problems() == []
    assert browser.requests() == [page.as_uri()]  # the file itself, nothing else
    shot = tmp_path / "html-report.png"
    shot.write_bytes(base64.b64decode(browser.send("Page.captureScreenshot", format="png")["data"]))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


# ---------------------------------------------------------------------------------------------
# CI: the workflow and the composite action upload the page and link it

GITHUB = Path(__file__).resolve().parents[2] / ".github"


def test_workflow_and_action_upload_the_html_report_and_link_it():
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load((GITHUB / "workflows" / "graph-budget.yml").read_text())
    action = yaml.safe_load((GITHUB / "actions" / "graph-budget" / "action.yml").read_text())
    for steps in (workflow["jobs"]["budgets"]["steps"], action["runs"]["steps"]):
        check = next(s for s in steps if s.get("id") == "budgets")
        assert "--graph-budget-html=" in check["run"]
        upload = next(s for s in steps if s.get("id") == "upload")
        assert "/report.html" in upload["with"]["path"]
        url = "${{ steps.upload.outputs.artifact-url }}"
        summary = next(s for s in steps if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
        assert summary["env"]["URL"] == url and "($URL)" in summary["run"]
        comment = next(s for s in steps if s.get("uses", "").startswith("actions/github-script"))
        assert comment["env"]["HTML_URL"] == url
        assert "htmlUrl: process.env.HTML_URL" in comment["with"]["script"]
    assert action["outputs"]["html-url"]["value"] == "${{ steps.upload.outputs.artifact-url }}"


COMMENT_JS = """
const post = require(process.argv[1]);
const posted = [];
const github = {
  paginate: async () => [],
  rest: { issues: { listComments: () => {},
    createComment: async (a) => { posted.push(a.body); return { data: { html_url: "u" } }; } } },
};
const core = { info: () => {}, warning: () => {} };
const context = { repo: { owner: "o", repo: "r" }, payload: { pull_request: { number: 7 } } };
(async () => {
  await post({ github, context, core }, process.argv[2], { htmlUrl: "https://example/a/1" });
  await post({ github, context, core }, process.argv[2], { htmlUrl: "" });
  console.log(JSON.stringify(posted));
})();
"""


def test_sticky_comment_links_the_html_report(tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    report = tmp_path / "report.md"
    report.write_text("<!-- graph-budget -->\n### Graph budget\n")
    script = GITHUB / "actions" / "graph-budget" / "comment.js"
    done = subprocess.run(
        [node, "-e", COMMENT_JS, str(script), str(report)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    with_link, without = json.loads(done.stdout)
    assert with_link.startswith(report.read_text())  # the marker still opens it
    assert "[📊 Interactive HTML report](https://example/a/1)" in with_link
    assert without == report.read_text()  # no artifact uploaded: no dead link


STALE_COMMENT_JS = """
const post = require(process.argv[1]);
const calls = [];
const old = { id: 3, body: "<!-- graph-budget -->\\n### ✅ Graph budget: 2 models within budget" };
const github = {
  paginate: async () => (process.argv[3] === "posted" ? [old] : []),
  rest: { issues: { listComments: () => {},
    updateComment: async (a) => { calls.push(["update", a.comment_id, a.body]); },
    createComment: async (a) => { calls.push(["create", a.body]); return { data: {} }; } } },
};
const core = { info: () => {}, warning: () => {} };
const context = { repo: { owner: "o", repo: "r" }, payload: { pull_request: { number: 7 } } };
(async () => {
  await post({ github, context, core }, process.argv[2], {});
  console.log(JSON.stringify(calls));
})();
"""


@pytest.mark.parametrize("earlier", ["posted", "none"])
def test_a_run_without_a_report_corrects_the_comment_it_leaves(tmp_path, earlier):
    """User trial: a usage error (exit 4) wrote no report, and the comment of the last push,
    green, stood beside the red check. It now says this run checked nothing; without an
    earlier comment there is nothing to correct, and none is posted."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    script = GITHUB / "actions" / "graph-budget" / "comment.js"
    missing = tmp_path / "graph-budget" / "report.md"
    done = subprocess.run(
        [node, "-e", STALE_COMMENT_JS, str(script), str(missing), earlier],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    calls = json.loads(done.stdout)
    if earlier == "none":
        assert calls == []
        return
    ((kind, comment, body),) = calls
    assert (kind, comment) == ("update", 3)
    assert body.startswith("<!-- graph-budget -->\n### ❌ Graph budget: this run wrote no report")


def test_graph_budget_check_writes_the_same_page(tmp_path, monkeypatch, capsys):
    """``graph-budget check --html``: the TOML budgets' check without pytest writes it too."""
    from pytest_graphbudget import cli

    (tmp_path / "htmlcheck_models.py").write_text(
        "import torch\nfrom pytest_graphbudget import ModelCase\n\n"
        "def linear():\n    torch.manual_seed(0)\n"
        "    return ModelCase(torch.nn.Linear(64, 32), (torch.randn(4, 64),), name='linear')\n"
    )
    (tmp_path / "budgets").mkdir()
    (tmp_path / "budgets" / "nets.toml").write_text(
        '[models.over]\nfactory = "htmlcheck_models:linear"\nflops_max = "10k"\n'
    )
    (tmp_path / "pyproject.toml").write_text("[tool.graph_budget]\ncache_dir = '.cache'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert cli.main(["check", "--html", "out/report.html", "--no-cache"]) == 1
    text = (tmp_path / "out" / "report.html").read_text()
    (over,) = model_sections(text)
    assert 'data-model="over" data-verdict="fail"' in over
    # 2*4*64*32 + 4*32 = 16,512 FLOPs against a 10k limit: the failure and the figure.
    assert (
        f"FLOPs 16.5k exceeds flops_max 10k ({linear_flops(64, 32) / 10_000 - 1:.1%} over)" in over
    )
    assert '<tr data-figure="flops"><th>FLOPs</th><td>16.5k</td><td>10k</td>' in over


# ---------------------------------------------------------------------------------------------
# A shape sweep's growth curves (the JSON of `graph-budget profile NAME --seq-len 128,256,512`)


def sweep_json(batches=(None,)) -> dict:
    """FLOPs 1000*s^2 and peak memory 64*s bytes (times the batch in a grid), fitted."""
    points = [
        {
            "seq_len": s,
            **({"batch": b} if b else {}),
            "totals": {"flops": 1000 * s * s * (b or 1), "peak_memory_bytes": 64 * s * (b or 1)},
        }
        for b in batches
        for s in (128, 256, 512)
    ]
    axes = {"seq_len": [128, 256, 512], **({"batch": list(batches)} if batches[0] else {})}
    fitted = {"polynomial": True, "formula": "flops = 1000*s^2", "points": 3, "held_out": 1}
    unfitted = {"polynomial": False, "points": 3, "reason": "no polynomial of degree <= 3"}
    return {
        "axes": axes,
        "points": points,
        "fit": {
            "method": "interpolated",
            "variables": {"s": "seq_len"},
            "figures": {"flops": fitted, "peak_memory_bytes": unfitted},
        },
    }


def test_sweep_page_draws_one_growth_curve_per_fitted_figure():
    from pytest_graphbudget.reports.html_sweep import sweep_page

    text = sweep_page("tiny-bert", sweep_json())
    charts = re.findall(r'<svg class="growth" data-figure="(\w+)"', text)
    assert charts == ["flops", "peak_memory_bytes"]
    flops = text[text.index('data-figure="flops"') : text.index('data-figure="peak_memory')]
    points = re.findall(r'data-point="(\d+)" cx="([\d.]+)" cy="([\d.]+)"', flops)
    assert [p[0] for p in points] == ["128", "256", "512"]
    (x1, y1), (x2, y2), (x3, y3) = ((float(x), float(y)) for _, x, y in points)
    # A power law is a straight line on log-log axes: seq_len doubles, equal steps both ways.
    assert x2 - x1 == pytest.approx(x3 - x2, abs=0.2) and y1 - y2 == pytest.approx(y2 - y3, abs=0.2)
    assert y3 < y2 < y1  # it grows (SVG y points down)
    assert "flops = 1000*s^2 (s = seq_len; verified on 1 more point)" in text
    assert "no polynomial of degree &lt;= 3" in text
    assert text.count("<tr><td") == 3  # one table row per point

    grid = sweep_page("tiny-bert", sweep_json(batches=(1, 8)))
    flops = grid[grid.index('data-figure="flops"') : grid.index('data-figure="peak_memory')]
    assert flops.count('class="series"') == 2  # a line per batch, named
    assert re.findall(r'class="series-name"[^>]*>([^<]+)<', flops) == ["batch=1", "batch=8"]
    assert "batch=8: 2.10G" in html_unescape(flops)  # 1000 * 512^2 * 8 = 2,097,152,000


def test_sweep_page_in_headless_chromium(browser, tmp_path):
    from pytest_graphbudget.reports.html_sweep import sweep_page

    page = tmp_path / "sweep.html"
    html_page = sweep_page("tiny-bert", sweep_json(batches=(1, 8)))
    page.write_text(html_page, encoding="utf-8")
    browser.events.clear()
    browser.open(page.as_uri())
    tip = browser.js(
        "(() => { const p = document.querySelector('svg.growth [data-point=\"512\"]');"
        " p.dispatchEvent(new MouseEvent('mousemove', {clientX: 50, clientY: 50}));"
        " return document.getElementById('tip').textContent; })()"
    )
    assert tip == "seq_len=512, batch=1: 262M FLOPs"  # 1000 * 512^2
    assert browser.problems() == []
    assert browser.requests() == [page.as_uri()]


def test_run_page_gathers_a_swept_tables_points_into_growth_curves(profiles):
    """A swept budget table runs as one result per point (``tiny[seq_len=128]``, ...): the
    run's page fits them as ``profile --seq-len`` does. The points' FLOPs are 1000*s^2 here."""
    from pytest_graphbudget.gate.check import ModelResult
    from pytest_graphbudget.reports import html

    results = []
    for s in (4, 8, 16, 32):
        profile = profiles[0].to_dict()
        profile["totals"] = {**profile["totals"], "flops": 1000 * s * s}
        label = f"tiny[seq_len={s}]"
        results.append(ModelResult(f"b::{label}", label, "", "b", 1, {"limits": {}}, [], profile))
    text = html.run_page(results, set())
    assert '<section id="sweep-0"><h2>How cost grows: tiny</h2>' in text
    # Four points, a quadratic: three find it, the fourth verifies it.
    assert "<code>flops = 1000*s^2 (s = seq_len; verified on 1 more point)</code>" in text
    curve = re.findall(r'data-figure="flops".*?</svg>', text[text.index("sweep-0") :], re.S)[0]
    assert re.findall(r'data-point="(\d+)"', curve) == ["4", "8", "16", "32"]


@pytest.mark.slow
def test_sweep_and_decode_write_their_html_pages(tmp_path, monkeypatch, capsys):
    """``--html`` is honoured on the paths of ``profile`` that are not one profile: a
    ``--seq-len`` sweep (growth curves, the formulas of its JSON) and ``--decode`` (the
    prefill beside the decode step). On a one-layer GPT-2 built from its configuration."""
    transformers = pytest.importorskip("transformers")
    from pytest_graphbudget import cli

    transformers.GPT2Config(
        n_layer=1, n_embd=16, n_head=2, vocab_size=100, n_positions=64, bos_token_id=0
    ).to_json_file(str(tmp_path / "config.json"))
    monkeypatch.chdir(tmp_path)
    argv = ["profile", str(tmp_path), "--seq-len", "4,8", "--format", "json", "--html", "s.html"]
    assert cli.main([*argv, "-q"]) == 0
    fitted = json.loads(capsys.readouterr().out)["sweep"]["fit"]["figures"]
    sweep = Path("s.html").read_text()
    flops = re.findall(r'data-figure="flops".*?</svg>', sweep, flags=re.S)[0]
    assert re.findall(r'data-point="(\d+)"', flops) == ["4", "8"]
    assert f"<code>{fitted['flops']['formula']} (s = seq_len;" in sweep

    argv = ["profile", str(tmp_path), "--decode", "--context", "4", "--html", "d.html"]
    assert cli.main([*argv, "-q", "-o", "decode.txt"]) == 0
    names = re.findall(r'class="model" id="[^"]+" data-model="([^"]+)"', Path("d.html").read_text())
    assert names == [f"prefill: {tmp_path}", f"decode step: {tmp_path}"]
