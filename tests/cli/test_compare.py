"""``graph-budget compare``: what each side's estimated latency was priced for, and the flags
a saved profile cannot take (user trial 36: an eager profile against a compiled one read as a
-42.8% latency regression, and ``--hardware`` on two saved profiles changed nothing silently).

The model is a convolution and its ReLU, two kernels eager and one fused group compiled, so
its estimated latency depends on ``execution``; its JSON profiles are written by
``profile_model(...).to_dict()``, as ``graph-budget profile --format json`` writes them.
"""

from __future__ import annotations

import json

import pytest
import torch

from pytest_graphbudget import cli
from pytest_graphbudget.api import profile_model


def conv_relu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    return model, (torch.randn(1, 3, 16, 16),)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """``e.json`` eager and ``c.json`` compiled on h100, ``a.json`` eager on a100, and
    ``old.json``, an eager profile saved before ``execution`` was recorded."""
    folder = tmp_path_factory.mktemp("compare")
    for name, hardware, execution in [
        ("e", "h100", "eager"),
        ("c", "h100", "compiled"),
        ("a", "a100", "eager"),
    ]:
        prof = profile_model(*conv_relu(), hardware=hardware, execution=execution)
        (folder / f"{name}.json").write_text(json.dumps(prof.to_dict()))
    old = json.loads((folder / "e.json").read_text())
    del old["execution"]
    (folder / "old.json").write_text(json.dumps(old))
    return folder


def compare(folder, monkeypatch, capsys, *argv):
    monkeypatch.chdir(folder)
    assert cli.main(["compare", *argv]) == 0
    return capsys.readouterr()


def test_each_side_says_its_hardware_and_execution(saved, monkeypatch, capsys):
    out, err = compare(saved, monkeypatch, capsys, "e.json", "c.json")
    lines = out.splitlines()
    assert lines[0] == "A: Sequential on h100, eager (input 1x3x16x16 float32)"
    assert lines[1] == "B: Sequential on h100, compiled (input 1x3x16x16 float32)"
    assert err.strip() == (
        "graph-budget: note: A's estimated latency is priced on h100, eager; B's on h100, "
        "compiled: they are not comparable as a regression (profile both with one --hardware "
        "and one --execution)"
    )
    markdown, _ = compare(saved, monkeypatch, capsys, "e.json", "c.json", "--format", "markdown")
    assert "- A: Sequential on h100, eager (input 1x3x16x16 float32)" in markdown.splitlines()
    assert "- B: Sequential on h100, compiled (input 1x3x16x16 float32)" in markdown.splitlines()
    data = json.loads(
        compare(saved, monkeypatch, capsys, "e.json", "c.json", "--format", "json")[0]
    )
    assert (data["a"]["hardware"], data["a"]["execution"]) == ("h100", "eager")
    assert (data["b"]["hardware"], data["b"]["execution"]) == ("h100", "compiled")
    latency = data["totals"]["est_latency_s"]
    assert latency["b"] < latency["a"]  # the change the note says is no regression


def test_other_hardware_is_noted_and_one_pricing_is_not(saved, monkeypatch, capsys):
    out, err = compare(saved, monkeypatch, capsys, "e.json", "a.json")
    assert out.splitlines()[1].startswith("B: Sequential on a100, eager (")
    assert "A's estimated latency is priced on h100, eager; B's on a100, eager" in err
    assert compare(saved, monkeypatch, capsys, "e.json", "e.json").err == ""


EDGE = {"peak_tflops": {"float32": 2}, "bandwidth_gbs": 50}
CARD = {"peak_tflops": {"float32": 20, "float16": 80}, "bandwidth_gbs": 900, "family": "ada"}


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        (EDGE, {**EDGE, "bandwidth_gbs": 5}, "bandwidth 50 -> 5 GB/s"),
        *(
            (CARD, {**CARD, **edit}, "its family, fitted shares, launch cost or calibrated rates")
            for edit in (
                {"family": "hopper"},
                {"launch_us": 50},
                {"efficiency": {"conv": [0.2, 1]}},
            )
        ),
    ],
    ids=["bandwidth", "family", "launch", "shares"],
)
def test_one_name_priced_with_other_figures_is_noted(
    before, after, changed, monkeypatch, capsys, tmp_path
):
    """A project profile edited between two runs kept its name, and compare showed the
    latency change on "card" against "card" with nothing said: a bandwidth 50 -> 5 GB/s (10x),
    or, with the same peaks and bandwidth, another family, launch cost or shares, which the
    JSON's roofline figures do not show (its ``pricing`` digest does)."""
    from pytest_graphbudget.hardware import from_table

    for name, table in (("before", before), ("after", after)):
        prof = profile_model(*conv_relu(), hardware=from_table("card", table), dtype="float16")
        (tmp_path / f"{name}.json").write_text(json.dumps(prof.to_dict()))
    err = compare(tmp_path, monkeypatch, capsys, "before.json", "after.json").err
    assert err.strip() == (
        f"graph-budget: note: A and B are priced on card, but its figures differ between them "
        f"({changed}): the profile changed, so their estimated latencies are not comparable "
        "as a regression"
    )
    assert compare(tmp_path, monkeypatch, capsys, "after.json", "after.json").err == ""


