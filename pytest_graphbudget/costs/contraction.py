"""Contractions: convolutions and matrix products. Their multiply-accumulates are ``macs``.

``linear``, ``matmul`` and ``einsum`` are composite ops: by the time the interpreter sees them
they have become the ``mm``/``addmm``/``bmm`` calls priced here.
"""

from __future__ import annotations

from math import prod

from pytest_graphbudget.costs.registry import OpCost, Shape, numel, register


@register("convolution", "_convolution", "convolution_overrideable", "_slow_conv2d_forward")
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


@register("mm")
def mm(a: Shape, b: Shape, *, out: Shape, **_) -> OpCost:
    # (m, k) @ (k, n): m*n outputs, k MACs each.
    return OpCost(macs=numel(a) * b[-1])


@register("addmm")
def addmm(bias: Shape, a: Shape, b: Shape, *_, out: Shape, **__) -> OpCost:
    # mm plus one add per output element for the bias.
    return OpCost(macs=numel(a) * b[-1], other=numel(out))


@register("_addmm_activation")
def addmm_activation(
    bias: Shape, a: Shape, b: Shape, beta=1, alpha=1, use_gelu=False, *, out: Shape, **_
) -> OpCost:
    # addmm with a fused epilogue: GELU (5 FLOPs per element) or ReLU (1).
    return OpCost(macs=numel(a) * b[-1], other=numel(out) * (1 + (5 if use_gelu else 1)))


@register("bmm")
def bmm(a: Shape, b: Shape, *, out: Shape, **_) -> OpCost:
    # (B, m, k) @ (B, k, n)
    return OpCost(macs=numel(a) * b[-1])


@register("baddbmm")
def baddbmm(bias: Shape, a: Shape, b: Shape, *_, out: Shape, **__) -> OpCost:
    return OpCost(macs=numel(a) * b[-1], other=numel(out))


@register("addbmm")
def addbmm(bias: Shape, a: Shape, b: Shape, *_, out: Shape, **__) -> OpCost:
    # Sum over the batch of (m, k) @ (k, n), added to bias: the batch sum is one add per product.
    return OpCost(macs=numel(a) * b[-1], other=numel(out) * a[0])


@register("mv", "dot", "vdot")
def mv(a: Shape, b: Shape, *, out: Shape, **_) -> OpCost:
    # (m, k) @ (k,) or (k,) . (k,): one MAC per element of the first operand.
    return OpCost(macs=numel(a))


@register("addmv")
def addmv(bias: Shape, a: Shape, b: Shape, *_, out: Shape, **__) -> OpCost:
    return OpCost(macs=numel(a), other=numel(out))
