"""Attention kernels and recurrent layers: fused ops that hide contractions inside one call.

Every scaled-dot-product backend takes q [..., L, E], k [..., S, E], v [..., S, Ev], with the
batch and head dimensions in front. QK^T and AV are contractions; per score element the kernel
also scales (1 FLOP), applies softmax (5) and, when masked, adds the mask (1). A causal mask
is counted as dense: the reference counts (torchvision, fvcore) do the same.
"""

from __future__ import annotations

from math import prod

from pytest_graphbudget.costs.reduction import SOFTMAX
from pytest_graphbudget.costs.registry import OpCost, Shape, numel, register, workspace

SCALE = 1


def _sdpa(q: Shape, k: Shape, v: Shape, masked: bool) -> OpCost:
    batch, length, source = prod(q[:-2]), q[-2], k[-2]
    scores = batch * length * source
    return OpCost(macs=scores * (q[-1] + v[-1]), other=scores * (SCALE + SOFTMAX + int(masked)))


@register("scaled_dot_product_attention", role="anchor", kind="attention")
def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *_, out, **kw) -> OpCost:
    # The public op, when it reaches the recorder whole (under inference_mode); otherwise each
    # tier prices the kernels it runs: the flash kernel, or the math fallback's ops.
    mask = kw.get("attn_mask", attn_mask)
    return _sdpa(q, k, v, masked=mask is not None or kw.get("is_causal", is_causal))


@register("_scaled_dot_product_flash_attention_for_cpu", role="anchor", kind="attention")
def sdpa_flash_cpu(q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, out, **_) -> OpCost:
    return _sdpa(q, k, v, masked=attn_mask is not None or is_causal)


def flash_blocks(q: Shape, k: Shape) -> tuple[int, int]:
    """The query and key block lengths of ATen's CPU flash attention (``q_split_size``: 32,
    64 from 192 queries, 256 from 768; ``kv_split_size``: 512), no longer than the sequences."""
    queries, keys = q[-2], k[-2]
    block = 256 if queries >= 768 else 64 if queries >= 192 else 32
    return min(block, queries), min(512, keys)


@workspace("_scaled_dot_product_flash_attention_for_cpu")
def flash_cpu_buffer(q: Shape, k: Shape, v: Shape, *_, out, itemsize: int, **__) -> int:
    """Each thread's buffer (one, as every workspace here): a block's scores, their running
    max and sum, and its output rows, in float32. A 1,024-token attention's forward read 19%
    under without it when the attention set the peak."""
    if itemsize != 4 or len(q) < 3:
        return 0
    rows, cols = flash_blocks(q, k)
    return (rows * cols + 2 * rows + rows * v[-1]) * itemsize


def _tensor_slot(args: tuple) -> bool:
    """Whether the argument after q, k and v is a tensor's slot (a ``Shape``, or None for an
    optional tensor left out) rather than ``dropout_p``, a float: the two layouts that share
    an op's name below."""
    return bool(args) and (args[0] is None or isinstance(args[0], Shape))


@register("_scaled_dot_product_flash_attention", role="anchor", kind="attention")
def sdpa_flash(q, k, v, *args, out, **__) -> OpCost:
    # (dropout_p, is_causal, ...); the float8 overload ``.quantized`` puts q_descale,
    # k_descale and v_descale (tensors or None) before them.
    if _tensor_slot(args):
        args = args[3:]
    return _sdpa(q, k, v, masked=len(args) > 1 and bool(args[1]))


@register("_scaled_dot_product_efficient_attention", role="anchor", kind="attention")
def sdpa_efficient(
    q, k, v, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0, is_causal=False, *_, out, **__
) -> OpCost:
    return _sdpa(q, k, v, masked=attn_bias is not None or is_causal)


@register("_scaled_dot_product_cudnn_attention", role="anchor", kind="attention")
def sdpa_cudnn(q, k, v, *args, out, **__) -> OpCost:
    # (attn_bias, compute_log_sumexp, dropout_p, is_causal, ...) from torch 2.5, as the
    # efficient kernel; torch 2.4's has the flash kernel's (dropout_p, is_causal, ...).
    if _tensor_slot(args):
        return sdpa_efficient(q, k, v, *args, out=out)
    return _sdpa(q, k, v, masked=len(args) > 1 and bool(args[1]))


@register("_scaled_dot_product_fused_attention_overrideable", role="anchor", kind="attention")
def sdpa_overrideable(
    q, k, v, attn_bias=None, dropout_p=0.0, is_causal=False, *_, out, **__
) -> OpCost:
    # The efficient kernel's arguments without compute_log_sumexp: is_causal is the sixth.
    return _sdpa(q, k, v, masked=attn_bias is not None or is_causal)


@register(
    "_scaled_dot_product_attention_math",
    "_scaled_dot_product_attention_math_for_mps",
    role="anchor",
    kind="attention",
)
def sdpa_math(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *_, out, **__) -> OpCost:
    return _sdpa(q, k, v, masked=attn_mask is not None or is_causal)


def _heads_last(q: Shape, k: Shape, v: Shape) -> tuple[Shape, Shape, Shape]:
    """(B, S, H, D) -> (B, H, S, D): the layout of the kernels below, as ``_sdpa`` reads it."""
    if len(q) != 4:  # packed variable-length batches (cum_seq_q) have no batch dimension
        raise ValueError("a packed (nested) batch: its sequence lengths are data, not shapes")
    return tuple(Shape((t[0], t[2], t[1], t[3])) for t in (q, k, v))


