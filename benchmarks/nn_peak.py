"""Peak memory of torch.nn's layers, losses and tensor functions in tiny models, measured.

Each case puts one layer, loss or tensor function behind a small layer with weights, so that a
training step computes the gradient of the layer's input too, as inside a network, and
measures two steps against ``torch.profiler(profile_memory=True)`` on one intra-op thread
(``tests/engine/test_peak_measured.measured_peak``: what the step holds before it, plus the
profiler's running peak):

- ``eval``: a forward under ``inference_mode``, its output held;
- ``train``: the forward, ``sum().backward()``: the layer's output gradient is the sum's
  seed expanded (strides 0), which many backward kernels copy contiguous first;
- ``inside``: the same with the output scaled by a weight, so that the gradient reaching the
  layer is dense, as inside a network.

A kernel that allocates inside itself what its meta kernel does not (a loop's slices, a copy
in another layout, a mask) shows here as an estimate under the measured peak: ``nn.Bilinear``
read 0.40 of it before ``costs/scratch.trilinear_slices``.

    python benchmarks/nn_peak.py                    # every case, writes NN_PEAK_RESULTS.md
    python benchmarks/nn_peak.py --cases GroupNorm,CTCLoss --no-write
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import warnings
from pathlib import Path

from notes import cpu_kernels, ratio, save_results  # benchmarks/notes.py

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE.parent / "tests" / "engine")]


def cases() -> dict:
    """Name -> a function making (model, input), seeded by the caller."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Behind(nn.Module):
        """``layer(pre(x))``, or ``layer(pre(x), *more)`` for a loss with its target."""

        def __init__(self, pre, layer, *more):
            super().__init__()
            self.pre, self.layer = pre, layer
            for i, t in enumerate(more):
                self.register_buffer(f"more{i}", t)
            self.count = len(more)

        def forward(self, x):
            more = [getattr(self, f"more{i}") for i in range(self.count)]
            return self.layer(self.pre(x), *more)

    class Pair(nn.Module):
        """A layer of two inputs, both made from ``x``."""

        def __init__(self, layer, width=16):
            super().__init__()
            self.a, self.b, self.layer = nn.Linear(16, width), nn.Linear(16, width), layer

        def forward(self, x):
            return self.layer(self.a(x), self.b(x).relu())

    class SelfMemory(nn.Module):
        """A decoder layer attending to its own input as memory."""

        def __init__(self):
            super().__init__()
            self.layer = nn.TransformerDecoderLayer(16, 2, 32, batch_first=True)

        def forward(self, x):
            return self.layer(x, x)

    class SelfAttention(nn.Module):
        """``nn.MultiheadAttention`` on its input as query, key and value."""

        def __init__(self):
            super().__init__()
            self.layer = nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, x):
            return self.layer(x, x, x)[0]

    def image(layer, channels=8, size=16, batch=2):
        return lambda: (Behind(nn.Conv2d(3, channels, 1), layer), torch.randn(batch, 3, size, size))

    def volume(layer):
        return lambda: (Behind(nn.Conv3d(3, 8, 1), layer), torch.randn(2, 3, 8, 8, 8))

    def signal(layer):
        return lambda: (Behind(nn.Conv1d(3, 8, 1), layer), torch.randn(2, 3, 32))

    def tokens(layer):
        return lambda: (Behind(nn.Linear(16, 16), layer), torch.randn(4, 10, 16))

    def loss(layer, target, width=10):
        return lambda: (Behind(nn.Linear(16, width), layer, target()), torch.randn(8, 16))

    def recurrent(layer):
        class Out(nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = layer

            def forward(self, x):
                return self.layer(x)[0]

        return tokens(Out())

    classes = lambda: torch.randint(0, 10, (8,))  # noqa: E731
    found = {
        f"{type(layer).__name__}{tag}": image(layer)
        for layer, tag in [
            (nn.MaxPool2d(2), ""),
            (nn.MaxPool2d(3, 2, 1, ceil_mode=True), "(3,2,1,ceil)"),
            (nn.AvgPool2d(2), ""),
            (nn.AvgPool2d(3, 1, 1, count_include_pad=False), "(3,1,1)"),
            (nn.LPPool2d(2, 2), ""),
            (nn.AdaptiveAvgPool2d(3), ""),
            (nn.AdaptiveMaxPool2d(3), ""),
            (nn.FractionalMaxPool2d(2, output_size=8), ""),
            (nn.ReflectionPad2d(2), ""),
            (nn.ReplicationPad2d(2), ""),
            (nn.ZeroPad2d(2), ""),
            (nn.CircularPad2d(2), ""),
            (nn.PixelShuffle(2), ""),
            (nn.PixelUnshuffle(2), ""),
            (nn.ChannelShuffle(2), ""),
            (nn.Upsample(scale_factor=2), "(nearest)"),
            (nn.Upsample(scale_factor=2, mode="bilinear"), "(bilinear)"),
            (nn.Upsample(scale_factor=2, mode="bicubic", align_corners=True), "(bicubic)"),
            (nn.Upsample(size=(80, 80), mode="bilinear"), "(bilinear,80)"),
            (nn.BatchNorm2d(8), ""),
            (nn.GroupNorm(4, 8), ""),
            (nn.InstanceNorm2d(8, affine=True), "(affine)"),
            (nn.InstanceNorm2d(8, track_running_stats=True), "(tracked)"),
            (nn.LocalResponseNorm(3), ""),
            (nn.Dropout2d(0.5), ""),
            (nn.Softmax2d(), ""),
            (nn.Unfold(3, padding=1), ""),
            (nn.Sequential(nn.Unfold(2, stride=2), nn.Fold(16, 2, stride=2)), "(Unfold-Fold)"),
            (nn.PReLU(8), ""),
            (nn.RReLU(), ""),
            (nn.GLU(dim=1), ""),
            (nn.Hardswish(), ""),
            (nn.SiLU(), ""),
            (nn.GELU(), ""),
            (nn.Mish(), ""),
            (nn.GELU(approximate="tanh"), "(tanh)"),
            (nn.ELU(), ""),
            (nn.CELU(), ""),
            (nn.SELU(), ""),
            (nn.LogSigmoid(), ""),
            (nn.Softplus(), ""),
            (nn.Softsign(), ""),
            (nn.Tanhshrink(), ""),
            (nn.Threshold(0.1, 0.0), ""),
            (nn.Hardsigmoid(), ""),
            (nn.ReLU6(), ""),
            (nn.LeakyReLU(0.1), ""),
            (nn.Softmin(dim=1), ""),
            (nn.LogSoftmax(dim=1), ""),
        ]
    }
    found |= {
        f"{type(layer).__name__}{tag}": volume(layer)
        for layer, tag in [
            (nn.MaxPool3d(2), ""),
            (nn.AvgPool3d(2), ""),
            (nn.AdaptiveAvgPool3d(3), ""),
            (nn.Upsample(scale_factor=2, mode="trilinear"), "(trilinear)"),
            (nn.BatchNorm3d(8), ""),
            (nn.ReplicationPad3d(1), ""),
            (nn.ReflectionPad3d(1), ""),
            (nn.AdaptiveMaxPool3d(3), ""),
            (nn.ConvTranspose3d(8, 4, 2, stride=2), ""),
        ]
    }
    found |= {
        f"{type(layer).__name__}{tag}": signal(layer)
        for layer, tag in [
            (nn.MaxPool1d(3, 2), ""),
            (nn.AvgPool1d(4), ""),
            (nn.AdaptiveMaxPool1d(5), ""),
            (nn.ConvTranspose1d(8, 8, 4, stride=2), ""),
            (nn.Upsample(scale_factor=3, mode="linear"), "(linear)"),
            (nn.InstanceNorm1d(8), ""),
            (nn.ReflectionPad1d(3), ""),
            (nn.ReplicationPad1d(3), ""),
        ]
    }
    found |= {
        f"{type(layer).__name__}{tag}": tokens(layer)
        for layer, tag in [
            (nn.LayerNorm(16), ""),
            (nn.RMSNorm(16), ""),
            (nn.Dropout(0.1), ""),
            (nn.AlphaDropout(0.1), ""),
            (nn.FeatureAlphaDropout(0.1), ""),
            (nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), ""),
            (nn.Softmax(dim=-1), ""),
        ]
    }
    found["TransformerDecoderLayer(memory=x)"] = tokens(SelfMemory())
    found |= {
        f"{type(layer).__name__}{tag}": recurrent(layer)
        for layer, tag in [
            (nn.LSTM(16, 12, proj_size=8, batch_first=True), "(proj)"),
            (nn.GRU(16, 12, bidirectional=True, batch_first=True), "(bidirectional)"),
            (nn.RNN(16, 12, num_layers=2, batch_first=True), "(2 layers)"),
        ]
    }
    found["MultiheadAttention"] = tokens(SelfAttention())
    found["CosineSimilarity"] = lambda: (Pair(nn.CosineSimilarity(dim=-1)), torch.randn(8, 16))
    found["PairwiseDistance"] = lambda: (Pair(nn.PairwiseDistance()), torch.randn(8, 16))
    found["Bilinear"] = lambda: (Pair(nn.Bilinear(16, 16, 12)), torch.randn(8, 16))
    found["EmbeddingBag(mean)"] = lambda: (
        nn.Sequential(nn.EmbeddingBag(500, 16, mode="mean"), nn.Linear(16, 4)),
        torch.randint(0, 500, (8, 6)),
    )
    found["EmbeddingBag(max)"] = lambda: (
        nn.Sequential(nn.EmbeddingBag(500, 16, mode="max"), nn.Linear(16, 4)),
        torch.randint(0, 500, (8, 6)),
    )
    found["Embedding(max_norm)"] = lambda: (
        nn.Sequential(nn.Embedding(500, 16, max_norm=1.0), nn.Linear(16, 4)),
        torch.randint(0, 500, (8, 6)),
    )
    for layer, target, width in [
        (nn.CrossEntropyLoss(label_smoothing=0.1), classes, 10),
        (nn.NLLLoss(), classes, 10),
        (nn.MultiMarginLoss(), classes, 10),
        (nn.KLDivLoss(reduction="batchmean"), lambda: torch.softmax(torch.randn(8, 10), -1), 10),
        (nn.BCEWithLogitsLoss(pos_weight=torch.ones(10)), lambda: torch.rand(8, 10), 10),
        (nn.MSELoss(), lambda: torch.randn(8, 10), 10),
        (nn.L1Loss(), lambda: torch.randn(8, 10), 10),
        (nn.HuberLoss(), lambda: torch.randn(8, 10), 10),
        (nn.SmoothL1Loss(), lambda: torch.randn(8, 10), 10),
        (nn.SoftMarginLoss(), lambda: torch.randn(8, 10).sign(), 10),
        (nn.MultiLabelSoftMarginLoss(), lambda: torch.randint(0, 2, (8, 10)).float(), 10),
        (nn.MultiLabelMarginLoss(), lambda: torch.randint(-1, 10, (8, 10)), 10),
        (nn.PoissonNLLLoss(), lambda: torch.rand(8, 10), 10),
        (nn.HingeEmbeddingLoss(), lambda: torch.randn(8, 10).sign(), 10),
    ]:
        found[type(layer).__name__] = loss(layer, target, width)
    found["CrossEntropyLoss(2d)"] = lambda: (
        Behind(nn.Conv2d(3, 5, 1), nn.CrossEntropyLoss(), torch.randint(0, 5, (2, 16, 16))),
        torch.randn(2, 3, 16, 16),
    )
    found["CTCLoss"] = lambda: (
        Behind(
            nn.Sequential(nn.Linear(16, 6), nn.LogSoftmax(-1)),
            lambda x, t: F.ctc_loss(x, t, [10] * 4, [3] * 4),
            torch.randint(1, 6, (4, 3)),
        ),
        torch.randn(10, 4, 16),
    )
    found |= functional(torch, nn, F)
    return found


