"""Training-step peaks of convolutional nets, estimated against measured, to the byte.

``peak.py`` measures a few zoo models at batch 1; this sweep covers the convolution kernels
``costs/workspace.py`` models (strided, grouped, depthwise, channels-last, the im2col weight
gradients) and the norms and resizes of ``costs/scratch.py`` as the nets people train use them
(a ViT and an MLP-Mixer too, whose patch embedding is a 16x16 convolution): timm and torchvision
models built without weights, batch 2 at 128x128, one training step
(forward, the sum of the outputs as the loss, ``backward()``), in a fresh subprocess per model,
one torch thread. Measured: the step's peak above what was allocated before it, the running sum
of ``torch.profiler(profile_memory=True)``'s records; estimated: ``activation_peak_bytes``.

    python benchmarks/peak_cnn.py                   # every net, writes PEAK_CNN_RESULTS.md
    python benchmarks/peak_cnn.py --models convnext_atto,tv:resnext50_32x4d
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from notes import save_results  # benchmarks/notes.py
from peak import step_peak  # benchmarks/peak.py

HERE = Path(__file__).resolve().parent
MODELS = (
    "convnext_atto convnextv2_atto edgenext_xx_small efficientnet_b0 mobilenetv3_small_100 "
    "resnet18 resnet50 regnety_002 regnetx_002 ghostnet_100 mobilevit_xxs mobilevitv2_050 "
    "rexnet_100 mixnet_s tinynet_a densenet121 inception_next_tiny poolformer_s12 "
    "convmixer_768_32 hrnet_w18_small fastvit_t8 repvit_m1 ese_vovnet19b_dw cspdarknet53 dla34 "
    "dpn68 tv:convnext_tiny tv:resnext50_32x4d tv:wide_resnet50_2 tv:regnet_x_400mf "
    "tv:mobilenet_v3_small tv:efficientnet_b0 tv:shufflenet_v2_x0_5 tv:squeezenet1_0 "
    "tv:googlenet tv:vgg11_bn tv:swin_t tv:mnasnet0_5 vit_tiny_patch16_224 mixer_s16_224"
).split()
SHAPE = (2, 3, 128, 128)
SIZED = ("vit_", "mixer_")
"""timm families built for one image size: built at ``SHAPE``'s."""


def build(name: str):
    """A net without weights: ``tv:NAME`` from torchvision, any other name from timm."""
    import torch

    torch.manual_seed(0)
    if name.startswith("tv:"):
        import torchvision

        return torchvision.models.get_model(name[3:], weights=None)
    import timm

    sized = {"img_size": SHAPE[-1]} if name.startswith(SIZED) else {}
    return timm.create_model(name, pretrained=False, **sized)


def measure(name: str) -> dict:
    """Estimate and measure one training step of ``name``, in this process."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from pytest_graphbudget import profile_model
    from pytest_graphbudget.engine.joint import default_loss

    model = build(name)
    x = torch.randn(*SHAPE)
    estimated = profile_model(model, x, mode="train").activation_peak_bytes
    model.train()

    def run() -> None:
        default_loss(model(x)).backward()

    run()  # lazy state and oneDNN's caches, as in every step after the first
    model.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    return {"model": name, "estimated": estimated, "measured": step_peak(prof)}


def spawn(name: str) -> dict:
    env = dict(
        os.environ, PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    command = [sys.executable, __file__, "--worker", name]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"model": name, "error": tail}
    return json.loads(lines[-1])


def table(rows: list[dict]) -> str:
    ok = [r for r in rows if "error" not in r]
    exact = sum(r["estimated"] == r["measured"] for r in ok)
    lines = [
        "# Training-step peaks of convolutional nets, estimated against measured",
        "",
        f"One run of `python benchmarks/peak_cnn.py` on {platform.machine()} "
        f"({os.cpu_count()} cores), one torch thread: each net built without weights, batch "
        f"{SHAPE[0]} at {SHAPE[2]}x{SHAPE[3]}, one step of the sum of its outputs. Measured: the "
        "step's peak above what was allocated before it (`torch.profiler(profile_memory=True)`); "
        "estimated: `Profile.activation_peak_bytes`. `tv:` names are torchvision's, the others "
        "timm's.",
        "",
        "| net | estimated bytes | measured bytes | difference | estimate / measured |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | | | {r['error'][:80]} | |")
            continue
        diff = r["estimated"] - r["measured"]
        lines.append(
            f"| {r['model']} | {r['estimated']:,} | {r['measured']:,} | {diff:+,} | "
            f"{r['estimated'] / r['measured']:.4f} |"
        )
    lines += ["", f"{exact} of {len(ok)} nets exact to the byte.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", metavar="MODEL")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--output", help="where to write the table (default: PEAK_CNN_RESULTS.md)")
    args = parser.parse_args()
    if args.worker:
        import torch

        torch.set_num_threads(1)
        print(json.dumps(measure(args.worker)))
        return
    rows = []
    for name in args.models.split(","):
        rows.append(spawn(name))
        print(json.dumps(rows[-1]), flush=True)
    text = table(rows)
    output = Path(args.output or HERE / "PEAK_CNN_RESULTS.md")
    partial = args.models != ",".join(MODELS)
    save_results(output, text, partial=partial, chosen=args.output is not None)


if __name__ == "__main__":
    main()
