"""Contractions: convolutions and matrix products. Their multiply-accumulates are ``macs``.

``linear``, ``matmul`` and ``einsum`` are composite ops: by the time the interpreter sees them
they have become the ``mm``/``addmm``/``bmm`` calls priced here.
"""

from __future__ import annotations

from math import prod

from pytest_graphbudget.costs.registry import OpCost, Shape, numel, out_numel, register


@register("convolution", "_convolution", "convolution_overrideable", role="anchor", kind="conv")
def convolution(
    x: Shape,
    w: Shape,
    bias: Shape | None,
    stride,
    padding,
    dilation,
    transposed: bool = False,
    *_,
    out: Shape,
    **__,
) -> OpCost:
    # Normal weight [C_out, C_in/groups, *kernel]: each output element takes C_in/groups*k MACs.
    # Transposed weight [C_in, C_out/groups, *kernel]: each input element scatters to
    # C_out/groups*k outputs.
    macs = numel(x) * prod(w[1:]) if transposed else numel(out) * prod(w[1:])
    return OpCost(macs=macs, other=numel(out) if bias is not None else 0)


@register(
    "_slow_conv2d_forward",
    "slow_conv3d_forward",
    "slow_conv_dilated2d",
    "slow_conv_dilated3d",
    "_conv_depthwise2d",
    "conv_depthwise3d",
    role="anchor",
    kind="conv",
)
def slow_convolution(x: Shape, w: Shape, kernel_size, bias=None, *_, out: Shape, **__) -> OpCost:
    # The kernels behind ``convolution``, when called by name (``thnn_conv2d`` and
    # ``slow_conv3d`` decompose into the first two): their arguments are (input, weight,
    # kernel_size, bias, stride, padding[, dilation]), with no groups. Weight [C_out, C_in,
    # *kernel] ([C_out, 1, *kernel] depthwise; [C_out, C_in * k] for the 2-d slow kernel):
    # C_in*k MACs per output element, as ``convolution``.
    return OpCost(macs=numel(out) * prod(w[1:]), other=numel(out) if bias is not None else 0)


@register("slow_conv_transpose2d", "slow_conv_transpose3d", role="anchor", kind="conv")
def slow_conv_transpose(x: Shape, w: Shape, kernel_size, bias=None, *_, out: Shape, **__) -> OpCost:
    # The same arguments, weight [C_in, C_out, *kernel]: each input element scatters to
    # C_out*k outputs, as a transposed ``convolution``.
    return OpCost(macs=numel(x) * prod(w[1:]), other=numel(out) if bias is not None else 0)


@register("mm", role="anchor", kind="matmul")
def mm(a: Shape, b: Shape, *, out: Shape, **_) -> OpCost:
    # (m, k) @ (k, n): m*n outputs, k MACs each.
    return OpCost(macs=numel(a) * b[-1])


def _scaled(out: Shape, beta=1, alpha=1) -> int:
    """FLOPs of ``beta * input + alpha * product`` besides the product, per output element.

    The add of the input (none when beta is 0: the input is ignored), and one multiply for each
    of alpha and beta that is not 1.
    """
    per_element = int(beta != 0) + int(alpha != 1) + int(beta not in (0, 1))
    return per_element * numel(out)


@register("addmm", role="anchor", kind="linear")
def addmm(bias: Shape, a: Shape, b: Shape, *_, out: Shape, beta=1, alpha=1, **__) -> OpCost:
    # mm plus, per output element, the bias add and the alpha/beta scaling.
    return OpCost(macs=numel(a) * b[-1], other=_scaled(out, beta, alpha))


@register("_addmm_activation", role="anchor", kind="linear")
def addmm_activation(
    bias: Shape, a: Shape, b: Shape, beta=1, alpha=1, use_gelu=False, *, out: Shape, **_
) -> OpCost:
    # addmm with a fused epilogue: GELU (5 FLOPs per element) or ReLU (1).
    epilogue = numel(out) * (5 if use_gelu else 1)
    return OpCost(macs=numel(a) * b[-1], other=_scaled(out, beta, alpha) + epilogue)


