"""One truth across tiers, wide: one model of every timm model file and torchvision's zoo,
each profiled through FX (``tier="fx"``) and the taped forward (``tier="eager"``).

``tests/engine/test_tiers_agree.py`` holds a sample to identical figures on every run; this
sweep reaches the families the sample does not, where a formula fed other arguments, an op one
tier never sees, or a kernel grouped otherwise shows up as a figure that differs. Each model
runs in a fresh process (one that crashes or hangs costs its row). A model FX cannot trace is
listed with FX's reason: the tape alone prices it. Results go to
``benchmarks/TIERS_AGREE_RESULTS.md`` (notes by hand at its end are kept).

    python benchmarks/tiers_agree.py                        # every model (about 20 minutes)
    python benchmarks/tiers_agree.py --models timm:levit_128,tv:mvit_v1_b
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

from notes import save_results  # benchmarks/notes.py

HERE = Path(__file__).resolve().parent
DERIVED = ("arithmetic_intensity", "est_latency_s")
"""Totals that are functions of the others (and the hardware): not compared."""
TORCHVISION = (
    "alexnet convnext_tiny densenet121 efficientnet_b1 efficientnet_v2_s googlenet inception_v3 "
    "mnasnet0_5 mobilenet_v2 mobilenet_v3_large regnet_x_800mf regnet_y_400mf resnext50_32x4d "
    "shufflenet_v2_x1_0 squeezenet1_1 swin_v2_t vgg11_bn vit_b_32 wide_resnet50_2 "
    "deeplabv3_mobilenet_v3_large fcn_resnet50 lraspp_mobilenet_v3_large r3d_18 mc3_18 "
    "r2plus1d_18 s3d swin3d_t mvit_v1_b mvit_v2_s"
).split()
SMALL = ("test_", "tiny", "nano", "pico", "femto", "small", "_s", "t0", "b0", "xxs")
TOO_LARGE = ("deepseek_vit", "nasnet", "pnasnet", "mobilenetv5", "gemma4_vit")
"""timm files whose smallest model takes minutes a tier here (or more memory than a runner)."""


def timm_models() -> list[str]:
    """One model of each timm model file: the shortest name among its small ones."""
    import timm
    from timm.models import _registry

    files: dict[str, list[str]] = {}
    for name in timm.list_models():
        files.setdefault(_registry._model_to_module[name], []).append(name)
    chosen = []
    for file, names in sorted(files.items()):
        small = [n for n in names if any(mark in n for mark in SMALL)]
        if not file.startswith(TOO_LARGE):
            chosen.append("timm:" + sorted(small or names, key=len)[0])
    return chosen


def build(name: str):
    """The model and its one input, built with seed 0 as the zoo would."""
    import torch

    torch.manual_seed(0)
    family, _, model_name = name.partition(":")
    if family == "timm":
        import timm

        model = timm.create_model(model_name, pretrained=False).eval()
        return model, torch.rand(1, *model.pretrained_cfg["input_size"])
    import torchvision

    backbone = (
        {"weights_backbone": None} if model_name.startswith(("deeplab", "fcn", "lraspp")) else {}
    )
    model = torchvision.models.get_model(model_name, weights=None, **backbone).eval()
    video = model_name in ("r3d_18", "mc3_18", "r2plus1d_18", "swin3d_t")
    large = model_name.startswith("mvit") or model_name == "s3d"
    side = 299 if model_name == "inception_v3" else 112 if video else 224
    shape = (1, 3, 16, side, side) if video or large else (1, 3, side, side)
    return model, torch.rand(shape)


def worker(name: str) -> dict:
    """Both tiers' figures for one model, or FX's reason for not tracing it."""
    from pytest_graphbudget import profile_model

    model, x = build(name)
    row = {}
    for tier in ("fx", "eager"):
        try:
            profile = profile_model(model, (x,), tier=tier)
        except Exception as error:
            if tier == "eager":
                raise
            return {"fx_failed": str(error).splitlines()[0][:160]}
        totals = profile.to_dict()["totals"]
        figures = {k: v for k, v in totals.items() if k not in DERIVED}
        row[tier] = figures | {"kernels": len(profile.subgraphs)}
    return row


def render(rows: dict[str, dict], failed: dict[str, str], seconds: float) -> str:
    import torch

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(time.time() - seconds))
    traced = {n: r for n, r in rows.items() if "fx" in r}
    apart = {n: r for n, r in traced.items() if r["fx"] != r["eager"]}
    lines = [
        "# One truth across tiers: FX against the taped forward",
        "",
        f"Written by `benchmarks/tiers_agree.py`, run started {started}; torch "
        f"{torch.__version__}, Python {platform.python_version()}. One model of each timm "
        'model file and torchvision\'s zoo, batch 1, profiled with `tier="fx"` and '
        f'`tier="eager"`: every total a budget can be written on, and the kernel count. '
        f"**{len(traced) - len(apart)} of {len(traced)} models FX traces agree on every "
        f"figure**; {len(rows) - len(traced)} more are priced by the tape alone.",
        "",
        "| model | figures apart (FX / tape) |",
        "| --- | --- |",
    ]
    for name, row in apart.items():
        differ = [
            f"{k} {row['fx'][k]:,} / {row['eager'][k]:,}"
            for k in row["fx"]
            if row["fx"][k] != row["eager"][k]
        ]
        lines.append(f"| {name} | {'; '.join(differ)} |")
    if not apart:
        lines.append("| (none) | |")
    lines += ["", "Agree: " + ", ".join(n for n in traced if n not in apart) + "."]
    lines += ["", "FX cannot trace (the tape prices them):", ""]
    lines += [f"- {n}: {r['fx_failed']}" for n, r in rows.items() if "fx_failed" in r]
    lines += [f"- {name} failed: {why}" for name, why in failed.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated timm:NAME or tv:NAME (default: all)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        import warnings

        warnings.filterwarnings("ignore")
        print(json.dumps(worker(options.worker)))
        return
    names = (
        options.models.split(",")
        if options.models
        else [*timm_models(), *(f"tv:{n}" for n in TORCHVISION)]
    )
    rows, failed, start = {}, {}, time.perf_counter()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for name in names:
        command = [sys.executable, __file__, "--worker", name]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
        except subprocess.TimeoutExpired:
            done = None
        out = done.stdout.strip().splitlines() if done else []
        if not done or done.returncode or not out:
            why = (done.stderr.strip().splitlines() or ["no output"])[-1] if done else "timed out"
            failed[name] = why[:200]
            print(name, "failed:", failed[name], flush=True)
            continue
        row = rows[name] = json.loads(out[-1])
        verdict = (
            "FX cannot trace"
            if "fx" not in row
            else "equal"
            if row["fx"] == row["eager"]
            else "APART"
        )
        print(name, verdict, flush=True)
    text = render(rows, failed, time.perf_counter() - start)
    save_results(HERE / "TIERS_AGREE_RESULTS.md", text, partial=bool(options.models))


if __name__ == "__main__":
    main()
