"""Workspaces of kernels other than convolutions, resizes (``costs/resizes.py``) and oneDNN's
LSTM layers (``costs/rnn_workspace.py``): the fused attention paths, CPU products and norms
(the copies they make of arguments that come with strides they cannot read), complex-to-real
kernels. Registered and read as ``costs/workspace.py``'s are (bytes, during the op only,
float32 CPU figures read off ``torch.profiler(profile_memory=True)``).
"""

from __future__ import annotations

from math import prod

from pytest_graphbudget.compat import kernels as releases
from pytest_graphbudget.costs import brgemm, channels_last
from pytest_graphbudget.costs.contraction import unsqueezed
from pytest_graphbudget.costs.registry import Shape, numel, output_storage, workspace


def _attention_held(
    u: int, scores: int, masked: bool, blocks: tuple[int, ...] = (0, 0, 0, 0)
) -> int:
    """Bytes ATen's fused attention (``native_multi_head_attention`` in ``attention.cpp``)
    holds beside its input while it runs, as the profiler sees it: the packed q, k, v (``u``
    each, the input's bytes) twice while they are split out, then once with the scores (a
    masked softmax writes a second copy), then once with the context and the output.
    ``blocks``: bfloat16's products' buffers (``_attention_blocks``), each beside what is live
    while it runs."""
    project, scored, weighed, out = blocks
    return max(
        6 * u,
        3 * u + project,
        3 * u + scores * (2 if masked else 1),
        3 * u + scores + scored,
        3 * u + scores + weighed,
        5 * u + out,
    )


def _attention_blocks(query: Shape, key: Shape, heads: int, dtype_name: str):
    """oneDNN's bfloat16 blocks (``brgemm``) of the fused attention's products: the input
    projection, each head's scores and context, the output projection; none in other dtypes."""
    if dtype_name != "bfloat16":
        return (0, 0, 0, 0)
    tokens, width, length, keys = prod(query[:-1]), query[-1], query[-2], key[-2]
    head, items = width // heads, prod(query[:-2]) * heads
    scratch = brgemm.matmul_scratch
    return (
        scratch(Shape((tokens, width)), Shape((width, 3 * width))),
        scratch(Shape((length, head)), Shape((head, keys)), items),
        scratch(Shape((length, keys)), Shape((keys, head)), items),
        scratch(Shape((tokens, width)), Shape((width, width))),
    )


def _outputs(out) -> int:
    """Elements of every output of an op (``out`` a shape or a tuple of them)."""
    if isinstance(out, Shape):
        return numel(out)
    return sum(numel(o) for o in out if isinstance(o, Shape))


@workspace("_native_multi_head_attention")
def native_mha(
    query: Shape,
    key: Shape,
    value,
    embed_dim,
    num_head: int,
    *args,
    out,
    itemsize: int,
    dtype_name: str = "",
    **kwargs,
) -> int:
    """``nn.MultiheadAttention``'s inference fast path materializes every head's scores,
    batch x heads x L x S: a 512-token self-attention of 8 heads holds 8x its input. Asked
    for the weights, the context and the output are live with the scores, and the weights
    averaged over the heads after them."""
    mask, need_weights, average = (*args[4:], None, True, True)[:3]
    mask = kwargs.get("mask", mask)
    need_weights = kwargs.get("need_weights", need_weights)
    average = kwargs.get("average_attn_weights", average)
    u = numel(query) * itemsize
    scores = prod(query[:-1]) * key[-2] * num_head * itemsize
    blocks = _attention_blocks(query, key, num_head, dtype_name)
    held = _attention_held(u, scores, mask is not None, blocks)
    if need_weights:
        weights = scores // num_head if average else 0  # else the scores are the weights
        held = max(held, 3 * u + scores + u + max(u, weights), 3 * u + scores + blocks[2])
    return held - _outputs(out) * itemsize


