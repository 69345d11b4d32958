"""Which models are taped first (``tiers``): those of many layers, on the meta device or on
real weights until their forward computes too much per op.

FX's symbolic trace and cost pass cost a fixed hundred-odd microseconds per node, whatever
the node computes; the taped forward costs what the model costs to run, plus less per op. So a
model of many small layers is cheaper taped, and one whose layers compute a lot is cheaper
traced. On the meta device both run every op on fake tensors, and the trace is FX's alone: a
model there is taped on fake twins of its weights first, whatever it computes. On real weights
the tape gives way to FX (``breaks.OverBudget``) as soon as its first ops compute more than
``TAPE_BUDGET`` allows. The two tiers give the same figures
(``tests/engine/test_tiers_agree.py``), so only time depends on which comes first. The choice
depends on the model and the FLOPs of its first ops, never on a clock, so that it never
depends on how busy the machine is.
"""

from __future__ import annotations

from typing import Any

TAPE_BUDGET = (64, 64 * 40_000_000)
"""A real forward is taped while its first 64 ops that compute (views, copies and allocations
aside) do at most 40 MFLOPs each on average, counted as they run (ops, FLOPs): past that,
FX prices the model
for less than its forward costs to run. Measured against one FlopCounterMode forward, FX
against the tape: ResNet-50 (4.1 GMACs in 161 layers) 0.61x against 1.12x, resnet26t 0.56x
against 1.32x; caformer_s36 (8 GMACs in about a thousand ops) 2.35x against about 1.2x,
davit_base 1.76x against 1.21x, mobilenetv2_075 3.44x against 1.84x. A model whose first ops
are heavy (an autoencoder at 512 x 512, 19 GFLOPs a convolution) gives way at its first."""

TAPE_FIRST_LEAVES = 64
"""...and models of at least this many leaf modules: a model of a few layers traces in a few
milliseconds whatever its size, and keeps its whole graph (FX's names, one node per call)."""


def tape_first(model: Any) -> bool:
    """Whether the taped forward comes before FX: a model of many layers, not quantized (its
    packed weights are priced through FX) and with no lazy modules (sized only by a forward).
    The cheapest questions first: most hand-written models stop at the count of their layers.

    On the meta device the tape runs on fakes, as FlopCounterMode's forward there does, and
    saves FX's trace: vit_large_patch16_224 in 194 ms of CPU against 325 ms by FX (one
    FlopCounterMode forward: 249 ms), regnety_1280 179 against 250 (176). A real model is
    taped on its real weights (``TAPE_BUDGET``), never on fakes: transformers' models take
    another path on fakes (T5 builds its attention mask where a real forward skips it)."""
    from pytest_graphbudget.engine.quantized import holds_quantized
    from pytest_graphbudget.engine.trace import has_lazy_modules

    leaves = sum(1 for m in model.modules() if next(m.children(), None) is None)
    return not (leaves < TAPE_FIRST_LEAVES or has_lazy_modules(model) or holds_quantized(model))


def elements(model: Any, example: Any) -> int:
    """The model's weight and buffer elements (tied ones once) and its inputs'."""
    from pytest_graphbudget.engine.trace import model_state

    state = {id(t): t.numel() for t in model_state(model).values()}
    return sum(state.values()) + sum(t.numel() for t in example.tensors)
