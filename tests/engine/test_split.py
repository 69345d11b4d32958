"""An FX node that runs several kernels is priced one node per ATen op (``engine/split.py``),
as the taped forward prices them: each op its own kernel candidate, and what the node's own
code allocates and lets go of counted while it lives."""

from __future__ import annotations

import torch
from torch import nn

from pytest_graphbudget import profile_model


@torch.fx.wrap
def scaled_shift(x):
    """Two kernels FX does not see into: ``y`` lives until the add has read it."""
    y = x * 2
    return y + 1


class Wrapped(nn.Module):
    def forward(self, x):
        return scaled_shift(x)


def test_a_wrapped_function_is_priced_op_by_op_with_its_temporary():
    x = torch.randn(16, 32)  # 512 floats: 2,048 bytes
    fx = profile_model(Wrapped(), (x,), tier="fx")
    names = [n for s in fx.subgraphs for n in s.nodes]
    assert names == ["scaled_shift.mul", "scaled_shift.add"]
    # one FLOP an element each, the mul's result (2,048 B) alive while the add writes its own
    assert fx.flops == 2 * 512
    assert fx.activation_peak_bytes == 2 * 2048
    eager = profile_model(Wrapped(), (x,), tier="eager")
    assert (eager.flops, eager.activation_peak_bytes) == (fx.flops, fx.activation_peak_bytes)
    assert len(eager.subgraphs) == len(fx.subgraphs)


def test_a_node_of_one_kernel_keeps_its_name_and_its_other_outputs_live_at_it():
    # layer_norm returns its mean and rstd beside its output: 4 x 1 floats each, freed at once
    norm = nn.LayerNorm(8).eval()
    fx = profile_model(norm, (torch.randn(4, 8),), tier="fx")
    assert [n for s in fx.subgraphs for n in s.nodes] == ["layer_norm"]
    assert fx.activation_peak_bytes == 4 * 8 * 4 + 2 * 4 * 4  # 128 B out, 2 x 16 B statistics
