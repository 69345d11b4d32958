"""A storage read through several views is charged the union of the bytes they cover, in
every tier (``engine/extents.py``, ``partition.traffic``; issue 35): hand counts, float32."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_graphbudget import profile_model
from pytest_graphbudget.engine.extents import covered, form


class SplitThree(nn.Module):
    """A linear's 8 x 48 output split in three 8 x 16 parts, each read by a kernel of its own
    (a matmul by the 16 x 16 ``w``). A kernel reading all three: ``QKV`` below."""

    def __init__(self, how: str):
        super().__init__()
        self.proj = nn.Linear(16, 48, bias=False)
        self.w = nn.Parameter(torch.ones(16, 16))
        self.how = how

    def forward(self, x):
        y = self.proj(x)
        if self.how == "split":
            a, b, c = torch.split(y, 16, dim=1)
        elif self.how == "chunk":
            a, b, c = y.chunk(3, dim=1)
        else:
            a, b, c = y.view(8, 3, 16).unbind(1)
        return a @ self.w, b @ self.w, c @ self.w


@pytest.mark.parametrize("tier", ["fx", "eager"])
@pytest.mark.parametrize("how", ["split", "chunk", "unbind"])
def test_each_kernel_reads_the_part_it_takes(tier, how):
    prof = profile_model(SplitThree(how), (torch.ones(8, 16),), tier=tier)
    # proj: reads x (8 x 16, 512 B), writes y (8 x 48, 1,536 B): the union of the three parts
    # read outside (the largest of them, 512 B, before; and on the tape the split is one node,
    # in FX three getitems). Each part's matmul reads its part (512 B, not the 1,536 of y)
    # and w (1,024 B), and writes its 8 x 16 output (512 B).
    first, *parts = prof.subgraphs
    assert (first.bytes_in, first.bytes_out, first.bytes_weights) == (512, 1536, 3072)
    assert [(s.bytes_in, s.bytes_out, s.bytes_weights) for s in parts] == [(512, 512, 1024)] * 3


class QKV(nn.Module):
    """q, k and v: three 1 x 2 x 8 x 4 views of one 1 x 8 x 24 linear output, read by SDPA."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24, bias=False)

    def forward(self, x):
        q, k, v = self.qkv(x).view(1, 8, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
        return nn.functional.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("tier", ["fx", "eager"])
def test_attention_reads_all_three_of_q_k_and_v(tier):
    prof = profile_model(QKV(), (torch.ones(1, 8, 8),), tier=tier)
    # The linear reads x (8 x 8, 256 B) and writes 8 x 24 floats (768 B); SDPA reads q, k and
    # v, each 8 runs of 2 x 4 floats of that storage, 32 B in every 96: together all 768 B,
    # not the 256 B of one view; it writes its 1 x 2 x 8 x 4 output (256 B).
    linear, attention = prof.subgraphs
    assert (linear.bytes_in, linear.bytes_out) == (256, 768)
    assert (attention.bytes_in, attention.bytes_out) == (768, 256)


def test_a_transpose_is_the_same_bytes_as_its_tensor():
    x = torch.ones(4, 6)
    assert form(x) == form(x.t()) == (0, ((96, 1),))
    # x[:, :3] is 4 runs of 12 B, 24 B apart: one form of 48 B; inside x's run it adds nothing
    assert covered({form(x[:, :3])}, 96) == 48
    assert covered({form(x[:, :3]), form(x)}, 96) == 96
    # Two halves of rows are one run together; a broadcast reads its bytes once
    assert covered({form(x[:2]), form(x[2:])}, 96) == 96
    assert covered({form(torch.ones(1, 6).expand(5, 6))}, 24) == 24
