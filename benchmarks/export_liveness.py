"""Peak memory of exported graphs against the taped forward, across the zoo.

An exported graph records no frees: ``engine/liveness.py`` decides when each activation dies
from the code the export records (which statement bound it, which rebinds it, read with
``engine/rebinding.py``) and from what calls hold. The taped forward records eager's own
frees, so its activation peak is the reference. Two exports of each model are profiled:

- ``user``: ``torch.export.export`` as a user calls it (non-strict), which records only the
  ``forward`` methods' lines;
- ``ours``: the same with the helper functions of the model's files recorded too, as this
  project exports (``engine/helper_frames.py``; torch 2.13 and later).

Each column is the export's activation peak less the tape's, in bytes (0: equal). A negative
figure is the export under eager, the side a memory budget must not err on.

    python benchmarks/export_liveness.py                  # every model, writes the file
    python benchmarks/export_liveness.py --models swin_t,vit_b_16 --no-write
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import time
import warnings
from pathlib import Path

from notes import save_results  # benchmarks/notes.py

HERE = Path(__file__).resolve().parent

MODELS = (
    "alexnet densenet121 googlenet inception_v3 maxvit_t mnasnet0_5 mvit_v2_s regnet_y_400mf "
    "shufflenet_v2_x1_0 squeezenet1_0 swin_t swin_v2_t vgg11 wide_resnet50_2 r3d_18 resnet18 "
    "mobilenet_v3_small efficientnet_b0 convnext_tiny vit_b_16 lraspp_mobilenet_v3_large "
    "deeplabv3_mobilenet_v3_large albert-base-v2 bert-base-uncased distilbert-base-uncased "
    "roberta-base google/electra-small-discriminator microsoft/deberta-v3-small timm:resnet50 "
    "timm:vit_small_patch16_224 timm:convnext_tiny timm:efficientnet_b0 timm:caformer_s18 "
    "timm:coat_lite_mini timm:levit_128 timm:mobilevit_s timm:poolformerv2_s12 "
    "timm:swin_tiny_patch4_window7_224 timm:deit_tiny_patch16_224 timm:regnety_002 yolo11n "
    "yolov5nu timm:pvt_v2_b0 timm:twins_svt_small timm:selecsls42b timm:hrnet_w18_small "
    "timm:deit3_small_patch16_224 timm:edgenext_xx_small timm:mvitv2_tiny timm:tnt_s_patch16_224 "
    "timm:eva02_tiny_patch14_224 timm:crossvit_tiny_240 timm:ese_vovnet19b_dw timm:convit_tiny "
    "timm:csatv2 timm:nf_resnet26 raft_small timm:qwen3_vit_88m timm:pnasnet5large "
    "timm:nasnetalarge"
).split()
"""Models whose whole forward a non-strict export takes with the zoo's inputs (the causal
language models return a cache object export cannot flatten)."""


def measure(name: str) -> dict:
    """The tape's activation peak and each export's, for one zoo model."""
    import torch

    from pytest_graphbudget import profile_model
    from pytest_graphbudget.engine import helper_frames
    from pytest_graphbudget.zoo import resolve

    case = resolve(name)
    args, kwargs = tuple(case.inputs), dict(case.kwargs or {})
    row = {"tape": profile_model(case.model, args, kwargs, tier="eager").activation_peak_bytes}
    for column, frames in (("user", contextlib.nullcontext()), ("ours", None)):
        with frames or helper_frames.recorded(case.model):
            program = torch.export.export(case.model, args, kwargs, strict=False)
        row[column] = profile_model(program, args, kwargs).activation_peak_bytes
    return row


def render(rows: dict[str, dict], failed: dict[str, str], seconds: float) -> str:
    import torch

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(time.time() - seconds))
    lines = [
        "# Exported graphs' peak memory against the taped forward",
        "",
        f"Written by `benchmarks/export_liveness.py`, run started {started}; torch "
        f"{torch.__version__}, Python {platform.python_version()}. Each export's activation "
        "peak less the tape's, in bytes: `user` as `torch.export.export` records it "
        "(forward methods' lines only), `ours` with the model's helper functions' lines "
        "recorded too (`engine/helper_frames.py`). Negative: under eager.",
        "",
        "| model | tape peak | user | ours |",
        "| --- | --- | --- | --- |",
    ]
    for name, row in rows.items():
        user, ours = row["user"] - row["tape"], row["ours"] - row["tape"]
        lines.append(f"| {name} | {row['tape']:,} | {user:+,} | {ours:+,} |")
    equal = sum(1 for r in rows.values() if r["user"] == r["ours"] == r["tape"])
    under = [n for n, r in rows.items() if min(r["user"], r["ours"]) < r["tape"]]
    lines += [
        "",
        f"{equal} of {len(rows)} equal both ways; under in either: {', '.join(under) or 'none'}.",
    ]
    lines += [f"- {name} failed: {why}" for name, why in failed.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated zoo names (default: all)")
    parser.add_argument("--no-write", action="store_true", help="print, do not write the file")
    options = parser.parse_args()
    warnings.filterwarnings("ignore")
    names = options.models.split(",") if options.models else list(MODELS)
    rows, failed, start = {}, {}, time.perf_counter()
    for name in names:
        try:
            rows[name] = measure(name)
        except Exception as error:  # a row that says why, not a stopped sweep
            failed[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
            print(name, "failed:", failed[name], flush=True)
            continue
        print(name, rows[name], flush=True)
    text = render(rows, failed, time.perf_counter() - start)
    if options.no_write:
        print(text)
    else:
        save_results(HERE / "EXPORT_LIVENESS_RESULTS.md", text, partial=bool(options.models))


if __name__ == "__main__":
    main()
