"""timm's models timed on the GPU at hand as timm's tables time them, against a
datasheet-plus-family estimate (issue 36): a card held out of every fit. Needs CUDA for
``measure``; ``bash benchmarks/cuda_check.sh`` runs it on a lent GPU (an H200: hopper, a
family no public per-model table measured, whose fractions are borrowed from ada).

    python benchmarks/gpu_timm_check.py measure --hardware h200 [--models 24] [--compiled 3]
    python benchmarks/gpu_timm_check.py report benchmarks/out/gpu_timm_check.jsonl
    python benchmarks/gpu_timm_check.py fit benchmarks/data/h200_timm_check_cudnn_benchmark.jsonl \
        benchmarks/data/h200_timm_check.jsonl

``measure`` takes models held out of every fit (``gpu_fit.held_out``) at 224 px from timm's
4090 table, in a fixed order, and for each writes one JSON line as soon as it is done (a run
cut short keeps what it measured): the step time of a forward under CUDA's autocast (float16,
NCHW, ``torch.no_grad``; warm-up steps, then the mean of timed steps, as timm's
``benchmark.py``), and ``est_latency_s`` of the same model built on the meta device and
profiled at the same batch with ``dtype="amp_float16"`` on ``--hardware``. Eager for every
model first, then ``torch.compile`` for the first ``--compiled`` (each compile takes a while).
``report`` prints the hit rates (within ±25%, within ±10%, rank correlation) per execution.
``fit`` fits the one figure hopper's profile carries beyond ada's borrowed shares (its
``memory_scale``) to the first file's eager rows, scores it on both halves of the models (each
half from a fit on the other) and on every file's rows, and needs no GPU: it prices the
models' ops recorded by ``gpu_tables.py --amp`` (``benchmarks/out/gpu_ops_amp.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from gpu_fit import held_out, spearman  # noqa: E402
from gpu_tables import TABLES, deployed, fusable, read_table  # noqa: E402

OUT = HERE / "out" / "gpu_timm_check.jsonl"
SIZE = 224
WARM, STEPS, MIN_STEPS = 10, 40, 5  # timm's benchmark.py: 10 warm-up steps, 40 timed
STEP_BUDGET_S = 3.0  # the timed steps of one model take about this long at most


def models(count: int) -> list[str]:
    """Held-out models of the 4090 table at 224 px, in an order fixed by a hash of the name
    (a spread of families, the same every run)."""
    table = read_table(TABLES["rtx4090"][0])
    names = sorted({m for m, size in table if size == SIZE and held_out(m)})
    return sorted(names, key=lambda n: zlib.crc32(f"check:{n}".encode()))[:count]


def step_s(model, x, compiled: bool) -> float:
    """The mean seconds of a forward under CUDA's autocast, timed as timm's ``benchmark.py``
    times its tables: ``cudnn.benchmark`` on, warm-up steps, then each step timed from its
    launch to a synchronize at its end. On a CPU (``--device cpu``, a dry run of this script)
    under CPU autocast. A slow model takes fewer timed steps (at least ``MIN_STEPS``)."""
    import torch

    torch.backends.cudnn.benchmark = True
    run = torch.compile(model) if compiled else model
    low = torch.float16 if x.is_cuda else torch.bfloat16

    def step() -> float:
        start = time.perf_counter()
        run(x)
        torch.cuda.synchronize() if x.is_cuda else None
        return time.perf_counter() - start

    with torch.no_grad(), torch.autocast(x.device.type, dtype=low):
        warm = [step() for _ in range(WARM)]
        steps = max(MIN_STEPS, min(STEPS, int(STEP_BUDGET_S / warm[-1])))
        return sum(step() for _ in range(steps)) / steps


def datasheet_only(hw):
    """``hw`` without its measured matmul: its family's compute shares as they are."""
    from dataclasses import replace

    def undo(fractions):
        return {k: (c / hw.compute_scale, m) for k, (c, m) in fractions.items()}

    return replace(
        hw,
        efficiency=undo(hw.efficiency),
        compiled_efficiency=undo(hw.compiled_efficiency),
        compute_scale=1.0,
    )


