"""Workspaces: the bytes a kernel allocates and frees while it runs, beside its inputs and output.

They count toward the peak (``engine/partition.live_at_peak``) during the op only. Each function
gets the op's arguments as shapes, like its formula, and ``itemsize``; it returns bytes. The
figures are those of float32 convolutions, LSTM layers and products (a matrix copied) on CPU,
read off ``torch.profiler(profile_memory=True)`` (``benchmarks/peak.py --explain``); other dtypes
and devices have none here (``docs/metrics.md``).

A CPU convolution takes one of two paths, chosen as ``ConvParams::use_mkldnn`` in ATen chooses:

- oneDNN (``mkldnn_convolution``): it computes in a blocked layout (channels in blocks of 16
  with AVX-512, of 8 below it), so it reorders the input and the weight into that layout,
  writes its result in it and copies that into the plain output;
- the slow path (``thnn_conv2d``): it unfolds the input into columns (im2col), one column per
  output position of C_in x kernel values, and multiplies them by the weight, except for an
  unstrided, unpadded 1x1 kernel, whose input already is its columns.

A transposed convolution takes its own kernels on each path (``_deconv``, ``_deconv_backward``,
``_deconv_columns``): oneDNN's deconvolution, which pads no channels where a strided one runs
on brgemm, and reads an output gradient of fewer than 16 channels plain for the input's
gradient (of fewer than 4 for the weight's); ``slow_conv_transpose2d``, whose columns are
C_out x kernel values per input position.
"""

from __future__ import annotations

from math import ceil, prod

from pytest_graphbudget.costs import channels_last
from pytest_graphbudget.costs.registry import Shape, numel, workspace

FIRST_LAYER_CHANNELS = 8
"""oneDNN reads a source with fewer input channels (an image's 3) in its plain layout."""


MODELLED_THREADS = 1
MODELLED_BLOCK = 16
"""The CPU the workspaces describe: one intra-op thread, oneDNN's AVX-512 block of 16 channels.
Fixed, never read from the machine profiling: a budget compares figures recorded on one
machine with figures of another (a laptop, a CI runner), and a peak that followed the thread
count or the vector width would move between them with the model unchanged. It is the setup
``benchmarks/peak.py`` measures against."""


def _cpu() -> tuple[int, int]:
    """The intra-op threads and oneDNN's channel block the workspaces are modelled for."""
    return MODELLED_THREADS, MODELLED_BLOCK


def _onednn(x: Shape, w: Shape, stride, dilation, groups: int, threads: int) -> bool:
    """ATen's choice of oneDNN for a float32 CPU convolution (``use_mkldnn``): the slow path
    is faster for a small input, and for an unstrided 1x1 kernel on one thread and a batch
    under 16."""
    one_by_one = all(k == 1 for k in w[2:])
    plain = all(s == 1 for s in stride) and all(d == 1 for d in dilation)
    if one_by_one and plain and x[0] < 16 and threads == 1:
        return False
    sizes = (*x, 1)[:4]  # a 1-D convolution runs as a 2-D one of height 1
    big_kernel = len(w) > 3 and w[-1] > 3 and w[-2] > 3
    return groups > 1 or big_kernel or x[0] > 1 or prod(sizes) > 20480


def _padded(shape: Shape, block: int, channels: int = 1) -> int:
    """Elements of ``shape`` with its channel dimension rounded up to whole blocks."""
    if not shape[channels]:
        return 0
    return prod(shape) // shape[channels] * ceil(shape[channels] / block) * block


def _columns(x: Shape, w: Shape, out_spatial: tuple, stride, padding) -> int:
    """Elements of the slow path's im2col buffer: C_in x kernel values per output position."""
    kernel = tuple(w[2:])
    plain = all(s == 1 for s in stride) and not any(padding)
    if all(k == 1 for k in kernel) and plain:
        return 0
    return x[0] * x[1] * prod(kernel) * prod(out_spatial)


