"""Fitted formulas on full-size transformers: does a sweep predict an unmeasured length exactly?

For each model, ``profile_sweep(name, seq_len=FIT, symbolic=True)`` fits every figure over the
measured lengths, then the model is profiled at ``PREDICT``, a length the fit never saw, and
each figure's prediction is compared with that profile: exact or not. MACs are also compared
with the closed form of the architecture (per layer: 12*s*h^2 for the projections and the
MLP, 2*s^2*h for attention; BERT adds its pooler, h^2). The test suite does the same on a
2-layer BERT; this is the full-size proof, too slow for ``make test``.

    python benchmarks/sweep.py                  # writes benchmarks/SWEEP_RESULTS.md
    python benchmarks/sweep.py --models gpt2
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# name -> (lengths fitted, length predicted, layers, hidden, pooler): within each model's
# position limit (BERT 512, GPT-2 1024).
MODELS = {
    "bert-base-uncased": ((64, 128, 256), 512, 12, 768, True),
    "gpt2": ((128, 256, 512), 1024, 12, 768, False),
}
FIGURES = ("flops", "macs", "peak_memory_bytes", "traffic_bytes")


def closed_form_macs(s: int, layers: int, h: int, pooler: bool) -> int:
    return layers * (12 * s * h * h + 2 * s * s * h) + (h * h if pooler else 0)


def run(name: str) -> list[str]:
    """One table row per figure of ``name``."""
    from pytest_graphbudget import profile_model, profile_sweep

    fitted, unseen, layers, h, pooler = MODELS[name]
    start = time.perf_counter()
    sweep = profile_sweep(name, seq_len=list(fitted), symbolic=True)
    seconds = time.perf_counter() - start
    measured = profile_model(name, seq_len=unseen)
    rows = []
    for figure in FIGURES:
        fit = sweep.fits[figure]
        predicted = fit(seq_len=unseen)
        actual = getattr(measured, figure)
        closed = closed_form_macs(unseen, layers, h, pooler) if figure == "macs" else None
        rows.append(
            f"| `{name}` | {figure} | {fit.method} | `{fit.formula()}` | {unseen} | "
            f"{int(predicted):,} | {actual:,} | {'yes' if predicted == actual else 'NO'} | "
            f"{'' if closed is None else f'{closed:,}'} | {seconds:.1f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--output", default=str(HERE / "SWEEP_RESULTS.md"))
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    lines = [
        "# Fitted formulas on full-size transformers",
        "",
        "`python benchmarks/sweep.py` (generated). Each model is profiled at the fitted lengths "
        "(`profile_sweep(..., symbolic=True)`), then at a length the fit never saw; a figure is "
        "exact when the formula's prediction equals that profile. Seconds: the sweep's, "
        f"load average {os.getloadavg()[0]:.1f} at the start.",
        "",
        "| model | figure | method | formula | unseen s | predicted | measured | exact | "
        "closed-form MACs | sweep s |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for name in args.models:
        lines += run(name)
    Path(args.output).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
