"""Transposed convolutions' workspaces on the CPU: oneDNN's deconvolution forward and backward,
and the slow path's columns (``costs/workspace.py`` picks the path)."""

from __future__ import annotations

from math import prod

from pytest_graphbudget.costs import conv_layout as layout
from pytest_graphbudget.costs.registry import Shape


def forward(x: Shape, w: Shape, bias, stride, out: Shape, block: int, itemsize: int) -> int:
    """Bytes a oneDNN transposed convolution holds beside its output (weight ``w``: C_in x
    C_out x kernel).

    Strided (brgemm): the input copied channels-last, the weight (C_out rounded up to the
    block), the result channels-last (neither channel count padded) and brgemm's buffer: one
    image of the input, its borders widened by the input positions one output position
    overlaps (``(k - 1) // s`` each side), and, with a bias, the whole result again when the
    stride does not divide the output's size. Then the result, its dense copy and that copy
    made contiguous (the same tensor for one channel).
    Unstrided (a convolution's backward-data kernel): the input, the weight (both channel
    counts rounded up) and the result, blocked, and with a bias a second blocked result, in
    float32, the bias is added from; then the blocked result and the output."""
    if any(s > 1 for s in stride):
        edges = [(k - 1) // s for k, s in zip(w[2:], stride, strict=True)]
        buffer = x[1] * prod(d + 2 * e for d, e in zip(x[2:], edges, strict=True))
        if bias is not None and any(d % s for d, s in zip(out[2:], stride, strict=True)):
            buffer += prod(out)
        held = buffer + prod(x) + layout.numel_w(w, block, True) + prod(out)
        copies = 3 if out[1] > 1 else 2
        return (max(held, copies * prod(out)) - prod(out)) * itemsize
    out_b = layout.padded(out, block)
    held = (layout.padded(x, block) + layout.transposed_weight(w, block, block) + out_b) * itemsize
    if bias is not None:  # in float32 whatever the dtype, and 128 bytes
        held += out_b * 4 + 128
    return max(held, (out_b + prod(out)) * itemsize) - prod(out) * itemsize


def backward(grad_out: Shape, x: Shape, w: Shape, output_mask, block: int, scratch: int = 0) -> int:
    """Elements a oneDNN transposed convolution's backward holds beside its gradients.

    The input's gradient, a convolution of the output's gradient (reordered only from one block of
    channels up) with the weight (C_in rounded up, C_out too from one block): the blocked input
    gradient, then it and its dense copy. The weight's gradient: its operands
    (``layout.reordered_operands``, the output's gradient as the source) beside the input's
    gradient, and the blocked weight gradient, which is then copied out."""
    channels = grad_out[1]
    grad_in = prod(x) if output_mask[0] else 0
    grad_w = prod(w) if output_mask[1] else 0
    live = [0]
    if output_mask[0]:
        blocked = channels >= block
        grad_out_r = layout.padded(grad_out, block) if blocked else 0
        grad_in_b = layout.padded(x, block)
        weight = layout.transposed_weight(w, block, block if blocked else 1)
        live += [grad_out_r + weight + grad_in_b, grad_in_b + grad_in]
    if output_mask[1]:
        half = block if scratch else None  # bfloat16's kernel takes no half blocks
        live.append(
            grad_in + layout.reordered_operands(grad_out, x, block, half) + grad_w + scratch
        )
        live.append(grad_in + 2 * grad_w)  # the blocked weight gradient, then its copy
    return max(live) - grad_in - grad_w


def columns(x: Shape, w: Shape) -> int:
    """Elements of ``slow_conv_transpose2d``'s columns: C_out x kernel values per input
    position, for the whole batch (the input times the weight, before col2im)."""
    return x[0] * w[1] * prod(w[2:]) * prod(x[2:])
