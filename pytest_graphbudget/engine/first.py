"""Which models are taped first (``tiers``): those of many layers, on the meta device or on
real weights of a small model.

FX's symbolic trace and cost pass cost a fixed hundred-odd microseconds per node, whatever
the node computes; the taped forward costs what the model costs to run, plus less per op. So a
model of many small layers is cheaper taped, and one whose few layers compute a lot is cheaper
traced. On the meta device both run every op on fake tensors, and the trace is FX's alone: a
model there is taped on fake twins of its weights first, whatever its size. The two give the
same figures (``tests/engine/test_tiers_agree.py``), so only time depends on which comes
first. The choice is made before any forward, from the model alone, so that it never depends
on how busy the machine is.
"""

from __future__ import annotations

from typing import Any

TAPE_FIRST_ELEMENTS = 60_000_000
"""A model on real weights with fewer weight, buffer and input elements than this is taped
first. On 55 timm models under 40M parameters, against one FlopCounterMode forward: FX first,
median 1.84x and worst 5.4x; the tape, 1.42x and 2.3x (mobilenetv2_075: the tape 55 ms, FX
125 ms, FlopCounterMode 36 ms). On 42 timm models of 30M to 60M (every fourth of those FX
priced in the corpus run of 2026-11-29): FX median 1.06x, p90 1.96x, worst 3.02x
(fastvit_mci2); the tape 1.19x, 1.39x and 1.71x. FX is quicker on a network of few heavy
convolutions (resnet101d 0.60x against 1.17x) and far slower on one of many small ops
(lowformer_b15 2.97x against 1.32x), and nothing before the forward tells them apart, so the
tape, whose cost is the forward's plus a bounded share, goes first up to here. Above it the
forward's arithmetic dominates (vit_b_16 in bfloat16). A model below it whose forward
computes a lot (an autoencoder at 512 x 512) is slower taped: its ops would cost less on fake
tensors, but transformers' models take another path on fakes (T5 builds its attention mask
where a real forward skips it), so the tape never switches mid-run."""

TAPE_FIRST_LEAVES = 64
"""...and at least this many leaf modules: a model of a few layers traces in a few
milliseconds whatever its size, and keeps its whole graph (FX's names, one node per call)."""

TAPE_FIRST_FEW_LEAVES = 32
SMALL_ELEMENTS = 1_000_000
"""A model of fewer leaf modules, but at least ``TAPE_FIRST_FEW_LEAVES``, is taped first on
real weights when it holds under ``SMALL_ELEMENTS``: FX would run its cost pass on real tensors
too (``tiers.ELEMENTS_PER_SECOND``), after a trace that costs more than the forward. timm's toy
``test_*`` models hold 49 to 62 leaves and 0.4M parameters, with up to 427 FX nodes (EvoNorm
and GroupNorm written as many small ops): FX first, 2.1x to 4.4x one FlopCounterMode forward in
CPU time; taped, 1.35x to 1.60x, the same figures. resnet18 (52 leaves, 11.7M) keeps FX:
0.39x, against 1.14x taped."""


def tape_first(model: Any, example: Any) -> bool:
    """Whether the taped forward comes before FX: a model of many layers, not quantized (its
    packed weights are priced through FX) and with no lazy modules (sized only by a forward),
    on the meta device or small on real weights. The cheapest questions first: most
    hand-written models stop at the count of their layers.

    On the meta device the tape runs on fakes, as FlopCounterMode's forward there does, and
    saves FX's trace: vit_large_patch16_224 in 194 ms of CPU against 325 ms by FX (one
    FlopCounterMode forward: 249 ms), regnety_1280 179 against 250 (176). A real model is
    taped on its real weights, never on fakes: transformers' models take another path on
    fakes (T5 builds its attention mask where a real forward skips it)."""
    from pytest_graphbudget.engine import walk
    from pytest_graphbudget.engine.quantized import holds_quantized
    from pytest_graphbudget.engine.trace import has_lazy_modules, is_meta

    leaves = sum(1 for m in walk.modules(model) if next(m.children(), None) is None)
    if leaves < TAPE_FIRST_FEW_LEAVES or has_lazy_modules(model) or holds_quantized(model):
        return False
    if is_meta(model):
        return leaves >= TAPE_FIRST_LEAVES
    few = leaves < TAPE_FIRST_LEAVES
    return elements(model, example) < (SMALL_ELEMENTS if few else TAPE_FIRST_ELEMENTS)


def elements(model: Any, example: Any) -> int:
    """The model's weight and buffer elements (tied ones once) and its inputs'."""
    from pytest_graphbudget.engine.trace import model_state

    state = {id(t): t.numel() for t in model_state(model).values()}
    return sum(state.values()) + sum(t.numel() for t in example.tensors)
