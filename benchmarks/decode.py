"""LLM decode on the zoo's decoder-only models, against hand-derived closed forms.

For each model and context N, ``profile_decode`` is compared with what the published
configuration alone says (no tool involved):

- per-token MACs: per layer QKV ``3h^2``, output projection ``h^2``, MLP ``2*h*ffn``, attention
  over the N cached positions and the new one ``2*(N+1)*h``; OPT's input and output projections
  ``2*e*h`` when its embedding width ``e`` differs from ``h``; the LM head ``e*V``;
- KV-cache bytes: ``2 x layers x N x h x 4`` (float32);
- the step is memory-bound on every built-in hardware profile.

The ``make test`` suite checks the same on a two-layer GPT-2 (``tests/modes/test_decode.py``); this
runs the published sizes, which take minutes.

    python benchmarks/decode.py                          # -> benchmarks/DECODE_RESULTS.md
    python benchmarks/decode.py --models gpt2 --contexts 128 --output -
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_MODELS = (
    "gpt2",
    "distilgpt2",
    "EleutherAI/gpt-neo-125m",
    "facebook/opt-125m",
    "facebook/opt-350m",
)
DEFAULT_CONTEXTS = (128, 1023)


def closed_form(config, context: int) -> tuple[int, int]:
    """(MACs of one decode step, KV-cache bytes) from the configuration alone."""
    h = config.hidden_size
    layers = config.num_hidden_layers
    ffn = getattr(config, "ffn_dim", None) or getattr(config, "n_inner", None)
    ffn = ffn or getattr(config, "intermediate_size", None) or 4 * h
    embed = getattr(config, "word_embed_proj_dim", None) or h
    per_layer = 3 * h * h + h * h + 2 * h * ffn + 2 * (context + 1) * h
    projections = 2 * embed * h if embed != h else 0
    macs = layers * per_layer + projections + embed * config.vocab_size
    return macs, 2 * layers * context * h * 4


def row(name: str, context: int) -> list[str]:
    from pytest_graphbudget import hardware, profile_decode
    from pytest_graphbudget.zoo.huggingface import load_config

    config, _ = load_config(name)
    macs, kv = closed_form(config, context)
    start = time.perf_counter()
    result = profile_decode(name, context=context)
    seconds = time.perf_counter() - start
    bound = {result.roofline(hw).bottleneck for hw in hardware.BUILTIN}
    ok = result.decode.macs == macs and result.kv_cache_bytes == kv and bound == {"memory_bound"}
    return [
        f"`{name}`",
        str(context),
        f"{result.decode.macs:,}",
        f"{macs:,}",
        f"{result.kv_cache_bytes:,}",
        f"{kv:,}",
        f"{result.arithmetic_intensity:.2f}",
        ", ".join(sorted(bound)),
        f"{seconds:.1f}",
        "yes" if ok else "**NO**",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--contexts", nargs="+", type=int, default=list(DEFAULT_CONTEXTS))
    parser.add_argument("--output", default=str(HERE / "DECODE_RESULTS.md"), help="- for stdout")
    args = parser.parse_args(argv)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(var, "1")
    headers = [
        "model",
        "context",
        "MACs ours",
        "MACs closed form",
        "KV bytes ours",
        "KV bytes closed form",
        "FLOPs/byte read",
        "bound on every built-in hardware",
        "seconds",
        "match",
    ]
    rows = [row(name, context) for name in args.models for context in args.contexts]
    lines = [
        "# LLM decode against closed forms",
        "",
        f"`python benchmarks/decode.py` (generated); {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load average "
        f"{os.getloadavg()[0]:.1f} at the end.",
        "",
        "| " + " | ".join(headers) + " |",
        "| " + " | ".join("---" for _ in headers) + " |",
        *("| " + " | ".join(r) + " |" for r in rows),
        "",
    ]
    text = "\n".join(lines)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
    return 0 if all(r[-1] == "yes" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
