"""GPU latency against timm's published inference tables: collect each model's ops once.

timm publishes measured inference throughput for about 1,600 models on the RTX 3090, 4090,
5090 and RTX Pro 6000 Max-Q (``benchmarks/data/timm-*.csv``, AMP float16, NCHW; eager and
``torch.compile``d, the ``-dynamo`` files). This script profiles each model of those tables on
the meta device in float16 and writes, per model, every op's kernel kind, FLOPs and bytes and
every fused group's (what eager and compiled execution price) to ``benchmarks/out/gpu_ops.jsonl``,
so that the fit (``benchmarks/gpu_fit.py``) reruns in seconds.

    .venv/bin/python benchmarks/gpu_tables.py [--limit N] [--only NAME ...] [--amp]

Figures are recorded at batch ``BATCH`` and scaled to each table's batch by the fit (FLOPs
and activation bytes grow with the batch, weights do not).
"""

from __future__ import annotations

import argparse
import csv
import json
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
OUT = HERE / "out" / "gpu_ops.jsonl"
OUT_AMP = HERE / "out" / "gpu_ops_amp.jsonl"
"""``--amp``: the same records, each model profiled as the tables ran it, float32 weights and
input under CUDA's autocast (``dtype="amp_float16"``, ``modes/amp.py``)."""
BATCH = 256
TIMEOUT_S = 120
TABLES = {
    # name: (eager file, compiled file or None)
    "rtx3090": ("timm-benchmark-infer-amp-nchw-pt240-cu124-rtx3090.csv", None),
    "rtx4090": (
        "timm-benchmark-infer-amp-nchw-pt291-cu128-4090.csv",
        "timm-benchmark-infer-amp-nchw-pt291-cu128-4090-dynamo.csv",
    ),
    "rtx5090": (
        "timm-benchmark-infer-amp-nchw-pt291-cu130-5090.csv",
        "timm-benchmark-infer-amp-nchw-pt291-cu130-5090-dynamo.csv",
    ),
    "rtx-pro-6000-maxq": (
        "timm-benchmark-infer-amp-nchw-pt291-cu130-pro6000maxq.csv",
        "timm-benchmark-infer-amp-nchw-pt291-cu130-pro6000maxq-dynamo.csv",
    ),
}


UNFUSED = {
    "timm-benchmark-infer-amp-nchw-pt240-cu124-rtx3090.csv",
    "timm-benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv",
    "timm-benchmark-infer-amp-nchw-pt240-cu124-rtx4090-dynamo.csv",
}
"""timm's tables made with torch 2.4 ran each model as built, train-time branches and all
(their GMACs: repvgg_a2 5.70, mobileone_s0 1.09); those of torch 2.9.1 ran them fused, as
``deployed`` does (5.12 and 0.28), and mobileone_s0 ran 5x faster on the same 4090."""