@workspace("convolution", "_convolution")
def convolution(
    x: Shape,
    w: Shape,
    bias,
    stride,
    padding,
    dilation,
    transposed: bool = False,
    output_padding=(),
    groups: int = 1,
    *_,
    out: Shape,
    itemsize: int,
    **__,
) -> int:
    """oneDNN: the reordered input (none below ``FIRST_LAYER_CHANNELS``), the reordered
    weight (output channels rounded to the block) and the blocked result are live at once,
    then the blocked result and the output. Slow path: im2col. Transposed: ``_deconv``."""
    if itemsize != 4 or len(x) < 3:
        return 0
    threads, block = _cpu()
    nhwc = not transposed and channels_last.channels_last(x, w)
    if not _onednn(x, w, stride, dilation, groups, threads):
        if transposed:
            return _deconv_columns(x, w) * itemsize
        copies = channels_last.copied(x) + channels_last.copied(w) if nhwc else 0
        return (_columns(x, w, tuple(out[2:]), stride, padding) + copies) * itemsize
    if transposed:
        return _deconv(x, w, bias, stride, out, block) * itemsize
    if nhwc:
        return channels_last.forward(x, w, groups, block, itemsize)
    out_b = _padded(out, block)
    x_b = _padded(x, block) if x[1] >= FIRST_LAYER_CHANNELS else 0
    held = x_b + numel_w(w, block, transposed) + out_b + _unit_stride(x, w, stride, padding, block)
    return max(held - prod(out), out_b) * itemsize