@register("_flash_attention_forward", role="anchor", kind="attention")
def flash_attention_forward(
    q,
    k,
    v,
    cum_seq_q=None,
    cum_seq_k=None,
    max_q=0,
    max_k=0,
    dropout_p=0.0,
    is_causal=False,
    *_,
    out,
    **kw,
) -> OpCost:
    # The flash kernel behind SDPA on CUDA, called directly by some libraries. Inputs are
    # (B, S, H, D); a window (window_size_left/right) or alibi slopes are counted as a mask.
    if cum_seq_q is not None:
        raise ValueError("a packed (nested) batch: its sequence lengths are data, not shapes")
    masked = is_causal or any(
        kw.get(key) is not None for key in ("window_size_left", "window_size_right", "alibi_slopes")
    )
    return _sdpa(*_heads_last(q, k, v), masked=bool(masked))


@register("_flash_attention_forward_no_dropout_inplace", role="anchor", kind="attention")
def flash_attention_forward_inplace(out_tensor, q, k, v, *args, out, **kw) -> OpCost:
    # The same kernel writing into its first argument.
    return flash_attention_forward(q, k, v, *args, out=out, **kw)


@register("_efficient_attention_forward", role="anchor", kind="attention")
def efficient_attention_forward(
    q,
    k,
    v,
    bias=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_q=None,
    max_k=None,
    dropout_p=0.0,
    custom_mask_type=0,
    *_,
    out,
    **kw,
) -> OpCost:
    # The memory-efficient (xformers) kernel: inputs (B, S, H, D); custom_mask_type 0 is no
    # mask, 1 and 2 are causal masks; a bias or a window is a mask too.
    if cu_seqlens_q is not None:
        raise ValueError("a packed (nested) batch: its sequence lengths are data, not shapes")
    masked = bias is not None or bool(custom_mask_type) or kw.get("window_size") is not None
    return _sdpa(*_heads_last(q, k, v), masked=masked)


def _mha(query: Shape, key: Shape, heads: int, has_bias: bool, masked: bool) -> OpCost:
    """Projections, QK^T, AV and output projection of multi-head attention."""
    embed = query[-1]
    batch = prod(query[:-2]) if len(query) > 2 else 1
    length, source = query[-2], key[-2]
    projections = (2 * numel(query) + 2 * numel(key)) * embed  # q, out on L tokens; k, v on S
    attention = 2 * batch * length * source * embed  # QK^T and AV, summed over the heads
    scores = batch * heads * length * source
    bias = 2 * numel(query) + 2 * numel(key) if has_bias else 0
    return OpCost(
        macs=projections + attention, other=bias + scores * (SCALE + SOFTMAX + int(masked))
    )


@register("_native_multi_head_attention", role="anchor", kind="mha")
def native_mha(
    query,
    key,
    value,
    embed_dim,
    num_head,
    qkv_weight,
    qkv_bias,
    proj_weight,
    proj_bias,
    mask=None,
    need_weights=True,
    average_attn_weights=True,
    *_,
    out,
    **__,
) -> OpCost:
    # nn.MultiheadAttention's inference fast path: one kernel for the whole block; asked for
    # its weights averaged over the heads, it sums the heads' scores and divides each sum.
    cost = _mha(query, key, num_head, qkv_bias is not None, mask is not None)
    if need_weights and average_attn_weights:
        scores = (prod(query[:-2]) if len(query) > 2 else 1) * query[-2] * key[-2]
        cost = cost + OpCost(other=scores * (num_head + 1))
    return cost


@register("_transformer_encoder_layer_fwd", role="anchor", kind="encoder_layer")
def transformer_encoder_layer(
    src,
    embed_dim,
    num_heads,
    qkv_weight,
    qkv_bias,
    proj_weight,
    proj_bias,
    use_gelu,
    norm_first,
    eps,
    norm_weight_1,
    norm_bias_1,
    norm_weight_2,
    norm_bias_2,
    ffn_weight_1,
    ffn_bias_1,
    ffn_weight_2,
    ffn_bias_2,
    mask=None,
    *_,
    out,
    **__,
) -> OpCost:
    # nn.TransformerEncoderLayer's fast path: attention, two layer norms (7 FLOPs per element
    # with affine), two residual adds, and the feed-forward block with its activation.
    attention = _mha(src, src, num_heads, qkv_bias is not None, mask is not None)
    tokens, hidden = numel(src) // src[-1], ffn_weight_1[0]
    ffn = OpCost(
        macs=2 * tokens * src[-1] * hidden,
        other=tokens * hidden * (1 + (5 if use_gelu else 1)) + numel(src),
    )
    return attention + ffn + OpCost(other=numel(src) * (2 * 7 + 2))


LSTM_CELL = 30
"""FLOPs per hidden unit per step besides the products: 4 gates x 3 adds (two biases and the
sum of the two products), 3 sigmoids x 4, 2 tanh x 1, c = f*c + i*g (3), h = o*tanh(c) (1)."""


@register("mkldnn_rnn_layer", role="anchor", kind="lstm")
def mkldnn_rnn_layer(
    x,
    w_ih,
    w_hh,
    b_ih,
    b_hh,
    hx,
    cx,
    reverse,
    batch_sizes,
    mode,
    hidden_size,
    num_layers=1,
    has_biases=True,
    *_,
    out,
    **__,
) -> OpCost:
    # One LSTM layer in one direction (the CPU path): per step and sample, the input product
    # (I x 4H) and the recurrent product (H x 4H). ``bias=False`` passes the weights again
    # where the biases go, and ``has_biases`` False: the 4 gates' 2 bias adds each are not done.
    steps = numel(x) // x[-1]
    cell = LSTM_CELL if has_biases else LSTM_CELL - 8
    return OpCost(macs=steps * (numel(w_ih) + numel(w_hh)), other=steps * hidden_size * cell)