def test_a_profile_saved_before_execution_says_it_is_not_recorded(saved, monkeypatch, capsys):
    out, err = compare(saved, monkeypatch, capsys, "old.json", "e.json")
    assert out.splitlines()[0].startswith("A: Sequential on h100, execution not recorded (")
    assert "priced on h100, execution not recorded; B's on h100, eager" in err
    data = json.loads(
        compare(saved, monkeypatch, capsys, "old.json", "e.json", "--format", "json")[0]
    )
    assert data["a"]["execution"] is None


def test_flags_a_saved_profile_cannot_take_are_noted(saved, monkeypatch, capsys):
    _, err = compare(saved, monkeypatch, capsys, "e.json", "c.json", "--hardware", "a100")
    for name in ("e.json", "c.json"):
        assert (
            f"graph-budget: note: {name} is a saved profile (eval, float32): --hardware a100 "
            "applies to models profiled now"
        ) in err.splitlines()
    _, err = compare(
        saved, monkeypatch, capsys, "e.json", "e.json", "--execution", "compiled", "--batch", "4"
    )
    assert "--execution compiled, --batch 4 apply to models profiled now" in err
    # user trial: a misspelt name was noted as applying, exit 0, where it is one line, exit 2
    monkeypatch.chdir(saved)
    assert cli.main(["compare", "e.json", "c.json", "--hardware", "h1000"]) == 2
    assert "unknown hardware 'h1000' (did you mean 'h100'?)" in capsys.readouterr().err


def test_the_projects_execution_is_no_flag_given(saved, monkeypatch, capsys):
    """``execution = "compiled"`` in pyproject.toml is no ``--execution`` on the command line:
    nothing to note for two saved profiles."""
    (saved / "pyproject.toml").write_text('[tool.graph_budget]\nexecution = "compiled"\n')
    try:
        assert compare(saved, monkeypatch, capsys, "e.json", "e.json").err == ""
        _, err = compare(saved, monkeypatch, capsys, "e.json", "e.json", "--execution", "eager")
        assert err == (
            "graph-budget: note: e.json is a saved profile (eval, float32): --execution eager "
            "applies to models profiled now\n"
        )
    finally:
        (saved / "pyproject.toml").unlink()


@pytest.fixture
def linear_json(tmp_path, monkeypatch):
    """``b.json``: ``nn.Linear(64, 32)`` on a ``(4, 64)`` input, 2*4*64*32 + 4*32 = 16,512
    FLOPs; the current directory holds it. ``edited(name, key, value)`` writes a copy whose
    ``totals[key]`` is ``value`` (or, for ``...``, has no ``key``)."""
    torch.manual_seed(0)
    saved = profile_model(torch.nn.Linear(64, 32), (torch.randn(4, 64),)).to_dict()
    assert saved["totals"]["flops"] == 2 * 4 * 64 * 32 + 4 * 32
    (tmp_path / "b.json").write_text(json.dumps(saved))
    monkeypatch.chdir(tmp_path)

    def edited(name, key, value):
        copy = json.loads(json.dumps(saved))
        if value is ...:
            del copy["totals"][key]
        else:
            copy["totals"][key] = value
        (tmp_path / name).write_text(json.dumps(copy))

    return edited