@workspace("_transformer_encoder_layer_fwd")
def encoder_layer(
    src: Shape,
    embed_dim: int,
    num_heads: int,
    *args,
    out,
    itemsize: int,
    dtype_name: str = "",
    **kw,
) -> int:
    """``nn.TransformerEncoderLayer``'s fast path: its attention as ``native_mha``'s without
    the weights (beside the first norm's output when ``norm_first``), then the feed-forward
    block's hidden layer with the attention block's output and the second linear's (and the
    second norm's output when ``norm_first``), and in bfloat16 that linear's blocks."""
    norm_first = kw.get("norm_first", args[5] if len(args) > 5 else False)
    mask = kw.get("mask", args[15] if len(args) > 15 else None)
    hidden_features = (kw.get("ffn_weight_1") or args[12])[0]
    u = numel(src) * itemsize
    scores = prod(src[:-1]) * src[-2] * num_heads * itemsize
    blocks = _attention_blocks(src, src, num_heads, dtype_name)
    attention = _attention_held(u, scores, mask is not None, blocks) + (u if norm_first else 0)
    feed_forward = (3 if norm_first else 2) * u + u * hidden_features // embed_dim
    if dtype_name == "bfloat16":
        tokens = prod(src[:-1])
        second = Shape((tokens, hidden_features)), Shape((hidden_features, embed_dim))
        feed_forward += brgemm.matmul_scratch(*second)
    return max(attention, feed_forward) - numel(out) * itemsize


def _copied(m: Shape, lax: bool = False) -> int:
    """Elements of a matrix (a batch item: the last two dimensions) that ATen's CPU product
    (``addmm_impl_cpu_``) copies into a contiguous clone first, freed as it returns: neither
    row- nor column-major with a leading dimension BLAS takes (an expanded gradient, strides
    0). ``lax``: ``bmm``'s test of an item, which ignores a size-1 dimension's stride."""
    strides = getattr(m, "strides", None)
    if strides is None or len(m) < 2:
        return 0
    (rows, cols), (across, along) = m[-2:], strides[-2:]
    row_major = along == 1 and (across >= max(1, cols) or lax and rows == 1)
    column_major = across == 1 and (along >= max(1, rows) or lax and cols == 1)
    return 0 if row_major or column_major else rows * cols


@workspace("mm", "addmm")
def product_copies(*args, out, itemsize: int, dtype_name: str = "", **__) -> int:
    """``mm(a, b)``, ``addmm(bias, a, b)``: both operands' clones, live at once (a Linear's
    two backward products each copy the sum loss's expanded gradient), in every dtype; in
    bfloat16 beside oneDNN's blocks (``brgemm``)."""
    a, b = args[-2:]
    copies = (_copied(a) + _copied(b)) * itemsize
    return copies + (brgemm.matmul_scratch(a, b) if dtype_name == "bfloat16" else 0)


@workspace("bmm", "baddbmm")
def batched_copies(*args, out, itemsize: int, dtype_name: str = "", **__) -> int:
    """``bmm(a, b)``, ``baddbmm(bias, a, b)`` (``bmm_out_or_baddbmm_``): under 400
    multiply-adds an item, a loop that copies nothing; else one MKL call if it takes every item
    as it is, or one product per item, each copying its own: one item's copies live at once.
    bfloat16: oneDNN's blocks of one item (``brgemm``)."""
    a, b = args[-2:]
    if dtype_name == "bfloat16":
        return brgemm.matmul_scratch(a, b, batch=a[0] if len(a) > 2 else 1)
    if itemsize < 4 or a[-1] * a[-2] * b[-1] < 400 or not _copied(a, True) + _copied(b, True):
        return 0
    return (_copied(a) + _copied(b)) * itemsize


