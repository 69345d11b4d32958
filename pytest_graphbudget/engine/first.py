"""Which models are taped first (``tiers``): those of many layers, on the meta device or on
real weights, and tiny ones of some layers.

FX's symbolic trace and cost pass cost a fixed hundred-odd microseconds per node, whatever
the node computes; the taped forward costs what the model costs to run, less the arithmetic
of the ops it hollows (``hollow``), plus less per op. So a model of many layers is cheaper
taped, and one of a few layers keeps its whole graph. On the meta device both run every op on
fake tensors, and the trace is FX's alone: a model there is taped on fake twins of its
weights first, whatever its size. The two give the same figures
(``tests/engine/test_tiers_agree.py``), so only time depends on which comes
first. The choice is made before any forward, from the model alone, so that it never depends
on how busy the machine is.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

TAPE_FIRST_LEAVES = 64
"""A model of at least this many leaf modules is taped first, whatever its size. On 55 timm
models under 40M parameters, against one FlopCounterMode forward: FX first, median 1.84x and
worst 5.4x; the tape, 1.42x and 2.3x (mobilenetv2_075: the tape 55 ms, FX 125 ms,
FlopCounterMode 36 ms). FX is quicker on a network of few heavy convolutions and far slower on
one of many small ops, and nothing before the forward tells them apart. Up to 2026-11-29 a
model of 60M elements or more went to FX, where the forward's arithmetic dominated the tape;
since the tape hollows its repeated heavy ops (``hollow``), the tape is the quicker on those
too: pvt_v2_b5 warm 0.27 s against FX's 1.11 s (cold 0.44 s against 1.28 s), vit_base 0.07
against 0.15 s (0.11 against 0.21), convnext_base 0.10 against 0.13 s (cold 0.23 against
0.17: its first forward computes the first block of each stage). A model of fewer leaves
traces in a few milliseconds whatever its size, and keeps its whole graph (FX's names, one
node per call)."""

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
    packed weights are priced through FX) and with no lazy modules (sized only by a forward);
    on real weights, also a tiny model of some layers. The cheapest questions first: most
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
    return leaves >= TAPE_FIRST_LEAVES or elements(model, example) < SMALL_ELEMENTS


def elements(model: Any, example: Any) -> int:
    """The model's weight and buffer elements (tied ones once) and its inputs'."""
    from pytest_graphbudget.engine.trace import model_state

    state = {id(t): t.numel() for t in model_state(model).values()}
    return sum(state.values()) + sum(t.numel() for t in example.tensors)


FX_FAILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Models whose symbolic trace failed having assigned nothing, with the modules and inputs it
failed on, why, and the modules running when it did. A symbolic trace is a pure function of
those (it runs the same Python on the same proxies), so the next profile of the same model at
the same inputs tapes straight away instead of failing the trace again: transformers' small
models fail FX a dozen milliseconds into every profile (bloom's default configuration: a
third of its profile). Only which tier comes first depends on it, never a figure
(``tests/engine/test_tiers_agree.py``)."""


def fx_failed(model: Any, example: Any) -> tuple[str, set[int]] | None:
    """Why ``model``'s trace failed at these inputs before and where, or None."""
    try:
        known = FX_FAILED.get(model)
    except TypeError:  # a module that defines __eq__ without __hash__
        return None
    if known is None or known[0] != _fx_key(model, example):
        return None
    return known[1], set(known[2])


def remember_fx_failure(model: Any, example: Any, why: str, running: set[int]) -> None:
    """Keep a trace's failure at these inputs (``fx_failed``) when they can be described."""
    key = _fx_key(model, example)
    if key is None:
        return
    with contextlib.suppress(TypeError):
        FX_FAILED[model] = (key, why, frozenset(running))


def _fx_key(model: Any, example: Any) -> Any:
    """The model's modules (each with its class and any forward set on the instance) and the
    inputs' structure, tensor layouts and constants; None when a constant is unhashable."""
    import torch
    from torch.utils import _pytree as pytree

    from pytest_graphbudget.engine import walk

    leaves, spec = pytree.tree_flatten((example.args, example.kwargs))
    described = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            described.append((leaf.shape, leaf.dtype, leaf.device, leaf.requires_grad))
        elif isinstance(leaf, (bool, int, float, str, type(None), torch.dtype, torch.device)):
            described.append((type(leaf), leaf))
        else:
            return None
    modules = tuple(
        (id(m), type(m), m.__dict__.get("forward"), m.training) for m in walk.modules(model)
    )
    return modules, str(spec), tuple(described)
