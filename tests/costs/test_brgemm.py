"""oneDNN's bfloat16 matrix product buffers (``costs/brgemm.py``), each figure the bytes
``torch.profiler(profile_memory=True)`` recorded inside one ``mm`` on one thread of an AVX-512
BF16 CPU (torch 2.14), beside the derivation the rule gives."""

from __future__ import annotations

import pytest

from pytest_graphbudget.compat import kernels as releases
from pytest_graphbudget.costs.brgemm import matmul_scratch
from pytest_graphbudget.costs.channels_last import Strided
from pytest_graphbudget.costs.registry import Shape, workspace_bytes


@pytest.fixture(autouse=True)
def onednn_3_10(monkeypatch):
    """The figures of oneDNN 3.10 and later (torch 2.11 on), whichever this torch bundles."""
    monkeypatch.setattr(releases, "onednn_brgemm_accumulates", lambda: True)


def plain(rows: int, cols: int) -> Strided:
    return Strided((rows, cols), strides=(cols, 1))


def transposed(rows: int, cols: int) -> Strided:
    """A transposed view: ``t()`` of a contiguous cols x rows matrix."""
    return Strided((rows, cols), strides=(1, rows))


@pytest.mark.parametrize(
    ("m", "k", "n", "measured"),
    [
        # 256 rows of float32 result x 64 columns (65,536) + the right operand's 256 x 64
        # packed (32,768) + 1,024
        (256, 256, 256, 99_328),
        # fewer than 64 columns: the result's block is as wide as the product (256 x 16 x 4);
        # the inner dimension is rounded up to 32
        (256, 16, 256, 70_656),
        (17, 16, 16, 6_208),
        # 300 rows split into two blocks of 150; 1,000 into four of 250
        (300, 256, 256, 72_192),
        (1000, 64, 10, 19_216),
        # inner blocks: 512 up to 1,024, then 1,024
        (256, 768, 256, 132_096),
        (256, 1100, 256, 197_632),
        (96, 2048, 96, 156_672),
    ],
)
def test_a_plain_product_holds_its_blocks(m, k, n, measured):
    assert matmul_scratch(plain(m, k), plain(k, n)) == measured


@pytest.mark.parametrize(
    ("m", "k", "n", "measured"),
    [
        # a Linear's weight gradient, grad_out.t() @ x: the left block packed too, 96 rows of
        # 512 + 32 (rows of 1 KiB are padded), the right one (512 x 64 x 2), the result over
        # every column block (96 x 128 x 4) while 2,048 inner values run in four blocks, 1,152
        (96, 2048, 96, 220_288),
        (96, 2048, 384, 318_592),
        (768, 8192, 768, 1_131_648),
        # one inner block: one column block of result
        (256, 256, 256, 230_528),
        (256, 100, 96, 148_608),
    ],
)
def test_a_transposed_left_operand_is_packed_too(m, k, n, measured):
    assert matmul_scratch(transposed(m, k), plain(k, n)) == measured


def test_a_small_product_runs_atens_kernel():
    # 16 x 16 x 16 multiply-adds is ATen's own kernel (checksize), which allocates nothing.
    assert matmul_scratch(plain(16, 16), plain(16, 16)) == 0
    assert matmul_scratch(plain(17, 16), plain(16, 16)) == 6_208


def test_only_bfloat16_takes_them():
    # float16 on a CPU without FP16 instructions, and float32 (MKL), allocate nothing there.
    a, b = plain(256, 256), plain(256, 256)
    assert workspace_bytes("mm", (a, b), {}, Shape((256, 256)), 2, "bfloat16") == 99_328
    assert workspace_bytes("mm", (a, b), {}, Shape((256, 256)), 2, "float16") == 0
    assert workspace_bytes("mm", (a, b), {}, Shape((256, 256)), 4, "float32") == 0


def test_an_expanded_operand_is_copied_then_packed_as_plain():
    # The sum loss's seed, 256 x 96 expanded, transposed for the weight gradient: ATen copies it
    # (49,152 bytes) and oneDNN packs the copy as a plain 96 x 256 operand (58,368).
    seed = Strided((96, 256), strides=(0, 0))
    got = workspace_bytes("mm", (seed, plain(256, 64)), {}, Shape((96, 64)), 2, "bfloat16")
    assert got == 49_152 + 58_368


@pytest.mark.parametrize(
    ("a", "k", "measured"),
    [
        # oneDNN 3.7 (torch 2.9) accumulates in float32 only across inner blocks: one block of
        # 256 inner values holds the right operand's block (32,768) and 896 bytes
        (plain(256, 256), 256, 33_664),
        (transposed(256, 256), 256, 164_864),  # and the left one's (131,072), 1,024 bytes
        (plain(96, 2048), 2048, 156_672),  # four inner blocks: as 3.10's
        (transposed(96, 2048), 2048, 220_288),
    ],
)
def test_an_older_onednn_accumulates_only_across_inner_blocks(monkeypatch, a, k, measured):
    monkeypatch.setattr(releases, "onednn_brgemm_accumulates", lambda: False)
    columns = 256 if k == 256 else 96
    assert matmul_scratch(a, plain(k, columns)) == measured
