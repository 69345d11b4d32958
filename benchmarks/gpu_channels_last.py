"""Channels-last (NHWC) convolutions on a GPU: a factor per convolution kind, fitted to timm's
NHWC tables, scored on models and a card left out of the fit.

timm publishes its AMP inference twice on the RTX 4090 and the RTX 3090 (torch 2.4): with the
model and input in NCHW and in channels-last (``benchmarks/data/*-nhwc-*``). A channels-last
conv net runs in a median 0.89 of its NCHW time on both cards (ViTs 0.97-0.99): cuDNN's NHWC
tensor-core kernels skip the transposes NCHW pays. The eager estimate prices a convolution by
its FLOPs and bytes, which the layout does not change, so a channels-last model read 9-12%
slow. Here each convolution kind's roofline time (``Hardware.kind_time`` less the launch) is
multiplied by a factor, fitted per kind (Adam on a Huber loss, as ``gpu_fit.py``) to
log(estimate / measured) on the NHWC table of the fit card's fit models, less the same
model's log error on the NCHW table of that card: the layout's effect alone, not the family
fit's misses. Scored on models held out of every fit (``gpu_fit.held_out``), on the fit card
and on the other one: the shipped factors are the 4090's (ada), the 3090 (ampere) their check.
Compiled models are left alone: Inductor picks channels-last for a conv net's convolutions
itself, whatever the input's layout.

    .venv/bin/python benchmarks/gpu_tables.py --amp --only $(.venv/bin/python \
        benchmarks/gpu_channels_last.py --names 320)   # the records of 320 models (or all)
    .venv/bin/python benchmarks/gpu_channels_last.py     # the table GPU_RESULTS.md shows
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gpu_fit import held_out, records, spearman  # noqa: E402
from gpu_tables import OUT_AMP, read_table  # noqa: E402

from pytest_graphbudget.engine.latency import efficiency_kind  # noqa: E402
from pytest_graphbudget.hardware import get  # noqa: E402

KINDS = ("conv", "conv_grouped", "depthwise")
TABLES = {  # card -> (NCHW table, NHWC table), both torch 2.4, eager, as built (unfused)
    card: tuple(f"timm-benchmark-infer-amp-{f}-pt240-cu124-{card}.csv" for f in ("nchw", "nhwc"))
    for card in ("rtx4090", "rtx3090")
}


def rows(card: str, recs) -> list[dict]:
    """Every model of both tables that was profiled: its estimated conv roofline time per
    kind and the rest at the NHWC table's batch, both tables' measured step times, and the
    NCHW estimate at that table's batch."""
    hw = get(card)
    nchw_name, nhwc_name = TABLES[card]
    nchw, nhwc = read_table(nchw_name), read_table(nhwc_name)
    found = []
    for key, measured in nhwc.items():
        record = recs.of(key, nchw_name)
        if record is None or key not in nchw:
            continue
        conv, rest = _split(record, measured["batch"], hw)
        nchw_conv, nchw_rest = _split(record, nchw[key]["batch"], hw)
        before = {"conv": nchw_conv, "rest": nchw_rest, "measured": nchw[key]["step_s"]}
        found.append(
            {"model": key[0], "conv": conv, "rest": rest, "measured": measured["step_s"]}
            | {"nchw": before, "nchw_error": math.log(estimate(before, {}) / before["measured"])}
        )
    return found


def _split(record: dict, batch: int, hw) -> tuple[dict[str, float], float]:
    """Eager seconds at ``batch``: each convolution kind's roofline time, and the rest (every
    other kernel, and every launch)."""
    scale, conv, rest = batch / record["batch"], dict.fromkeys(KINDS, 0.0), 0.0
    for kind, flops, moved, weights, count in record["ops"]:
        if kind == "view":
            continue
        flops, moved = flops * scale, (moved - weights) * scale + weights
        efficiency = efficiency_kind(kind, flops)
        seconds = count * hw.kind_time(efficiency, flops, moved, "float16")
        if efficiency in conv:
            conv[efficiency] += seconds - count * hw.launch_s
            rest += count * hw.launch_s
        else:
            rest += seconds
    return conv, rest


def estimate(row: dict, factors: dict[str, float]) -> float:
    return row["rest"] + sum(row["conv"][k] * factors.get(k, 1.0) for k in KINDS)


def fit(train: list[dict], steps: int = 800) -> dict[str, float]:
    conv = torch.tensor([[r["conv"][k] for k in KINDS] for r in train], dtype=torch.float64)
    rest = torch.tensor([r["rest"] for r in train], dtype=torch.float64)
    measured = torch.tensor([r["measured"] for r in train], dtype=torch.float64)
    base = torch.tensor([r["nchw_error"] for r in train], dtype=torch.float64)
    logs = torch.zeros(len(KINDS), dtype=torch.float64, requires_grad=True)
    adam = torch.optim.Adam([logs], lr=0.02)
    for _ in range(steps):
        adam.zero_grad()
        error = torch.log((rest + (conv * logs.exp()).sum(1)) / measured) - base
        torch.nn.functional.huber_loss(error, torch.zeros_like(error), delta=0.1).backward()
        adam.step()
    return {k: round(float(v), 3) for k, v in zip(KINDS, logs.detach().exp(), strict=True)}


def score(rows_: list[dict], factors: dict[str, float]) -> str:
    ratios = [estimate(r, factors) / r["measured"] for r in rows_]
    within = [sum(abs(x - 1) <= band for x in ratios) / len(ratios) for band in (0.25, 0.1)]
    rank = spearman([estimate(r, factors) for r in rows_], [r["measured"] for r in rows_])
    median = statistics.median(ratios)
    return f"{len(ratios)} | {within[0]:.0%} | {within[1]:.0%} | {median:.2f} | {rank:.3f}"


def names(count: int) -> list[str]:
    """``count`` models drawn (seed 1) from those in all four tables, to profile first."""
    import random

    keys = [set(read_table(name)) for pair in TABLES.values() for name in pair]
    drawn = sorted({model for model, _ in set.intersection(*keys)})
    random.Random(1).shuffle(drawn)
    return drawn[:count]


def main() -> int:
    if sys.argv[1:2] == ["--names"]:
        print(" ".join(names(int(sys.argv[2]))))
        return 0
    recs = records(OUT_AMP)
    found = {card: rows(card, recs) for card in TABLES}
    lines = [
        "| factors | card, NHWC, held-out models | models | within ±25% | within ±10% "
        "| estimate / measured, median | rank correlation |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    fitted = {}
    for fit_card in TABLES:
        fitted[fit_card] = fit([r for r in found[fit_card] if not held_out(r["model"])])
    for card in TABLES:
        held = [r["nchw"] for r in found[card] if held_out(r["model"])]
        lines.append(f"| none: the same models in NCHW | {card} | {score(held, {})} |")
    labelled = [("none (as before)", {})] + [(f"fitted on {c}", f) for c, f in fitted.items()]
    for label, factors in labelled:
        for card in TABLES:
            held = [r for r in found[card] if held_out(r["model"])]
            lines.append(f"| {label} | {card} | {score(held, factors)} |")
    for card, factors in fitted.items():
        train = sum(not held_out(r["model"]) for r in found[card])
        lines.append(f"\nfitted on {card} ({train} models): " + ", ".join(
            f"{k} {v}" for k, v in factors.items()
        ))  # fmt: skip
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
