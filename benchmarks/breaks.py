"""The graph-break tier on the detectors: its time next to FlopCounterMode and bare torch.compile.

TorchVision's detectors branch on tensor values (NMS, per-image loops), so neither ``fx`` nor
``torch.export`` captures them and ``profile_model`` falls through to ``dynamo-breaks``. For each
detector this measures, in a fresh subprocess per tool (so one tool's caches never warm
another's):

- ``ours``: ``profile_model(case)``, everything included (the ``fx`` and ``export`` tries that
  fail, Dynamo's capture, the cost pass, the partition);
- ``flopcounter``: one forward under ``torch.utils.flop_counter.FlopCounterMode``;
- ``torch.compile``: the first call of ``torch.compile(model, backend="eager")``: Dynamo's
  capture with graph breaks and an eager run, the part of our tier that is not ours;
- ``forward``: one plain forward, for scale.

MACs of ours and FlopCounterMode's (FLOPs / 2) are printed side by side. Times are medians of
``--repeat`` fresh processes, wall clock, on whatever machine runs it (the load is recorded).

    python benchmarks/breaks.py                         # the two smallest detectors
    python benchmarks/breaks.py --models ssd300_vgg16 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_MODELS = ("fasterrcnn_mobilenet_v3_large_320_fpn", "ssdlite320_mobilenet_v3_large")
TOOLS = ("ours", "flopcounter", "torch.compile", "forward")


def worker(tool: str, name: str) -> dict:
    """One measurement in this process: build the zoo case (not timed), then time ``tool``."""
    import torch

    from pytest_graphbudget import profile_model
    from pytest_graphbudget.zoo import resolve

    case = resolve(name)
    model, args = case.model.eval(), case.inputs
    out: dict = {"tool": tool, "model": name}
    start = time.perf_counter()
    if tool == "ours":
        prof = profile_model(case)
        out.update(macs=prof.macs, tier=prof.trace.method, graphs=prof.trace.graphs)
        out["breaks"] = len(prof.trace.breaks)
        out["unsupported"] = dict(prof.coverage.unsupported_ops)
    elif tool == "flopcounter":
        from torch.utils.flop_counter import FlopCounterMode

        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(*args)
        out["macs"] = counter.get_total_flops() // 2
    elif tool == "torch.compile":
        with torch.no_grad():
            torch.compile(model, backend="eager", fullgraph=False)(*args)
    elif tool == "forward":
        with torch.no_grad():
            model(*args)
    out["seconds"] = time.perf_counter() - start
    return out


def spawn(tool: str, name: str) -> dict:
    env = dict(os.environ, YOLO_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = str(HERE.parent) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, __file__, "--worker", tool, name],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"tool": tool, "model": name, "error": tail}
    return json.loads(lines[-1])


def report(rows: dict[str, dict[str, list[dict]]], load: tuple[float, float]) -> str:
    lines = [
        "# Graph-break tier on the detectors",
        "",
        "`python benchmarks/breaks.py` (generated). Medians of fresh processes, wall clock; "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {load[0]:.1f} before and {load[1]:.1f} after (a shared machine: "
        "compare the columns of one row, not rows of two runs).",
        "",
        "| model | tier | graphs | breaks | MACs ours | MACs FlopCounterMode | ours s | "
        "FlopCounterMode s | torch.compile s | forward s | ours / torch.compile |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, by_tool in rows.items():
        med = {
            tool: statistics.median(r["seconds"] for r in runs) if runs else None
            for tool, runs in by_tool.items()
        }
        ours = (by_tool.get("ours") or [{}])[0]
        ref = (by_tool.get("flopcounter") or [{}])[0]
        ratio = (
            f"{med['ours'] / med['torch.compile']:.2f}x"
            if med.get("ours") and med.get("torch.compile")
            else ""
        )
        cells = [
            f"`{name}`",
            ours.get("tier", "failed"),
            str(ours.get("graphs", "")),
            str(ours.get("breaks", "")),
            f"{ours.get('macs', 0) / 1e9:.4f} G",
            f"{ref.get('macs', 0) / 1e9:.4f} G",
            *(f"{med[t]:.2f}" if med.get(t) is not None else "-" for t in TOOLS),
            ratio,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated zoo names (default: two detectors)")
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per measurement")
    parser.add_argument("--output", type=Path, default=HERE / "BREAKS_RESULTS.md")
    parser.add_argument("--worker", nargs=2, metavar=("TOOL", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return 0
    models = args.models.split(",") if args.models else list(DEFAULT_MODELS)
    before = os.getloadavg()[0]
    rows: dict[str, dict[str, list[dict]]] = {}
    for name in models:
        rows[name] = {tool: [] for tool in TOOLS}
        for _ in range(args.repeat):
            for tool in TOOLS:
                result = spawn(tool, name)
                print(json.dumps(result), file=sys.stderr)
                if "error" not in result:
                    rows[name][tool].append(result)
    text = report(rows, (before, os.getloadavg()[0]))
    args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