@register("bmm", role="anchor")
def bmm(a: Shape, b: Shape, *, out: Shape, **_) -> OpCost:
    # (B, m, k) @ (B, k, n)
    return OpCost(macs=numel(a) * b[-1])


@register("_grouped_mm", role="anchor", kind="matmul")
def grouped_mm(a: Shape, b: Shape, offs=None, bias=None, *_, out: Shape, **__) -> OpCost:
    # One product per group (a mixture of experts' experts, transformers 5): each row of a
    # (m, k) meets its group's (k, n), so 2-d x 3-d is m*k*n; 3-d x 3-d is bmm's g*m*k*n;
    # with ``offs`` splitting k (2-d x 2-d) or n (3-d x 2-d), the groups' parts add up to
    # one m*k*n. Plus the bias add, when there is one.
    macs = prod(a[-2:]) * b[-1] * (a[0] if len(a) == 3 and len(b) == 3 else 1)
    return OpCost(macs=macs, other=numel(out) if bias is not None else 0)


@register("transformers.grouped_mm_fallback", role="anchor", kind="matmul")
def grouped_mm_fallback(a: Shape, b: Shape, offs: Shape, *, out: Shape, **_) -> OpCost:
    # transformers 5's stand-in for ``_grouped_mm`` (a torch before 2.9 on the CPU, or float32
    # weights under export): one ``mm`` per expert inside one custom op. Each row of the
    # sorted (m, k) meets its expert's (k, n) of the (experts, k, n): m*k*n.
    return OpCost(macs=numel(a) * b[-1])


@register("transformers.grouped_mm_fallback_backward", role="anchor", kind="matmul")
def grouped_mm_fallback_backward(a: Shape, b: Shape, offs: Shape, grad: Shape, **_) -> OpCost:
    # Its backward, both gradients in one op: each row's input gradient (n, k per row of the
    # (m, n) gradient), and each expert's weight gradient (its rows' k x n outer products).
    return OpCost(macs=2 * numel(a) * b[-1])


@register("baddbmm", role="anchor", kind="bmm")
def baddbmm(bias: Shape, a: Shape, b: Shape, *_, out: Shape, beta=1, alpha=1, **__) -> OpCost:
    return OpCost(macs=numel(a) * b[-1], other=_scaled(out, beta, alpha))


@register("addbmm", role="anchor", kind="bmm")
def addbmm(bias: Shape, a: Shape, b: Shape, *_, out: Shape, beta=1, alpha=1, **__) -> OpCost:
    # Sum over the batch of (m, k) @ (k, n), added to bias: each output element accumulates
    # batch x k products, all of them MACs (the batch is contracted as k is), then the bias
    # add and the alpha/beta scaling.
    return OpCost(macs=numel(a) * b[-1], other=_scaled(out, beta, alpha))


@register("mv", "dot", "vdot", role="anchor", kind="matmul")
def mv(a: Shape, b: Shape, *, out: Shape, **_) -> OpCost:
    # (m, k) @ (k,) or (k,) . (k,): one MAC per element of the first operand.
    return OpCost(macs=numel(a))


@register("addmv", role="anchor", kind="linear")
def addmv(bias: Shape, a: Shape, b: Shape, *_, out: Shape, beta=1, alpha=1, **__) -> OpCost:
    return OpCost(macs=numel(a), other=_scaled(out, beta, alpha))


@register("addr", role="anchor", kind="matmul")
def addr(bias: Shape, u: Shape, v: Shape, *_, out: Shape, beta=1, alpha=1, **__) -> OpCost:
    # The outer product u v^T is addmm with k = 1: one MAC per output element, then the bias
    # add and the alpha/beta scaling.
    return OpCost(macs=numel(u) * numel(v), other=_scaled(out, beta, alpha))