def functional(torch, nn, F) -> dict:
    """Tensor functions a model's own code calls, each on a projected input: ``fn(x)``."""

    class Fn(nn.Module):
        def __init__(self, fn, width: int = 16):
            super().__init__()
            self.pre, self.fn = nn.Linear(16, width), fn

        def forward(self, x):
            return self.fn(self.pre(x))

    x = (4, 10, 16)
    table = {
        "sdpa": lambda h: F.scaled_dot_product_attention(h, h, h),
        "sdpa(causal)": lambda h: F.scaled_dot_product_attention(h, h, h, is_causal=True),
        "sdpa(dropout)": lambda h: F.scaled_dot_product_attention(h, h, h, dropout_p=0.1),
        "sdpa(mask)": lambda h: F.scaled_dot_product_attention(
            h, h, h, attn_mask=torch.ones(10, 10, dtype=torch.bool).tril()
        ),
        "softmax(dim=1)": lambda h: h.softmax(1),
        "cumsum": lambda h: h.cumsum(1),
        "sort": lambda h: h.sort(-1).values,
        "topk": lambda h: h.topk(4, -1).values,
        "logsumexp": lambda h: h.logsumexp(-1),
        "var": lambda h: h.var(-1),
        "norm": lambda h: h.norm(dim=-1),
        "einsum(bij-bkj)": lambda h: torch.einsum("bij,bkj->bik", h, h),
        "matmul(bcast)": lambda h: h @ h[0].T,
        "cat": lambda h: torch.cat([h, h * 2], -1),
        "stack": lambda h: torch.stack([h, h * 2], 0),
        "roll": lambda h: h.roll(1, 1),
        "flip": lambda h: h.flip(1),
        "repeat": lambda h: h.repeat(1, 2, 1),
        "expand.contiguous": lambda h: h[:, :1].expand(-1, 10, -1).contiguous(),
        "transpose.contiguous": lambda h: h.transpose(1, 2).contiguous(),
        "masked_fill": lambda h: h.masked_fill(h > 0, 0.0),
        "where": lambda h: torch.where(h > 0, h, h * 0.1),
        "gather": lambda h: h.gather(-1, h.argsort(-1)),
        "index_select": lambda h: h.index_select(1, torch.tensor([0, 2, 4])),
        "scatter_add": lambda h: torch.zeros_like(h).scatter_add(-1, h.argsort(-1), h),
        "tril": lambda h: h.tril(),
        "outer-cdist": lambda h: torch.cdist(h, h),
        "fft.rfft": lambda h: torch.fft.rfft(h, dim=1).abs(),
        "clamp": lambda h: h.clamp(-0.5, 0.5),
        "pow": lambda h: h.pow(3),
        "abs": lambda h: h.abs(),
        "interpolate(linear)": lambda h: F.interpolate(h, scale_factor=2, mode="linear"),
        "pad(reflect)": lambda h: F.pad(h, (2, 2), mode="reflect"),
        "normalize": lambda h: F.normalize(h, dim=-1),
        "layer_norm(no affine)": lambda h: F.layer_norm(h, (16,)),
        "dropout": lambda h: F.dropout(h, 0.1),
        "one_hot-matmul": lambda h: F.one_hot(h.argmax(-1), 16).float() @ h.transpose(1, 2),
    }
    return {name: (lambda fn=fn: (Fn(fn), torch.randn(*x))) for name, fn in table.items()}


