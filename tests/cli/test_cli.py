"""``graph-budget`` as users see it: its exit code, stdout and stderr.

Commands run in this process (``cli.main`` from the test's directory, stdout and stderr caught
apart), which is what the console script calls: a fresh interpreter per command cost the suite
minutes. The console script itself, ``python -m pytest_graphbudget.cli`` and the promise that the
CLI imports no torch until it needs it run as subprocesses, once each.

Most checks use a tiny model saved to disk (``Linear(8, 16) -> ReLU -> Linear(16, 4)`` at input
2x8) whose figures are derived by hand below; the examples of ``profile_graph.py`` (BERT,
DistilBERT, ResNet-18, YOLOv8n) run as written, at the end, marked slow.

Hand-derived figures of the tiny model (batch 2):
  Linear(8, 16):  MACs 2*8*16 = 256, FLOPs 2*256 + bias 2*16 = 544, params 8*16+16 = 144
  ReLU:           FLOPs 2*16 = 32
  Linear(16, 4):  MACs 2*16*4 = 128, FLOPs 2*128 + bias 2*4 = 264, params 16*4+4 = 68
  total:          MACs 384, FLOPs 840, params 212
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TINY = {"macs": 384, "flops": 840, "params": 212}
TINY_ARGS = ["--input-shape", "2,8", "--trust-pickle"]


@dataclass
class Run:
    """What a command left: its exit code and what it wrote to stdout and stderr."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, cwd: Path, env: dict | None = None) -> Run:
    """``graph-budget ARGS`` run by ``cli.main`` in ``cwd``, with ``env`` added to the
    environment. An exception that escapes ``main`` fails the test, as a traceback would."""
    from pytest_graphbudget import cli

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(args))
    return Run(code, out.getvalue(), err.getvalue())


def run_python(argv: list[str], *, cwd: Path) -> subprocess.CompletedProcess:
    """``python ARGV`` in a fresh interpreter that imports this checkout."""
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "YOLO_OFFLINE"):
        environ.setdefault(key, "1")
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=environ, capture_output=True, text=True, timeout=900
    )


def assert_ok(result) -> None:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr}"
    assert "Traceback" not in result.stderr


def assert_user_error(result, *snippets: str) -> str:
    """Exit 2, one error line, no traceback; returns the error line."""
    assert result.returncode == 2, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    errors = [
        line
        for line in result.stderr.splitlines()
        if line.startswith(("graph-budget: error:", "usage:")) or ": error: " in line
    ]
    assert errors, result.stderr
    if errors[0].startswith("graph-budget: error:"):
        assert len(errors) == 1, result.stderr
    for snippet in snippets:
        assert snippet in result.stderr, f"{snippet!r} not in:\n{result.stderr}"
    return errors[-1]


def summary_int(text: str, label: str) -> int:
    """The exact integer in a summary line such as ``  MACs   1.81G (1,814,073,344)``."""
    match = re.search(rf"^\s+{re.escape(label)}\s+\S+ \(([\d,]+)\)", text, re.MULTILINE)
    assert match, f"no {label} line in:\n{text[:2000]}"
    return int(match.group(1).replace(",", ""))


