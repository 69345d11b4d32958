"""Per-rank peak of a sharded training step: ``profile_model(parallel=...)`` against a real run.

A small transformer (``Block``) trains with Adam for two steps under ``torch.distributed``'s
gloo backend on CPU, N processes on this machine (``torch.multiprocessing.spawn``): FSDP2
(``fully_shard`` on each block, then the model) or a tensor-parallel plan
(``parallelize_module``: q, k, v and up column-parallel, o and down row-parallel). Memory is
what the CPU allocator reports to ``torch.profiler`` (``profile_memory=True``): its running
total of live bytes, from before the model is built, so the rank's parameters, gradients,
optimizer state, activations, FSDP's buffers and gloo's temporaries allocated on the training
thread all count. The measured peak is that total's maximum over the second step (the first
allocates Adam's state). ``--write`` replaces the section of ``SHARDED_RESULTS.md``.

    python benchmarks/sharded.py                     # fsdp=2, fsdp=4, tp=2, tp=2+fsdp=2
    python benchmarks/sharded.py --parallel fsdp=2 --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = ("fsdp=2", "fsdp=4", "tp=2", "tp=2,fsdp=2")
DIM, HEADS, LAYERS, BATCH, SEQ = 64, 4, 4, 4, 64


def build():
    import torch
    from torch import nn

    class Block(nn.Module):
        """Pre-norm attention and MLP; heads reshaped with -1, as tensor parallelism needs."""

        def __init__(self, dim: int, heads: int) -> None:
            super().__init__()
            self.head_dim = dim // heads
            self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
            self.o = nn.Linear(dim, dim)
            self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            h = self.norm1(x)
            q, k, v = (
                f(h).view(b, t, -1, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v)
            )
            a = torch.softmax(q @ k.transpose(-1, -2) / self.head_dim**0.5, -1) @ v
            x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
            return x + self.down(torch.relu(self.up(self.norm2(x))))

    torch.manual_seed(0)
    return nn.Sequential(*[Block(DIM, HEADS) for _ in range(LAYERS)]), torch.randn(BATCH, SEQ, DIM)


def case():
    """The model and its input as a ``ModelCase``: the factory of ``budgets/sharded.toml``."""
    from pytest_graphbudget import ModelCase

    model, x = build()
    return ModelCase(model, (x,), name="sharded-transformer")


def _peak(prof) -> tuple[int, int]:
    """The allocator's live total before the last ``step`` and its maximum during it."""
    from torch._C._profiler import _EventType

    def walk(events):
        for e in events:
            yield e
            yield from walk(e.children)

    events = list(walk(prof.profiler.kineto_results.experimental_event_tree()))
    last = [e for e in events if e.name == "step"][-1]
    totals = sorted(
        (e.start_time_ns, e.extra_fields.total_allocated)
        for e in events
        if e.tag == _EventType.Allocation
    )
    before = [t for s, t in totals if s < last.start_time_ns] or [0]
    inside = [t for s, t in totals if last.start_time_ns <= s <= last.end_time_ns]
    return before[-1], max(inside, default=before[-1])


def worker(rank: int, world: int, parallel: str, port: int, out: str) -> None:
    """One rank: build, shard, two Adam steps under the profiler; its peak to ``out``."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sizes = dict(part.split("=") for part in parallel.split(","))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model, x = build()
        _shard(model, {k: int(v) for k, v in sizes.items()})
        opt = torch.optim.Adam(model.parameters())
        for _ in range(2):
            with record_function("step"):
                model(x).sum().backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
    base, peak = _peak(prof)
    Path(out, f"{rank}.json").write_text(json.dumps({"rank": rank, "base": base, "peak": peak}))
    dist.destroy_process_group()


def _shard(model, sizes: dict[str, int]) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    tp, fsdp = sizes.get("tp", 1), sizes.get("fsdp", 1)
    mesh = init_device_mesh("cpu", (fsdp, tp), mesh_dim_names=("fsdp", "tp"))
    if tp > 1:
        plan = {n: ColwiseParallel() for n in ("q", "k", "v", "up")}
        plan.update({n: RowwiseParallel() for n in ("o", "down")})
        for block in model:
            parallelize_module(block, mesh["tp"], plan)
    if fsdp > 1:
        for block in model:
            fully_shard(block, mesh=mesh["fsdp"])
        fully_shard(model, mesh=mesh["fsdp"])


def measure(parallel: str, port: int) -> list[dict]:
    """Each rank's measured peak of one run of ``parallel`` ("fsdp=2", "tp=2,fsdp=2")."""
    import tempfile

    import torch.multiprocessing as mp

    world = 1
    for part in parallel.split(","):
        world *= int(part.split("=")[1])
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(worker, args=(world, parallel, port, out), nprocs=world)
        return [json.loads(Path(out, f"{r}.json").read_text()) for r in range(world)]


def derive(parallel: str) -> list[dict]:
    """``profile_model``'s per-rank figures for the same step."""
    from pytest_graphbudget import profile_model

    model, x = build()
    prof = profile_model(model, x, mode="train", optimizer="adam", parallel=parallel)
    return prof.parallel["ranks"]


def compare(parallel: str, port: int = 29541) -> list[dict]:
    """Each rank's derived and measured peak and their ratio."""
    measured, derived = measure(parallel, port), derive(parallel)
    rows = []
    for m in measured:
        tp = int(dict(part.split("=") for part in parallel.split(",")).get("tp", 1))
        d = derived[m["rank"] // tp]  # the mesh is (fsdp, tp): ranks of one shard are adjacent
        rows.append(
            {
                "parallel": parallel,
                "rank": m["rank"],
                "measured": m["peak"],
                "derived": d["peak_bytes"],
                "ratio": d["peak_bytes"] / m["peak"],
            }
        )
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| parallel | rank | measured peak (B) | derived peak (B) | derived / measured |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['parallel']} | {r['rank']} | {r['measured']:,} | {r['derived']:,} | "
        f"{r['ratio']:.3f} |"
        for r in rows
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallel", help=f"one run, e.g. fsdp=2 (default: {', '.join(RUNS)})")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--port", type=int, default=29541, help="the rendezvous port")
    parser.add_argument("--write", action="store_true", help="rewrite SHARDED_RESULTS.md")
    args = parser.parse_args()
    rows = [
        row for p in ([args.parallel] if args.parallel else RUNS) for row in compare(p, args.port)
    ]
    if args.json:
        print(json.dumps(rows))
        return 0
    text = table(rows)
    print(text)
    if args.write:
        head = (HERE / "SHARDED_RESULTS.md").read_text().split("\n| parallel")[0]
        (HERE / "SHARDED_RESULTS.md").write_text(head.rstrip() + "\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