def measure(name: str, make) -> dict:
    import torch
    from test_peak_measured import estimated_peak, measured_peak  # tests/engine

    class Inside(torch.nn.Module):
        """The layer's output scaled by a weight: its gradient reaches the layer dense, as
        inside a network, where the sum loss's reaches it expanded (strides 0)."""

        def __init__(self, model):
            super().__init__()
            self.model, self.scale = model, torch.nn.Parameter(torch.ones(()))

        def forward(self, x):
            return self.model(x) * self.scale

    row = {"case": name}
    for step in ("eval", "train", "inside"):
        torch.manual_seed(0)
        model, x = make()
        model = Inside(model) if step == "inside" else model
        optimizer = "eval" if step == "eval" else None
        torch.manual_seed(1)
        ours = estimated_peak(model, x, optimizer)
        torch.manual_seed(1)
        row[step] = (ours, measured_peak(model, x, optimizer))
    return row


def render(rows: list[dict], failed: dict[str, str], seconds: float) -> str:
    import torch

    lines = [
        "# torch.nn layers and losses in tiny models: peaks estimated and measured",
        "",
        "Written by `python benchmarks/nn_peak.py` (its docstring says what is measured): "
        f"torch {torch.__version__}, Python {platform.python_version()}, one intra-op thread, "
        f"{cpu_kernels()}, {seconds:.0f} s.",
        "",
        "| case | eval (ours) | measured | eval | train | train, inside |",
        "| --- | ---: | ---: | --- | --- | --- |",
    ]
    for r in rows:
        (e, em), train, inside = r["eval"], r["train"], r["inside"]
        lines.append(
            f"| {r['case']} | {e:,} | {em:,} | {ratio(e, em)} | {ratio(*train)} | "
            f"{ratio(*inside)} |"
        )
    steps = [r[s] for r in rows for s in ("eval", "train", "inside")]
    within = sum(abs(ours - truth) <= 0.001 * truth for ours, truth in steps)
    lines += [
        "",
        f"{len(rows)} cases: {within} of {len(steps)} steps within ±0.1% of measured.",
    ]
    for name, why in failed.items():
        lines.append(f"- {name} failed: {why}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated case names (default: all)")
    parser.add_argument("--no-write", action="store_true", help="print, do not write the file")
    options = parser.parse_args()
    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)  # oneDNN's scratch is per thread
    table = cases()
    names = options.cases.split(",") if options.cases else list(table)
    rows, failed, start = [], {}, time.perf_counter()
    for name in names:
        try:
            row = measure(name, table[name])
        except Exception as error:  # a row that says why, not a stopped sweep
            failed[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
            print(name, "failed:", failed[name], flush=True)
            continue
        rows.append(row)
        print(name, *(ratio(*row[s]) for s in ("eval", "train", "inside")), flush=True)
    text = render(rows, failed, time.perf_counter() - start)
    if options.no_write:
        print(text)
    else:
        save_results(HERE / "NN_PEAK_RESULTS.md", text, partial=bool(options.cases))


if __name__ == "__main__":
    main()