@workspace("_trilinear")
def trilinear_slices(
    i1: Shape,
    i2: Shape,
    i3: Shape,
    expand1,
    expand2,
    expand3,
    sumdim,
    unroll_dim=1,
    *_,
    out,
    itemsize: int,
    **__,
) -> int:
    """``nn.Bilinear``'s kernel, forward and each gradient alike (``_trilinear`` in
    ``aten/src/ATen/native/Linear.cpp``): one slice of ``unroll_dim`` at a time, ``i1 * i2``
    over the summed dims ``i3`` lacks, then that with ``i3`` over the rest, each a
    ``sumproduct_pair`` whose result lives until the slice is added into the output. Both
    results of the largest slice are the workspace: the input's gradient makes a whole
    batch x in1 x in2 product per output feature (a step had read 3.5% under without)."""
    s1, s2, s3 = unsqueezed(i1, expand1), unsqueezed(i2, expand2), unsqueezed(i3, expand3)
    if not all(prod(s) for s in (s1, s2, s3)):
        return 0
    for s in (s1, s2, s3):
        s[unroll_dim] = 1
    dims = range(len(s1))
    first = [d for d in dims if d in sumdim and d != unroll_dim and d in expand3]
    then = [d for d in dims if d in sumdim and d != unroll_dim and d not in expand3]
    peak, made = _sumproduct_pair(s1, s2, first)
    later, _ = _sumproduct_pair(made, s3, then)
    return max(peak, prod(made) + later) * itemsize


def _sumproduct_pair(left: list[int], right: list[int], summed: list[int]) -> tuple[int, list]:
    """ATen's ``sumproduct_pair``: the elements it holds at once (a dim only one side has,
    summed away first; then one ``bmm``, or a ``mul`` when nothing is summed), and its
    result's shape (the summed dims kept, as 1)."""
    left, right = list(left), list(right)
    held = {"left": 0, "right": 0}
    peak = 0
    for dim in summed:
        for side, shape, other in (("left", left, right), ("right", right, left)):
            if shape[dim] != 1 and other[dim] == 1:
                shape[dim] = 1
                peak = max(peak, sum(held.values()) + prod(shape))
                held[side] = prod(shape)
    result = [
        1 if d in summed else max(a, b) for d, (a, b) in enumerate(zip(left, right, strict=True))
    ]
    return max(peak, sum(held.values()) + prod(result)), result


@workspace(
    "max_pool2d_with_indices_backward",
    "max_pool3d_with_indices_backward",
    "avg_pool2d_backward",
    "avg_pool3d_backward",
    "_adaptive_avg_pool2d_backward",
    "_adaptive_avg_pool3d_backward",
    "adaptive_max_pool2d_backward",
    "adaptive_max_pool3d_backward",
    "fractional_max_pool2d_backward",
    "fractional_max_pool3d_backward",
    "reflection_pad1d_backward",
    "reflection_pad2d_backward",
    "reflection_pad3d_backward",
    "replication_pad1d_backward",
    "replication_pad2d_backward",
    "replication_pad3d_backward",
    contiguous=(0,),
)
def gradient_made_contiguous(*_, **__) -> int:
    """Pooling, padding and GroupNorm backwards read the output's gradient through
    ``grad_output.contiguous()`` (in its memory format): the sum loss's seed, expanded (strides
    0), is copied whole while the kernel runs, when the layer is the model's last (a feature
    extractor's pooling). The registry's ``contiguous`` counts the copy; nothing else is
    held."""
    return 0


@workspace("_softmax", "_log_softmax")
def softmax_input_made_contiguous(x: Shape, *_, out, itemsize: int, **__) -> int:
    """ATen's CPU softmax and log-softmax read ``input.contiguous()``, row-major whatever the
    input's memory format: a permuted input (CaiT's talking heads, whose scores come back
    permuted from a linear over the heads) is copied whole while the kernel runs (a CaiT
    block's eval peak had read 19% under)."""
    return 0 if channels_last.contiguous(x) else numel(x) * itemsize


@workspace("_safe_softmax")
def safe_softmax_masks(x: Shape, dim: int = -1, *_, out, itemsize: int, **__) -> int:
    """SDPA's math path (5-D heads, NesT's blocks) calls ``_safe_softmax``: a softmax, then
    the rows whose every score is -inf zeroed, found through a bool mask of the scores
    (``isneginf``) and its ``all`` over the row, and a zero scalar, held beside the
    probabilities (NesT's attention had read 25% under). Torch 2.5 compares the scores with a
    scalar -inf, and its ``where`` writes a new result beside the probabilities
    (``releases.safe_softmax_in_place``)."""
    copied = softmax_input_made_contiguous(x, out=out, itemsize=itemsize)
    fresh = 0 if releases.safe_softmax_in_place() else (numel(x) + 1) * itemsize
    return copied + fresh + numel(x) + numel(x) // max(x[dim], 1) + itemsize


