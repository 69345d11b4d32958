"""Shape sweeps from the command line and from budget TOML files, on a small BERT saved as a
``config.json`` folder (2 layers, hidden 64, intermediate 256), counted by hand.

Per layer at sequence length s: Q, K, V and output projections 4*s*h^2 MACs, attention 2*s^2*h,
MLP 8*s*h^2; the pooler h^2; all of it per sequence (times the batch).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_graphbudget import cli
from pytest_graphbudget.gate import budget_files
from pytest_graphbudget.gate.budgets import Budget

H, LAYERS = 64, 2
SEQ = [8, 16, 32]


def closed_form_macs(s: int, b: int = 1) -> int:
    return b * (LAYERS * (4 * s * H * H + 2 * s * s * H + 8 * s * H * H) + H * H)


def closed_form_flops(s: int) -> int:
    """Not counted here; what flops_max tables below sit around."""
    return 2 * closed_form_macs(s)


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import BertConfig

    folder = tmp_path_factory.mktemp("tinybert")
    BertConfig(
        hidden_size=H,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        intermediate_size=4 * H,
        vocab_size=100,
        max_position_embeddings=64,
    ).save_pretrained(folder)
    return folder


def profile(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["profile", *args, "-q"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_sweep_is_plot_ready_and_exact(bert_dir, capsys):
    args = (str(bert_dir), "--seq-len", "8,16,32", "--format", "json", "--symbolic")
    code, out, err = profile(capsys, *args)
    assert code == 0, err
    data = json.loads(out)
    assert list(data) == ["sweep"]
    assert list(data["sweep"]) == ["mode", "dtype", "axes", "points", "fit"]
    sweep = data["sweep"]
    assert sweep["axes"] == {"seq_len": SEQ}
    assert [(p["seq_len"], p["totals"]["macs"]) for p in sweep["points"]] == [
        (s, closed_form_macs(s)) for s in SEQ
    ]
    fit = sweep["fit"]
    assert fit["figures"]["macs"]["formula"] == (
        f"macs = {H * H} + {12 * LAYERS * H * H}*s + {2 * LAYERS * H}*s^2"
    )
    from pytest_graphbudget.compat import dim_auto

    # from one export with a dynamic seq_len, checked; torch 2.4 has no Dim.AUTO: the points'
    # fit, saying why
    symbolic = "symbolic" if dim_auto() is not None else "interpolated"
    assert fit["method"] == fit["figures"]["macs"]["method"] == symbolic
    assert fit["figures"]["traffic_bytes"]["method"] == "interpolated"
    assert set(fit["figures"]) == {"flops", "macs", "peak_memory_bytes", "traffic_bytes"}


def test_table_has_one_row_per_point_and_the_formulas(bert_dir, capsys, tmp_path):
    page = tmp_path / "sweep.html"
    args = (str(bert_dir), "--seq-len", "8", "--batch", "1,2", "--html", str(page))
    code, out, err = profile(capsys, *args)
    assert code == 0, err
    assert f"macs = {closed_form_macs(8)}*b" in page.read_text()  # the growth curves' page
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [row[0] for row in rows] == ["1", "2"]  # --seq-len 8 is fixed, batch is swept
    assert f"macs = {closed_form_macs(8)}*b  (every point used; add one to verify it)" in out
    assert "b = batch" in out


def test_a_grid_says_which_axis_no_spare_point_checked(bert_dir, capsys, tmp_path):
    """User trial: ``--seq-len 16,32 --batch 1,2,3`` printed a line in ``s`` as "verified on 2
    more points" (JSON and HTML ``verified: true``), though the spare points only vary the
    batch and the MACs are quadratic in ``s``. Two seq_lens fix the chord of it."""
    slope = (closed_form_macs(16) - closed_form_macs(8)) // 8
    start = closed_form_macs(8) - 8 * slope
    assert (start, slope) == (-28672, 104448)  # not the closed form's 4096 + 98304*s + 256*s^2
    page = tmp_path / "grid.html"
    args = (str(bert_dir), "--seq-len", "8,16", "--batch", "1,2,3", "--html", str(page))
    code, out, err = profile(capsys, *args)
    assert code == 0, err
    check = "verified in batch on 2 more points; every seq_len used, add one to verify it"
    assert f"macs = {start}*b + {slope}*s*b  ({check})" in out
    assert f"macs = {start}*b + {slope}*s*b (s = seq_len, b = batch; {check})" in page.read_text()


def test_a_single_value_keeps_the_single_profile(bert_dir, capsys):
    code, out, err = profile(capsys, str(bert_dir), "--seq-len", "16", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["schema"] == "graphbudget.profile/1"
    assert data["totals"]["macs"] == closed_form_macs(16)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seq-len", "8,8"], "each value once"),
        (["--seq-len", "8,x"], "expected a positive integer, got 'x'"),
        (["--seq-len", "8,16", "--visualize", "g.dot"], "--visualize draws one profile"),
        (["--seq-len", "8", "--symbolic"], "--symbolic derives formulas over a sweep"),
        (["--batch", "1,2", "--decode", "--context", "8"], "give --batch one value, or sweep"),
        (["--seq-len", "8,16", "--batch", "1,2", "--decode"], "give --seq-len and --batch one"),
    ],
)
def test_bad_sweeps_are_one_line_usage_errors(args, message, tmp_path, capsys):
    code, _, err = profile(capsys, str(tmp_path), *args)
    assert code == 2
    assert message in err and "Traceback" not in err


# ---------------------------------------------------------------------------------------------
# Budget files


BUDGET = """
[models.tiny]
model = "{model}"
seq_len = [8, 16, 32]
flops_max = {{8 = "{low}", 16 = "{low}", 32 = "100M"}}
growth_max = {{seq_len = "linear"}}

