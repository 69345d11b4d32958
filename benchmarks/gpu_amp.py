"""How much of the GPU fit's eager error is AMP: timm's tables ran under ``torch.autocast``
(float32 weights and input, float16 convolutions and products), while ``gpu_tables.py``
profiles the model cast to float16, as ``dtype="float16"`` does.

Under CUDA's autocast, ``layer_norm``, ``group_norm``, ``softmax``, ``exp``, ``rsqrt``, ``pow``
and sums run in float32 and return float32, and what follows them (an add with a float32
parameter, a layer scale) stays float32 until the next convolution or product casts it back;
every convolution and product casts its input and weight to float16 first. A metaformer's
memory-bound ops move about twice the bytes of their float16 profile.

This script measures that, per (model, size) of ``benchmarks/out/gpu_ops.jsonl``: the bytes
read and written by every ATen op of one forward at batch 256, products (convolutions,
matmuls, attention) apart from the rest, under CUDA's autocast and in float16. It runs on
this CPU machine: the model's tensors are fake CUDA tensors (``FakeTensorMode``), and
autocast is switched on for the CUDA device by hand (``torch.autocast`` refuses without a
GPU), so the casts are CUDA's own lists, not a copy of them. ``--fit`` then refits the
families with each model's eager op bytes scaled by its ratios (products by the products',
the rest by the rest's) and prints ``gpu_fit.py``'s held-out tables beside the float16 ones.

This is a model-level correction, coarse on purpose: it asks whether pricing AMP is worth
building into the package (a ``dtype`` that profiles under autocast), not what it would give.

    .venv/bin/python benchmarks/gpu_amp.py [--part I --parts N]   # out/gpu_amp.jsonl
    .venv/bin/python benchmarks/gpu_amp.py --fit
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gpu_tables import BATCH, OUT  # noqa: E402

AMP_OUT = HERE / "out" / "gpu_amp.jsonl"
ALIASES = frozenset({"_unsafe_view", "_reshape_alias", "lift_fresh"})
"""Ops that alias their input though their schema does not say so: no bytes moved."""
TIMEOUT_S = 90
PRODUCTS = frozenset(
    "conv1d conv2d conv3d convolution _convolution conv_transpose1d conv_transpose2d "
    "conv_transpose3d linear matmul addmm mm bmm baddbmm einsum scaled_dot_product_attention "
    "_scaled_dot_product_efficient_attention _scaled_dot_product_flash_attention "
    "_scaled_dot_product_cudnn_attention".split()
)
"""Convolutions, products and attention, by name at whichever level the mode sees them
(under ``inference_mode`` a composite such as ``conv2d`` or ``linear`` arrives whole)."""


def _counter():
    import torch
    from torch.utils import _pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        """Bytes of every op's tensor arguments and results: products', the rest's."""

        def __init__(self):
            super().__init__()
            self.products = self.rest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.is_view or func.overloadpacket.__name__ in ALIASES:
                return out
            leaves = pytree.tree_leaves((args, kwargs, out))
            moved = sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))
            if func.overloadpacket.__name__ in PRODUCTS:
                self.products += moved
            else:
                self.rest += moved
            return out

    return Count()


@contextlib.contextmanager
def cuda_autocast(enabled: bool):
    """CUDA's autocast at float16, as ``torch.autocast("cuda")`` would set it, on a machine
    without a GPU (where ``torch.autocast`` switches itself off)."""
    import torch

    if not enabled:
        yield
        return
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", torch.float16)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        torch.autocast_decrement_nesting()
        torch.clear_autocast_cache()
        torch.set_autocast_enabled("cuda", False)