@workspace("_softmax_backward_data", "_log_softmax_backward_data")
def softmax_backward_made_contiguous(grad: Shape, output: Shape, *_, out, itemsize: int, **__):
    """Their backwards read ``grad_output.contiguous()`` and ``output.contiguous()``: a sum
    loss's expanded seed when the layer is the model's last (a classifier's ``LogSoftmax``),
    a permuted output or gradient, copied whole while the kernel runs."""
    return sum(numel(t) * itemsize for t in (grad, output) if not channels_last.contiguous(t))


@workspace("_embedding_bag_backward")
def embedding_bag_backward_indices(
    grad: Shape,
    indices: Shape,
    offsets,
    offset2bag,
    bag_size,
    maximum_indices,
    num_weights,
    scale_grad_by_freq,
    mode,
    sparse,
    per_sample_weights=None,
    *_,
    out,
    itemsize: int,
    **__,
) -> int:
    """``nn.EmbeddingBag``'s CPU backward, beside the weight's gradient: the dense kernel's
    scratch (below) and, where the forward kept no bag for each index (sum over 2-D input),
    that map made again (one int64 more than the indices) and held while the kernel runs."""
    if sparse:
        return 0
    scratch = embedding_bag_dense_backward_indices(
        grad, indices, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq,
        mode, per_sample_weights, out=out, itemsize=itemsize,
    )  # fmt: skip
    remade = isinstance(offset2bag, Shape) and numel(offset2bag) == 0 and numel(indices) > 0
    return scratch + ((numel(indices) + 1) * 8 if remade else 0)


@workspace("_embedding_bag_dense_backward")
def embedding_bag_dense_backward_indices(
    grad: Shape,
    indices: Shape,
    offset2bag,
    bag_size,
    maximum_indices,
    num_weights,
    scale_grad_by_freq,
    mode,
    per_sample_weights=None,
    *_,
    out,
    itemsize: int,
    **__,
) -> int:
    """The dense kernel ``_embedding_bag_backward`` calls (a joint graph names it where torch's
    decomposition splits the backward, as 2.4's does): sum and mean sort the looked-up indices
    and gather through them (three int64 arrays of them); max gathers each bag's winning rows
    (bags x dim int64) and their gradients (bags x dim), and the bags that have any (int64
    each). Measured with neither per-sample weights nor ``scale_grad_by_freq``, which take
    other paths: none then."""
    if scale_grad_by_freq or isinstance(per_sample_weights, Shape) or len(grad) != 2:
        return 0
    if mode == 2:  # EmbeddingBag's max
        bags, dim = grad
        return bags * dim * (8 + itemsize) + bags * 8
    return 3 * numel(indices) * 8


@workspace("im2col", "col2im", contiguous=(0,))
def resized_from_the_input(x: Shape, *_, out, itemsize: int, **__) -> int:
    """``nn.Unfold`` and ``nn.Fold`` (``im2col_cpu``, ``col2im_cpu``) allocate their output
    the size of their input, read contiguous, then ``resize_`` it: to a larger output (Unfold's
    overlapping windows) the first buffer is still held while the second is made."""
    return numel(x) * itemsize if numel(out) > numel(x) else 0


@output_storage("im2col", "col2im")
def kept_from_the_input(x: Shape, *_, out, **__) -> int:
    """And resized to a smaller output (``nn.Fold``'s image from its columns, Unfold's
    gradient), the buffer keeps its size: the output holds the input's bytes."""
    return max(numel(x), numel(out))


@workspace("native_group_norm_backward", contiguous=(0,))
def group_norm_backward_sums(grad_out: Shape, x: Shape, *rest, out, itemsize: int, **kw) -> int:
    """GroupNorm's CPU backward sums the gradient and its product with the input per sample
    and channel first (``ds``, ``db``: N x C each), live while the input's gradient is written;
    and, as the pooling backwards, reads the output's gradient contiguous."""
    return 2 * grad_out[0] * grad_out[1] * itemsize if len(grad_out) > 1 else 0