[models.roomy]
model = "{model}"
seq_len = [8, 16, 32, 64]  # telling quadratic from cubic takes four
macs_max = "100M"
growth_max = {{seq_len = "quadratic"}}
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bert_dir: Path) -> Path:
    # 8 and 16 get the same limit, between their FLOPs: 8 passes, 16 fails.
    low = (closed_form_flops(8) + closed_form_flops(16)) // 2
    budget = BUDGET.format(model=bert_dir.as_posix(), low=low)
    (tmp_path / "budgets").mkdir()
    (tmp_path / "budgets/sweep.toml").write_text(textwrap.dedent(budget))
    (tmp_path / "pyproject.toml").write_text("[tool.graph_budget]\ncache_dir = '.cache'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return tmp_path


def test_toml_checks_each_point_and_the_growth(project, capsys):
    code = cli.main(["check", "--json", "out.json"])
    out = capsys.readouterr().out
    assert code == 1, out
    verdicts = {
        m["id"].rpartition("::")[2]: (m["verdict"], [f["key"] for f in m["findings"]])
        for m in json.loads((project / "out.json").read_text())["models"]
    }
    assert verdicts["tiny[seq_len=8]"][0] in ("pass", "warn")
    assert verdicts["tiny[seq_len=16]"] == ("fail", ["flops_max"])
    assert verdicts["tiny[seq_len=32]"][0] == "pass"
    assert verdicts["tiny[growth]"][0] == "fail"
    assert verdicts["roomy[growth]"] == ("pass", [])
    assert [v[0] for k, v in verdicts.items() if k.startswith("roomy[seq")] == ["pass"] * 4
    assert "MACs grows with seq_len to degree 2 (quadratic: macs = 4096 + 98304*s + 256*s^2" in out
    assert "faster than growth_max seq_len = 'linear'" in out


def read(tmp_path: Path, table: str) -> list:
    path = tmp_path / "b.toml"
    path.write_text(textwrap.dedent(table))
    return budget_files.read(path, "b.toml", Budget())


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'seq_len = [128, 2048]\nflops_max = {128 = "22G", 1024 = "400G"}',
            "flops_max in b.toml::bert: '1024' is not a point of the sweep; keys are 128, 2048",
        ),
        (
            'seq_len = [128, 2048]\nflops_max = {128 = "22G"}',
            "flops_max in b.toml::bert: no limit for seq_len=2048; give one per point",
        ),
        (
            'seq_len = 128\nflops_max = {128 = "22G"}',
            "flops_max in b.toml::bert: a limit per point needs a sweep",
        ),
        (
            'seq_len = [128, 2048]\ngrowth_max = {seq_len = "linear"}',
            "telling linear from faster growth takes 3 values of seq_len, got 2",
        ),
        (
            'seq_len = [1, 2, 3]\ngrowth_max = {batch = "linear"}',
            "'batch' is not swept",
        ),
        (
            'seq_len = [1, 2, 3]\ngrowth_max = {seq_len = "exponential"}',
            "one of 'constant', 'linear', 'quadratic', 'cubic', got 'exponential'",
        ),
        ("seq_len = [128, 0]", "seq_len: a list of positive integers"),
    ],
)
def test_bad_sweep_keys_are_one_line_errors(tmp_path, table, message):
    (entry,) = read(tmp_path, f"[models.bert]\n{table}\n")
    assert isinstance(entry, budget_files.Broken)
    assert message in entry.message and "\n" not in entry.message


def test_grid_points_are_named_and_limits_keyed_by_point(tmp_path):
    entries = read(
        tmp_path,
        """
        [models.bert]
        model = "bert-base-uncased"
        seq_len = [128, 512]
        batch = [1, 8]


        [models.bert.flops_max]
        "seq_len=128,batch=1" = "1G"
        "seq_len=128,batch=8" = "2G"
        "seq_len=512,batch=1" = "3G"
        "seq_len=512,batch=8" = "4G"
        """,
    )
    assert [
        (e.name, e.table["seq_len"], e.table["batch"], e.table["flops_max"]) for e in entries
    ] == [
        ("bert[seq_len=128,batch=1]", 128, 1, "1G"),
        ("bert[seq_len=128,batch=8]", 128, 8, "2G"),
        ("bert[seq_len=512,batch=1]", 512, 1, "3G"),
        ("bert[seq_len=512,batch=8]", 512, 8, "4G"),
    ]
    assert all(e.table["model"] == "bert-base-uncased" for e in entries)


def test_pytest_collects_one_item_per_point_and_the_growth(pytester):
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets/sweep.toml").write_text(
        '[models.bert-base]\nseq_len = [128, 256, 2048]\ngrowth_max = {seq_len = "linear"}\n'
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--graph-budget", "--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "budgets/sweep.toml::bert-base[[]seq_len=128]",
            "budgets/sweep.toml::bert-base[[]seq_len=256]",
            "budgets/sweep.toml::bert-base[[]seq_len=2048]",
            "budgets/sweep.toml::bert-base[[]growth]",
        ]
    )


def test_a_single_batch_beside_a_swept_seq_len_is_a_plain_option(tmp_path):
    entries = read(tmp_path, "[models.bert]\nseq_len = [128, 512]\nbatch = 8\n")
    assert [(e.name, e.table["batch"]) for e in entries] == [
        ("bert[seq_len=128]", 8),
        ("bert[seq_len=512]", 8),
    ]
