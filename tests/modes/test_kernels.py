"""The per-kind micro-benchmarks (``modes.kernels``, issue 26): the kinds that read weights
are timed cold, over copies that together outgrow a server's last-level cache, as a layer of a
forward reads its weights once, evicted by the layers since."""

from __future__ import annotations

import torch

from pytest_graphbudget.modes.kernels import cold


def test_a_cold_benchmark_rotates_copies_that_together_hold_the_limit():
    made = []

    def make():
        layer = torch.nn.Linear(16, 16)  # one copy: its own weights and input
        x = torch.randn(4, 16)
        made.append(layer)
        # moved: 4 x 16 in + 16 x 16 weight + 16 bias + 4 x 16 out = 416 elements = 1,664 B
        return (lambda: layer(x)), 2 * 4 * 16 * 16, 1_664

    call, flops, moved = cold(make, limit=16_640)  # 10 x 1,664 B: 10 copies besides the first
    assert (flops, moved) == (2_048, 1_664)
    assert len(made) == 11
    seen = set()
    for layer in made:  # each call runs the next copy, in turn
        layer.register_forward_hook(lambda module, *_: seen.add(id(module)))
    for _ in range(11):
        call()
    assert seen == {id(layer) for layer in made}


def test_a_benchmark_that_moves_nothing_keeps_one_copy():
    made = []

    def make():
        made.append(1)
        return (lambda: None), 0, 0

    cold(make, limit=2**26)
    assert made == [1]