# ---------------------------------------------------------------------------------------------
# Fixtures: the tiny model on disk, and its profile through the CLI and in-process


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A directory with tiny.pt (the model above), tiny2.pt (twice as wide) and bad files."""
    import torch
    from torch import nn

    root = tmp_path_factory.mktemp("cli")
    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), root / "tiny.pt")
    torch.save(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4)), root / "tiny2.pt")
    torch.save(nn.Linear(8, 4).state_dict(), root / "weights.pt")
    (root / "garbage.pt").write_bytes(b"this is not a PyTorch file\n")
    return root


@pytest.fixture(scope="module")
def tiny_json_run(work):
    """``profile tiny.pt --format json --visualize tiny.svg``: JSON on stdout, image beside."""
    args = ["profile", "tiny.pt", *TINY_ARGS, "--format", "json"]
    if shutil.which("dot"):
        args += ["--visualize", "tiny.svg"]
    result = run_cli(*args, cwd=work)
    assert_ok(result)
    return result


@pytest.fixture(scope="module")
def tiny_profile(work):
    """The same profile computed in this process, through the Python API."""
    from pytest_graphbudget import zoo
    from pytest_graphbudget.api import profile_model

    case = zoo.resolve(str(work / "tiny.pt"), input_shape=(2, 8), trust_pickle=True)
    case.name = "tiny.pt"
    return profile_model(case)


# ---------------------------------------------------------------------------------------------
# No torch until needed; usage errors


def test_importing_the_cli_and_listing_hardware_do_not_import_torch(tmp_path):
    code = textwrap.dedent(
        """
        import sys
        import pytest_graphbudget.cli as cli
        assert "torch" not in sys.modules, "import"
        assert cli.main(["hardware", "--format", "json"]) == 0
        assert cli.main(["--help"]) == 0
        assert "torch" not in sys.modules, "hardware"
        """
    )
    result = run_python(["-c", code], cwd=tmp_path)
    assert_ok(result)


@pytest.mark.parametrize(
    ("args", "snippet"),
    [
        ([], "required: COMMAND"),
        (["frobnicate"], "invalid choice"),
        (["profile"], "required: MODEL"),
        (["profile", "resnet18", "--format", "xml"], "invalid choice: 'xml'"),
        (["profile", "resnet18", "--input-shape", "1,3,a,224"], "invalid shape '1,3,a,224'"),
        # user trial: the empty piece was dropped, and the shape 1,3,224,224 profiled
        (["profile", "resnet18", "--input-shape", "1,,3,224,224"], "invalid shape '1,,3,224,"),
        (["profile", "resnet18", "--seq-len", "0"], "expected a positive integer"),
        (["init", "resnet18", "--headroom", "lots"], "cannot read 'lots'"),
        (["explore", "resnet18", "--around", "5", "--start", "1"], "--around cannot be combined"),
        (["explore", "resnet18", "--start", "9", "--end", "3"], "--end 3 is before --start 9"),
        # user trial: ignored, and every node shown
        (["explore", "resnet18", "--context", "3"], "--context K goes with --around N"),
        (["profile", "resnet18", "--visualize", "graph.jpg"], "unknown format .jpg"),
        (["profile", "resnet18", "--hardware", "abacus"], "unknown hardware 'abacus'"),
        (["profile", "resnet18", "-o", "no/such/dir/out.txt"], "does not exist"),
        # user trial: written to stdout; and the API's wording, "drop tier"
        (["profile", "resnet18", "-o", ""], "--output: the path is empty"),
        (["list", "resnet", "-o", ""], "--output: the path is empty"),
        (["profile", "resnet18", "--breaks", "--mode", "train"], "--breaks captures one eval"),
        # user trial: "(see graph-budget --help)", which lists no command's options
        (["profile", "resnet18", "--frob"], "--frob (see graph-budget profile --help)"),
        (["compare", "a.json", "b.json", "--top", "5", "--all"], "not allowed with argument"),
        (["hardware", "--calibrate", "--max-spread", "lots"], "expected a percentage such as"),
        # user trial: a value starting with '-' was argparse's "expected one argument"
        (["compare", "a.json", "b.json", "--max-growth", "-5%"], "'-5%' is negative"),
        (["profile", "resnet18", "--input-shape", "-1,3,224"], "invalid shape '-1,3,224'"),
        (["compare", "a.json", "b.json", "--max-growth", "-q"], "expected one argument"),
    ],
)
def test_usage_errors_exit_2_without_traceback_and_before_any_model_is_built(
    tmp_path, args, snippet
):
    result = run_cli(*args, cwd=tmp_path)
    assert_user_error(result, snippet)
    assert "loading" not in result.stderr  # refused before any work


def test_help_and_version(tmp_path):
    result = run_cli("--help", cwd=tmp_path)
    assert_ok(result)
    for command in ("profile", "explore", "compare", "list", "init", "hardware"):
        assert command in result.stdout
    result = run_cli("profile", "--help", cwd=tmp_path)
    assert_ok(result)
    for flag in (
        "--format",
        "--output",
        "--seq-len",
        "--batch",
        "--input-shape",
        "--hardware",
        "--visualize",
        "--showshape",
    ):
        assert flag in result.stdout
    result = run_python(["-m", "pytest_graphbudget.cli", "--version"], cwd=tmp_path)
    assert_ok(result)
    assert result.stdout.startswith("graph-budget ")


def test_console_script(tmp_path):
    script = shutil.which("graph-budget", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the package is not installed in this environment (no graph-budget script)")
    result = subprocess.run(
        [script, "hardware", "--format", "csv"], cwd=tmp_path, capture_output=True, text=True
    )
    assert_ok(result)
    assert result.stdout.startswith("name,peak_flops_fp32,")


# ---------------------------------------------------------------------------------------------
# hardware


def test_hardware_lists_every_profile_with_its_ridge_point(tmp_path):
    from pytest_graphbudget import hardware

    result = run_cli("hardware", "--format", "json", cwd=tmp_path)
    assert_ok(result)
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(rows) == {hw.name for hw in hardware.BUILTIN}
    assert rows["generic"]["ridge_point"] == pytest.approx(10.0)
    for hw in hardware.BUILTIN:
        assert rows[hw.name]["ridge_point"] == pytest.approx(hw.peak("float32") / hw.bandwidth)
    # A100: 19.5 TFLOP/s fp32 over 2039 GB/s.
    assert rows["a100"]["ridge_point"] == pytest.approx(19.5e12 / 2039e9)
    # the L4's published matmul, 68.83 of its 121 TFLOP/s, against the RTX 4090's 166.87 of 165.2
    assert rows["l4"]["compute_scale"] == pytest.approx((68.83 / 121) / (166.87 / 165.2))
    assert rows["rtx4090"]["compute_scale"] == 1.0 and rows["generic"]["compute_scale"] == 1.0
    # the family and launch cost that price each kernel: the same peaks price apart without
    # them being shown (the data file's fitted families, and launch_us per kernel)
    for hw in hardware.BUILTIN:
        assert rows[hw.name]["family"] == hw.family
        assert rows[hw.name]["launch_us"] == pytest.approx(hw.launch_s * 1e6)
    assert rows["l4"]["family"] == "ada" and rows["generic"]["family"] == ""
    assert rows["l4"]["launch_us"] > 0 and rows["generic"]["launch_us"] == 0
    # a borrowed family says so, and what it was worth where a card of it was timed
    assert "RTX 4090" in rows["l4"]["family_source"] and rows["generic"]["family_source"] is None
    assert rows["h200"]["family_source"].startswith("ada's figures, borrowed")
    # how each card's peak memory is counted: a CUDA GPU's allocator, else the host's
    assert (rows["h200"]["compute_capability"], rows["a100"]["compute_capability"]) == (
        "9.0",
        "8.0",
    )
    assert rows["mi300x"]["compute_capability"] is None is rows["generic"]["compute_capability"]
    assert "timed by this project on one H200" in rows["h100"]["family_source"]

    table = run_cli("hardware", cwd=tmp_path)
    assert_ok(table)
    generic = next(line for line in table.stdout.splitlines() if line.startswith("generic"))
    assert "10.0" in generic and " - " in generic  # no family
    assert table.stdout.splitlines()[0].split()[-2:] == ["family", "description"]
    t4 = next(line for line in table.stdout.splitlines() if line.startswith("t4 "))
    assert " turing " in t4
    assert "a100 (a100-80gb, a100-sxm)" in table.stdout

    md = run_cli("hardware", "--format", "markdown", cwd=tmp_path)
    assert_ok(md)
    assert md.stdout.startswith("| name |") and "| generic |" in md.stdout
    assert "| family |" in md.stdout and "| hopper |" in md.stdout

    data = run_cli("hardware", "--format", "csv", cwd=tmp_path)
    assert_ok(data)
    rows = list(csv.DictReader(io.StringIO(data.stdout)))
    assert {r["name"] for r in rows} == {hw.name for hw in hardware.BUILTIN}
    t4 = next(r for r in rows if r["name"] == "t4")
    assert float(t4["ridge_point"]) == pytest.approx(8.1e12 / 320e9)
    assert t4["family"] == "turing"


def test_project_hardware_profiles_come_from_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        "[tool.graph_budget.hardware_profiles.edge]\n"
        "peak_tflops = { float32 = 4.0 }\nbandwidth_gbs = 100\n"
    )
    result = run_cli("hardware", "--format", "json", cwd=tmp_path)
    assert_ok(result)
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["edge"]["ridge_point"] == pytest.approx(40.0)  # 4e12 / 100e9


def test_profile_uses_the_projects_hardware_like_pytest_does(tmp_path, monkeypatch, capsys):
    """Without --hardware, the CLI prices on `[tool.graph_budget] hardware`, as the budget run
    does; the flag still wins. Linear(64, 32) at batch 4: 16,512 FLOPs."""
    import torch

    from pytest_graphbudget import cli

    torch.save(torch.nn.Linear(64, 32), tmp_path / "lin.pt")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.graph_budget]\nhardware = "edge"\n'
        "[tool.graph_budget.hardware_profiles.edge]\n"
        "peak_tflops = { float32 = 4.0 }\nbandwidth_gbs = 100\n"
    )
    monkeypatch.chdir(tmp_path)
    base = ["profile", "lin.pt", "--input-shape", "4,64", "--trust-pickle", "--format", "json"]
    assert cli.main(base) == 0
    prof = json.loads(capsys.readouterr().out)
    assert prof["totals"]["flops"] == 2 * 4 * 64 * 32 + 4 * 32
    assert prof["hardware"]["name"] == "edge"
    assert cli.main([*base, "--hardware", "a100"]) == 0
    assert json.loads(capsys.readouterr().out)["hardware"]["name"] == "a100"


def test_hardware_file_adds_profiles(tmp_path):
    (tmp_path / "hw.toml").write_text(
        '[hardware.edge-npu]\ndescription = "our NPU"\npeak_tflops = { float32 = 2.0 }\n'
        "bandwidth_gbs = 50\n"
    )
    result = run_cli("hardware", "--hardware-file", "hw.toml", "--format", "json", cwd=tmp_path)
    assert_ok(result)
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["edge-npu"]["ridge_point"] == pytest.approx(40.0)  # 2e12 / 50e9
    assert "generic" in rows

    (tmp_path / "broken.toml").write_text("[hardware.x\n")
    assert_user_error(
        run_cli("hardware", "--hardware-file", "broken.toml", cwd=tmp_path), "not valid TOML"
    )


# ---------------------------------------------------------------------------------------------
# profile: every format, on the tiny model


def test_profile_json_is_exactly_the_profile_dict(tiny_json_run, tiny_profile):
    data = json.loads(tiny_json_run.stdout)  # progress went to stderr: stdout parses
    expected = tiny_profile.to_dict()
    assert data["trace"].pop("seconds") >= 0
    expected["trace"].pop("seconds")
    assert data == expected
    assert data["schema"] == "graphbudget.profile/1"
    for key, value in TINY.items():
        assert data["totals"][key] == value
    assert data["totals"]["flops_contraction"] == 2 * TINY["macs"]
    assert data["inputs"] == [{"name": "input", "shape": [2, 8], "dtype": "float32"}]
    assert "profiling tiny.pt" in tiny_json_run.stderr


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")
def test_profile_visualize_svg_draws_the_partitioned_graph(work, tiny_json_run, tiny_profile):
    svg = (work / "tiny.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    # One cluster per subgraph, labelled with its kind; the graph input is drawn.
    for sub in tiny_profile.subgraphs:
        assert f"#{sub.id} {sub.kind}" in svg
    assert "input input" in svg
    assert "memory&#45;bound" in svg or "memory-bound" in svg


def test_profile_table_with_shapes_and_dot_file(work):
    result = run_cli(
        "profile", "tiny.pt", *TINY_ARGS, "--showshape", "--visualize", "tiny.dot", cwd=work
    )
    assert_ok(result)
    out = result.stdout
    for section in (
        "Per-layer profile",
        "Top 10 layers by FLOPs",
        "Operation types",
        "Bottleneck mix on generic (ridge point 10.0 FLOPs/byte)",
    ):
        assert section in out
    assert summary_int(out, "FLOPs") == TINY["flops"]
    assert summary_int(out, "MACs") == TINY["macs"]
    assert summary_int(out, "params") == TINY["params"]
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("    ")}
    # module  type  params  shape...  MACs  FLOPs  %  traffic
    assert rows["0"][1:3] == ["Linear", "144"]
    assert "[2, 16]" in out and "[2, 4]" in out  # --showshape
    assert rows["0"][-4:-2] == ["256", "544"] and rows["2"][-4:-2] == ["128", "264"]
    assert re.search(r"^\s+#0\s+linear\+relu\s+0\s+576\b", out, re.MULTILINE)  # top layers
    assert re.search(r"^\s+memory_bound\s+2\s+100\.0%", out, re.MULTILINE)
    assert "wrote tiny.dot" in result.stderr

    dot = (work / "tiny.dot").read_text()
    assert dot.startswith('digraph "tiny.pt" {')
    assert dot.count("subgraph cluster_") == 3  # two kernels and the legend
    assert '"_0" -> "_1";' in dot and '"_1" -> "_2";' in dot
    assert '"in:input_1" -> "_0";' in dot  # the graph input, labelled with its shape
    assert "input input\\n2x8 float32" in dot

    plain = run_cli("profile", "tiny.pt", *TINY_ARGS, "--depth", "0", cwd=work)
    assert_ok(plain)
    assert "[2, 16]" not in plain.stdout  # no shapes without --showshape
    assert "Linear" not in plain.stdout.split("Per-layer profile")[1].split("Top")[0]


def test_profile_csv_from_the_output_suffix(work):
    result = run_cli("profile", "tiny.pt", *TINY_ARGS, "-o", "tiny.csv", cwd=work)
    assert_ok(result)
    assert result.stdout == ""  # the result went to the file
    rows = list(csv.DictReader(io.StringIO((work / "tiny.csv").read_text())))
    assert [r["module"] for r in rows] == ["", "0", "1", "2"]
    root, first, relu, last = rows
    assert (int(root["flops"]), int(root["macs"]), int(root["params"])) == (840, 384, 212)
    assert (first["type"], int(first["flops"]), int(first["macs"])) == ("Linear", 544, 256)
    assert (int(relu["flops"]), relu["output_shape"]) == (32, "2x16")
    assert int(last["params"]) == 68 and last["output_shape"] == "2x4"
    assert float(first["flops_share"]) == pytest.approx(544 / 840, abs=1e-6)
    # User trial: --format csv -o out.json wrote CSV into a .json file, which a later compare
    # refused as "not valid JSON"
    clash = run_cli("profile", "tiny.pt", *TINY_ARGS, "--format", "csv", "-o", "out.json", cwd=work)
    assert clash.returncode == 2 and not (work / "out.json").exists()
    assert clash.stderr.strip().splitlines()[-1] == (
        "graph-budget: error: --format csv with -o out.json, whose name says json: give the "
        "file a name for csv, or leave --format out"
    )


def test_profile_markdown(work):
    result = run_cli("profile", "tiny.pt", *TINY_ARGS, "--format", "markdown", cwd=work)
    assert_ok(result)
    out = result.stdout
    assert out.startswith("## tiny.pt\n")
    assert "| FLOPs | 840 (840) |" in out
    assert "| `0` | Linear | 144 | 256 | 544 | 64.8% |" in out
    assert "| linear | 2 | 808 | 384 | 96.2% |" in out  # op types: 544 + 264
    assert "| memory_bound | 2 | 100.0% |" in out


# ---------------------------------------------------------------------------------------------
# explore


def test_explore_shows_every_node_with_subgraph_kind_flops_and_bottleneck(work, tiny_profile):
    result = run_cli("explore", "tiny.pt", *TINY_ARGS, cwd=work)
    assert_ok(result)
    out = result.stdout
    assert "Created 2 subgraphs from 3 graph nodes; showing nodes 0 to 2" in out
    for node in tiny_profile.node_info:
        assert f"{node.index}. [{node.op}] {node.name}" in out
    assert ">> Subgraph #0: linear+relu (0)" in out
    assert "Kind: linear, FLOPs: 544, MACs: 256" in out
    assert "Kind: relu, FLOPs: 32" in out
    assert out.count("Bottleneck: memory_bound") == 3
    assert "Starts subgraph:" in out
    assert re.search(r"compute_bound\s*:\s+0 \(\s*0\.0%\)", out)


def test_explore_range_to_a_file(work):
    result = run_cli(
        "explore",
        "tiny.pt",
        *TINY_ARGS,
        "--around",
        "1",
        "--context",
        "0",
        "-o",
        "x.txt",
        cwd=work,
    )
    assert_ok(result)
    text = (work / "x.txt").read_text()
    assert "showing nodes 1 to 1" in text
    # a user trial: -o x.json wrote the text view, a JSON file no reader could open
    result = run_cli("explore", "tiny.pt", *TINY_ARGS, "-o", "x.json", cwd=work)
    assert result.returncode == 2 and not (work / "x.json").exists()
    assert result.stderr.strip().endswith(
        "-o x.json: explore writes its text view; for JSON or HTML, graph-budget profile "
        "tiny.pt --format json (or --html FILE)"
    ), result.stderr
    assert "1. [call_module] _1" in text
    assert "0. [call_module]" not in text and "2. [call_module]" not in text

    capped = run_cli(
        "explore",
        "tiny.pt",
        *TINY_ARGS,
        "--start",
        "1",
        "--end",
        "2",
        "--max-nodes",
        "1",
        cwd=work,
    )
    assert_ok(capped)
    assert "showing nodes 1 to 1" in capped.stdout and "2. [call_module]" not in capped.stdout

    past = run_cli("explore", "tiny.pt", *TINY_ARGS, "--start", "7", cwd=work)
    assert_user_error(past, "--start 7 is past the last node", "nodes 0 to 2")


# ---------------------------------------------------------------------------------------------
# compare


@pytest.fixture(scope="module")
def tiny_json_file(work, tiny_json_run) -> Path:
    path = work / "tiny.json"
    path.write_text(tiny_json_run.stdout)
    return path


def test_compare_saved_profile_with_a_model(work, tiny_json_file):
    result = run_cli(
        "compare",
        "tiny.json",
        "tiny2.pt",
        *TINY_ARGS,
        "--max-growth",
        "5%",
        "--format",
        "json",
        cwd=work,
    )
    # tiny2 doubles the hidden width: MACs 2*8*32 + 2*32*4 = 768, params 420.
    assert result.returncode == 1, result.stderr  # grew beyond --max-growth
    assert "Traceback" not in result.stderr
    assert "FAILED: MACs grew +100.0% (384 -> 768)" in result.stderr
    data = json.loads(result.stdout)
    assert data["totals"]["macs"] == {"a": 384, "b": 768, "delta": 384, "ratio": 2.0}
    assert data["totals"]["params"]["b"] == 420
    modules = {m["module"]: m for m in data["modules"]}
    assert modules["0"]["delta"] == {"flops": 544, "macs": 256, "params": 144}
    assert modules["2"]["delta"]["macs"] == 128
    assert [m["module"] for m in data["modules"]][0] == "0"  # largest FLOPs change first


def test_compare_two_saved_profiles_in_every_format(work, tiny_json_file):
    same = run_cli("compare", "tiny.json", "tiny.json", "--max-growth", "0", cwd=work)
    assert_ok(same)
    assert "Per-module figures are identical." in same.stdout
    assert re.search(r"^FLOPs\s+840\s+840\s+=$", same.stdout, re.MULTILINE)

    data = json.loads(tiny_json_file.read_text())
    data["model"] = "tiny-bigger"
    data["totals"]["flops"] = 1000
    data["modules"]["0"]["flops"] = 704
    (work / "bigger.json").write_text(json.dumps(data))

    md = run_cli("compare", "tiny.json", "bigger.json", "--format", "markdown", cwd=work)
    assert_ok(md)
    assert "## tiny.pt vs tiny-bigger" in md.stdout
    assert "| FLOPs | 840 | 1k | +160 (+19.0%) |" in md.stdout
    assert "| `0 (Linear)` | changed | 544 | 704 | +160 (+29.4%) |" in md.stdout

    table = run_cli("compare", "tiny.json", "bigger.json", cwd=work)
    assert_ok(table)
    assert "Modules that differ: 1" in table.stdout

    rows = run_cli("compare", "tiny.json", "bigger.json", "--format", "csv", cwd=work)
    assert_ok(rows)
    parsed = list(csv.DictReader(io.StringIO(rows.stdout)))
    flops = next(r for r in parsed if r["section"] == "total" and r["name"] == "flops")
    assert (flops["a"], flops["b"], flops["delta"]) == ("840", "1000", "160")
    assert any(r["section"] == "module.flops" and r["name"] == "0" for r in parsed)


def test_compare_refuses_unreadable_json(work, tiny_json_file):
    (work / "broken.json").write_text('{"schema": "graphbudget.profile/1", ')
    assert_user_error(
        run_cli("compare", "tiny.json", "broken.json", cwd=work), "broken.json: not valid JSON"
    )
    (work / "other.json").write_text('{"hello": "world"}')
    assert_user_error(
        run_cli("compare", "other.json", "tiny.json", cwd=work),
        "other.json: not a graph-budget profile",
    )
    assert_user_error(run_cli("compare", "tiny.json", "nowhere.json", cwd=work), "no such file")


# ---------------------------------------------------------------------------------------------
# init


def test_init_writes_a_budget_the_plugin_accepts(work, tiny_profile):
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    from pytest_graphbudget import units
    from pytest_graphbudget.gate import budgets

    result = run_cli("init", "tiny.pt", *TINY_ARGS, "-o", "budgets/tiny.toml", cwd=work)
    assert_ok(result)
    path = work / "budgets" / "tiny.toml"
    data = tomllib.loads(path.read_text())
    assert data["defaults"]["hardware"] == "generic"
    entry = data["models"]["tiny.pt"]
    assert entry["input_shape"] == [2, 8]
    # 15% headroom, rounded up readably: 840 * 1.15 = 966 -> "970".
    assert entry["flops_max"] == "970"
    assert entry["macs_max"] == "450"  # 384 * 1.15 = 441.6
    assert entry["params_max"] == "250"  # 212 * 1.15 = 243.8
    assert "compute_bound_min" not in entry  # nothing is compute-bound: no floor to keep
    memory = units.parse(entry["memory_max"], "bytes")
    peak = tiny_profile.peak_memory_bytes
    assert peak * 1.15 <= memory <= peak * 1.15 * 1.05  # rounding adds at most 5%
    assert "# measured: 840 FLOPs, 384 MACs, 212 params" in path.read_text()

    # Every key is one the plugin knows, and today's profile passes it.
    model_keys = {k: v for k, v in entry.items() if k not in budgets.MODEL_KEYS}
    budget = budgets.build(model_keys, "tiny.toml", budgets.build(data["defaults"], "defaults"))
    assert [f for f in budgets.check(tiny_profile, budget) if f.severity == "fail"] == []

    again = run_cli("init", "tiny.pt", *TINY_ARGS, "-o", "budgets/tiny.toml", cwd=work)
    assert_user_error(again, "already budgets tiny.pt", "--force")
    assert "loading" not in again.stderr

    # --force replaces that model's table and keeps the rest of the file, comments included.
    path.write_text(path.read_text() + '\n[models.other]\nflops_max = "1G"  # keep me\n')
    forced = run_cli(
        "init",
        "tiny.pt",
        *TINY_ARGS,
        "-o",
        "budgets/tiny.toml",
        "--force",
        "--headroom",
        "50%",
        cwd=work,
    )
    assert_ok(forced)
    text = path.read_text()
    data = tomllib.loads(text)
    assert data["models"]["tiny.pt"]["flops_max"] == "1.26k"  # 840 * 1.5
    assert data["models"]["other"] == {"flops_max": "1G"}
    assert "# keep me" in text


def test_budget_values_round_up_readably():
    from pytest_graphbudget.cli import budget_value
    from pytest_graphbudget.units import parse

    cases = {
        3_642_974_696 * 1.1: "4.1G",
        1_814_073_344 * 1.1: "2G",
        11_689_512 * 1.1: "12.9M",
        120_000_000: "120M",
        999.5: "1k",
        924: "930",
        0.5: "0.5",
    }
    for value, text in cases.items():
        assert budget_value(value) == text
        assert value <= parse(text, "count") <= value * 1.05
    assert budget_value(128_900_000, "B") == "129MB"
    assert parse(budget_value(128_900_000, "B"), "bytes") >= 128_900_000


# ---------------------------------------------------------------------------------------------
# Bad input: models that are not models


def test_bad_model_files_are_one_line_errors(work):
    garbage = run_cli("profile", "garbage.pt", "--input-shape", "1,8", cwd=work)
    assert "garbage.pt" in assert_user_error(garbage)
    assert_user_error(
        run_cli("profile", "weights.pt", "--input-shape", "1,8", cwd=work),
        "weights.pt holds a state dict",
    )
    assert_user_error(
        run_cli("profile", "tiny.pt", "--input-shape", "2,8", cwd=work),
        "tiny.pt is a full pickle",
        "--trust-pickle",
    )
    assert_user_error(
        run_cli("profile", "missing.pt", cwd=work), "missing.pt: no such file or directory"
    )


def test_unknown_model_names_the_closest(tmp_path):
    result = run_cli("profile", "resnet181", cwd=tmp_path)
    line = assert_user_error(result, "unknown model 'resnet181'", "did you mean")
    assert "resnet18" in line


# ---------------------------------------------------------------------------------------------
# list


@pytest.fixture
def test_family():
    """A model family of two, ``tiny-ok`` and ``tiny-broken`` (its forward raises), added to
    the zoo through the loader hook as an installed package would, and removed after."""
    import torch
    from torch import nn

    from pytest_graphbudget import zoo
    from pytest_graphbudget.case import ModelCase
    from pytest_graphbudget.hookspecs import hookimpl
    from pytest_graphbudget.zoo.base import ModelLoader

    class Broken(nn.Module):
        def forward(self, x):
            raise ValueError("this model is broken")

    class TestLoader(ModelLoader):
        family = "testfamily"

        def names(self):
            return ["tiny-ok", "tiny-broken"]

        def load(self, name, options):
            model = nn.Linear(8, 4) if name == "tiny-ok" else Broken()
            return ModelCase(model, (torch.ones(2, 8),), name=name)

    class Plugin:
        @hookimpl
        def graphbudget_model_loaders(self):
            return [TestLoader()]

    plugin = Plugin()
    zoo.plugin_manager().register(plugin)
    yield
    zoo.plugin_manager().unregister(plugin)


def test_list_check_reports_the_tier_and_fails_on_a_broken_model(tmp_path, test_family):
    result = run_cli("list", "--check", "--family", "testfamily", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    # Linear(8, 4) at batch 2: MACs 64, FLOPs 2*64 + bias 8 = 136.
    assert re.match(r"tiny-ok\s+testfamily\s+ok\s+fx\s+136\s+36\b", lines["tiny-ok"])
    assert re.match(r"tiny-broken\s+testfamily\s+FAILED", lines["tiny-broken"])
    assert "this model is broken" in lines["tiny-broken"]
    assert "1 of 2 models profiled" in result.stdout
    assert "FAILED: 1 of 2 models failed to profile" in result.stderr
    assert "[2/2] checking" in result.stderr

    ok = run_cli("list", "--check", "tiny-ok", "--format", "json", cwd=tmp_path)
    assert_ok(ok)
    (record,) = json.loads(ok.stdout)
    assert record["model"] == "tiny-ok" and record["status"] == "ok"
    assert (record["tier"], record["flops"], record["params"]) == ("fx", 136, 36)

    broken = run_cli("profile", "tiny-broken", cwd=tmp_path)
    assert_user_error(broken, "the model's forward raised ValueError: this model is broken")


def test_list_by_family_in_every_format(tmp_path):
    result = run_cli("list", "--format", "json", cwd=tmp_path)
    assert_ok(result)
    families = json.loads(result.stdout)
    assert {"torchvision", "huggingface", "ultralytics"} <= set(families)
    assert {"resnet18", "vit_b_16"} <= set(families["torchvision"])
    assert {"bert-base-uncased", "gpt2", "t5-small"} <= set(families["huggingface"])
    assert len(families["ultralytics"]) == 25  # v5u, v8, 11, 12, 26 in sizes n to x
    assert "collecting model names" in result.stderr

    table = run_cli("list", "resnet18", "yolov8*", "bert-base", cwd=tmp_path)
    assert_ok(table)
    out = table.stdout
    assert "ultralytics (5)" in out and "yolov8n" in out and "yolov8x" in out
    assert "torchvision (1)" in out  # an exact name means that model only
    assert "quantized_resnet18" not in out
    assert "bert-base-uncased" in out and "bert-base-cased" in out

    md = run_cli("list", "--family", "ultralytics", "--format", "markdown", cwd=tmp_path)
    assert_ok(md)
    assert md.stdout.startswith("### ultralytics (25)") and "`yolo11n`" in md.stdout
    assert "huggingface" not in md.stdout

    rows = run_cli("list", "--family", "huggingface", "--format", "csv", cwd=tmp_path)
    assert_ok(rows)
    parsed = list(csv.DictReader(io.StringIO(rows.stdout)))
    assert {"family": "huggingface", "model": "gpt2"} in parsed
    assert {r["family"] for r in parsed} == {"huggingface"}

    assert_user_error(run_cli("list", "--family", "nope", cwd=tmp_path), "unknown family nope")
    assert_user_error(
        run_cli("list", "--family", "ultralytics", "zzzz", cwd=tmp_path), "no model matches zzzz"
    )


# ---------------------------------------------------------------------------------------------
# Missing Graphviz


def test_missing_dot_is_one_line_before_profiling(work, tmp_path):
    empty = tmp_path / "empty-path"
    empty.mkdir()
    result = run_cli(
        "profile",
        "tiny.pt",
        *TINY_ARGS,
        "--visualize",
        "tiny.png",
        cwd=work,
        env={"PATH": str(empty)},
    )
    assert_user_error(result, "needs Graphviz's `dot`", "write a .dot file instead")
    assert "loading" not in result.stderr


# ---------------------------------------------------------------------------------------------
# The examples of profile_graph.py and graph_explorer.py, as written


@pytest.fixture(scope="module")
def built() -> dict:
    """Models loaded and profiled by the example commands of this module, by their options."""
    return {}


@pytest.fixture
def once(built, monkeypatch):
    """Commands that name the same model with the same options share one load and one profile
    (BERT at its default size is both explored and drawn); each command still parses its
    arguments, resolves its hardware and renders its own view."""
    from pytest_graphbudget.cli import loading

    load, price = loading.load_case, loading.profile_case

    def load_case(name, args, console):
        key = ("case", name, repr(sorted(loading.zoo_options(args).items())))
        if key not in built:
            built[key] = load(name, args, console)
        return built[key]

    def profile_case(case, hardware, console, how=None):
        key = ("profile", id(case), hardware.name, repr(sorted((how or {}).items())))
        if key not in built:
            built[key] = price(case, hardware, console, how)
        return built[key]

    monkeypatch.setattr(loading, "load_case", load_case)
    monkeypatch.setattr(loading, "profile_case", profile_case)


BERT_HIDDEN, BERT_FF, BERT_LAYERS = 768, 3072, 12


def bert_base_macs(seq: int) -> int:
    """Closed form: Q, K, V, output projections, feed-forward, QK^T and AV, pooler."""
    h, f = BERT_HIDDEN, BERT_FF
    per_layer = 4 * seq * h * h + 2 * seq * h * f + 2 * seq * seq * h
    return BERT_LAYERS * per_layer + h * h


@pytest.mark.slow
def test_example_profile_bert_seq_len_256(tmp_path):
    result = run_cli("profile", "bert-base-uncased", "--seq-len", "256", cwd=tmp_path)
    assert_ok(result)
    out = result.stdout
    assert "input_ids 1x256 int64" in out and "attention_mask 1x256 int64" in out
    assert summary_int(out, "params") == 109_482_240
    assert abs(summary_int(out, "MACs") - bert_base_macs(256)) <= 0.005 * bert_base_macs(256)
    assert "eager trace" in out
    assert "encoder.layer.11.attention.self.query" in out
    assert re.search(r"^\s+attention\s+12\s", out, re.MULTILINE)  # op types: 12 attention ops


@pytest.mark.slow
def test_profile_batch_and_hardware(tmp_path):
    result = run_cli(
        "profile",
        "resnet18",
        "--batch",
        "2",
        "--hardware",
        "a100",
        "--format",
        "json",
        cwd=tmp_path,
    )
    assert_ok(result)
    data = json.loads(result.stdout)
    assert data["inputs"] == [{"name": "x", "shape": [2, 3, 224, 224], "dtype": "float32"}]
    assert abs(data["totals"]["macs"] - 2 * 1.814e9) <= 0.005 * 2 * 1.814e9
    data["hardware"].pop("pricing")
    assert data["hardware"] == {  # NVIDIA's A100 datasheet: 19.5 TFLOP/s float32, 2,039 GB/s
        "name": "a100",
        "ridge_point": pytest.approx(19.5e12 / 2039e9),
        "peak_flops_per_s": 19.5e12,
        "bandwidth_bytes_per_s": 2039e9,
    }


@pytest.mark.slow
def test_example_profile_distilbert_showshape(tmp_path):
    result = run_cli("profile", "distilbert-base-uncased", "--showshape", cwd=tmp_path)
    assert_ok(result)
    out = result.stdout
    assert summary_int(out, "params") == 66_362_880  # published
    assert "output shape" in out
    line = next(line for line in out.splitlines() if "transformer.layer.0.ffn.lin1 " in line)
    assert "[1, 128, 3072]" in line
    assert "Bottleneck mix on generic" in out


@pytest.mark.slow
def test_example_explore_bert_around_30(tmp_path, once):
    result = run_cli(
        "explore", "bert-base-uncased", "--around", "30", "--context", "20", cwd=tmp_path
    )
    assert_ok(result)
    out = result.stdout
    assert "showing nodes 10 to 50" in out
    numbers = [int(m) for m in re.findall(r"^(\d+)\. \[", out, re.MULTILINE)]
    assert numbers == list(range(10, 51))
    assert out.count(">> Subgraph #") == 41
    assert "Arithmetic Intensity:" in out and "Bottleneck: compute_bound" in out
    assert "module: encoder.layer.0.attention.self.query" in out  # the first Q projection
    assert "no subgraph" not in out  # every BERT node belongs to a kernel


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")
def test_example_profile_resnet18_visualize_svg(tmp_path):
    result = run_cli("profile", "resnet18", "--visualize", "resnet18.svg", cwd=tmp_path)
    assert_ok(result)
    # torchvision publishes 1.814 GMACs and 11,689,512 parameters for resnet18.
    assert abs(summary_int(result.stdout, "MACs") - 1.814e9) <= 0.005 * 1.814e9
    assert summary_int(result.stdout, "params") == 11_689_512
    svg = (tmp_path / "resnet18.svg").read_text()
    assert "<svg" in svg
    assert svg.count("conv+bn+relu") >= 8 and "layer4.1.conv2" in svg
    assert "input x" in svg and "1x3x224x224" in svg


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")
def test_example_profile_bert_visualize_svg_multi_input_dynamo_graph(tmp_path, once):
    result = run_cli("profile", "bert-base-uncased", "--visualize", "bert.svg", cwd=tmp_path)
    assert_ok(result)
    svg = (tmp_path / "bert.svg").read_text()
    assert "<svg" in svg
    # Multi-input Dynamo graph: every input read is drawn, and every kernel is a cluster.
    # transformers 4 drops the unpadded mask without an op reading it (5 casts it first)
    from conftest import transformers_major

    read = ("input_ids", "token_type_ids")
    for name in read if (transformers_major() or 5) < 5 else (*read, "attention_mask"):
        assert f"input {name}" in svg
    assert svg.count('class="cluster"') >= 100
    assert "encoder.layer.11.intermediate.dense" in svg


@pytest.mark.slow
def test_example_profile_yolov8n_pt_falls_back_to_its_yaml(tmp_path):
    assert not (tmp_path / "yolov8n.pt").exists()
    result = run_cli("profile", "yolov8n.pt", "--input-shape", "1,3,640,640", cwd=tmp_path)
    assert_ok(result)
    assert "note: yolov8n.pt not found; built from yolov8n.yaml" in result.stderr
    out = result.stdout
    assert out.startswith("yolov8n: eager trace")
    assert "x 1x3x640x640 float32" in out
    assert summary_int(out, "params") == 3_157_200  # ultralytics' YAML: YOLOv8n summary
    assert "model.22" in out and "Detect" in out


@pytest.mark.parametrize(
    "config",
    [
        {"model_type": "bert", "hidden_size": 16, "num_hidden_layers": 1,
         "num_attention_heads": 2, "intermediate_size": 32, "vocab_size": 64},
        # no AutoModel class: its modeling module is imported to find TrOCRForCausalLM
        {"model_type": "trocr", "d_model": 16, "decoder_layers": 1,
         "decoder_attention_heads": 2, "decoder_ffn_dim": 32, "vocab_size": 64},
    ],
    ids=lambda config: config["model_type"],
)  # fmt: skip
def test_a_hugging_face_model_profiles_without_torch_log_lines(config, tmp_path):
    """Building a transformers model imports its code, which imports torchao when installed
    (the ``quant`` extra); torchao's import makes torch log deprecation notes (``W1126 ...
    _pytree.py ... register_constant``). They speak to neither us nor the user: only our
    lines reach the terminal, in a fresh process where that import happens."""
    pytest.importorskip("transformers")
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    result = run_python(
        ["-m", "pytest_graphbudget.cli", "profile", str(folder), "-q"], cwd=tmp_path
    )
    assert_ok(result)
    assert "register_constant" not in result.stderr and "_pytree" not in result.stderr, (
        result.stderr
    )


def test_max_spread_reads_as_the_docs_write_it():
    """User trial: the docs write the calibration's spread as ±10%; ``--max-spread 10%`` was
    "invalid float value"."""
    from pytest_graphbudget.cli import build_parser

    for given in ("10", "10%", " 10% "):
        argv = ["hardware", "--calibrate", "--max-spread", given]
        assert build_parser().parse_args(argv).max_spread == 10.0


def test_list_counts_one_model_in_the_singular(capsys):
    """User trial: "1 models."."""
    from pytest_graphbudget import cli

    assert cli.main(["list", "wide_resnet101_2", "-q"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("1 model. Also:")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.ao.quantization's
def test_loading_a_quantized_pickle_keeps_torchs_warnings_back(tmp_path):
    """User trial: a ``quantize_dynamic`` model saved whole printed torch's TypedStorage and
    quantized-tensor deprecation warnings on stderr while it loaded, without ``-v``. A
    process of its own: pytest would catch the warnings of one run in this one."""
    import subprocess
    import sys

    import torch

    model = torch.nn.Sequential(torch.nn.Linear(64, 32))
    torch.save(torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}), tmp_path / "q.pt")
    argv = ["profile", "q.pt", "--input-shape", "4,64", "--trust-pickle"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest_graphbudget.cli", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
    assert "MACs" in done.stdout
