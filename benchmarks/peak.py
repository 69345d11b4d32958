"""Estimated against measured peak memory, one real CPU step per model and step kind.

For each model of the sample (the zoo's families, batch 1 and the inputs ``zoo.resolve`` gives,
plus a Conv2d/GroupNorm/ConvTranspose2d decoder, a Conv2d/BatchNorm/ConvTranspose2d
autoencoder at 4x3x128x128 and a 2-layer bidirectional LSTM (128 -> 256) at 16x50x128 built
here), in a fresh subprocess per model:

- ``eval``: one forward under ``torch.inference_mode()``, against ``profile_model(case)``;
- ``train``, ``sgd``, ``adam``: one training step (the forward, the sum of the outputs as the
  loss, ``backward()`` and, for ``sgd``/``adam``, torch's single-tensor optimizer step, grads set
  to None before it, the optimizer's state made by a first step outside the measurement, as in
  every step after the first), against ``profile_model(case, mode="train", optimizer=...)``.

The measured peak is the quantity ``Profile.peak_memory_bytes`` estimates: the bytes allocated
before the step (weights and buffers, the inputs, the optimizer's state), plus the most bytes the
step holds at once above them, the running sum of ``torch.profiler(profile_memory=True)``'s
allocation and free records in time order. One torch thread (``--threads``): oneDNN's scratch is
per thread. ``--explain`` prints, for each step, the ops running at the measured peak and the
largest allocations made inside ops that return nothing of that size (workspaces).

    python benchmarks/peak.py                       # every model, writes PEAK_RESULTS.md
    python benchmarks/peak.py --models resnet50 --explain
    python benchmarks/peak.py --models vit_b_16 --output /tmp/vit.md   # a partial run's table
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from notes import cpu_kernels, save_results  # benchmarks/notes.py

HERE = Path(__file__).resolve().parent
MODELS = (
    "resnet50",
    "mobilenet_v3_large",
    "vit_b_16",
    "efficientnet_b0",
    "bert-base-uncased",
    "gpt2",
    "yolov8n",
    "facebook/detr-resnet-50",
    "conv-decoder",
    "tconv-autoencoder",
    "lstm",
)
STEPS = ("eval", "train", "sgd", "adam")
SGD = {"lr": 0.01, "momentum": 0.9}  # engine/joint.py's SGD: momentum, no dampening


def decoder():
    """A small image decoder: convolutions, group norms and transposed convolutions."""
    import torch
    from torch import nn

    def up(cin: int, cout: int) -> list:
        return [
            nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1),
            nn.GroupNorm(8, cout),
            nn.SiLU(),
            nn.Conv2d(cout, cout, 3, padding=1),
            nn.GroupNorm(8, cout),
            nn.SiLU(),
        ]

    model = nn.Sequential(
        nn.Conv2d(16, 256, 3, padding=1),
        *up(256, 128),
        *up(128, 64),
        *up(64, 32),
        nn.Conv2d(32, 3, 3, padding=1),
    )
    return model.eval(), (torch.randn(1, 16, 32, 32),), {}


def autoencoder():
    """Strided convolutions down to 64 channels and transposed ones up to 3 (issue 35)."""
    import torch
    from torch import nn

    def step(cin: int, cout: int, up: bool = False) -> list:
        conv = (nn.ConvTranspose2d if up else nn.Conv2d)(cin, cout, 4, stride=2, padding=1)
        return [conv, nn.BatchNorm2d(cout), nn.ReLU()]

    model = nn.Sequential(
        *step(3, 32),
        *step(32, 64),
        *step(64, 128),
        *step(128, 64, up=True),
        *step(64, 32, up=True),
        nn.ConvTranspose2d(32, 3, 4, stride=2, padding=1),
    )
    return model.eval(), (torch.randn(4, 3, 128, 128),), {}


def build(name: str):
    import torch

    torch.manual_seed(0)
    if name == "conv-decoder":
        return decoder()
    if name == "tconv-autoencoder":
        return autoencoder()
    if name == "lstm":  # oneDNN's RNN: reordered weights and every step's gates (scratch.py)
        model = torch.nn.LSTM(128, 256, num_layers=2, batch_first=True, bidirectional=True)
        return model.eval(), (torch.randn(16, 50, 128),), {}
    from pytest_graphbudget.zoo import resolve

    case = resolve(name, batch=1)
    return case.model.eval(), case.inputs, case.kwargs


def step_peak(prof) -> int:
    """The most bytes held at once above what was allocated before the profiler started."""
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return peak


def nbytes(tensors) -> int:
    seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(seen.values())


def measure(name: str, step: str, explain: bool) -> dict:
    """Estimate and measure one step kind of one model, in this process."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.utils import _pytree as pytree

    from pytest_graphbudget import profile_model
    from pytest_graphbudget.engine.joint import default_loss

    model, args, kwargs = build(name)
    optimizer = {"sgd": "sgd", "adam": "adam"}.get(step)
    started = time.perf_counter()
    if step == "eval":
        est = profile_model(model, args, kwargs, name=name)
    else:
        est = profile_model(model, args, kwargs, name=name, mode="train", optimizer=optimizer)
    seconds = time.perf_counter() - started
    inputs = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    before = nbytes([*model.parameters(), *model.buffers(), *inputs])
    if step == "eval":

        def run() -> None:
            with torch.inference_mode():
                run.out = model(*args, **kwargs)  # the output is held, as the estimate holds it

        opt = None
    else:
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = None
        if optimizer == "adam":
            opt = torch.optim.Adam(params, foreach=False)
        elif optimizer == "sgd":
            opt = torch.optim.SGD(params, foreach=False, **SGD)

        def run() -> None:
            default_loss(model(*args, **kwargs)).backward()
            if opt is not None:
                opt.step()

        if opt is not None:  # the optimizer's state exists from the first step
            run()
        for p in params:
            p.grad = None
    state = 0
    if opt is not None:
        state = nbytes([t for s in opt.state.values() for t in s.values() if t.dim()])
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    measured = before + state + step_peak(prof)
    out = {
        "model": name,
        "step": step,
        "estimated": est.peak_memory_bytes,
        "measured": measured,
        "est_activation": est.activation_peak_bytes,
        "measured_activation": measured - before - state,
        "seconds": seconds,
    }
    if explain:
        out["explain"] = workspaces(prof)
    return out