def estimate_s(
    name: str, batch: int, hardware: str, execution: str, calibrated=None, fused: bool = False
) -> dict[str, float]:
    """The profile's estimate, and (for a profile with ``matmul_tflops``) the estimate from its
    datasheet alone, so the check says what the measured matmul is worth on this card; with
    ``calibrated`` (``graph-budget hardware --calibrate --device cuda`` of this GPU), that
    profile's estimate too."""
    import timm
    import torch

    from pytest_graphbudget import profile_model
    from pytest_graphbudget.hardware import get

    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False).eval()
    model = deployed(model) if fused else model
    x = torch.empty(batch, 3, SIZE, SIZE, device="meta")
    hw = get(hardware)
    cards = [("estimate_s", hw)]
    if hw.compute_scale != 1.0:
        cards.append(("estimate_datasheet_s", datasheet_only(hw)))
    if calibrated is not None:
        cards.append(("estimate_calibrated_s", calibrated))
    found = {}
    for key, card in cards:
        prof = profile_model(model, (x,), dtype="amp_float16", hardware=card, execution=execution)
        found[key] = prof.est_latency_s
    return found


def calibrated_profile(path: str | None):
    """The one profile of a ``hardware --calibrate -o FILE`` (None without one, or when the
    calibration wrote nothing)."""
    if not path or not Path(path).exists():
        return None
    from pytest_graphbudget.cli.loading import read_toml
    from pytest_graphbudget.hardware import from_tables

    found = from_tables(read_toml(path).get("hardware", {}))
    return next(iter(found.values()), None)


def _built(name: str, device: str):
    """timm's ``name`` made on ``device`` (its random init there: seconds on a CPU for the
    large ones, every batch of the model reusing it), its branches fused as timm's tables ran
    it, and whether there were any."""
    import timm
    import torch

    with torch.device(device):
        model = timm.create_model(name, pretrained=False).eval()
    fused = fusable(model)
    return deployed(model), fused


def measure(args: argparse.Namespace) -> int:
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_timm_check measure: no CUDA device here (--device cpu: a dry run)")
        return 2
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    names = models(args.models)
    first = args.batch[0]
    plan = [(n, "eager", b) for n in names for b in args.batch]
    plan += [(n, "compiled", first) for n in names[: args.compiled]]
    plan = plan[args.skip :]
    calibrated = calibrated_profile(args.hardware_file)
    stop = time.monotonic() + args.budget_s
    built: tuple[str, object, bool] | None = None  # the last model: each is built once
    with out.open("a") as handle:
        for name, execution, batch in plan:
            if time.monotonic() > stop:
                print(f"--budget-s {args.budget_s:g} spent: the rest is not measured")
                break
            row = {"model": name, "size": SIZE, "batch": batch, "execution": execution}
            row["timing"] = "timm benchmark.py: cudnn.benchmark, a synchronize per step"
            row.update(gpu=gpu, torch=torch.__version__, hardware=args.hardware)
            try:
                if built is None or built[0] != name:
                    built = None
                    torch.cuda.empty_cache() if args.device == "cuda" else None
                    built = (name, *_built(name, args.device))
                model, row["fused"] = built[1], built[2]  # fused: as timm's tables ran it
                x = torch.randn(batch, 3, SIZE, SIZE, device=args.device)
                row["measured_s"] = step_s(model, x, execution == "compiled")
                del x
                if args.estimate:
                    row.update(
                        estimate_s(name, batch, args.hardware, execution, calibrated, row["fused"])
                    )
            except Exception as exc:  # one model's failure is a row, not the end of the run
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            handle.write(json.dumps(row) + "\n")
            handle.flush()
            shown = {k: row.get(k) for k in ("measured_s", "estimate_s", "error") if k in row}
            print(name, execution, batch, shown, flush=True)
    return 0


def estimate(args: argparse.Namespace) -> int:
    """Fill in the estimates of a file measured with ``--no-estimate`` (they need no GPU: a
    lease's minutes go to the timings); ``--again`` replaces those already there (a new
    calibration of the card, an engine that prices differently)."""
    path = Path(args.file)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    calibrated = calibrated_profile(args.hardware_file)
    for row in rows:
        if "measured_s" in row and ("estimate_s" not in row or args.again):
            row["hardware"] = args.hardware
            row.update(
                estimate_s(
                    row["model"], row["batch"], args.hardware, row["execution"], calibrated,
                    row.get("fused", False),
                )
            )  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return 0


