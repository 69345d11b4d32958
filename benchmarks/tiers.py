"""Issue 25's table: ``profile_model`` against one ``FlopCounterMode`` forward, per tier.

For each model: warm, both tools in one process, one call each first, then the median of 3
alternating pairs; cold, the median over ``--cold-runs`` (3) fresh processes per tool, taken
in alternation, of the first call of the tool in that process (model built and
imports done before the clock starts; the package byte-compiled first, as ``pip install`` leaves
it, so that a fresh process does not compile our modules from source where the environment
says ``PYTHONDONTWRITEBYTECODE``, as torch's are not). The tier that priced the model and its
MACs are shown beside the ratios, with the machine's load average when each model started.
Results go to ``benchmarks/TIERS_RESULTS.md``.

    python benchmarks/tiers.py                       # the issue's six models
    python benchmarks/tiers.py --models yolov8n,gpt2
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from notes import save_results  # benchmarks/notes.py

HERE = Path(__file__).resolve().parent
MODELS = (
    "resnet50",
    "vit_b_16",
    "bert-base-uncased",
    "gpt2",
    "yolov8n",
    "fasterrcnn_mobilenet_v3_large_320_fpn",
)


def _build(name: str):
    from pytest_graphbudget import zoo

    return zoo.resolve(name)


def _ours(case):
    from pytest_graphbudget import profile_model

    return profile_model(case.model, case.inputs, case.kwargs)


def _peer(case):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        case.model(*case.inputs, **case.kwargs)
    return counter.get_total_flops()


def _timed(call, case) -> tuple[float, object]:
    start = time.perf_counter()
    value = call(case)
    return time.perf_counter() - start, value


def worker(tool: str, name: str) -> dict:
    """One fresh process: the model built, the tool imported, then its first call timed."""
    case = _build(name)
    # The import lines a user writes, for each tool: the clock starts after them.
    from torch.utils.flop_counter import FlopCounterMode  # noqa: F401

    from pytest_graphbudget import profile_model  # noqa: F401

    seconds, value = _timed(_ours if tool == "ours" else _peer, case)
    if tool == "ours":
        return {"seconds": seconds, "tier": value.trace.method, "macs": value.macs}
    return {"seconds": seconds}


def warm(name: str) -> dict:
    case = _build(name)
    _ours(case), _peer(case)
    ours, peer = [], []
    for _ in range(3):
        ours.append(_timed(_ours, case)[0])
        peer.append(_timed(_peer, case)[0])
    return {"ours": statistics.median(ours), "peer": statistics.median(peer)}


def cold(tool: str, name: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", tool, name],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "YOLO_OFFLINE": "1", "HF_HUB_OFFLINE": "1"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--cold-runs", type=int, default=3, help="fresh processes per tool")
    parser.add_argument("--worker", nargs=2, metavar=("TOOL", "MODEL"))
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return 0
    compileall.compile_dir(str(HERE.parent / "pytest_graphbudget"), quiet=1)
    rows = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for name in args.models.split(","):
        load = os.getloadavg()[0]
        runs = [(cold("ours", name), cold("flopcounter", name)) for _ in range(args.cold_runs)]
        ours = {**runs[0][0], "seconds": statistics.median(o["seconds"] for o, _ in runs)}
        peer = {"seconds": statistics.median(p["seconds"] for _, p in runs)}
        hot = warm(name)
        rows.append(
            f"| {name} | {ours['tier']} | {ours['macs'] / 1e9:.3f} G | "
            f"{hot['ours']:.2f} s / {hot['peer']:.2f} s = {hot['ours'] / hot['peer']:.2f}x | "
            f"{ours['seconds']:.2f} s / {peer['seconds']:.2f} s = "
            f"{ours['seconds'] / peer['seconds']:.2f}x | {load:.2f} |"
        )
        print(rows[-1], flush=True)
    text = "\n".join(
        [
            "# Tiers against FlopCounterMode (issue 25)",
            "",
            f"Written by `benchmarks/tiers.py`, run started {started}; "
            f"{os.cpu_count()} logical CPUs, shared. Warm: median of 3 alternating pairs after "
            "one call of each; cold: the median over "
            f"{args.cold_runs} fresh processes per tool, taken in alternation, of the first "
            "call in the process (model built, imports done, our package byte-compiled as an "
            "install leaves it). Ratios are ours / FlopCounterMode.",
            "",
            "| model | tier | MACs | warm | cold | 1-min load at start |",
            "| --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
        ]
    )
    save_results(HERE / "TIERS_RESULTS.md", text, partial=args.models != ",".join(MODELS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
