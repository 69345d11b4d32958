"""Each kernel kind's micro-benchmarks: a few shapes of the layers real models use
(MobileNet's depthwise 3x3, ResNet's 3x3 and 1x1, BERT's linear layers, ...), each shape's
FLOPs and bytes written out by hand below, as ``engine.latency`` counts them (FLOPs = 2 x MACs;
bytes = inputs + weights + output). Each maker builds its tensors with torch's default device,
so ``modes.kernels`` builds them on the device it calibrates (``with torch.device(...)``);
``batch`` multiplies every shape's batch (a GPU's rates show at a batch a CPU's never needs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_graphbudget.modes.post_shapes import Bench, float32_benches


def _conv(
    cin: int, cout: int, k: int, hw: int, groups: int, dtype: Any, stride: int = 1, batch: int = 1
):
    import torch

    conv = torch.nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups).to(dtype)
    x = torch.randn(batch, cin, hw, hw, dtype=dtype)
    out = (hw + 2 * (k // 2) - k) // stride + 1
    macs = batch * cout * out * out * (cin // groups) * k * k
    size = x.element_size()
    moved = size * (batch * (cin * hw * hw + cout * out * out) + conv.weight.numel() + cout)
    return (lambda: conv(x)), 2 * macs, moved


def linear(m: int, k: int, n: int, dtype: Any, batch: int = 1):
    import torch

    m *= batch
    layer = torch.nn.Linear(k, n).to(dtype)
    x = torch.randn(m, k, dtype=dtype)
    return (lambda: layer(x)), 2 * m * k * n, x.element_size() * (m * k + k * n + n + m * n)


def _attention(heads: int, seq: int, dim: int, dtype: Any, batch: int = 1):
    import torch

    q, k, v = (torch.randn(batch, heads, seq, dim, dtype=dtype) for _ in range(3))
    call = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)  # noqa: E731
    heads *= batch
    return call, 4 * heads * seq * seq * dim, q.element_size() * 4 * heads * seq * dim


def _block(seq: int, embed: int, heads: int, dtype: Any, batch: int = 1):
    """``nn.MultiheadAttention``'s fast path on ``(1, seq, embed)``: its MACs are the four
    projections, 4 seq embed^2, and the scores and their sum, 2 seq^2 embed (the softmax's few
    FLOPs per score left out: under 1% at ViT-B's sizes)."""
    import torch

    block = torch.nn.MultiheadAttention(embed, heads, batch_first=True).eval().to(dtype)
    x = torch.randn(batch, seq, embed, dtype=dtype)
    call = lambda: block(x, x, x, need_weights=False)  # noqa: E731
    macs = batch * (4 * seq * embed * embed + 2 * seq * seq * embed)
    weights = 4 * embed * embed + 4 * embed
    return call, 2 * macs, x.element_size() * (2 * batch * seq * embed + weights)


def _memory(op: str, n: int, dtype: Any, batch: int = 1):
    """A memory-bound op over ``n`` elements (``batch`` times as many): its bytes (read +
    write)."""
    import torch

    n *= batch
    x, y = torch.randn(n // 64, 64, dtype=dtype), torch.randn(n // 64, 64, dtype=dtype)
    size = x.element_size()
    relu, silu, hardswish = torch.nn.ReLU(), torch.nn.SiLU(), torch.nn.Hardswish()  # as modules
    calls = {
        "add": (lambda: x + y, n, 3 * n),
        "mul": (lambda: x * y, n, 3 * n),
        "relu": (lambda: relu(x), n, 2 * n),
        "silu": (lambda: silu(x), 4 * n, 2 * n),
        "sigmoid": (lambda: torch.sigmoid(x), 4 * n, 2 * n),
        "gelu": (lambda: torch.nn.functional.gelu(x), 5 * n, 2 * n),
        "tanh": (lambda: torch.tanh(x), n, 2 * n),
        "hardswish": (lambda: hardswish(x), 4 * n, 2 * n),
        "softmax": (lambda: torch.softmax(x, -1), 5 * n, 2 * n),
        "layer_norm": (lambda: torch.nn.functional.layer_norm(x, (64,)), 5 * n, 2 * n),
        "copy": (lambda: x.t().contiguous(), 0, 2 * n),
        "shuffle": (lambda: x.view(2, -1, 64).transpose(0, 1).contiguous(), 0, 2 * n),
        "cat": (lambda: torch.cat([x, y]), 0, 4 * n),
        "view": (lambda: x.view(-1), 0, 0),
    }
    call, flops, elements = calls[op]
    return call, flops, size * elements


def _compare(op: str, n: int, dtype: Any, batch: int = 1):
    """A comparison writing a bool an element, or a value chosen by a mask an element: ``gt``,
    ``n`` scores against a threshold; ``eq``, ``n`` int64 labels against one class (batched
    NMS); ``masked_fill`` and ``where``, 12 heads of ``n`` attention scores each by a causal mask
    broadcast over them. A causal mask, not a random one: what models mask comes in runs, and
    a random mask took 2.5x to 6x as long an element (a branch mispredicted every other one) on
    an AMD EPYC. Its FLOPs are the registry's, one an element; its bytes what it reads and
    writes."""
    import torch

    if op in ("gt", "eq"):
        n *= batch
        x = torch.randint(0, 91, (n,)) if op == "eq" else torch.randn(n, dtype=dtype)
        call = (lambda: x == 5) if op == "eq" else (lambda: x > 0.5)
        return call, n, (x.element_size() + 1) * n
    side = int(n**0.5)
    mask = torch.ones(side, side, dtype=torch.bool).tril()
    scores = torch.randn(12 * batch, side, side, dtype=dtype)
    if op == "where":
        call = lambda: torch.where(mask, scores, -1e4)  # noqa: E731
    else:
        call = lambda: scores.masked_fill(mask, -1e4)  # noqa: E731
    return call, scores.numel(), 2 * scores.numel() * scores.element_size() + mask.numel()


def _batch_norm(channels: int, hw: int, dtype: Any, batch: int = 1):
    """An eval batch norm module: the pointwise op of every convolutional network."""
    import torch

    norm = torch.nn.BatchNorm2d(channels).eval().to(dtype)
    x = torch.randn(batch, channels, hw, hw, dtype=dtype)
    n = x.numel()
    return (lambda: norm(x)), 2 * n, x.element_size() * (2 * n + 4 * channels)


def _resample(channels: int, hw: int, scale: int, dtype: Any, batch: int = 1):
    """Bilinear upsampling by ``scale``: a segmentation head's (LR-ASPP, DeepLab), an FPN's."""
    import torch

    x = torch.randn(batch, channels, hw, hw, dtype=dtype)
    out = hw * scale
    channels *= batch
    call = lambda: torch.nn.functional.interpolate(x, scale_factor=scale, mode="bilinear")  # noqa: E731
    return call, 9 * channels * out * out, x.element_size() * channels * (hw * hw + out * out)


def pool(
    channels: int,
    hw: int,
    dtype: Any,
    stride: int = 2,
    ceil: bool = False,
    k: int = 3,
    batch: int = 1,
):
    """Max pooling ``k`` x ``k`` (padding (k - 1) // 2): ResNet's stem at stride 2, GoogLeNet's
    ceil-mode stage pools, its inception branches at stride 1, YOLO's SPPF (5x5, stride 1),
    VGG's 2x2 at stride 2. Its FLOPs are the window's comparisons, its bytes input and output
    and the int64 index of each output, which ATen's ``max_pool2d_with_indices`` writes on the
    CPU and CUDA alike whether asked or not (a model's max pool is priced with them)."""
    import torch

    x = torch.randn(batch, channels, hw, hw, dtype=dtype)
    pad = (k - 1) // 2
    call = lambda: torch.nn.functional.max_pool2d(x, k, stride, pad, ceil_mode=ceil)  # noqa: E731
    out = torch.nn.functional.max_pool2d(x, k, stride, pad, ceil_mode=ceil).shape[-1]
    channels *= batch
    moved = x.element_size() * channels * (hw * hw + out * out) + 8 * channels * out * out
    return call, k * k * channels * out * out, moved


def _select(op: str, n: int, dtype: Any, batch: int = 1):
    """A selection by a random mask of ``n`` elements, about half of them set: ``nonzero``, or
    a boolean ``index`` of ``(n, 4)`` boxes, as a detector's post-processing keeps the boxes
    over its score threshold. Its bytes: what it reads (the mask, the boxes) and writes."""
    import torch

    n *= batch
    generator = torch.Generator(device="cpu").manual_seed(n)
    mask = torch.rand(n, generator=generator, device="cpu") < 0.5
    kept = int(mask.sum())  # counted on the CPU: the device may be ``meta``
    mask, boxes = mask.to(torch.get_default_device()), torch.randn(n, 4, dtype=dtype)
    if op == "nonzero":
        return (lambda: torch.nonzero(mask)), 0, n + 8 * kept
    return (lambda: boxes[mask]), 0, n + boxes.element_size() * 4 * (n + kept)


def _index(n: int, row: int, k: int, dtype: Any, batch: int = 1, put: bool = False):
    """``x[idx]``: ``k`` int64 indices into ``n`` rows of ``row`` elements (the dims after the
    one indexed), or ``x[idx] = v`` (``put``: ``k`` distinct rows written): ATen's indexing
    kernel computes an offset an index value, then copies its row element by element. Its
    FLOPs are those offsets, its bytes the elements copied, read and written, as
    ``engine.latency`` prices an ``index`` (``engine.lookups``)."""
    import torch

    n, k = n * batch, k * batch
    generator = torch.Generator(device="cpu").manual_seed(n * row + k)
    if put:
        idx = torch.randperm(n, generator=generator, device="cpu")[:k]
    else:
        idx = torch.randint(0, n, (k,), generator=generator, device="cpu")
    idx = idx.to(torch.get_default_device())
    x = (
        torch.randn(n, row, dtype=dtype).squeeze(1)
        if row == 1
        else torch.randn(n, row, dtype=dtype)
    )
    moved = 2 * k * row * x.element_size()
    if put:
        values = torch.randn(k, row, dtype=dtype)
        return (lambda: x.index_put_((idx,), values)), k, moved
    return (lambda: x[idx]), k, moved


def conv_benches(dtype: Any, batch: int = 1) -> dict[str, list[Callable[[], Bench]]]:
    """The convolution kinds' shapes: ``(in, out, kernel, input size, groups)``."""
    return {
        "conv_depthwise": [  # inputs up to LARGE_BYTES (float32)
            lambda: _conv(32, 32, 3, 28, 32, dtype, batch=batch),
            lambda: _conv(672, 672, 3, 14, 672, dtype, batch=batch),
            lambda: _conv(240, 240, 5, 14, 240, dtype, batch=batch),
            lambda: _conv(96, 96, 3, 28, 96, dtype, batch=batch),
            lambda: _conv(1152, 1152, 3, 7, 1152, dtype, batch=batch),
            lambda: _conv(32, 32, 3, 56, 32, dtype, batch=batch),
        ],
        "conv_depthwise_large": [
            lambda: _conv(96, 96, 3, 56, 96, dtype, batch=batch),
            lambda: _conv(32, 32, 3, 112, 32, dtype, batch=batch),
            lambda: _conv(144, 144, 3, 56, 144, dtype, stride=2, batch=batch),
        ],
        "conv_pointwise": [
            lambda: _conv(16, 96, 1, 56, 1, dtype, batch=batch),
            lambda: _conv(64, 256, 1, 56, 1, dtype, batch=batch),
            lambda: _conv(512, 128, 1, 28, 1, dtype, batch=batch),
            lambda: _conv(1024, 256, 1, 14, 1, dtype, batch=batch),
            lambda: _conv(112, 672, 1, 14, 1, dtype, batch=batch),
        ],
        "conv_pointwise_small_map": [  # 7x7 last stages; squeeze-excitation's 1x1 maps
            lambda: _conv(160, 960, 1, 7, 1, dtype, batch=batch),
            lambda: _conv(960, 160, 1, 7, 1, dtype, batch=batch),
            lambda: _conv(512, 2048, 1, 7, 1, dtype, batch=batch),
            lambda: _conv(1152, 48, 1, 1, 1, dtype, batch=batch),
            lambda: _conv(48, 1152, 1, 1, 1, dtype, batch=batch),
        ],
        "conv_grouped": [  # RegNet's groups of 16 channels, ResNeXt's of 4 and 16
            lambda: _conv(64, 64, 3, 28, 4, dtype, batch=batch),
            lambda: _conv(128, 128, 3, 56, 32, dtype, batch=batch),
            lambda: _conv(160, 160, 3, 14, 10, dtype, batch=batch),
            lambda: _conv(400, 400, 3, 7, 25, dtype, batch=batch),
            lambda: _conv(512, 512, 3, 28, 32, dtype, batch=batch),
        ],
        "conv_dense": [
            lambda: _conv(16, 16, 3, 28, 1, dtype, batch=batch),
            lambda: _conv(32, 64, 3, 112, 1, dtype, stride=2, batch=batch),
            lambda: _conv(64, 64, 3, 56, 1, dtype, batch=batch),
            lambda: _conv(128, 128, 3, 28, 1, dtype, batch=batch),
            lambda: _conv(256, 256, 3, 14, 1, dtype, batch=batch),
        ],
        "conv_stem": [  # an RGB image in: MobileNet's, EfficientNet's, ResNet's, YOLO's
            lambda: _conv(3, 16, 3, 64, 1, dtype, stride=2, batch=batch),
            lambda: _conv(3, 16, 3, 224, 1, dtype, stride=2, batch=batch),
            lambda: _conv(3, 32, 3, 224, 1, dtype, stride=2, batch=batch),
            lambda: _conv(3, 64, 7, 224, 1, dtype, stride=2, batch=batch),
            lambda: _conv(3, 16, 3, 640, 1, dtype, stride=2, batch=batch),
        ],
        "conv_dense_small_map": [
            lambda: _conv(64, 64, 3, 7, 1, dtype, batch=batch),
            lambda: _conv(512, 512, 3, 7, 1, dtype, batch=batch),
            lambda: _conv(160, 320, 3, 7, 1, dtype, batch=batch),
        ],
    }


def benches(dtype: Any, quick: bool, batch: int = 1) -> dict[str, list[Callable[[], Bench]]]:
    """Every kind's micro-benchmarks, each a maker of a fresh copy (its own weights and
    input: ``cold`` rotates copies); ``quick`` keeps the first (small) shape of each."""
    import torch

    table: dict[str, list[Callable[[], Bench]]] = {
        **conv_benches(dtype, batch),
        "matmul": [
            lambda: linear(16, 64, 64, dtype, batch=batch),
            lambda: linear(128, 768, 768, dtype, batch=batch),
            lambda: linear(197, 768, 3072, dtype, batch=batch),
            lambda: linear(64, 256, 1024, dtype, batch=batch),
        ],
        "attention": [
            lambda: _attention(4, 32, 32, dtype, batch=batch),
            lambda: _attention(12, 128, 64, dtype, batch=batch),
            lambda: _attention(12, 197, 64, dtype, batch=batch),
        ],
        "attention_block": [
            lambda: _block(16, 64, 4, dtype, batch=batch),
            lambda: _block(64, 256, 4, dtype, batch=batch),
            lambda: _block(50, 512, 8, dtype, batch=batch),
            lambda: _block(197, 768, 12, dtype, batch=batch),
        ],
        "pointwise": [
            lambda op=op, n=n: _memory(op, n, dtype, batch=batch)
            for op, n in [("add", 4096), ("relu", 2**16), ("mul", 2**16), ("add", 2**20)]
            + [("hardswish", 2**18), ("relu", 2**21)]
        ],
        "pointwise_exp": [
            lambda op=op, n=n: _memory(op, n, dtype, batch=batch)
            for op, n in [("silu", 4096), ("sigmoid", 2**16), ("gelu", 2**18), ("silu", 2**20)]
            + [("tanh", 2**18), ("silu", 2**21)]
        ],
        "batch_norm": [
            lambda c=c, hw=hw: _batch_norm(c, hw, dtype, batch=batch)
            for c, hw in [(576, 7), (144, 28), (32, 112), (256, 56)]
        ],
        "resample": [
            lambda c=c, hw=hw, k=k: _resample(c, hw, k, dtype, batch=batch)
            for c, hw, k in [(16, 14, 2), (21, 65, 8), (64, 40, 2), (256, 33, 2)]
        ],
        "compare": [  # a detector's 3,234 scores and its 27,000 labels; attention masks
            lambda op=op, n=n: _compare(op, n, dtype, batch=batch)
            for op, n in [("gt", 3234), ("eq", 27000), ("masked_fill", 128**2), ("where", 256**2)]
        ],
        "reduction": [
            lambda op=op, n=n: _memory(op, n, dtype, batch=batch)
            for op, n in [("softmax", 4096), ("layer_norm", 2**16), ("softmax", 2**20)]
        ],
        "pooling": [  # 3x3 at stride 2, and VGG's 2x2
            lambda c=c, hw=hw, ceil=ceil, k=k: pool(c, hw, dtype, 2, ceil, k, batch=batch)
            for c, hw, ceil, k in [(16, 28, False, 3), (64, 112, False, 3), (192, 57, True, 3)]
            + [(480, 28, True, 3), (24, 56, False, 3), (96, 55, True, 3)]
            + [(64, 56, False, 2), (256, 28, False, 2)]
        ],
        "copy": [
            lambda op=op, n=n: _memory(op, n, dtype, batch=batch)
            for op, n in [("copy", 4096), ("cat", 2**16), ("copy", 2**20), ("shuffle", 2**18)]
        ],
        "index": [  # 450 of a detector's 27,000 scores, its 3,234 scores sorted; SSDlite's
            # 300 boxes, Swin's relative position bias, tokens routed to an expert; Faster
            # R-CNN's RoI features put back in place
            lambda n=n, row=row, k=k, put=put: _index(n, row, k, dtype, batch, put)
            for n, row, k, put in [(27000, 1, 450, False), (3234, 1, 3234, False)]
            + [(3234, 4, 300, False), (169, 12, 2401, False), (2048, 256, 1024, False)]
            + [(150, 64 * 49, 150, True)]
        ],
        "select": [
            lambda op=op, n=n: _select(op, n, dtype, batch=batch)
            for op, n in [("index", 3234), ("nonzero", 3234), ("index", 2**16)]
        ],
        **(float32_benches() if dtype == torch.float32 else {}),
        "view": [lambda: _memory("view", 4096, dtype, batch=batch)],
    }
    return {kind: makers[: 1 if quick else None] for kind, makers in table.items()}