def test_max_growth_from_zero_fails(linear_json, capsys):
    """User trial: A's FLOPs 0 and B's 16,512 passed ``--max-growth 2%``: any growth from 0
    is beyond every ratio (the baseline gate's "regressed from 0")."""
    linear_json("a.json", "flops", 0)
    assert cli.main(["compare", "a.json", "b.json", "--max-growth", "2%"]) == 1
    assert capsys.readouterr().err == (
        "graph-budget: FAILED: FLOPs grew from 0 (0 -> 16.5k), more than --max-growth 2.0%\n"
    )
    assert cli.main(["compare", "b.json", "a.json", "--max-growth", "2%"]) == 0  # a drop
    assert cli.main(["compare", "a.json", "a.json", "--max-growth", "2%"]) == 0  # 0 -> 0


# The schema is given: torch 2.4's custom_op cannot read this module's string annotations.
@torch.library.custom_op("gbcompare::spread", mutates_args=(), schema="(Tensor x) -> Tensor")
def spread(x: torch.Tensor) -> torch.Tensor:
    """A user's kernel with no cost formula: one value out of a (2, 8) input."""
    return x.std().reshape(1)


@spread.register_fake
def _(x):
    return x.new_empty(1)


class Unpriced(torch.nn.Module):
    """A ``Linear(8, 4)`` and a custom op, which has no cost formula."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x).sum() + spread(x).sum()


def test_max_growth_fails_a_side_with_nothing_counted_and_shows_unpriced_ops(
    tmp_path, monkeypatch, capsys
):
    """User trial: two sides of 0 FLOPs and 0 params (every op unpriced, or none) were
    "within --max-growth", and the written verdict never named the ops left uncounted."""
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    for name, model, x in (
        ("empty.json", torch.nn.Identity(), torch.randn(2, 8)),
        ("unpriced.json", Unpriced(), torch.randn(2, 8)),
    ):
        (tmp_path / name).write_text(json.dumps(profile_model(model, (x,)).to_dict()))
    argv = ["compare", "empty.json", "empty.json", "--max-growth", "1%", "--format", "json"]
    assert cli.main(argv) == 1
    failures = json.loads(capsys.readouterr().out)["failures"]
    assert failures == [
        f"{side} (Identity) counted no FLOPs and no parameter: nothing for --max-growth to check "
        "(ops without a cost formula?)"
        for side in "AB"
    ]
    # counted ops (the Linear's 2*2*8*4 + 2*4 FLOPs, its sum's 8, the custom op's sum's 1 and
    # the add's 1) and one without a formula
    argv = ["compare", "unpriced.json", "unpriced.json", "--max-growth", "1%"]
    assert cli.main([*argv, "--format", "markdown"]) == 0
    out, err = capsys.readouterr()
    assert "- ✅ within --max-growth" in out
    assert "- ⚠️ B (Unpriced) has ops without a cost formula (gbcompare.spread x1)" in out
    assert "unpriced.json: no cost formula for gbcompare.spread x1" in err
    flops = json.loads(open("unpriced.json").read())["totals"]["flops"]
    assert flops == 2 * 2 * 8 * 4 + 2 * 4 + 8 + 1 + 1


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("inputs", "x", 'profile\'s inputs is "x", not a list'),
        ("inputs", [{"name": "x"}], "profile's inputs[0].shape is null"),
        ("inputs", None, "profile's inputs is null, not a list"),
        ("subgraphs", [{"id": 0}], "profile's subgraphs[0] lacks its module or bottleneck"),
    ],
)
def test_a_hand_edited_inputs_or_subgraph_is_one_line(linear_json, capsys, key, value, says):
    """User trial: a saved profile with ``"inputs": "x"`` (or a subgraph without its module,
    read by ``--html``'s roofline) gave a Python traceback and exit 1."""
    saved = json.loads(open("b.json").read())
    saved[key] = value
    with open("e.json", "w") as handle:
        json.dump(saved, handle)
    assert cli.main(["compare", "b.json", "e.json", "--html", "c.html"]) == 2
    assert capsys.readouterr().err.strip() == f"graph-budget: error: e.json: {says}"


def test_growth_exactly_at_the_limit_passes(linear_json, capsys):
    """User trial: params 100 -> 113 failed ``--max-growth 13%`` ("+13.0%, more than 13.0%"):
    in floats 100 * 1.13 is 112.99999999999999. b.json's params: 64*32 + 32 = 2,080; at 13%
    exactly 2,350.4 is the limit, so 2,350 passes and 2,351 fails."""
    from pytest_graphbudget.gate.figures import grew_beyond

    assert not grew_beyond(100, 113, 0.13) and grew_beyond(100, 114, 0.13)
    assert not grew_beyond(100, 104, 0.04) and grew_beyond(0, 1, 0.13)
    linear_json("a.json", "params", 2_080)
    linear_json("c.json", "params", 2_080 + 270)  # +12.98%
    linear_json("d.json", "params", 2_080 + 271)  # +13.03%
    assert cli.main(["compare", "a.json", "c.json", "--max-growth", "13%"]) == 0
    assert cli.main(["compare", "a.json", "d.json", "--max-growth", "13%"]) == 1
    capsys.readouterr()
    # the exact edge, as the trial hit it: 100 params -> 113
    linear_json("p100.json", "params", 100)
    linear_json("p113.json", "params", 113)
    assert cli.main(["compare", "p100.json", "p113.json", "--max-growth", "13%"]) == 0


def test_the_written_comparison_carries_its_verdict(linear_json, tmp_path, capsys):
    """User trial: ``--max-growth`` failed with exit 1, but the file written with ``-o`` (a
    PR comment's markdown, a JSON a later step reads) held no verdict, and looked clean."""
    linear_json("a.json", "flops", 0)
    common = ["compare", "a.json", "b.json", "--max-growth", "2%"]
    assert cli.main([*common, "--format", "markdown", "-o", "c.md"]) == 1
    failure = "FLOPs grew from 0 (0 -> 16.5k), more than --max-growth 2.0%"
    assert f"- ❌ {failure}" in (tmp_path / "c.md").read_text()
    assert cli.main([*common, "--format", "json", "-o", "c.json"]) == 1
    written = json.loads((tmp_path / "c.json").read_text())
    assert (written["max_growth"], written["failures"]) == (0.02, [failure])
    assert (
        cli.main(
            [
                "compare",
                "b.json",
                "b.json",
                "--max-growth",
                "2%",
                "-o",
                "d.md",
                "--format",
                "markdown",
            ]
        )
        == 0
    )
    assert "- ✅ within --max-growth" in (tmp_path / "d.md").read_text()
    capsys.readouterr()


def test_the_html_page_carries_the_verdict_too(linear_json, tmp_path, capsys):
    """User trial: ``--max-growth 2% --html`` exited 1 and the markdown listed the growth,
    but the page held no verdict. A's FLOPs edited to 16,000, B's 16,512: 512 / 16,000 is
    +3.2%, past 2%; B against itself is within."""
    import html
    import re

    def said(page: str) -> list[tuple[str, str]]:
        found = re.findall(r'<ul class="findings growth">(.*?)</ul>', page)
        items = re.findall(r'<li class="(\w+)">(.*?)</li>', "".join(found))
        return [(kind, html.unescape(text)) for kind, text in items]

    linear_json("a.json", "flops", 16_000)
    assert cli.main(["compare", "a.json", "b.json", "--max-growth", "2%", "--html", "c.html"]) == 1
    page = (tmp_path / "c.html").read_text()
    grew = "FLOPs grew +3.2% (16k -> 16.5k), more than --max-growth 2.0%"  # 16,000: "16k"
    assert said(page) == [("fail", grew)]
    assert '<header data-verdict="fail">' in page
    assert cli.main(["compare", "b.json", "b.json", "--max-growth", "2%", "--html", "d.html"]) == 0
    page = (tmp_path / "d.html").read_text()
    assert said(page) == [("pass", "within --max-growth 2.0%")]
    assert '<header data-verdict="pass">' in page
    assert cli.main(["compare", "a.json", "b.json", "--html", "e.html"]) == 0  # no check asked
    page = (tmp_path / "e.html").read_text()
    assert said(page) == [] and "<header>" in page
    capsys.readouterr()


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (..., None),
        ("20M", '"20M"'),
        (None, "null"),
        (True, "true"),
        (float("nan"), "NaN"),
        (-5, "-5"),  # user trial: read as a drop, and the gate passed
    ],
)
def test_a_total_that_is_not_a_number_is_one_line_naming_file_and_key(
    linear_json, capsys, value, shown
):
    """User trial: ``totals.flops`` missing, ``"20M"`` or null was a KeyError or TypeError
    traceback (exit 1); NaN would pass every growth check. On either side, with or without
    ``--max-growth``: one line, exit 2."""
    linear_json("x.json", "flops", value)
    if shown is None:
        expected = "graph-budget: error: x.json: profile lacks totals.flops\n"
    else:
        expected = (
            f"graph-budget: error: x.json: profile's totals.flops is {shown}, not a number >= 0 "
            "(a saved profile holds plain numbers: write it with `graph-budget profile MODEL "
            "--format json`)\n"
        )
    for argv in (["x.json", "b.json", "--max-growth", "2%"], ["b.json", "x.json"]):
        assert cli.main(["compare", *argv]) == 2
        captured = capsys.readouterr()
        assert (captured.out, captured.err) == ("", expected)