def read_table(filename: str) -> dict[tuple[str, int], dict[str, float]]:
    """``(model, image size) -> {"batch", "step_s", "gmacs"}`` of one timm results file."""
    rows = {}
    with open(DATA / filename, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["model"].startswith("test_") or not row["infer_step_time"]:
                continue
            key = (row["model"], int(row["infer_img_size"]))
            rows[key] = {
                "batch": int(row["infer_batch_size"]),
                "step_s": float(row["infer_step_time"]) / 1000,
                "gmacs": float(row["infer_gmacs"] or "nan"),
            }
    return rows


def wanted() -> list[tuple[str, int]]:
    """Every (model, image size) of any table, shuffled (seed 0): a run cut short has
    profiled a random sample of the models."""
    import random

    keys: set[tuple[str, int]] = set()
    for eager, compiled in TABLES.values():
        for filename in (eager, compiled):
            if filename:
                keys |= set(read_table(filename))
    order = sorted(keys)
    random.Random(0).shuffle(order)
    return order


def build(name: str, size: int, amp: bool = False, fuse: bool = True):
    """The timm model on the meta device in float16 (float32 for ``amp``), fused as the newer
    tables ran it (``deployed``; as built with ``fuse=False``), its input at ``BATCH``, and
    whether it has branches to fuse."""
    import timm
    import torch

    from pytest_graphbudget.modes.dtype import cast
    from pytest_graphbudget.zoo._build import build_module

    def factory(**extra):
        return lambda: timm.create_model(name, pretrained=False, **extra)

    model = build_module(factory(), True)
    default = (getattr(model, "pretrained_cfg", None) or {}).get("input_size") or (3, 224, 224)
    if int(default[-1]) != size:
        try:  # a ViT's position embedding is sized for its image
            model = build_module(factory(img_size=size), True)
        except TypeError:
            pass
    x = torch.empty(BATCH, int(default[0]), size, size, device="meta")
    fused = fusable(model)
    model = deployed(model) if fuse else model
    return (*cast(model, (x,), {}, None if amp else "float16"), fused)


def fusable(model) -> bool:
    """Whether ``timm.utils.reparameterize_model`` changes the model: a module of it that can
    fuse its train-time branches (``fuse``, ``reparameterize`` or ``switch_to_deploy``)."""
    names = ("fuse", "reparameterize", "switch_to_deploy")
    return any(any(hasattr(m, n) for n in names) for m in model.modules() if m is not model)


def deployed(model):
    """The model as timm's tables ran it: its train-time branches fused where it has them
    (RepVGG, MobileOne, FastViT, GhostNetV3, EfficientViT (MSRA), ...). The tables' GMACs are
    those of the fused model (repvgg_a2: 5.12, against 5.69 unfused; mobileone_s0: 0.28
    against 1.05), so their timings are too."""
    import torch
    from timm.utils import reparameterize_model

    if not fusable(model):
        return model
    with torch.device(next(model.parameters()).device):  # new tensors beside the weights
        return reparameterize_model(model)


def record(name: str, size: int, amp: bool = False, fuse: bool = True) -> dict:
    """One model's ops and fused groups, as the fit reads them; ``fused``: whether its
    train-time branches were fused (absent for a model without any)."""
    import contextlib

    import torch

    from pytest_graphbudget.engine import latency
    from pytest_graphbudget.engine.partition import partition, traffic
    from pytest_graphbudget.engine.tiers import trace_and_measure
    from pytest_graphbudget.engine.trace import Example
    from pytest_graphbudget.modes.amp import cuda_autocast

    model, args, kwargs, reparameterized = build(name, size, amp, fuse)
    autocast = cuda_autocast("amp_float16") if amp else contextlib.nullcontext()
    with torch.inference_mode(False), autocast:
        traced, measured, _ = trace_and_measure(model, Example(args, kwargs))
    groups = partition(measured)
    flows = traffic(groups, measured)
    sizes = latency.tensor_sizes(measured)
    shapes = latency.weight_casts(latency.param_shapes(model), measured)
    channels, masks = latency.tensor_channels(measured), latency.tensor_masks(measured)
    ops: dict[tuple, int] = {}
    kinds = {}
    for node in measured.nodes:
        kind = latency.kernel_kind(node, shapes, sizes, channels, masks)
        kinds[node.name] = kind
        moved = latency.kernel_bytes(kind, node, sizes)
        key = (kind, latency.kernel_flops(kind, node), moved, sum(node.weights.values()))
        ops[key] = ops.get(key, 0) + 1
    fused = []
    for group, flow in zip(groups, flows, strict=True):
        launches = sum(1 for m in group.members if kinds[m.name] != "view")
        anchor = kinds[group.anchor.name]
        flops = sum(m.flops for m in group.members)
        fused.append([anchor, flops, flow.total, flow.bytes_weights, launches])
    return {
        "model": name,
        "size": size,
        "batch": BATCH,
        "tier": traced.method,
        **({"fused": fuse} if reparameterized else {}),
        "macs": sum(n.macs for n in measured.nodes),
        "ops": [[*key, count] for key, count in ops.items()],
        "groups": fused,
    }


def _timeout(signum, frame):
    raise TimeoutError(f"over {TIMEOUT_S} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="profile at most N new models")
    parser.add_argument("--only", nargs="*", default=[], help="these model names only")
    parser.add_argument(
        "--retry-errors", action="store_true", help="profile again the pairs that failed"
    )
    parser.add_argument("--amp", action="store_true", help="under autocast, into OUT_AMP")
    parser.add_argument("--part", type=int, default=0, help="this process's share (from 0)")
    parser.add_argument("--parts", type=int, default=1, help="processes sharing the pairs")
    args = parser.parse_args(argv)
    out_path = OUT_AMP if args.amp else OUT
    import torch

    torch.set_num_threads(1)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out_path.exists():
        for line in out_path.read_text().splitlines():
            data = json.loads(line)
            if not (args.retry_errors and "error" in data):
                done.add((data["model"], data["size"]))
    todo = [k for k in wanted() if k not in done and (not args.only or k[0] in args.only)]
    # a model not profiled at any size first (one size each), then the other sizes: a run cut
    # short has seen as many models as it could
    seen = {name for name, _ in done}
    first = []
    for name, size in todo:
        if name not in seen:
            seen.add(name)
            first.append((name, size))
    todo = (first + [k for k in todo if k not in set(first)])[args.part :: args.parts]
    if args.limit:
        todo = todo[: args.limit]
    signal.signal(signal.SIGALRM, _timeout)
    with out_path.open("a") as out:
        for i, (name, size) in enumerate(todo):
            start = time.perf_counter()
            signal.alarm(TIMEOUT_S)
            try:
                data = record(name, size, args.amp)
                # the older tables ran it as built: its unfused record too
                found = [data] + ([record(name, size, args.amp, False)] if "fused" in data else [])
            except Exception as exc:  # the model's failure, recorded so it is not retried
                data = {"model": name, "size": size, "error": f"{type(exc).__name__}: {exc}"[:300]}
                found = [data]
            finally:
                signal.alarm(0)
            data["seconds"] = round(time.perf_counter() - start, 2)
            out.write("".join(json.dumps(one) + "\n" for one in found))
            out.flush()
            status = data.get("error", data.get("tier"))
            print(f"[{i + 1}/{len(todo)}] {name} {size}: {status} {data['seconds']}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