def report(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.exists():
        print(f"gpu_timm_check report: no {path}: nothing was measured")
        return 2
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    failed = [r for r in rows if "error" in r]
    print(
        "| card, execution | models | within ±25% | within ±10% | estimate / measured, median "
        "| rank correlation |\n| --- | --- | --- | --- | --- | --- |"
    )
    for execution, key, how in (
        ("eager", "estimate_s", ""),
        ("compiled", "estimate_s", ""),
        ("eager", "estimate_datasheet_s", ", datasheet only"),
        ("compiled", "estimate_datasheet_s", ", datasheet only"),
        ("eager", "estimate_calibrated_s", ", calibrated here"),
        ("compiled", "estimate_calibrated_s", ", calibrated here"),
    ):
        for batch in sorted({r["batch"] for r in rows}):
            done = [
                r for r in rows if (r["execution"], r["batch"]) == (execution, batch) and key in r
            ]
            if not done:
                continue
            ratios = sorted(r[key] / r["measured_s"] for r in done)
            n = len(ratios)
            rank = spearman([r[key] for r in done], [r["measured_s"] for r in done])
            print(
                f"| {done[0]['gpu']} ({done[0]['hardware']}{how}), {execution}, batch {batch} "
                f"| {n} | {sum(abs(r - 1) <= 0.25 for r in ratios) / n:.0%} "
                f"| {sum(abs(r - 1) <= 0.10 for r in ratios) / n:.0%} | {ratios[n // 2]:.2f} "
                f"| {rank:.3f} |"
            )
    for r in failed:
        print(f"failed: {r['model']} {r['execution']}: {r['error']}")
    return 0


def priced(rows: list[dict], hardware: str) -> list[dict]:
    """Each measured row with its kernels' compute and memory seconds on ``hardware`` at the
    lender's memory shares (the family's ``memory_scale`` divided out): what ``fit`` scales."""
    import torch
    from gpu_fit import KINDS, kernels, records
    from gpu_tables import OUT_AMP

    from pytest_graphbudget.hardware import FAMILIES, get

    hw = get(hardware)
    undo = FAMILIES[hw.family].memory_scale
    recs, kind_of = records(OUT_AMP), {i: k for k, i in KINDS.items()}
    found = []
    for row in rows:
        key = (row["model"], row["size"])  # measured as built unless the row says fused
        record = recs.get(key) if row.get("fused") else recs.unfused.get(key, recs.get(key))
        if record is None:
            raise SystemExit(
                f"gpu_timm_check fit: {row['model']} is not in {OUT_AMP}: run "
                f"benchmarks/gpu_tables.py --amp --only {row['model']}"
            )
        compiled = row["execution"] == "compiled"
        shares = hw.compiled_efficiency if compiled else hw.efficiency
        compute, memory, count = [], [], []
        for k, flops, moved, n in kernels(record, row["batch"], compiled):
            c, m = shares[kind_of[k]]
            compute.append(flops / (c * hw.peak("float16")))
            memory.append(moved / (m / undo * hw.bandwidth))
            count.append(n)
        as_tensor = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
        found.append(
            {**row, "compute": as_tensor(compute), "memory": as_tensor(memory),
             "count": as_tensor(count), "launch": hw.launch_s}
        )  # fmt: skip
    return found


def seconds(row: dict, memory_scale: float) -> float:
    """The package's eager or compiled estimate of a priced row at ``memory_scale``."""
    import torch

    roof = torch.maximum(row["compute"], row["memory"] / memory_scale)
    return float(((row["launch"] + roof) * row["count"]).sum())


def best_scale(rows: list[dict]) -> float:
    """The memory scale (0.33 to 1, by 0.001 of its inverse) minimising the Huber loss (0.1)
    on log(estimate / measured), as ``gpu_fit.py`` fits the families."""
    import math

    def loss(scale: float) -> float:
        total = 0.0
        for row in rows:
            e = abs(math.log(seconds(row, scale) / row["measured_s"]))
            total += e * e if e < 0.1 else 0.1 * (2 * e - 0.1)
        return total

    return min((1000 / i for i in range(1000, 3001)), key=loss)


def scored(rows: list[dict], scale: float) -> str:
    ratios = sorted(seconds(r, scale) / r["measured_s"] for r in rows)
    n = len(ratios)
    rank = spearman([seconds(r, scale) for r in rows], [r["measured_s"] for r in rows])
    return (
        f"| {n} | {sum(abs(r - 1) <= 0.25 for r in ratios) / n:.0%} "
        f"| {sum(abs(r - 1) <= 0.10 for r in ratios) / n:.0%} | {ratios[n // 2]:.2f} "
        f"| {rank:.3f} |"
    )


def fit(args: argparse.Namespace) -> int:
    """The memory scale from the first file's eager rows, and how well it holds: on each half
    of the models (split by a hash of the name) from a fit on the other half, on all of them,
    and on every file's rows, eager and compiled."""
    files = [[json.loads(line) for line in Path(f).read_text().splitlines() if line]
             for f in args.files]  # fmt: skip
    done = [[r for r in rows if "measured_s" in r] for rows in files]
    first = priced([r for r in done[0] if r["execution"] == "eager"], args.hardware)
    scale = best_scale(first)
    print(f"memory_scale = {scale:.3f} ({args.hardware}'s family, over the lender's shares)\n")
    print(
        "| rows (memory scale) | rows | within ±25% | within ±10% | estimate / measured, "
        "median | rank correlation |\n| --- | --- | --- | --- | --- | --- |"
    )
    for half in (0, 1):
        train = [r for r in first if zlib.crc32(r["model"].encode()) % 2 == half]
        test = [r for r in first if zlib.crc32(r["model"].encode()) % 2 != half]
        own = best_scale(train)
        print(f"| {args.files[0]}, eager, held-out half {half + 1} ({own:.3f}) {scored(test, own)}")
    for path, rows in zip(args.files, done, strict=True):
        for execution in ("eager", "compiled"):
            mine = priced([r for r in rows if r["execution"] == execution], args.hardware)
            if mine:
                print(f"| {path}, {execution} ({scale:.3f}) {scored(mine, scale)}")
                print(f"| {path}, {execution}, unscaled (1.000) {scored(mine, 1.0)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("measure", help="time and estimate on this machine's GPU")
    run.add_argument("--hardware", default="h200", help="the profile to estimate with")
    run.add_argument("--models", type=int, default=24, help="held-out models, eager")
    run.add_argument("--compiled", type=int, default=3, help="of those, also compiled")
    run.add_argument(
        "--batch",
        type=int,
        nargs="+",
        default=[256],
        help="each model at each (compiled: the first)",
    )
    run.add_argument("--output", default=str(OUT))
    run.add_argument("--device", default="cuda", help="cpu: a dry run of this script")
    run.add_argument("--hardware-file", help="a --calibrate profile of this GPU: estimated too")
    run.add_argument("--skip", type=int, default=0, help="start this far into the plan")
    run.add_argument(
        "--budget-s", type=float, default=float("inf"), help="start no model after this long"
    )
    run.add_argument(
        "--no-estimate", dest="estimate", action="store_false", help="time only (see estimate)"
    )
    later = sub.add_parser("estimate", help="the estimates of a file measured --no-estimate")
    later.add_argument("file")
    later.add_argument("--hardware", default="h200")
    later.add_argument("--hardware-file")
    later.add_argument(
        "--again", action="store_true", help="estimate rows that have estimates again"
    )
    shown = sub.add_parser("report", help="the hit rates of a measured file")
    shown.add_argument("file")
    fitting = sub.add_parser("fit", help="the family's memory scale from measured files")
    fitting.add_argument("files", nargs="+", help="fitted on the first's eager rows")
    fitting.add_argument("--hardware", default="h200")
    args = parser.parse_args(argv)
    commands = {"measure": measure, "estimate": estimate, "report": report, "fit": fit}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