def _unit_stride(x: Shape, w: Shape, stride, padding, block: int) -> int:
    """Elements of oneDNN's copy of one image subsampled by a strided 1x1 kernel ("reduce to
    unit stride", per thread): where the stride divides the input, with no padding, it runs as
    an unstrided 1x1 convolution over that copy (ResNet's downsampling shortcuts; without it
    their peak read 0.92 of the measured one)."""
    sizes = x[2:]
    if x[1] < FIRST_LAYER_CHANNELS or any(k != 1 for k in w[2:]) or any(padding):
        return 0
    if all(s == 1 for s in stride) or any(d % s for d, s in zip(sizes, stride, strict=True)):
        return 0
    return _padded((1, x[1], *(d // s for d, s in zip(sizes, stride, strict=True))), block)


@workspace("mkldnn_rnn_layer")
def rnn_layer(x: Shape, w_ih: Shape, w_hh: Shape, *_, out, itemsize: int, **__) -> int:
    """oneDNN's LSTM layer (one direction), while it runs: its two weights reordered into its
    layout (packed for its GEMM in inference), its bias, and its scratchpad. In inference
    the scratchpad holds the layer's states ((steps + 1) x batch, ``rnn_training_workspace``'s
    arrays); a forward autograd will differentiate returns those in its workspace (the op's
    fourth output, not empty then), and its scratchpad holds every step's gates instead.
    Within 0.2% of the profiler at every size tried, less 776 bytes of oneDNN's own."""
    if itemsize != 4:
        return 0
    steps, batch, width, gates, hidden = _rnn_sizes(x, w_ih, w_hh)
    if isinstance(out, tuple) and len(out) > 3 and numel(out[3]):
        return (width + hidden) * _good_ld(gates) * itemsize + _rnn_scratch(x, w_ih, w_hh)
    states = 2 * (steps + 1) * batch * itemsize
    scratch = _pages(
        states * _good_ld(max(width, hidden)),
        batch * _good_ld(gates) * itemsize,
        batch * _good_ld(hidden) * itemsize,
        gates * itemsize,
        states * hidden,
    )
    packed = ceil(gates / 128) * 128  # oneDNN's packed GEMM takes 4H in blocks of 128
    return ((width + hidden) * packed + gates) * itemsize + scratch


@workspace("mkldnn_rnn_layer_backward", contiguous=(10, 11, 12))
def rnn_layer_backward(x: Shape, w_ih: Shape, w_hh: Shape, *rest, out, itemsize: int, **__) -> int:
    """oneDNN's LSTM backward (one direction): the layer's two weights reordered into its
    layout (4H padded, and a third copy of a weight whose other side oneDNN pads too: H or I
    a multiple of 256), its scratchpad (every step's gate gradients) and zeros for a hidden
    or cell gradient autograd left undefined. The contiguous copies of its gradients (a sum's
    expanded one) are the registry's."""
    if itemsize != 4:
        return 0
    _, batch, width, gates, hidden = _rnn_sizes(x, w_ih, w_hh)
    weights = (width + hidden) * _good_ld(gates)
    weights += sum(_good_ld(side) * gates for side in (width, hidden) if _good_ld(side) != side)
    undefined = sum(g is None for g in rest[8:10])  # grad_hy, grad_cy
    return (weights + undefined * batch * hidden) * itemsize + _rnn_scratch(x, w_ih, w_hh)


def _rnn_sizes(x: Shape, w_ih: Shape, w_hh: Shape) -> tuple[int, int, int, int, int]:
    """Steps, batch, input width, gates (4H) and hidden size of an LSTM layer's call."""
    return x[0], x[1] if len(x) == 3 else 1, w_ih[1], w_ih[0], w_hh[1]


def _rnn_scratch(x: Shape, w_ih: Shape, w_hh: Shape) -> int:
    """The scratchpad of an LSTM layer's differentiated forward or its backward, with its
    bias: every step's gates, then a step's hidden and cell state, page by page."""
    steps, batch, _, gates, hidden = _rnn_sizes(x, w_ih, w_hh)
    itemsize = 4
    bias = gates * itemsize
    return bias + _pages(
        steps * batch * _good_ld(gates) * itemsize,
        batch * _good_ld(hidden) * itemsize,
        batch * hidden * itemsize,
        bias,
        bias,
    )


PAGE = 4096
"""oneDNN starts each array of an RNN's workspace on a page (``rnn_utils::set_offsets``)."""


def rnn_training_workspace(x: Shape, hidden: int, itemsize: int) -> int:
    """The workspace oneDNN's LSTM layer (one direction) returns from a forward that autograd
    will differentiate, saved for its backward: every step's gates and hidden state, and three
    arrays of the layer's states and two of its cell states, (steps + 1) x batch each, every
    array on a page of its own (``rnn_utils::set_workspace_sizes``, torch 2.14's oneDNN:
    bytes exact for float32 at every size tried). The op's meta kernel returns it empty."""
    if itemsize != 4:
        return 0
    steps, batch, width = x[0], x[1] if len(x) == 3 else 1, x[-1]
    states = 2 * (steps + 1) * batch * itemsize  # the input's and the output's layer
    arrays = (
        steps * batch * _good_ld(4 * hidden) * itemsize,  # the gates
        steps * batch * _good_ld(hidden) * itemsize,  # the hidden states
        *[states * _good_ld(max(width, hidden))] * 3,
        *[states * hidden] * 2,
    )
    return _pages(*arrays)


def _pages(*sizes: int) -> int:
    """The bytes of arrays laid out one after another, each starting on a page."""
    offset = 0
    for size in sizes:
        offset = ceil(offset / PAGE) * PAGE + size
    return ceil(offset / PAGE) * PAGE


def _good_ld(dim: int) -> int:
    """oneDNN's leading dimension for float32 (``rnn_utils::get_good_ld``): a multiple of 16
    elements (64 bytes), one block more when it divides 256 (4K aliasing)."""
    ld = ceil(dim / 16) * 16
    return ld + 16 if ld % 256 == 0 else ld


def numel_w(w: Shape, block: int, transposed: bool) -> int:
    """Elements of the reordered weight: its output channels rounded up to the block."""
    return _padded(w, block, 1 if transposed else 0)


@workspace("convolution_backward", contiguous=(0,))
def convolution_backward(
    grad_out: Shape,
    x: Shape,
    w: Shape,
    bias_sizes,
    stride,
    padding,
    dilation,
    transposed: bool,
    output_padding,
    groups: int,
    output_mask,
    *_,
    out,
    itemsize: int,
    **__,
) -> int:
    """oneDNN: the output's gradient reordered, with the blocked input gradient (for the
    input's gradient) or the operands of the weight's (``_weight_grad``). Slow path: the
    columns again. Transposed: ``_deconv_backward``. On every path ATen first makes the
    output's gradient contiguous: a copy when it comes expanded (a sum loss's), added by the
    cost pass."""
    if itemsize != 4 or len(x) < 3:
        return 0
    threads, block = _cpu()
    if not _onednn(x, w, stride, dilation, groups, threads):
        if transposed:
            plain = all(k == 1 for k in w[2:]) and all(s == 1 for s in stride)
            return 0 if plain and not any(padding) else _deconv_columns(x, w) * itemsize
        return _columns(x, w, tuple(grad_out[2:]), stride, padding) * itemsize
    if transposed:
        return _deconv_backward(grad_out, x, w, output_mask, block) * itemsize
    if channels_last.channels_last(x, w):
        return channels_last.backward(grad_out, x, w, groups, output_mask, block, itemsize)
    held = _weight_grad(x, grad_out, block) if output_mask[1] else 0
    if output_mask[0]:
        held = max(held, _padded(grad_out, block) + _padded(x, block))
    return held * itemsize


HALF_BLOCK_CHANNELS = 4
"""oneDNN's weight-gradient kernel reads a source (the convolution's input; a transposed
convolution's output gradient) of fewer channels than this in its plain layout, and one of
fewer than a block in blocks of half the size (its AVX2 kernel)."""


def _weight_grad(src: Shape, diff_dst: Shape, block: int) -> int:
    """Elements of the two operands of oneDNN's weight-gradient kernel, reordered: ``src`` and
    ``diff_dst`` (a convolution's input and output gradient; a transposed convolution's the
    other way round) in blocks of ``block`` channels, or both in half blocks when ``src`` has
    fewer than a block (``HALF_BLOCK_CHANNELS``), or only ``diff_dst`` when it has fewer than
    ``HALF_BLOCK_CHANNELS``."""
    channels = src[1]
    if channels < HALF_BLOCK_CHANNELS:
        return _padded(diff_dst, block)
    size = block // 2 if channels < block else block
    return _padded(src, size) + _padded(diff_dst, size)


def _deconv(x: Shape, w: Shape, bias, stride, out: Shape, block: int) -> int:
    """Elements a oneDNN transposed convolution holds beside its output (weight ``w``: C_in x
    C_out x kernel).

    Strided (brgemm): the input copied channels-last, the weight (C_out rounded up to the
    block), the result channels-last (neither channel count padded) and brgemm's buffer: one
    image of the input, its borders widened by the input positions one output position
    overlaps (``(k - 1) // s`` each side), and, with a bias, the whole result again when the
    stride does not divide the output's size. Then the result, its dense copy and that copy
    made contiguous (the same tensor for one channel).
    Unstrided (a convolution's backward-data kernel): the input, the weight (both channel
    counts rounded up) and the result, blocked, and with a bias a second blocked result the
    bias is added from; then the blocked result and the output."""
    if any(s > 1 for s in stride):
        edges = [(k - 1) // s for k, s in zip(w[2:], stride, strict=True)]
        buffer = x[1] * prod(d + 2 * e for d, e in zip(x[2:], edges, strict=True))
        if bias is not None and any(d % s for d, s in zip(out[2:], stride, strict=True)):
            buffer += prod(out)
        held = buffer + prod(x) + numel_w(w, block, True) + prod(out)
        copies = 3 if out[1] > 1 else 2
        return max(held, copies * prod(out)) - prod(out)
    out_b = _padded(out, block)
    held = _padded(x, block) + _weight(w, block, block) + out_b
    if bias is not None:
        held += out_b
    return max(held, out_b + prod(out)) - prod(out)


def _weight(w: Shape, block_in: int, block_out: int) -> int:
    """Elements of a transposed convolution's weight reordered, its C_in and C_out rounded up
    to the given blocks (1: not padded)."""
    return prod(w[2:]) * ceil(w[0] / block_in) * block_in * ceil(w[1] / block_out) * block_out


def _deconv_backward(grad_out: Shape, x: Shape, w: Shape, output_mask, block: int) -> int:
    """Elements a oneDNN transposed convolution's backward holds beside its gradients.

    The input's gradient, a convolution of the output's gradient (reordered only from one
    block of channels up) with the weight (C_in rounded up, C_out too from one block): the
    blocked input gradient, then it and its dense copy. The weight's gradient: its operands
    (``_weight_grad``, the output's gradient as the source) beside the input's gradient, and
    the blocked weight gradient, which is then copied out."""
    channels = grad_out[1]
    grad_in = prod(x) if output_mask[0] else 0
    grad_w = prod(w) if output_mask[1] else 0
    live = [0]
    if output_mask[0]:
        blocked = channels >= block
        grad_out_r = _padded(grad_out, block) if blocked else 0
        grad_in_b = _padded(x, block)
        weight = _weight(w, block, block if blocked else 1)
        live += [grad_out_r + weight + grad_in_b, grad_in_b + grad_in]
    if output_mask[1]:
        live.append(grad_in + _weight_grad(grad_out, x, block) + grad_w)
        live.append(grad_in + 2 * grad_w)  # the blocked weight gradient, then its copy
    return max(live) - grad_in - grad_w


def _deconv_columns(x: Shape, w: Shape) -> int:
    """Elements of ``slow_conv_transpose2d``'s columns: C_out x kernel values per input
    position, for the whole batch (the input times the weight, before col2im)."""
    return x[0] * w[1] * prod(w[2:]) * prod(x[2:])


def _attention_held(u: int, scores: int, masked: bool) -> int:
    """Bytes ATen's fused attention (``native_multi_head_attention`` in ``attention.cpp``)
    holds beside its input while it runs, as the profiler sees it: the packed q, k, v (``u``
    each, the input's bytes) twice while they are split out, then once with the scores (a
    masked softmax writes a second copy), then once with the context and the output."""
    return max(6 * u, 3 * u + scores * (2 if masked else 1), 5 * u)


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
    held = _attention_held(u, scores, mask is not None)
    if need_weights:
        weights = scores // num_head if average else 0  # else the scores are the weights
        held = max(held, 3 * u + scores + u + max(u, weights))
    return held - _outputs(out) * itemsize


@workspace("_transformer_encoder_layer_fwd")
def encoder_layer(
    src: Shape, embed_dim: int, num_heads: int, *args, out, itemsize: int, **kw
) -> int:
    """``nn.TransformerEncoderLayer``'s fast path: its attention as ``native_mha``'s without
    the weights (beside the first norm's output when ``norm_first``), then the feed-forward
    block's hidden layer with the attention block's output and the second linear's (and the
    second norm's output when ``norm_first``)."""
    norm_first = kw.get("norm_first", args[5] if len(args) > 5 else False)
    mask = kw.get("mask", args[15] if len(args) > 15 else None)
    hidden_features = (kw.get("ffn_weight_1") or args[12])[0]
    u = numel(src) * itemsize
    scores = prod(src[:-1]) * src[-2] * num_heads * itemsize
    attention = _attention_held(u, scores, mask is not None) + (u if norm_first else 0)
    feed_forward = (3 if norm_first else 2) * u + u * hidden_features // embed_dim
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
def product_copies(*args, out, itemsize: int, **__) -> int:
    """``mm(a, b)``, ``addmm(bias, a, b)``: both operands' clones, live at once (a Linear's
    two backward products each copy the sum loss's expanded gradient). 16-bit: oneDNN's."""
    return sum(_copied(m) for m in args[-2:]) * itemsize if itemsize >= 4 else 0


@workspace("bmm", "baddbmm")
def batched_copies(*args, out, itemsize: int, **__) -> int:
    """``bmm(a, b)``, ``baddbmm(bias, a, b)`` (``bmm_out_or_baddbmm_``): under 400
    multiply-adds an item, a loop that copies nothing; else one MKL call if it takes every item
    as it is, or one product per item, each copying its own: one item's copies live at once."""
    a, b = args[-2:]
    if itemsize < 4 or a[-1] * a[-2] * b[-1] < 400 or not _copied(a, True) + _copied(b, True):
        return 0
    return (_copied(a) + _copied(b)) * itemsize