def test_the_html_page_writes_each_change_as_the_text_does(tmp_path, monkeypatch, capsys):
    """User trial: ``compare --html`` wrote a change column of its own: a share's relative
    change (39.1% -> 38.5%: ``-1.7%`` where the text said ``-0.7 points``), raw floats from 0
    (``+1.486e+08``, ``+0.3913`` where it said ``+149M``, ``+39.1 points``) and the raw key
    ``compute_bound_share``. A is a ReLU alone: no MACs, one memory-bound subgraph. B is a
    Linear(64, 64) and its ReLU, then a softmax, on 64 rows: 64 * 64 * 64 = 262,144 MACs; the
    Linear and ReLU are one subgraph of 532,480 FLOPs over 49,408 bytes (input, weight, bias,
    output: 10.8 FLOPs/B, over the generic ridge point of 10), compute-bound; the softmax's,
    memory-bound. The bottleneck shares are of subgraphs: compute 0 -> 1/2, memory 1 -> 1/2."""
    import html
    import re

    x = torch.randn(64, 64)
    linear = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Softmax(-1))
    for name, model in (("a", torch.nn.ReLU()), ("b", linear)):
        (tmp_path / f"{name}.json").write_text(json.dumps(profile_model(model, (x,)).to_dict()))
    out, _ = compare(tmp_path, monkeypatch, capsys, "a.json", "b.json", "--html", "c.html")
    page = (tmp_path / "c.html").read_text()
    table = page[page.index('<table class="compare">') :]
    table = table[: table.index("</table>")]
    cells = r"<th>(.*?)</th><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td>"
    shown = {
        key: [html.unescape(cell) for cell in row]
        for key, *row in re.findall(rf'<tr data-figure="(\w+)">{cells}</tr>', table)
    }
    assert shown["macs"] == ["MACs", "0", "262k", "+262k"]  # from 0: no ratio, no raw float
    assert shown["compute_bound_share"] == ["compute_bound share", "0.0%", "50.0%", "+50.0 points"]
    assert shown["memory_bound_share"] == ["memory_bound share", "100.0%", "50.0%", "-50.0 points"]
    # Every row as the text view writes it: label, A, B and the change.
    text = out[out.index("metric") : out.index("Modules that differ")].splitlines()[2:]
    assert list(shown.values()) == [re.split(r"\s{2,}", line.strip()) for line in text if line]


