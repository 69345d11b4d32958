"""One training step per benchmark model: ``profile_model(mode="train")`` next to FlopCounterMode.

For each model of ``run.py``'s list, built by ``run.build`` (the inputs of the forward tables), in
a fresh subprocess per tool (so one tool's caches never warm another's), built first (not timed):

- ``ours``: ``profile_model(case, mode="train")``: the joint graph of forward, loss (the sum of
  the outputs) and backward traced on fake tensors, priced, partitioned, with its liveness;
- ``flopcounter``: one real forward and ``loss.backward()`` under
  ``torch.utils.flop_counter.FlopCounterMode``, the same loss.

Both run with one torch intra-op thread (``--threads``): on a shared two-core machine, threads
waiting for each other slow a real step many times over, which would flatter our column. MACs
(FlopCounterMode: FLOPs / 2) are printed side by side. The section "Training step, issue 12" of
``RESULTS.md`` is replaced by this run's table.

    python benchmarks/train_step.py
    python benchmarks/train_step.py --models resnet18,bert-base --repeat 1
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

from notes import replace_section  # benchmarks/notes.py

HERE = Path(__file__).resolve().parent
MODELS = ("resnet18", "resnet50", "mobilenet_v2", "vit_b_16", "bert-base", "gpt2", "yolov8n")
TOOLS = ("ours", "flopcounter")
SECTION = "## Training step, issue 12"


def worker(tool: str, name: str, threads: int) -> dict:
    """One measurement in this process: build the zoo case (not timed), then time ``tool``."""
    import torch
    from run import build  # the benchmark models and inputs of RESULTS.md

    from pytest_graphbudget import profile_model
    from pytest_graphbudget.engine.joint import default_loss

    torch.set_num_threads(threads)
    case = build(name)
    out: dict = {"tool": tool, "model": name}
    start = time.perf_counter()
    if tool == "ours":
        prof = profile_model(case.model, case.args, case.kwargs, mode="train", name=name)
        out.update(macs=prof.macs, forward_macs=prof.phases["forward"]["macs"])
        out.update(peak_mb=prof.peak_memory_bytes / 2**20, nodes=prof.trace.nodes)
        out["unsupported"] = dict(prof.coverage.unsupported_ops)
    else:
        from torch.utils.flop_counter import FlopCounterMode

        case.model.train()
        with FlopCounterMode(display=False) as counter:
            default_loss(case.model(*case.args, **case.kwargs)).backward()
        out["macs"] = counter.get_total_flops() // 2
    out["seconds"] = time.perf_counter() - start
    return out


def spawn(tool: str, name: str, threads: int) -> dict:
    env = dict(os.environ, YOLO_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = str(HERE.parent) + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, __file__, "--worker", tool, name, "--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"tool": tool, "model": name, "error": tail}
    return json.loads(lines[-1])


def table(rows: dict[str, dict[str, list[dict]]], load: tuple[float, float], threads: int) -> str:
    lines = [
        SECTION,
        "",
        "`python benchmarks/train_step.py` (generated, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). One step: forward, the sum "
        "of the outputs as the loss, backward (no optimizer). Medians of fresh processes, wall "
        f"clock, {threads} torch thread(s); {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {load[0]:.1f} before and {load[1]:.1f} after (a shared machine: compare "
        "the columns of one row, not rows of two runs).",
        "",
        "| model | MACs ours | MACs FlopCounterMode | d | forward share | graph nodes | "
        "peak memory MB | ours s | FlopCounterMode s | ours / FlopCounterMode | unsupported |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, by_tool in rows.items():
        med = {
            t: statistics.median(r["seconds"] for r in runs) if runs else None
            for t, runs in by_tool.items()
        }
        ours = (by_tool["ours"] or [{}])[0]
        ref = (by_tool["flopcounter"] or [{}])[0]
        mine, theirs = ours.get("macs"), ref.get("macs")
        cells = [
            f"`{name}`",
            f"{mine / 1e9:.4f} G" if mine else "failed",
            f"{theirs / 1e9:.4f} G" if theirs else "failed",
            f"{(mine - theirs) / theirs:+.2%}" if mine and theirs else "-",
            f"{ours['forward_macs'] / mine:.2f}" if mine else "-",
            str(ours.get("nodes", "-")),
            f"{ours['peak_mb']:.0f}" if mine else "-",
            *(f"{med[t]:.2f}" if med.get(t) is not None else "-" for t in TOOLS),
            f"{med['ours'] / med['flopcounter']:.2f}x"
            if med["ours"] and med["flopcounter"]
            else "-",
            ", ".join(f"{k} x{v}" for k, v in ours.get("unsupported", {}).items()) or "none",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated zoo names (default: run.py's models)")
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per measurement")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--output", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument("--worker", nargs=2, metavar=("TOOL", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.threads)))
        return 0
    models = args.models.split(",") if args.models else list(MODELS)
    before = os.getloadavg()[0]
    rows: dict[str, dict[str, list[dict]]] = {}
    for name in models:
        rows[name] = {tool: [] for tool in TOOLS}
        for _ in range(args.repeat):
            for tool in TOOLS:
                result = spawn(tool, name, args.threads)
                print(json.dumps(result), file=sys.stderr)
                if "error" not in result:
                    rows[name][tool].append(result)
    text = table(rows, (before, os.getloadavg()[0]), args.threads)
    replace_section(args.output, SECTION, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