def measure(name: str, size: int, amp: bool) -> tuple[int, int]:
    """(products' bytes, the rest's) of one forward at ``BATCH``: under autocast with float32
    weights and input, else all in float16."""
    import timm
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False).eval()
        default = (getattr(model, "pretrained_cfg", None) or {}).get("input_size") or (3, 224, 224)
        if int(default[-1]) != size:
            with contextlib.suppress(TypeError):  # a ViT's position embedding: its image
                model = timm.create_model(name, pretrained=False, img_size=size).eval()
        if not amp:
            model = model.half()
    dtype = torch.float32 if amp else torch.float16
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = model.to_empty(device="cuda")
        x = torch.empty(BATCH, int(default[0]), size, size, device="cuda", dtype=dtype)
        count = _counter()
        with cuda_autocast(amp), torch.inference_mode(), count:
            model(x)
    return count.products, count.rest


def collect(part: int, parts: int) -> None:
    import torch

    torch.set_num_threads(1)
    rows = map(json.loads, OUT.read_text().splitlines())
    pairs = sorted({(d["model"], d["size"]) for d in rows if "error" not in d})[part::parts]
    done = set()
    if AMP_OUT.exists():
        done = {tuple(json.loads(line)["key"]) for line in AMP_OUT.read_text().splitlines()}

    def timeout(signum, frame):
        raise TimeoutError(f"over {TIMEOUT_S} s")

    signal.signal(signal.SIGALRM, timeout)
    with AMP_OUT.open("a") as out:
        for name, size in pairs:
            if (name, size) in done:
                continue
            signal.alarm(TIMEOUT_S)
            try:
                row = {"key": [name, size], "amp": measure(name, size, True)}
                row["half"] = measure(name, size, False)
            except Exception as exc:  # recorded, not retried
                row = {"key": [name, size], "error": f"{type(exc).__name__}: {exc}"[:200]}
            finally:
                signal.alarm(0)
            out.write(json.dumps(row) + "\n")
            out.flush()


def ratios() -> dict[tuple[str, int], tuple[float, float]]:
    """(products' AMP / float16 bytes, the rest's) of every measured pair."""
    found = {}
    for line in AMP_OUT.read_text().splitlines():
        row = json.loads(line)
        if "error" not in row and all(row["half"]):
            amp, half = row["amp"], row["half"]
            found[tuple(row["key"])] = (amp[0] / half[0], amp[1] / half[1])
    return found


def refit() -> None:
    """``gpu_fit.py``'s held-out tables, float16 bytes and then AMP's (eager ops only:
    a compiler fuses the casts and keeps float32 intermediates out of memory)."""
    import gpu_fit
    import torch

    torch.set_num_threads(1)
    scale = ratios()
    plain_kernels = gpu_fit.kernels
    products = {
        gpu_fit.KINDS[k]
        for k in gpu_fit.EFFICIENCY_KINDS
        if "conv" in k or k in ("depthwise", "matmul", "matmul_small", "attention")
    }

    def amp_kernels(record, batch, compiled):
        found = plain_kernels(record, batch, compiled)
        if compiled:
            return found
        by_products, by_rest = scale[(record["model"], record["size"])]
        return [(k, f, m * (by_products if k in products else by_rest), c) for k, f, m, c in found]

    recs = {key: r for key, r in gpu_fit.records().items() if key in scale}
    train, held = gpu_fit.split(recs)
    print(f"{len(recs)} pairs measured both ways; {len(train)} models fit, {len(held)} held out")
    rest = sorted(r for _, r in scale.values())
    print(
        f"the rest's bytes, AMP / float16: median {rest[len(rest) // 2]:.2f}, "
        f"10th-90th {rest[len(rest) // 10]:.2f}-{rest[9 * len(rest) // 10]:.2f}"
    )
    for label, kernels in (("float16 (as shipped)", plain_kernels), ("AMP bytes", amp_kernels)):
        gpu_fit.kernels = kernels
        print(f"\n**{label}**\n")
        print("\n".join(gpu_fit.report(recs, train, held)[0]))
    gpu_fit.kernels = plain_kernels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="refit with AMP's bytes and report")
    parser.add_argument("--part", type=int, default=0, help="this process's share (from 0)")
    parser.add_argument("--parts", type=int, default=1, help="processes sharing the pairs")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.fit:
        refit()
    else:
        collect(args.part, args.parts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
