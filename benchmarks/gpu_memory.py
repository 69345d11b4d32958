"""GPU memory as the caching allocator counts it, against the GPU (issue 36). Needs CUDA;
writes benchmarks/GPU_MEMORY_RESULTS.md (``bash benchmarks/cuda_check.sh`` runs it).

Run: python benchmarks/gpu_memory.py [--output FILE]

For each model: ``profile_model(model, x, measure=1, device="cuda").peak_memory_bytes`` (the
estimate: ``engine/allocator.py``'s replay of the caching allocator over the traced graph, with
cuBLAS's and cuDNN's workspaces) against ``torch.cuda.max_memory_allocated()`` of a FRESH
process that moves the model and its input to the GPU and runs one forward in inference mode
(so no earlier allocation, cached block or cuBLAS handle is there); beside it the host-side
figure the CPU rules give (weights + inputs + activation peak, as before issue 36).
The bar: within ±5%.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = """
import json, sys, torch
sys.path.insert(0, {root!r})
sys.path.insert(0, {bench!r})
from gpu_memory import build, recording, trace
model, x = build({name!r})
torch.cuda.reset_peak_memory_stats()
traced = recording()
with torch.inference_mode():
    model = model.cuda()
    x = x.cuda()
    with torch.autocast("cuda", dtype=torch.float16, enabled={amp!r}):
        model(x)
torch.cuda.synchronize()
stats = torch.cuda.memory_stats()
print(json.dumps({{"max_allocated": torch.cuda.max_memory_allocated(),
                  "max_reserved": torch.cuda.max_memory_reserved(),
                  "max_requested": stats.get("requested_bytes.all.peak"),
                  "trace": trace() if traced else None}}))
"""


CASES = [
    ("transformer", None),
    ("resnet18", None),
    ("conv", None),
    ("transformer", "amp_float16"),
    ("resnet18", "amp_float16"),
]


def build(name: str):
    """The model and its input: a transformer block, resnet18 and a conv net."""
    import torch

    if name == "resnet18":
        import torchvision

        return torchvision.models.resnet18().eval(), torch.randn(8, 3, 224, 224)
    if name == "conv":
        net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 64, 3, padding=1),
            torch.nn.BatchNorm2d(64),
            torch.nn.ReLU(),
            torch.nn.Conv2d(64, 64, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(64, 10),
        )
        return net.eval(), torch.randn(16, 3, 128, 128)
    return block().eval(), torch.randn(8, 512, 256)


def _block_class():
    import torch

    class Block(torch.nn.Module):
        """A single-head transformer block whose intermediates die where its graph says (no
        local holds the attention map: eager Python would keep it to the return)."""

        def __init__(self, width: int = 256) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = (torch.nn.Linear(width, width) for _ in range(4))
            self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
            self.mlp = torch.nn.Sequential(
                torch.nn.Linear(width, 4 * width),
                torch.nn.GELU(),
                torch.nn.Linear(4 * width, width),
            )
            self.scale = width**-0.5

        def attend(self, x):
            scores = self.q(x) @ self.k(x).transpose(-2, -1) * self.scale
            return torch.softmax(scores, dim=-1) @ self.v(x)

        def forward(self, x):
            y = self.norm1(x + self.o(self.attend(x)))
            return self.norm2(y + self.mlp(y))

    return Block


def block():
    """A ``Block``; the class is built lazily, so that importing this module needs no torch."""
    return _block_class()()


def recording() -> bool:
    """Record the allocator's events (no device memory of its own), for reading a miss later;
    ``False`` where this torch cannot."""
    import torch

    try:
        torch.cuda.memory._record_memory_history(max_entries=100_000, stacks="python")
    except Exception:  # a private API: the figures must not depend on it
        return False
    return True


def trace() -> list[list]:
    """The allocator's events as ``[action, size, frames]``, frames the innermost few lines of
    Python (torch.nn's modules or the model's code) that asked."""
    import torch

    try:
        events = torch.cuda.memory._snapshot()["device_traces"][0]
    except Exception:
        return []
    rows = []
    for event in events:
        frames = [
            f"{f['filename'].rsplit('/', 2)[-1]}:{f['line']} {f['name']}"
            for f in event.get("frames", [])[:4]
        ]
        rows.append([event["action"], event["size"], frames])
    return rows


def fresh(name: str, amp: bool = False) -> dict:
    code = CHILD.format(root=str(ROOT), bench=str(ROOT / "benchmarks"), name=name, amp=amp)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the measuring process failed: {out.stderr[-1500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    import torch

    from pytest_graphbudget.api import profile_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "GPU_MEMORY_RESULTS.md"))
    parser.add_argument("--trace", help="a JSON file for the allocator's events of each case")
    args = parser.parse_args()
    rows, traces = [], {}
    # (model, dtype): the last two as served under CUDA's autocast, float32 weights
    for name, dtype in CASES:
        label = name if dtype is None else f"{name}, {dtype}"
        try:
            model, x = build(name)
            host = profile_model(model, x, dtype=dtype).peak_memory_bytes
            prof = profile_model(model, x, measure=1, device="cuda", dtype=dtype)
            measured = fresh(name, amp=dtype is not None)
        except Exception as exc:  # one case's failure is a line, not the end of the run
            print(f"{label}: failed: {type(exc).__name__}: {exc}"[:2000], flush=True)
            continue
        estimate = prof.peak_memory_bytes
        traces[label] = {
            "measured": measured.pop("trace"),
            "estimate": prof.to_dict(),
        }
        ratio = estimate / measured["max_allocated"]
        rows.append((label, tuple(x.shape), measured, estimate, host, ratio))
        print(label, measured, estimate, host, f"{ratio:.3f}", flush=True)
    if args.trace:
        Path(args.trace).write_text(json.dumps(traces, default=str))
    gpu = torch.cuda.get_device_name()
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# GPU memory: the allocator's rules against max_memory_allocated",
        "",
        f"Written by `benchmarks/gpu_memory.py` on {when}: {gpu}, capability "
        f"{'.'.join(map(str, torch.cuda.get_device_capability()))}, torch {torch.__version__}.",
        "",
        "For a transformer block, resnet18 (batch 8) and a conv net (batch 16, 128x128), and the",
        'first two again as served under CUDA\'s autocast (`dtype="amp_float16"`, float32',
        'weights, one forward under `torch.autocast("cuda")` in inference mode, where autocast',
        "caches no cast): the `peak_memory_bytes` of `profile_model(..., measure=1,",
        'device="cuda")` (the caching allocator\'s rules of',
        "`pytest_graphbudget/engine/allocator.py`: block rounding, cuBLAS's and cuBLASLt's",
        "workspaces, cuDNN's layout workspace) against",
        "`torch.cuda.max_memory_allocated()` of a fresh process running one forward. The bar is",
        '±5%. "CPU rules" is the same profile without a GPU (exact bytes, no workspace).',
        "",
        "| model | input | max_memory_allocated | estimate (CUDA rules) | estimate / measured "
        "| CPU rules | max_memory_reserved |",
        "|:--|:--|--:|--:|--:|--:|--:|",
    ]
    for name, shape, measured, estimate, host, ratio in rows:
        lines.append(
            f"| {name} | {shape} | {measured['max_allocated']:,} | {estimate:,} | {ratio:.3f} "
            f"| {host:,} | {measured['max_reserved']:,} |"
        )
    within = sum(abs(row[-1] - 1) <= 0.05 for row in rows)
    lines += ["", f"Within ±5%: {within} of {len(rows)}.", ""]
    Path(args.output).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