def test_sides_of_two_dtypes_say_each_models_dtype(saved, monkeypatch, capsys):
    """User trial: a float32 and a bfloat16 profile of one model read alike, "Sequential on
    generic, eager (input ... float32)", though every byte figure halved between them."""
    half = profile_model(*conv_relu(), hardware="h100", dtype="bfloat16")
    (saved / "h.json").write_text(json.dumps(half.to_dict()))
    out, _ = compare(saved, monkeypatch, capsys, "e.json", "h.json")
    lines = out.splitlines()
    assert lines[0] == "A: Sequential on h100, eager (input 1x3x16x16 float32, model float32)"
    assert lines[1] == "B: Sequential on h100, eager (input 1x3x16x16 bfloat16, model bfloat16)"
    markdown, _ = compare(saved, monkeypatch, capsys, "e.json", "h.json", "--format", "markdown")
    assert "- B: Sequential on h100, eager (input 1x3x16x16 bfloat16, model bfloat16)" in markdown


def test_a_profile_saved_before_module_classes_changes_no_module(saved, monkeypatch, capsys):
    """A profile saved before ``modules`` carried each module's ``type`` has the same figures:
    no module of it reads as changed."""
    untyped = json.loads((saved / "e.json").read_text())
    for module in untyped["modules"].values():
        module.pop("type")
    (saved / "untyped.json").write_text(json.dumps(untyped))
    out = compare(saved, monkeypatch, capsys, "untyped.json", "e.json", "--format", "json")[0]
    assert json.loads(out)["modules_changed"] == 0