def workspaces(prof, top: int = 12) -> list[str]:
    """The aten ops whose own allocations (less what they return) are largest: a workspace."""
    rows = []
    for event in prof.events():
        if not event.name.startswith("aten::"):
            continue
        rows.append((event.self_cpu_memory_usage, event.name, str(event.input_shapes)[:120]))
    rows.sort(reverse=True)
    return [f"{b / 1e6:8.2f} MB self {n} {s}" for b, n, s in rows[:top]]


def spawn(name: str, step: str, threads: int, explain: bool) -> dict:
    env = dict(os.environ, YOLO_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = str(HERE.parent) + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, __file__, "--worker", name, step, "--threads", str(threads)]
    done = subprocess.run(
        command + (["--explain"] if explain else []), capture_output=True, text=True, env=env
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"model": name, "step": step, "error": tail}
    return json.loads(lines[-1])


def table(rows: list[dict], load: tuple[float, float], threads: int) -> str:
    lines = [
        "# Peak memory: estimated against measured (issue 26)",
        "",
        f"One run of `python benchmarks/peak.py` on {platform.machine()} ({os.cpu_count()} "
        f"cores, {cpu_kernels()}), torch threads {threads}, load average {load[0]:.2f} "
        f"before and {load[1]:.2f} after. Batch 1, the inputs `zoo.resolve` gives (the "
        "decoder: 1x16x32x32; the autoencoder: 4x3x128x128). Measured: "
        "weights, buffers, inputs and optimizer state, plus the step's peak above them from "
        "`torch.profiler(profile_memory=True)`; estimated: `Profile.peak_memory_bytes`.",
        "",
        "| model | step | estimated MB | measured MB | error | within ±3% |",
        "| --- | --- | ---: | ---: | ---: | :---: |",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['step']} | | | {r['error'][:80]} | |")
            continue
        err = r["estimated"] / r["measured"] - 1
        mark = "yes" if abs(err) <= 0.03 else "**no**"
        lines.append(
            f"| {r['model']} | {r['step']} | {r['estimated'] / 1e6:.1f} | "
            f"{r['measured'] / 1e6:.1f} | {err:+.2%} | {mark} |"
        )
    ok = [r for r in rows if "error" not in r]
    hits = sum(abs(r["estimated"] / r["measured"] - 1) <= 0.03 for r in ok)
    lines += ["", f"{hits} of {len(ok)} steps within ±3%.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "STEP"))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--steps", default=",".join(STEPS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--output", help="where to write the table (default: PEAK_RESULTS.md)")
    args = parser.parse_args()
    if args.worker:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(measure(*args.worker, args.explain)))
        return
    load = os.getloadavg()[0]
    rows = []
    for name in args.models.split(","):
        for step in args.steps.split(","):
            row = spawn(name, step, args.threads, args.explain)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "explain"}), flush=True)
            for line in row.get("explain", []):
                print("   ", line, flush=True)
    text = table(rows, (load, os.getloadavg()[0]), args.threads)
    if args.explain:
        print(text)
        return
    partial = args.models != ",".join(MODELS) or args.steps != ",".join(STEPS)
    output = Path(args.output or HERE / "PEAK_RESULTS.md")
    save_results(output, text, partial=partial, chosen=args.output is not None)


if __name__ == "__main__":
    main()
