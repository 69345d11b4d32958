"""Fit each GPU family's efficiencies and launch cost to timm's measured inference, and say how
close a datasheet-plus-family profile comes on cards and models left out of the fit.

Reads ``benchmarks/out/gpu_ops.jsonl`` (``gpu_tables.py``: every model's ops and fused groups)
and the tables in ``benchmarks/data/``. The model of one kernel is the package's own
(``Hardware.kind_time``): ``launch + max(flops / (compute[k] * peak), bytes / (memory[k] *
bandwidth))`` with ``k`` its efficiency kind (``latency.efficiency_kind``); eager sums it over
ops at the family's ``efficiency``, compiled over fused groups at its ``compiled`` efficiency.
Per family, the 2 x 9 fractions of each execution (the launch held at 10 us) minimise a
robust (Huber, 0.1) loss on log(estimate / measured) over the training models (Adam on their
logs). A family fitted on two cards gives the second card a fitted compute scale of its own
(what it sustains of its datasheet peak relative to the first). Models are split by a hash of their
name: 30% held out, the same models whatever else has been profiled. Each held-out card is
scored from its datasheet alone and, as the package prices a profile with ``matmul_tflops``,
with its peak scaled by its published matmul share over the fit card's (``matmul_share``).
The held-out Max-Q is also scored at a range of compute scales (how closely the target needs
its sustained share) and at what its board power would say (``board_power_rule``).

    .venv/bin/python benchmarks/gpu_fit.py            # the report (GPU_RESULTS.md's tables)
    .venv/bin/python benchmarks/gpu_fit.py --toml     # also the families' fitted TOML
    .venv/bin/python benchmarks/gpu_fit.py --amp      # on the profiles made under autocast
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import zlib
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gpu_tables import OUT, OUT_AMP, TABLES, UNFUSED, read_table  # noqa: E402

from pytest_graphbudget.engine.latency import efficiency_kind  # noqa: E402
from pytest_graphbudget.hardware import _DATA, EFFICIENCY_KINDS, get  # noqa: E402

HELD_OUT = 0.3
HUBER = 0.1
"""The loss is quadratic within 10% (log ratio 0.1) and linear beyond: a few models the
profile gets badly wrong (a branch timm folds away at inference, an op priced as a copy) pull
the fit much less than under least squares."""
LAUNCH_S = 10e-6
"""The launch cost is not fitted: at batch 1024 the data barely sees it (a fit held to 10 us,
3 us, or left free, landing at 0.4 us, scores the same within a point on held-out models),
so it is held at eager PyTorch's per-op cost on a GPU (dispatch plus launch, about 10 us),
what a small batch pays. A small-batch budget deserves its own (``launch_us``)."""
CARDS = {
    # timm's card -> (datasheet FP16 tensor peak with FP32 accumulate, bandwidth, family)
    # GeForce cards run FP16 with FP32 accumulate at half their FP16-accumulate rate.
    "rtx3090": (71e12, 936e9, "ampere"),
    "rtx4090": (165.2e12, 1008e9, "ada"),
    "rtx5090": (209.5e12, 1792e9, "blackwell"),
    # RTX PRO 6000 Blackwell Max-Q Workstation Edition (300 W, 2,288 MHz boost), its own
    # datasheet: 3,511 sparse FP4 TOPS -> 438.9 dense FP16 TFLOP/s (full-rate FP32 accumulate)
    "rtx-pro-6000-maxq": (438.9e12, 1792e9, "blackwell"),
}
MAXQ_MATMUL = 235.13e12
"""The Max-Q is not shipped, so its published matmul lives here: cuBLAS float16 in, FP32
accumulate, 4096^3, the largest of its square sizes (waynehacking8/blackwell-tensorcore-kernels
results/bench.csv at c289bde, 2026-06-04, MIT); the shipped cards' are in the package's data."""
FIT_CARD = {
    "ampere": "rtx3090",
    "ada": "rtx4090",
    "blackwell (5090)": "rtx5090",
    "blackwell (Pro 6000 Max-Q)": "rtx-pro-6000-maxq",
}
"""The card each fit of ``report`` is made on: its fractions are shares of that datasheet."""


def matmul_share(card: str) -> float:
    """What a large float16 matmul was measured to reach on ``card``, as a share of its
    datasheet peak (``matmul_tflops`` in the package's data; 1.01 on the 4090, 0.54 on the
    300 W Max-Q)."""
    measured = MAXQ_MATMUL if card == "rtx-pro-6000-maxq" else None
    if measured is None:
        measured = _DATA["gpus"][card]["matmul_tflops"] * 1e12
    return measured / CARDS[card][0]


BOARD_WATTS = {
    # each card's board power from its datasheet (TDP / TGP; the SXM module's for datacenter
    # cards, one GPU of an HGX B200), the one datasheet figure that could say how far below
    # its peak a power-limited card runs
    "t4": 70, "l4": 72, "rtx-pro-6000-maxq": 300, "rtx3090": 350, "l40s": 350, "a100": 400,
    "rtx4090": 450, "rtx5090": 575, "rtx-pro-6000": 600, "h100": 700, "h200": 700, "mi300x": 750,
    "b200": 1000,
}  # fmt: skip


def board_power_rule() -> tuple[float, list[str]]:
    """Could the datasheet alone say what a card sustains? Fit one power law, compute scale =
    (peak per watt / the fit card's) ** k, on every shipped card with a published matmul that
    is not its family's fit card, and say what it gives for the held-out Max-Q (returns that
    scale and the table's lines)."""
    gpus, fams = _DATA["gpus"], _DATA["families"]
    per_watt = {
        c: gpus[c]["peak_tflops"]["float16"] / w for c, w in BOARD_WATTS.items() if c in gpus
    }
    per_watt["rtx-pro-6000-maxq"] = (
        CARDS["rtx-pro-6000-maxq"][0] / 1e12 / BOARD_WATTS["rtx-pro-6000-maxq"]
    )
    pairs = []  # (card, log peak-per-watt ratio, log measured scale)
    for card, table in gpus.items():
        family = fams[table["family"]]
        fit_card = fams[family.get("borrowed", table["family"])]["fitted_on"]
        if "matmul_tflops" in table and card != fit_card and card in BOARD_WATTS:
            share = table["matmul_tflops"] / table["peak_tflops"]["float16"]
            fit_share = gpus[fit_card]["matmul_tflops"] / gpus[fit_card]["peak_tflops"]["float16"]
            pairs.append(
                (card, math.log(per_watt[card] / per_watt[fit_card]), math.log(share / fit_share))
            )
    k = sum(x * y for _, x, y in pairs) / sum(x * x for _, x, _ in pairs)
    out = [
        f"\n**Board power as a datasheet rule**: compute scale = (float16 peak per board watt / "
        f"the fit card's) ** {k:.3f}, fitted on the {len(pairs)} shipped cards with a published "
        "matmul that are not a fit card\n",
        "| card | peak TFLOP/s per W | measured compute scale | by the rule |",
        "| --- | --- | --- | --- |",
    ]
    for card, x, y in pairs:
        out.append(f"| {card} | {per_watt[card]:.2f} | {math.exp(y):.2f} | {math.exp(k * x):.2f} |")
    x = math.log(per_watt["rtx-pro-6000-maxq"] / per_watt["rtx5090"])
    scale = math.exp(k * x)
    measured = matmul_share("rtx-pro-6000-maxq") / matmul_share("rtx5090")
    maxq = per_watt["rtx-pro-6000-maxq"]
    out.append(f"| rtx-pro-6000-maxq (held out) | {maxq:.2f} | {measured:.2f} | {scale:.2f} |")
    return scale, out


def scale_window(recs, held, family: dict, rule: float) -> list[str]:
    """The held-out Max-Q from the 5090's fit at a range of compute scales: how closely the
    target needs the card's sustained share, and where each way of knowing it lands."""
    measured = matmul_share("rtx-pro-6000-maxq") / matmul_share("rtx5090")
    marks = {
        1.0: "datasheet alone",
        round(measured, 3): "published matmul",
        round(rule, 3): "board-power rule",
    }
    out = [
        "\n**The held-out Max-Q from the 5090's fit at each compute scale** (within ±25% / "
        "within ±10% / rank correlation)\n",
        "| compute scale | eager | compiled |",
        "| --- | --- | --- |",
    ]
    for scale in sorted({0.40, 0.45, 0.47, 0.48, 0.50, 0.52, 0.55, 0.60, 0.75, *marks}):
        cells = []
        for execution in EXECUTIONS:
            rows = rows_for(recs, held, ["rtx-pro-6000-maxq"], (execution,))
            data = Set(rows, ["rtx-pro-6000-maxq"])
            data.peaks = data.peaks * scale
            s = score(data, plain(family))
            cells.append(f"{s['within25']:.0%} / {s['within10']:.1%} / {s['spearman']:.3f}")
        label = f"{scale:.3f}" + (f" ({marks[scale]})" if scale in marks else "")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


KINDS = {kind: i for i, kind in enumerate(EFFICIENCY_KINDS)}
TIED = torch.tensor([KINDS["matmul" if k == "matmul_small" else k] for k in KINDS])
"""The fractions each kind is priced at: ``matmul_small`` at ``matmul``'s. Products under a
gigaFLOP are rare at these batches, and fitted apart their shares went to extremes (ampere's
compute share 0.009, ada's 1.5): a batch-1 ViT on the A100 came out five times slower than on
the 4090, and a ``Linear(4096, 4096)`` nine times slower at batch 31 than at batch 32. A small
product's cost below its roofline is its launch."""
EXECUTIONS = ("eager", "compiled")


class Records(dict):
    """``(model, image size) -> record`` of the model as the newer tables ran it (its branches
    fused, ``gpu_tables.deployed``), with ``unfused``: the records of the models that fuse,
    as built, which the tables of ``gpu_tables.UNFUSED`` ran."""

    def __init__(self):
        super().__init__()
        self.unfused: dict[tuple[str, int], dict] = {}

    def of(self, key: tuple[str, int], filename: str) -> dict | None:
        """The record of ``key`` as the table ``filename`` ran it."""
        if filename in UNFUSED and key in self.unfused:
            return self.unfused[key]
        return self.get(key)


def records(path: Path = OUT) -> Records:
    found = Records()
    for line in path.read_text().splitlines():
        data = json.loads(line)
        if "error" not in data:
            key = (data["model"], data["size"])
            (found.unfused if data.get("fused") is False else found)[key] = data
    return found


def held_out(name: str) -> bool:
    """Whether a model is held out of every fit: by a hash of its name (every size of a model
    on one side), so the split does not move as more models are profiled."""
    return zlib.crc32(name.encode()) % 1000 < HELD_OUT * 1000


def split(keys) -> tuple[set[str], set[str]]:
    """Model names for the fit and held out."""
    names = {name for name, _ in keys}
    held = {name for name in names if held_out(name)}
    return names - held, held


def kernels(record: dict, batch: int, compiled: bool) -> list[tuple[int, float, float, int]]:
    """(kind index, FLOPs, bytes, count) of each kernel at ``batch``: FLOPs and activation
    bytes grow with it, weights do not."""
    scale = batch / record["batch"]
    found = []
    if compiled:
        for anchor, flops, moved, weights, launches in record["groups"]:
            if launches:
                kind = "pointwise" if anchor == "view" else anchor
                flops *= scale
                moved = (moved - weights) * scale + weights
                found.append((KINDS[efficiency_kind(kind, flops)], flops, moved, 1))
    else:
        for kind, flops, moved, weights, count in record["ops"]:
            if kind != "view":
                flops *= scale
                moved = (moved - weights) * scale + weights
                found.append((KINDS[efficiency_kind(kind, flops)], flops, moved, count))
    return found


class Set:
    """Every (model, card, execution) row as flat tensors the estimate is computed over."""

    def __init__(
        self, rows: list[tuple[dict, str, bool, float, int]], cards: list[str], fit_card: str = ""
    ):
        """``fit_card``: price each card with its datasheet peak times its measured matmul
        share over that card's, as the package does with ``matmul_tflops``."""
        kind, flops, moved, count, row, card_of, compiled_of = [], [], [], [], [], [], []
        self.peak, self.bandwidth, self.measured, self.labels = [], [], [], []
        for i, (record, card, compiled, seconds, batch) in enumerate(rows):
            peak, bandwidth, _ = CARDS[card]
            if fit_card:
                peak *= matmul_share(card) / matmul_share(fit_card)
            for k, f, m, c in kernels(record, batch, compiled):
                kind.append(k), flops.append(f), moved.append(m), count.append(c), row.append(i)
            self.peak.append(peak), self.bandwidth.append(bandwidth)
            card_of.append(cards.index(card) if card in cards else 0)
            compiled_of.append(int(compiled))
            self.measured.append(seconds)
            self.labels.append((record["model"], record["size"], card, compiled))
        self.kind, self.row = torch.tensor(kind, dtype=torch.long), torch.tensor(row)
        self.flops = torch.tensor(flops, dtype=torch.float64)
        self.moved = torch.tensor(moved, dtype=torch.float64)
        self.count = torch.tensor(count, dtype=torch.float64)
        self.peaks = torch.tensor(self.peak, dtype=torch.float64)[self.row]
        self.bws = torch.tensor(self.bandwidth, dtype=torch.float64)[self.row]
        self.card = torch.tensor(card_of, dtype=torch.long)[self.row]
        self.execution = torch.tensor(compiled_of, dtype=torch.long)[self.row]
        self.target = torch.tensor(self.measured, dtype=torch.float64)

    def estimate(self, params: dict) -> torch.Tensor:
        """Seconds per row: each kernel's launch plus the slower of compute and memory, at
        its execution's fractions (and its card's compute scale, 1 for a family's first)."""
        kind = TIED[self.kind]
        compute = params["compute"][self.execution, kind] * params["scale"][self.card]
        memory = params["memory"][self.execution, kind]
        roof = torch.maximum(self.flops / (compute * self.peaks), self.moved / (memory * self.bws))
        per = (params["launch"] + roof) * self.count
        return torch.zeros(len(self.measured), dtype=torch.float64).index_add(0, self.row, per)


def fit(data: Set, cards: int = 1, steps: int = 600) -> dict:
    """The fractions, launch and card scales minimising the robust loss (Adam over logs)."""
    n = len(KINDS)
    log_c = torch.full((2, n), math.log(0.5), dtype=torch.float64, requires_grad=True)
    log_m = torch.full((2, n), math.log(0.7), dtype=torch.float64, requires_grad=True)
    log_s = torch.zeros(cards - 1, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([log_c, log_m, log_s], lr=0.05)

    def params():
        scale = torch.cat([torch.zeros(1, dtype=torch.float64), log_s]).exp()
        return {"compute": log_c.exp(), "memory": log_m.exp(), "launch": LAUNCH_S, "scale": scale}

    for _ in range(steps):
        optimizer.zero_grad()
        error = torch.log(data.estimate(params()) / data.target)
        loss = torch.nn.functional.huber_loss(error, torch.zeros_like(error), delta=HUBER)
        loss.backward()
        optimizer.step()
        with torch.no_grad():  # a fraction of a datasheet peak: at most 1.5 (caches help)
            log_c.clamp_(max=math.log(1.5))
            log_m.clamp_(max=math.log(1.5))
    with torch.no_grad():
        found = {k: v.detach().clone() for k, v in params().items() if k != "launch"}
        for key in ("compute", "memory"):  # the tied kinds' figures, as they were priced
            found[key] = found[key][:, TIED]
    found["launch"] = LAUNCH_S
    # an execution no row of the fit measured keeps the start value; the caller fills it
    found["measured"] = {
        e for e, i in (("eager", 0), ("compiled", 1)) if (data.execution == i).any()
    }
    return found


def rows_for(recs, names, cards, executions) -> list:
    rows = []
    for card in cards:
        eager_file, compiled_file = TABLES[card]
        for compiled, filename in ((False, eager_file), (True, compiled_file)):
            if filename is None or ("compiled" if compiled else "eager") not in executions:
                continue
            for (model, size), row in read_table(filename).items():
                record = recs.of((model, size), filename)
                if record is not None and model in names:
                    rows.append((record, card, compiled, row["step_s"], row["batch"]))
    return rows


def spearman(a: list[float], b: list[float]) -> float:
    def ranks(values):
        order = sorted(range(len(values)), key=values.__getitem__)
        found = [0.0] * len(values)
        for rank, i in enumerate(order):
            found[i] = rank
        return found

    ra, rb = ranks(a), ranks(b)
    mean = (len(a) - 1) / 2
    cov = sum((x - mean) * (y - mean) for x, y in zip(ra, rb, strict=True))
    var = sum((x - mean) ** 2 for x in ra)
    return cov / var if var else float("nan")


def score(data: Set, params: dict) -> dict:
    est = data.estimate(params).tolist()
    ratios = [e / m for e, m in zip(est, data.measured, strict=True)]
    n = len(ratios)
    return {
        "n": n,
        "within25": sum(abs(r - 1) <= 0.25 for r in ratios) / n,
        "within10": sum(abs(r - 1) <= 0.10 for r in ratios) / n,
        "median": sorted(ratios)[n // 2],
        "p10": sorted(ratios)[n // 10],
        "p90": sorted(ratios)[(9 * n) // 10],
        "spearman": spearman(est, data.measured),
        "ratios": ratios,
    }


def line(label: str, s: dict) -> str:
    return (
        f"| {label} | {s['n']} | {s['within25']:.0%} | {s['within10']:.0%} | "
        f"{s['median']:.2f} ({s['p10']:.2f}-{s['p90']:.2f}) | {s['spearman']:.3f} |"
    )


HEADER = (
    "| card, execution (held-out models) | rows | within ±25% | within ±10% | estimate / "
    "measured, median (10th-90th) | rank correlation |\n| --- | --- | --- | --- | --- | --- |"
)


def fitted(recs, names, cards) -> dict:
    return fit(Set(rows_for(recs, names, cards, EXECUTIONS), cards), cards=len(cards))


def borrow_compiled(params: dict, donor: dict) -> dict:
    """A family fitted on eager rows alone: its compiled fractions are its eager ones times
    the donor family's compiled / eager ratio of each kind."""
    if "compiled" in params["measured"]:
        return params
    compute, memory = params["compute"].clone(), params["memory"].clone()
    compute[1] = compute[0] * donor["compute"][1] / donor["compute"][0]
    memory[1] = memory[0] * donor["memory"][1] / donor["memory"][0]
    return {**params, "compute": compute.clamp(max=1.5), "memory": memory.clamp(max=1.5)}


def plain(params: dict) -> dict:
    """The family's figures for a card given only its datasheet (compute scale 1)."""
    return {**params, "scale": torch.ones_like(params["scale"])}


CHECKS = [
    # (held-out card, fitted family key, title)
    (
        "rtx-pro-6000-maxq",
        "blackwell (5090)",
        "RTX PRO 6000 Blackwell Max-Q as a card nobody shipped: its own datasheet and the "
        "blackwell family fitted on the 5090",
    ),
    (
        "rtx5090",
        "blackwell (Pro 6000 Max-Q)",
        "RTX 5090 as a card nobody shipped: its datasheet and the blackwell family fitted on "
        "the Pro 6000 Max-Q",
    ),
    (
        "rtx5090",
        "ada",
        "RTX 5090 given ada's fit (a card of a family the fit never saw, borrowing another's)",
    ),
    ("rtx-pro-6000-maxq", "ada", "RTX PRO 6000 Max-Q given ada's fit"),
    ("rtx4090", "ada", "RTX 4090, the card of the fit, on held-out models"),
    ("rtx3090", "ampere", "RTX 3090, the card of the fit, on held-out models (eager only)"),
]


def report(recs, train, held) -> tuple[list[str], dict]:
    out, scores = [], {}
    ada = fitted(recs, train, ["rtx4090"])
    families = {
        "ampere": borrow_compiled(fitted(recs, train, ["rtx3090"]), ada),
        "ada": ada,
        "blackwell (5090)": fitted(recs, train, ["rtx5090"]),
        "blackwell (Pro 6000 Max-Q)": fitted(recs, train, ["rtx-pro-6000-maxq"]),
    }
    for card, family, title in CHECKS:
        out += [f"\n**{title}**\n", HEADER]
        for measured in ("", FIT_CARD[family]):
            for execution in EXECUTIONS:
                rows = rows_for(recs, held, [card], (execution,))
                if rows and (not measured or measured != card):
                    s = score(Set(rows, [card], measured), plain(families[family]))
                    scores[(card, family, execution, bool(measured))] = s
                    how = ", measured matmul" if measured else ""
                    out.append(line(f"{card}, {execution}{how}", s))
    # not a held-out card: what the Max-Q's one sustained-compute figure is worth
    both = fitted(recs, train, ["rtx5090", "rtx-pro-6000-maxq"])
    out += [
        "\n**Not a held-out card: the blackwell family fitted on the 5090 and the Max-Q "
        f"together, the Max-Q's compute scale fitted too ({float(both['scale'][1]):.2f} of "
        "its datasheet peak relative to the 5090's), on held-out models**\n",
        HEADER,
    ]
    for card in ("rtx-pro-6000-maxq", "rtx5090"):
        for execution in EXECUTIONS:
            rows = rows_for(recs, held, [card], (execution,))
            s = score(Set(rows, ["rtx5090", "rtx-pro-6000-maxq"]), both)
            out.append(line(f"{card}, {execution}", s))
    rule, table = board_power_rule()
    out += table + scale_window(recs, held, families["blackwell (5090)"], rule)
    out += other_4090_tables(recs, held, ada)
    return out + matrix(recs, held, families) + matrix(recs, held, families, True), scores


EARLIER = "timm-benchmark-infer-amp-nchw-pt240-cu124-rtx4090"
OTHER_4090 = {
    # timm's earlier tables of the 4090 (torch 2.4): compiled at batch 256, eager at 1024
    "compiled, batch 256, torch 2.4": (f"{EARLIER}-dynamo.csv", True),
    "eager, batch 1024, torch 2.4": (f"{EARLIER}.csv", False),
}


def other_4090_tables(recs, held, ada: dict) -> list[str]:
    """ada's fit (torch 2.9.1, batch 1024) on timm's earlier 4090 tables, held-out models: what
    a quarter of the batch (and another torch) does to shares fitted at one batch."""
    out = [
        "\n**RTX 4090, ada's fit on timm's earlier tables of the same card (torch 2.4), "
        "held-out models**\n",
        HEADER,
    ]
    for label, (filename, compiled) in OTHER_4090.items():
        rows = [
            (recs.of(key, filename), "rtx4090", compiled, row["step_s"], row["batch"])
            for key, row in read_table(filename).items()
            if key in recs and key[0] in held
        ]
        out.append(line(f"rtx4090, {label}", score(Set(rows, ["rtx4090"]), plain(ada))))
    return out


def matrix(recs, held, families: dict, measured: bool = False) -> list[str]:
    """Every card from every family's fit, on held-out models: which fit a card borrows is not
    something a user can choose by its score, so the whole matrix shows. ``measured``: each
    card's datasheet peak scaled by its measured matmul share over the fit card's."""
    names = list(families)
    how = "datasheet and measured matmul" if measured else "datasheet only"
    out = [
        f"\n**Every card from every fit, {how}, on held-out models** (within ±25% / "
        "within ±10% / rank correlation; a card from its own fit holds out models only; "
        "ampere's compiled fractions are its eager ones times ada's compiled / eager ratio)\n",
        "| card, execution | " + " | ".join(f"fitted on {n}" for n in names) + " |",
        "| --- |" + " --- |" * len(names),
    ]
    for card in CARDS:
        for execution in EXECUTIONS:
            rows = rows_for(recs, held, [card], (execution,))
            if not rows:
                continue
            data, cells = Set(rows, [card]), []
            for name in names:
                if measured:
                    data = Set(rows, [card], FIT_CARD[name])
                s = score(data, plain(families[name]))
                cells.append(f"{s['within25']:.0%} / {s['within10']:.0%} / {s['spearman']:.3f}")
            out.append(f"| {card}, {execution} | " + " | ".join(cells) + " |")
    return out


def shipped(recs) -> dict:
    """The figures the package ships: each family fitted on all its cards and models; the
    blackwell family at the 5090's scale (the Max-Q's own compute scale fitted beside it)."""
    every = {name for name, _ in recs}
    ada = fitted(recs, every, ["rtx4090"])
    return {
        "ampere": borrow_compiled(fitted(recs, every, ["rtx3090"]), ada),
        "ada": ada,
        "blackwell": fitted(recs, every, ["rtx5090", "rtx-pro-6000-maxq"]),
    }


def toml(families: dict) -> str:
    lines = []
    for name, p in families.items():
        fit_card = FIT_CARD["blackwell (5090)" if name == "blackwell" else name]
        lines += [f"[families.{name}]", f'fitted_on = "{fit_card}"']
        lines += [f"launch_us = {p['launch'] * 1e6:.3g}"]
        for key, e in (("efficiency", 0), ("compiled", 1)):
            pairs = ", ".join(
                f"{kind} = [{p['compute'][e][i]:.3g}, {p['memory'][e][i]:.3g}]"
                for kind, i in KINDS.items()
            )
            lines.append(f"{key} = {{ {pairs} }}")
        if len(p["scale"]) > 1:
            lines.append(f"# second card's compute scale: {float(p['scale'][1]):.3f}")
    return "\n".join(lines)


def amp_bytes(half: dict, amp: dict) -> str:
    """How many more bytes a model's eager ops move under autocast than cast to float16, and
    how many more kernels it launches (medians over the pairs profiled both ways)."""

    def totals(record):
        ops = [op for op in record["ops"] if op[0] != "view"]
        return sum(op[2] * op[4] for op in ops), sum(op[4] for op in ops)

    ratios = []
    for key in half.keys() & amp.keys():
        (b16, k16), (bamp, kamp) = totals(half[key]), totals(amp[key])
        ratios.append((bamp / b16, kamp / k16))
    n = len(ratios)
    by_bytes, by_kernels = sorted(r for r, _ in ratios), sorted(k for _, k in ratios)
    return (
        f"eager bytes under autocast / float16, {n} pairs: median {by_bytes[n // 2]:.2f} "
        f"(10th-90th {by_bytes[n // 10]:.2f}-{by_bytes[9 * n // 10]:.2f}); kernels "
        f"{by_kernels[n // 2]:.2f}x"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toml", action="store_true", help="print the shipped families' TOML")
    parser.add_argument(
        "--amp", action="store_true", help="the profiles made under autocast (gpu_tables --amp)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    recs = records(OUT_AMP if args.amp else OUT)
    train, held = split(recs)
    print(
        f"{len(recs)} profiled (model, size) pairs; {len(train)} models fit, {len(held)} held out"
    )
    if args.amp and OUT.exists():
        print(amp_bytes(records(OUT), recs))
    print("\n".join(report(recs, train, held)[0]))
    if args.toml:
        print(toml(shipped(recs)))
    get("rtx4090")  # the package's profiles load (the data file parses)
    return 0


if __name__ == "__main__":
    sys.exit(main())