@register("_euclidean_dist", role="anchor", kind="matmul")
def euclidean_dist(x1: Shape, x2: Shape, *, out: Shape, **_) -> OpCost:
    # cdist's p=2 kernel for more than 25 rows: one matmul of [-2*x1, |x1|^2, 1] by
    # [x2, 1, |x2|^2]^T, so M + 2 MACs per pair; besides it, the squared norms (a multiply
    # and an add per element), the -2 scale of x1, and a clamp and a root per pair.
    *batch, rows1, m = x1
    rows2 = x2[-2]
    pairs = prod(batch) * rows1 * rows2
    other = prod(batch) * (2 * m * (rows1 + rows2) + rows1 * m) + 2 * pairs
    return OpCost(macs=pairs * (m + 2), other=other)


@register("_cdist_forward", role="anchor", kind="matmul")
def cdist_forward(x1: Shape, x2: Shape, p=2.0, *_, out: Shape, **__) -> OpCost:
    # The direct kernel: per pair and feature a difference, then for p=2 a multiply-add of it
    # with itself (a MAC), for other p a power (or abs) and an add; a root per pair (p not 1).
    *batch, rows1, m = x1
    pairs = prod(batch) * rows1 * x2[-2]
    root = pairs if p not in (0, 1) else 0
    if p == 2:
        return OpCost(macs=pairs * m, other=pairs * m + root)
    return OpCost(other=3 * pairs * m + root)


@register("_pdist_forward", role="anchor", kind="matmul")
def pdist_forward(x: Shape, p=2.0, *_, out: Shape, **__) -> OpCost:
    # ``_cdist_forward``'s direct kernel over the n(n-1)/2 pairs of rows (the output's).
    pairs, m = out_numel(out), x[-1]
    root = pairs if p not in (0, 1) else 0
    if p == 2:
        return OpCost(macs=pairs * m, other=pairs * m + root)
    return OpCost(other=3 * pairs * m + root)


@register("affine_grid_generator", role="anchor", kind="matmul")
def affine_grid_generator(theta: Shape, size, align_corners=False, *_, out, **__) -> OpCost:
    # ``F.affine_grid``: the base grid (N x points x (dims + 1), homogeneous) times theta,
    # transposed (N x (dims + 1) x dims), one ``bmm``: dims + 1 MACs per output coordinate.
    return OpCost(macs=out_numel(out) * theta[-1])


def unsqueezed(shape: Shape, expand) -> list[int]:
    """A ``_trilinear`` operand's shape with a 1 at each of its ``expand`` dims."""
    full = list(shape)
    for dim in sorted(expand):
        full.insert(dim, 1)
    return full


@register("_trilinear", role="anchor", kind="matmul")
def trilinear(
    i1: Shape, i2: Shape, i3: Shape, expand1, expand2, expand3, sumdim, unroll_dim=1, *_, out, **__
) -> OpCost:
    # (i1 * i2 * i3).sum(sumdim), each unsqueezed at its expand dims (nn.Bilinear: x1 [N, I],
    # W [O, I, J], x2 [N, J]), as ATen runs it: one slice of unroll_dim at a time, i1 * i2
    # contracted over the summed dims i3 lacks, then that with i3 over the rest, added in.
    s1, s2, s3 = unsqueezed(i1, expand1), unsqueezed(i2, expand2), unsqueezed(i3, expand3)
    slices = max(s1[unroll_dim], s2[unroll_dim], s3[unroll_dim])
    for s in (s1, s2, s3):
        s[unroll_dim] = 1
    both = [max(a, b) for a, b in zip(s1, s2, strict=True)]
    kept = [
        1 if d in sumdim and d in expand3 and d != unroll_dim else n for d, n in enumerate(both)
    ]
    last = [max(a, b) for a, b in zip(kept, s3, strict=True)]
    added = prod(1 if d in sumdim else n for d, n in enumerate(last))
    return OpCost(macs=slices * (prod(both) + prod(last)), other=slices * added)
