"""``Profile`` in Jupyter (issue 24, item 5): a real notebook, executed by nbclient on a real
IPython kernel started with this interpreter, displays a profile; its ``text/html`` output is
checked as a browser would receive it.

The notebook's model, counted by hand: ``wide = Linear(8, 16)``, ``act = ReLU()``,
``head = Linear(16, 2)`` on a ``(1, 8)`` input. A linear layer does 2*in*out FLOPs plus one per
output for its bias, a ReLU one per element:
    wide: 2*8*16 + 16 = 272,  act: 16,  head: 2*16*2 + 2 = 66;  272 + 16 + 66 = 354 FLOPs.
So ``wide`` is the top layer.
"""

from __future__ import annotations

import os
import re
import sys
from contextlib import ExitStack
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from ipykernel.kernelspec import install as install_kernel_spec
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
WIDE, ACT, HEAD = 2 * 8 * 16 + 16, 16, 2 * 16 * 2 + 2
TOTAL_FLOPS = WIDE + ACT + HEAD  # 354
CELLS = [
    "import sys\nprint(sys.executable)",
    "import torch\nfrom torch import nn\nfrom pytest_graphbudget import profile_model\n\n"
    "class Tiny(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.wide = nn.Linear(8, 16)\n"
    "        self.act = nn.ReLU()\n"
    "        self.head = nn.Linear(16, 2)\n\n"
    "    def forward(self, x):\n"
    "        return self.head(self.act(self.wide(x)))\n\n"
    "prof = profile_model(Tiny(), (torch.randn(1, 8),))\n"
    "prof",
]
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class _Balanced(HTMLParser):
    """Parses the output and records any closing tag that does not close the open element."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.errors: list[str] = []
        self.sections: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        pass  # <line .../> in the SVG

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open.pop() != tag:
            self.errors.append(tag)


@pytest.fixture(scope="module")
def cell_html(tmp_path_factory) -> tuple[str, str]:
    """The executed notebook's (kernel interpreter, ``text/html`` of the Profile cell)."""
    prefix = tmp_path_factory.mktemp("kernel")
    # A kernel spec naming this very interpreter, found first on JUPYTER_PATH: the kernel
    # imports this checkout's package and torch, not whatever ``python3`` is on PATH.
    install_kernel_spec(kernel_name="graph-budget-test", prefix=str(prefix))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    client = NotebookClient(notebook, kernel_name="graph-budget-test", timeout=300)
    with pytest.MonkeyPatch.context() as env, ExitStack() as stack:
        env.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
        env.setenv("PYTHONPATH", str(ROOT), prepend=os.pathsep)
        try:
            stack.enter_context(client.setup_kernel())
        except Exception as exc:  # any failure to start is "no kernel here"
            pytest.skip(f"the Jupyter kernel cannot start here: {type(exc).__name__}: {exc}")
        for index, cell in enumerate(notebook.cells):
            client.execute_cell(cell, index)
    executable = notebook.cells[0].outputs[0]["text"].strip()
    (shown,) = [o for o in notebook.cells[1].outputs if o["output_type"] == "execute_result"]
    return executable, shown["data"]["text/html"]


def test_the_kernel_runs_this_interpreter(cell_html):
    executable, _ = cell_html
    assert os.path.samefile(executable, sys.executable)


def test_the_cell_shows_the_summary_roofline_and_top_layer(cell_html):
    _, html = cell_html
    assert re.search(rf'data-figure="flops"><th>FLOPs</th><td>{TOTAL_FLOPS}</td>', html)
    assert '<figure class="roofline-box">' in html and '<svg class="roofline"' in html
    rows = re.findall(r'<tr class="layer[^"]*" data-module="([^"]+)"', html)
    assert rows[0] == "wide"
    assert re.search(rf'data-module="wide" data-flops="{WIDE}"', html)


def test_the_cell_is_self_contained_html(cell_html):
    _, html = cell_html
    assert "<script" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html)
    assert not re.search(r"url\(|@import|https?://", html)
    parser = _Balanced()
    parser.feed(html)
    parser.close()
    assert not parser.errors and not parser.open


def test_the_cells_own_flops_are_the_modules_own_when_its_children_are_cut():
    """User trial: the cell keeps the top 10 layers, and a kept parent's own FLOPs were its
    FLOPs less its kept children's only (resnet18's layer3: 29.4M own, for 0). ``block``
    holds twelve ``Linear(8, 8)`` on a ``(1, 8)`` input (2*8*8 + 8 = 136 FLOPs each): the
    cell keeps it and nine of them, and its own FLOPs are 0."""
    import torch
    from torch import nn

    from pytest_graphbudget import profile_model
    from pytest_graphbudget.reports.notebook import profile_html

    block = nn.Sequential(*[nn.Linear(8, 8) for _ in range(12)])
    html = profile_html(profile_model(nn.Sequential(block), (torch.randn(1, 8),)))
    rows = dict(re.findall(r'data-module="([^"]+)" data-flops="\d+" data-own="(\d+)"', html))
    assert len(rows) == 10 and rows["0"] == "0"
    assert {rows[k] for k in rows if k != "0"} == {str(2 * 8 * 8 + 8)}
