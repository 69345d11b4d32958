"""Peak memory of bfloat16 and float16 models on the CPU, estimated against measured.

ATen picks a CPU kernel by dtype: bfloat16 convolutions and products run on oneDNN, float16
ones (on a CPU without FP16 instructions) on ATen's slow path, each with buffers of its own
(``costs/workspace.py``, ``costs/brgemm.py``). This sweep profiles torchvision nets built
without weights, cast with ``model.to(dtype)``, batch 2 at 128x128 (1 at 224x224 for the
transformers), eval under ``inference_mode`` and one training step (the sum of the outputs as
the loss, no optimizer), in a fresh subprocess per net and dtype, one torch thread. Measured:
weights, buffers and input, plus the step's peak above them
(``torch.profiler(profile_memory=True)``); estimated: ``Profile.peak_memory_bytes``.

    python benchmarks/peak_half.py                  # every net, writes PEAK_HALF_RESULTS.md
    python benchmarks/peak_half.py --models resnet18 --dtypes bfloat16
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from notes import cpu_kernels, save_results  # benchmarks/notes.py
from peak import nbytes, step_peak  # benchmarks/peak.py

HERE = Path(__file__).resolve().parent
MODELS = (
    "resnet18 mobilenet_v3_small efficientnet_b0 regnet_y_400mf convnext_tiny resnext50_32x4d "
    "shufflenet_v2_x0_5 densenet121 squeezenet1_0 mnasnet0_5 vit_b_16 swin_t maxvit_t"
).split()
DTYPES = ("bfloat16", "float16")
LARGE = ("vit_", "swin_", "maxvit_")
"""Nets built for 224x224 images: profiled at it, batch 1."""


def measure(name: str, dtype_name: str) -> dict:
    """Estimate and measure eval and one training step of ``name`` in ``dtype_name``."""
    import torch
    import torchvision
    from torch.profiler import ProfilerActivity, profile

    from pytest_graphbudget import profile_model

    dtype = getattr(torch, dtype_name)
    shape = (1, 3, 224, 224) if name.startswith(LARGE) else (2, 3, 128, 128)
    found = {"model": name, "dtype": dtype_name}
    for step in ("eval", "train"):
        torch.manual_seed(0)
        model = torchvision.models.get_model(name, weights=None).to(dtype)
        x = torch.randn(*shape, dtype=dtype)
        if step == "eval":
            estimated = profile_model(model.eval(), x).peak_memory_bytes
        else:
            estimated = profile_model(model, x, mode="train").peak_memory_bytes
            model.train()

        held = _run(model, x, step)  # lazy state and oneDNN's caches, as in every later step
        model.zero_grad(set_to_none=True)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            held = _run(model, x, step)  # noqa: F841  (the output is held, as the estimate holds it)
        before = nbytes([*model.parameters(), *model.buffers(), x])
        found[step] = {"estimated": estimated, "measured": before + step_peak(prof)}
    return found


def _run(model, x, step: str):
    """One eval forward under ``inference_mode`` (its output returned, to be held), or one
    training step of the sum of the outputs."""
    import torch

    if step == "eval":
        with torch.inference_mode():
            return model(x)
    model(x).sum().backward()
    return None


def spawn(name: str, dtype_name: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE.parent) + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, __file__, "--worker", name, dtype_name]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"model": name, "dtype": dtype_name, "error": tail}
    return json.loads(lines[-1])


def table(rows: list[dict]) -> str:
    lines = [
        "# Peak memory in bfloat16 and float16 on the CPU, estimated against measured",
        "",
        f"One run of `python benchmarks/peak_half.py` on {platform.machine()} "
        f"({os.cpu_count()} cores, {cpu_kernels()}), one torch thread: torchvision nets built "
        "without weights and cast, batch 2 at 128x128 (the transformers: 1 at 224x224), eval "
        "and one training step of the sum of the outputs. Measured: weights, buffers and the "
        "input, plus the step's peak above them (`torch.profiler(profile_memory=True)`); "
        "estimated: `Profile.peak_memory_bytes`.",
        "",
        "| net | dtype | eval estimated | eval measured | eval error | step estimated | "
        "step measured | step error |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    exact = total = 0
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['dtype']} | {r['error'][:80]} | | | | | |")
            continue
        cells = []
        for step in ("eval", "train"):
            est, real = r[step]["estimated"], r[step]["measured"]
            exact, total = exact + (est == real), total + 1
            cells.append(f"{est:,} | {real:,} | {est / real - 1:+.2%}")
        lines.append(f"| {r['model']} | {r['dtype']} | {' | '.join(cells)} |")
    lines += ["", f"{exact} of {total} figures exact to the byte.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "DTYPE"))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--output", help="where to write the table (default: PEAK_HALF_RESULTS)")
    args = parser.parse_args()
    if args.worker:
        import torch

        torch.set_num_threads(1)  # oneDNN's buffers are per thread
        print(json.dumps(measure(*args.worker)))
        return
    rows = []
    for name in args.models.split(","):
        for dtype_name in args.dtypes.split(","):
            rows.append(spawn(name, dtype_name))
            print(json.dumps(rows[-1]), flush=True)
    partial = args.models != ",".join(MODELS) or args.dtypes != ",".join(DTYPES)
    output = Path(args.output or HERE / "PEAK_HALF_RESULTS.md")
    save_results(output, table(rows), partial=partial, chosen=args.output is not None)


if __name__ == "__main__":
    main()
