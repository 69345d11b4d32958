"""The buffers oneDNN's bfloat16 matrix product takes on the CPU (its brgemm matmul).

ATen sends a bfloat16 ``mm``, ``addmm``, ``bmm`` or ``baddbmm`` above 16x16x16 multiply-adds
to oneDNN (``use_mkldnn_bf16_matmul``); float32 goes to MKL and float16, on a CPU without
FP16 instructions, to ATen's own kernel, neither of which allocates through torch. oneDNN
splits the product into blocks of rows (``M``), of the inner dimension (``K``) and of 64
columns (``N``), and for one block at a time holds:

- the right operand's block packed (``K`` block x 64 columns);
- the result's block accumulated in float32 (its rows x up to 64 columns), and 128 bytes; a
  oneDNN before 3.10 (torch 2.10 and older) does so only while the inner dimension runs over
  more than one block (``compat.kernels.onednn_brgemm_accumulates``);
- for a transposed left operand (a Linear's weight gradient, ``grad_out.t() @ x``), its block
  packed too, its rows padded by 32 elements where they would span a multiple of 1 KiB, and a
  float32 result over every column block (up to 1,024 columns) while the inner dimension runs
  over more than one block.

Measured with ``torch.profiler(profile_memory=True)`` on one thread, AVX-512 with BF16 (the CPU
``costs/workspace.py`` models), torch 2.14 (oneDNN 3.12), at 1 to 2,048 rows, inner
dimensions 3 to 8,192 and 10 to 3,072 columns: exact to the byte; torch 2.9 (oneDNN 3.7)
at some of them.
"""

from __future__ import annotations

from math import ceil

from pytest_graphbudget.compat import kernels as releases
from pytest_graphbudget.costs.registry import Shape

MIN_SIZE = 16 * 16 * 16
"""ATen's ``checksize``: a product of at most this many multiply-adds runs ATen's own kernel."""
ROWS = 256
"""The most rows of a block: more are split into equal blocks."""
COLUMNS = 64
"""Columns of a block of the right operand and of the result."""
PLAIN_EXTRA, TRANSPOSED_EXTRA, ACCUMULATOR_EXTRA = 896, 1_024, 128
"""Bytes oneDNN allocates beside the blocks, whatever the shapes, and beside the result's."""


def matmul_scratch(a: Shape, b: Shape, batch: int = 1) -> int:
    """Bytes oneDNN's bfloat16 product of ``a`` (... x M x K) and ``b`` (... x K x N) takes
    beside its operands and result; ``batch`` items of a ``bmm`` count toward ATen's test of
    size only (oneDNN holds one item's blocks)."""
    rows, inner, columns = a[-2], a[-1], b[-1]
    if batch * rows * inner * columns <= MIN_SIZE or not rows * inner * columns:
        return 0
    block_rows = rows if rows <= ROWS else ceil(rows / ceil(rows / ROWS))
    width = columns if columns < COLUMNS else COLUMNS
    accumulated = releases.onednn_brgemm_accumulates() or inner > 512
    if _transposed(a):
        block = _round(inner) if inner <= 512 else 512
        lda = block + 32 if block * 2 % 1024 == 0 else block
        if inner > 512:  # the result over every column block, summed across inner blocks
            width = columns if columns < COLUMNS else min(_round(columns, COLUMNS), 1024)
        held = block_rows * lda * 2 + block * COLUMNS * 2 + TRANSPOSED_EXTRA
    else:
        block = _round(inner) if inner <= 512 else 512 if inner <= 1024 else 1024
        held = block * COLUMNS * 2 + PLAIN_EXTRA
    return held + (block_rows * width * 4 + ACCUMULATOR_EXTRA if accumulated else 0)


def _round(n: int, to: int = 32) -> int:
    return max(to, ceil(n / to) * to)


def _transposed(m: Shape) -> bool:
    """Whether a matrix (a batch item) is column-major and not row-major: a transposed view."""
    strides = getattr(m, "strides", None)
    if strides is None:
        return False
    (rows, cols), (across, along) = m[-2:], strides[-2:]
    row_major = along == 1 and across >= max(1, cols)
    return not row_major and across == 1 and along >= max(1, rows)