@workspace("gelu_backward")
def gelu_backward_copies(
    grad: Shape,
    x: Shape,
    approximate="none",
    *_,
    out,
    itemsize: int,
    dtype_name: str = "",
    **kw,
):
    """The exact GELU's backward on a contiguous float32 or bfloat16 input is oneDNN's
    (``use_mkldnn``; float16 too on a CPU with FP16 instructions, not the modelled one),
    which reads the gradient contiguous and writes a contiguous result: a gradient that is not
    is copied (the sum loss's expanded seed), and one dense in another layout also gets a
    contiguous result copied into the output's layout. The tanh form, or an input that is not
    contiguous, takes ATen's own kernel, which reads any strides."""
    exact = kw.get("approximate", approximate) == "none"
    onednn = dtype_name in ("float32", "bfloat16") or (not dtype_name and itemsize == 4)
    if not exact or not onednn or not channels_last.contiguous(x):
        return 0
    if channels_last.contiguous(grad):
        return 0
    return numel(grad) * itemsize * (2 if channels_last.dense(grad) else 1)


def _copy(shape) -> int:
    """Elements of ``expect_contiguous()``'s copy of a tensor argument: all of them unless it
    is contiguous already (a permuted view is not)."""
    if not isinstance(shape, Shape) or channels_last.contiguous(shape):
        return 0
    return numel(shape)


@workspace("native_layer_norm")
def layer_norm_copy(x: Shape, *_, out, itemsize: int, **__) -> int:
    """The CPU kernel normalizes a contiguous copy of a permuted input (timm's
    ``LayerNorm2d``: ``permute``, ``layer_norm``, ``permute``), freed as it returns."""
    return _copy(x) * itemsize


@workspace("native_layer_norm_backward")
def layer_norm_backward_copy(grad_out: Shape, x: Shape, *_, out, itemsize: int, **__) -> int:
    """As the forward: contiguous copies of the saved input and of the output's gradient, live
    while the input's gradient is written (ConvNeXt's step read 0.91 of measured without)."""
    return (_copy(grad_out) + _copy(x)) * itemsize


def _dense_alike(a, b) -> bool:
    """Both tensors contiguous, or both channels-last and dense."""
    if not isinstance(a, Shape) or not isinstance(b, Shape):
        return False
    if channels_last.contiguous(a) and channels_last.contiguous(b):
        return True
    return len(a) in (4, 5) and not channels_last.copied(a) and not channels_last.copied(b)


@workspace(
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training",
    "_batch_norm_with_update",
    "_batch_norm_no_update",
)
def batch_norm_terms(x: Shape, *_, out, itemsize: int, **__) -> int:
    """The CPU kernel's per-channel scale and shift, in float32 for half precision (and the
    batch's mean and variance before they are saved, in training): two channels' worth of
    its compute dtype (a float16 BatchNorm's eval peak read 384 bytes under at 48 channels)."""
    return 2 * x[1] * max(itemsize, 4) if isinstance(x, Shape) and len(x) > 1 else 0


@workspace("native_batch_norm_backward")
def batch_norm_backward_twice(grad_out: Shape, x: Shape, *rest, out, itemsize: int, **kw) -> int:
    """In training, the CPU kernel's path for dense operands allocates the input's gradient a
    second time, the first freed as the second replaces it: one input-sized buffer beside the
    gradients (every BatchNorm's backward but one whose output's gradient is a sum loss's,
    expanded). It set ConvMixer's peak, at its last BatchNorm."""
    train = kw.get("train", rest[5] if len(rest) > 5 else False)
    mask = kw.get("output_mask", rest[7] if len(rest) > 7 else (True, True, True))
    if not train or not mask[0] or not _dense_alike(grad_out, x):
        return 0
    return numel(x) * itemsize


@workspace("abs", "angle")
def complex_to_real(x: Shape, *_, out, itemsize: int, **__) -> int:
    """``abs`` and ``angle`` of a complex tensor run complex to complex into a temporary, then
    copy its real part into the real result (``unary_op_impl_with_complex_to_float_out``):
    the input's size again, complex, beside them (a spectrogram's magnitude: -2 KB of 13 KB
    for a small ``rfft(h).abs()``)."""
    return 2 * numel(x) * itemsize if getattr(x, "complex", False) else 0
