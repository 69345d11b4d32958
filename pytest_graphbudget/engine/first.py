"""Which models are taped first (``tiers``), and the budget their real forward runs on.

FX's symbolic trace and cost pass cost a fixed hundred-odd microseconds per node, whatever
the node computes; the taped forward costs what the model costs to run, plus less per op. So a
model of many small layers is cheaper taped, and one whose few layers compute a lot is cheaper
traced. The two give the same figures (``tests/engine/test_tiers_agree.py``), so only time
depends on which comes first.
"""

from __future__ import annotations

import time
from typing import Any

TAPE_FIRST_ELEMENTS = 30_000_000
"""A model on real weights with fewer weight, buffer and input elements than this is taped
first. On 55 timm models under 40M parameters, against one FlopCounterMode forward: FX first,
median 1.84x and worst 5.4x; the tape, 1.42x and 2.3x (mobilenetv2_075: the tape 55 ms, FX
125 ms, FlopCounterMode 36 ms). Above it the forward's arithmetic dominates."""

TAPE_FIRST_LEAVES = 64
"""...and at least this many leaf modules: a model of a few layers traces in a few
milliseconds whatever its size, and keeps its whole graph (FX's names, one node per call)."""

BUDGET = (7e-4, 32)
"""``breaks.capture_eager``'s budget for a model taped first: seconds an op, counted over at
least that many ops. A forward slower than that computes more than its ops cost on fake
tensors (about 0.3 ms an op here), and is taped on fakes instead (``tiers._taped``): a tiny
autoencoder at 512 x 512 (diffusers' AutoencoderTiny, 2.4M parameters) tapes in 2.5 s for
real and 45 ms on fakes; mobilenetv2_075's forward, 0.18 ms an op, is taped for real."""


def tape_first(model: Any, example: Any) -> bool:
    """Whether the taped forward comes before FX: a small model of many layers on real
    weights, not quantized (its packed weights are priced through FX), with no lazy modules
    (sized only by a forward). The cheapest questions first: most hand-written models stop
    at the count of their layers."""
    from pytest_graphbudget.engine.quantized import holds_quantized
    from pytest_graphbudget.engine.trace import has_lazy_modules, is_meta

    leaves = sum(1 for m in model.modules() if next(m.children(), None) is None)
    if leaves < TAPE_FIRST_LEAVES or has_lazy_modules(model) or is_meta(model):
        return False
    return elements(model, example) < TAPE_FIRST_ELEMENTS and not holds_quantized(model)


def over(budget: tuple[float, float, int], ops: int) -> bool:
    """Whether a forward started at ``budget[0]`` has run past ``budget[1]`` seconds an op
    after ``ops`` ops, counted over ``budget[2]`` at least."""
    start, rate, least = budget
    return time.perf_counter() - start > rate * max(ops, least)


def elements(model: Any, example: Any) -> int:
    """The model's weight and buffer elements (tied ones once) and its inputs'."""
    from pytest_graphbudget.engine.trace import model_state

    state = {id(t): t.numel() for t in model_state(model).values()}
    return sum(state.values()) + sum(t.numel() for t in example.tensors)
