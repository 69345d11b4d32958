"""Which graph is priced, and how: the engine's trace-and-measure step.

A model of many layers, small on real weights or on the meta device, is taped first: one
forward priced as it runs (real, or on fakes for a meta model) is cheaper than FX's trace
for it (``first.tape_first``). Any other model without lazy state
has its FX graph priced straight away, with no real forward at all (the symbolic trace runs
under ``watch.restored``, which says whether the forward assigned any state). Every other
model is warmed up (one real forward, so its lazy state exists), then each tier
(``trace.tiers``) is tried until one graph traces and its cost pass succeeds; when no whole
graph can be had, the path one real forward takes is priced (``breaks.TIERS``).
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

from pytest_graphbudget.costs import FormulaError
from pytest_graphbudget.engine import first, kept
from pytest_graphbudget.engine.first import elements
from pytest_graphbudget.engine.nodes import strided
from pytest_graphbudget.errors import GraphBudgetError, ModelRunError, TraceError, one_line
from pytest_graphbudget.heap import heap_frozen

REAL_PASS_SECONDS = 0.25
"""A model whose warm-up forward took less than this is measured on real tensors: for small
models one more real pass is cheaper than a pass on fake tensors (whose per-op cost is fixed).
The counts are the same either way."""

ASKED = ("dynamo", "dynamo-breaks", "fx", "eager")
"""The tiers a caller may ask for: after ``fx``, instead of the taped forward, a whole graph
from ``torch.export`` (then the graph breaks, then eager) or Dynamo's graph breaks reported;
or one tier alone, ``fx`` or ``eager`` (the taped forward), which fails rather than fall back.
The two give the same figures (``tests/engine/test_tiers_agree.py``)."""

SETTLED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Models whose last taped forward assigned no state: nothing lazy is left to build, so their
next tape records no replay memo (``replay.Memo``, about 8% of a detector's profile once its
anchors exist). Only time depends on it, never a figure: a settled model whose forward does
assign state again (YOLO at a new input shape) has the forward after it taped for real
instead of replayed, and is no longer settled."""

ELEMENTS_PER_SECOND = 4e6
"""When no warm-up forward was timed, its seconds are guessed as the model's weight and input
elements over this: a model under a million elements is measured on real tensors."""


def trace_and_measure(
    model: Any, example: Any, program: Any = None, tier: str | None = None
) -> tuple[Any, Any, dict[str, str]]:
    """Price the FX graph of a model without lazy state straight away; otherwise warm up, then
    try each tier until one graph traces and its cost pass succeeds; when no whole graph can be
    had, price the path one real forward takes (``breaks.TIERS``).

    An exported program (``program``) has its graph already: it is neither run nor traced
    again, and its one tier is ``export``. ``tier`` asks for one of ``ASKED`` after ``fx``
    instead of the taped forward."""
    if tier is not None and tier not in ASKED:
        raise GraphBudgetError(f"tier must be one of {', '.join(ASKED)}, got {tier!r}")
    strided("an input", list(example.tensors))  # before a tier fails on its storage
    with heap_frozen():
        # every tier sees ordinary tensors: FX's cost pass too would price a composite op
        # (selu, SDPA) whole on inference tensors, and the tape would not
        return _trace_and_measure(model, _outside_inference(example), program, tier)


def _trace_and_measure(
    model: Any, example: Any, program: Any, tier: str | None
) -> tuple[Any, Any, dict[str, str]]:
    from pytest_graphbudget.engine.trace import trace_exported

    failures: dict[str, str] = {}
    failed_in: set[int] = set()
    tape_first = program is None and tier is None and first.tape_first(model, example)
    if tape_first:  # a forward that built lazy state is followed by a second tape, not FX
        taped = _taped(model, example, failures, failed_in, fx=False)
        if taped is not None:
            return taped
    if program is not None:
        kept.everything()  # the forwards below run outside a tape: what they may write, copied
        chosen = [("export", lambda module, live: trace_exported(program, live, module))]
        traced, measured, failures = _tiers(model, example, chosen, REAL_PASS_SECONDS)
        if traced is None:  # an exported program is one graph or nothing
            raise TraceError(failures)
        return traced, measured, failures
    if tier == "eager":
        return _eager_alone(model, example)
    known = first.fx_failed(model, example) if tier is None else None
    if known is not None:  # the same trace failed before: the tape first, copying less
        failures["fx"], failed_in = known
        taped = None if tape_first else _taped(model, example, failures, failed_in)
        if taped is not None:
            return taped
    kept.everything()  # untaped forwards follow: all they may write copied (bloom: 17 ms)
    if known is None:
        quick = _without_warm_up(model, example, failures, failed_in)
        if quick is not None:
            return (*quick, {})
        if tier is None and not tape_first:
            taped = _taped(model, example, failures, failed_in)
            if taped is not None:
                return taped
    return _after_warm_up(model, example, tier, failures.get("eager"))


def _eager_alone(model: Any, example: Any) -> tuple[Any, Any, dict[str, str]]:
    """``tier="eager"``: the taped forward and nothing else (after a forward that built lazy
    state, the forward after it), or the model's own error."""
    taped = _taped(model, example, {}, set(), fx=False)
    if taped is not None:
        return taped
    kept.everything()  # the forwards below run outside a tape: what they may write, copied
    from pytest_graphbudget.engine.breaks import capture_eager
    from pytest_graphbudget.engine.trace import analysis, warm_up

    with analysis(model, example) as live:
        warm_up(model, live)  # raises the model's own error, in its words
    try:
        captured = capture_eager(model, example)
    except FormulaError:
        raise
    except Exception as exc:
        raise TraceError({"eager": one_line(exc)}) from exc
    return captured, captured.measured, {}


def _modules_running(exc: BaseException, model: Any) -> set[int]:
    """The ids of the model's modules whose code was on the stack where ``exc`` was raised."""
    ids = {id(m) for m in model.modules()}
    found, tb = set(), exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if id(owner) in ids:
            found.add(id(owner))
        tb = tb.tb_next
    return found


def _settled(model: Any) -> bool:
    with contextlib.suppress(TypeError):  # a module that defines __eq__ without __hash__
        return model in SETTLED
    return False


def _settle(model: Any, settled: bool) -> None:
    with contextlib.suppress(TypeError):
        if settled:
            SETTLED[model] = True
        else:
            SETTLED.pop(model, None)


def _fx_again(failed_in: set[int], watch: Any) -> bool:
    """Whether ``fx`` may trace now that a forward built lazy state. Not when its first trace
    failed having assigned nothing, in modules none of whose attributes that forward changed
    (YOLO's and torchvision's detectors fail at once, iterating the input in the root's
    ``forward``; their state is their heads'): the trace would take the same path to the same
    failure. A trace that assigned state, or failed in a module whose state then changed,
    is tried again."""
    return not failed_in or bool(failed_in & watch.modules)


def _taped(
    model: Any,
    example: Any,
    failures: dict[str, str],
    failed_in: set[int],
    fx: bool = True,
) -> tuple[Any, Any, dict[str, str]] | None:
    """The tier after ``fx``: one taped real forward (``breaks.capture_eager``), priced as it
    runs, with no whole-graph capture. When that forward assigned lazy state (YOLO's anchors),
    ``fx`` is tried again on the state it left, and if ``fx`` still fails a second forward is
    replayed from the first one's calls (``_second_tape``): the ops recorded are those of a
    forward after the first, as the other tiers price.
    A model on the meta device (no data to run on) is taped on fake twins of its weights and
    inputs, never materialised. None when the tape fails: the whole-graph tiers then run, and
    say why the model failed (a meta model that branches on values: build it with weights)."""
    from pytest_graphbudget.engine.breaks import capture_eager
    from pytest_graphbudget.engine.hollow import worth_trying
    from pytest_graphbudget.engine.trace import evaluating, is_meta, trace_fx
    from pytest_graphbudget.engine.watch import watched

    example = _outside_inference(example)
    evaluating(model)
    if is_meta(model):
        try:
            captured = capture_eager(model, example, fake=True)
        except FormulaError:
            raise
        except Exception:  # the warm-up that follows says why, in the meta model's words
            return None
        return captured, captured.measured, failures
    try:
        with watched(model) as watch:
            hollow = watch if worth_trying(model) else None
            captured = capture_eager(model, example, memo=not _settled(model), hollow=hollow)
    except FormulaError:
        raise
    except Exception as exc:  # the model's own failure is reported by the warm-up that follows
        failures["eager"] = one_line(exc)  # and a tape the forward outran, by the profile
        return None
    memo, captured.memo = captured.memo, None  # used here or never: no profile carries it
    _settle(model, not watch.changed)
    if not watch.changed:
        return captured, captured.measured, failures
    kept.everything()  # a second forward follows, which no tape that copies may watch
    if fx and _fx_again(failed_in, watch):
        traced, measured, failures = _tiers(model, example, [("fx", trace_fx)], captured.seconds)
        if traced is not None:
            return traced, measured, failures
    try:
        captured = _second_tape(model, example, captured, memo, watch.values)
    except FormulaError:
        raise
    except Exception as exc:  # warmed up already: the whole-graph tiers say the rest
        failures["eager"] = one_line(exc)
        return _whole_graph(model, example, None, captured.seconds, failures)
    return captured, captured.measured, failures


def _second_tape(model: Any, example: Any, earlier: Any, memo: Any, stored: list) -> Any:
    """The tape of a forward after the one (``earlier``) that built lazy state (``stored``, the
    values it assigned): replayed from the first one's ``memo`` without computing
    (``replay``), else taped again: on fake tensors
    when the first took ``REAL_PASS_SECONDS`` or more (the ops without their arithmetic; a
    fake op's cost is fixed, and the first fake pass of a process pays for the mode's set-up,
    so a quick model runs again for real, as a quantized one does: ``_passes``), on real
    ones when the forward needs data, and straight away when the first one read data (a fake
    forward would only get that far)."""
    from pytest_graphbudget.engine.breaks import Captured, capture_eager
    from pytest_graphbudget.engine.names import name_as_fx
    from pytest_graphbudget.engine.reads import reads_data
    from pytest_graphbudget.engine.replay import replay_forward

    if memo is not None:
        try:
            measured = replay_forward(model, example, earlier.measured, memo, stored)
            name_as_fx(measured, model)
            return Captured("eager", measured, seconds=earlier.seconds)
        except FormulaError:
            raise
        except Exception:  # an op the first forward did not run: a real second forward
            pass
        finally:
            memo.calls.clear()
    if _passes(model, earlier.seconds)[0] and not reads_data(earlier.measured.nodes):
        try:
            return capture_eager(model, example, fake=True)
        except FormulaError:
            raise
        except Exception:  # a branch on a value, .item(), nonzero: the real forward prices it
            pass
    return capture_eager(model, example)


def _outside_inference(example: Any) -> Any:
    """The example with each input made under ``inference_mode`` copied to an ordinary tensor
    (the caller has left that mode): an inference tensor skips autograd, so composite ops
    would reach the tape whole and be priced under other names than the same model's."""
    import torch
    from torch.utils import _pytree as pytree

    from pytest_graphbudget.engine.trace import Example

    if not any(t.is_inference() for t in example.tensors):
        return example

    def ordinary(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_inference():
            return value.clone()
        return value

    return Example(*pytree.tree_map(ordinary, (example.args, example.kwargs)))


def _without_warm_up(
    model: Any, example: Any, failures: dict[str, str], failed_in: set[int]
) -> tuple[Any, Any] | None:
    """The FX tier with no warm-up forward, or None when it cannot be had that way.

    The warm-up exists for lazy state (attributes a forward assigns, lazy modules): a model
    whose symbolic trace assigned nothing has none, and its graph is the one a trace after a
    warm-up would give. Any failure here leaves the model as it was for ``_after_warm_up``,
    which tries every tier again and reports why each failed; ``failures`` gets why ``fx``
    failed here, for the taped forward that follows, and ``failed_in`` the modules whose code
    was running when it failed having assigned nothing (``_fx_again``)."""
    from pytest_graphbudget.engine.trace import (
        analysis,
        evaluating,
        has_lazy_modules,
        timed,
        trace_fx,
    )
    from pytest_graphbudget.engine.watch import restored

    if has_lazy_modules(model):
        return None
    evaluating(model)
    try:
        with analysis(model, example) as live, restored(model) as watch:
            traced = timed(trace_fx, model, live)
    except Exception as exc:  # the tiers after a warm-up say why, or the tape keeps this
        failures["fx"] = one_line(exc)
        if not watch.changed:
            failed_in.update(_modules_running(exc, model))
            first.remember_fx_failure(model, example, failures["fx"], failed_in)
        return None
    if watch.changed:
        return None
    for fake in _passes(model, elements(model, example) / ELEMENTS_PER_SECOND):
        try:
            return traced, _measure(model, traced, example, fake)
        except FormulaError:  # a custom formula's mistake is the same in every tier
            raise
        except Exception:
            continue
    return None


def _passes(model: Any, seconds: float) -> list[bool]:
    """Fake tensors first, unless the model is quick to run for real; real ones as the fallback
    (a graph that needs data), except for a model on the meta device, which has none; real
    ones only for a quantized model (``quantized.holds_quantized``)."""
    from pytest_graphbudget.engine.quantized import holds_quantized
    from pytest_graphbudget.engine.trace import is_meta

    if holds_quantized(model):  # packed weights and tensor subclasses have no fake twins here
        return [False]
    passes = [True] if is_meta(model) else [True, False]
    if seconds < REAL_PASS_SECONDS:
        passes.reverse()
    return passes


def _after_warm_up(
    model: Any, example: Any, tier: str | None, taped: str | None = None
) -> tuple[Any, Any, dict[str, str]]:
    """Warm up, then the tiers; when no whole graph can be had, the path one real forward
    takes (graphs between breaks, or eager). ``tier="dynamo-breaks"`` skips the export.
    ``taped``: why the taped forward failed (nested tensors), said in the profile's failures
    when a whole graph prices the model instead."""
    from pytest_graphbudget.engine.trace import analysis, is_meta, warm_up

    meta = is_meta(model)  # asked outside ``analysis``, which swaps meta weights for fakes
    with analysis(model, example) as live:
        try:
            seconds = warm_up(model, live)
        except ModelRunError as exc:
            # a branch on a value, or an output sized by values (nonzero: a detector's boxes)
            valued = ("DataDependent", "DynamicOutputShape", "data is not allocated")
            if not meta or not any(word in str(exc) for word in valued):
                raise
            raise ModelRunError(
                f"{exc}; the forward depends on tensor values (a branch, or an output sized by "
                "them), which a model on the meta device has none of: build it with real "
                "weights (meta=False) to profile it"
            ) from exc
    return _whole_graph(model, example, tier, seconds, {"eager": taped} if taped else {})


def _whole_graph(
    model: Any, example: Any, tier: str | None, seconds: float, failures: dict[str, str]
) -> tuple[Any, Any, dict[str, str]]:
    """On a warmed-up model: ``fx`` and export, then the path one real forward takes
    (graph breaks, eager); ``failures`` holds the reasons of tiers tried before."""
    from pytest_graphbudget.engine.breaks import TIERS
    from pytest_graphbudget.engine.trace import tiers

    chosen = [t for t in tiers() if tier != "dynamo-breaks" or t[0] != "dynamo"]
    if tier == "fx":
        chosen = chosen[:1]
    traced, measured, found = _tiers(model, example, chosen, seconds)
    failures = {**failures, **found}
    if traced is not None:
        return traced, measured, failures
    if tier == "fx":
        raise TraceError(failures)
    for tier_name, capture in TIERS:
        try:
            captured = capture(model, example)
        except FormulaError:
            raise
        except Exception as exc:
            failures[tier_name] = one_line(exc)
            continue
        return captured, captured.measured, failures
    raise TraceError(failures)


def _measure(model: Any, traced: Any, example: Any, fake: bool) -> Any:
    """The cost pass. An exported graph is priced on the fake values export left on its nodes
    (``measure_export``), whichever pass comes first; on fake tensors, an FX graph whose code
    cannot see the device runs on meta tensors (``meta_pass.meta_safe``), unless a tensor is
    channels-last (``meta_pass.plain_layouts``). Both are faster than fresh fakes (or a real
    run), with the same figures, and both fall back to them. Not meta tensors under autocast
    (``dtype="amp_float16"``): autocast casts CPU tensors, fake or real, and passes meta ones
    by, so the figures would silently be the model's own dtype's."""
    import torch

    from pytest_graphbudget.engine.measure import measure
    from pytest_graphbudget.engine.measure_export import measure_exported
    from pytest_graphbudget.engine.meta_pass import meta_safe, plain_layouts

    autocast = torch.is_autocast_enabled("cpu")
    meta = fake and traced.state_in_module and not autocast and meta_safe(traced.graph_module)
    if meta and plain_layouts(model, example.tensors):
        try:
            return measure(model, traced, example.tensors, meta=True)
        except FormulaError:
            raise
        except Exception:  # the fake pass below runs, and reports its own failure
            pass
    if not traced.state_in_module:  # export's values need no run: the first pass uses them
        try:
            measured = measure_exported(model, traced)
        except FormulaError:
            raise
        except Exception:  # the ordinary pass below runs, and reports its own failure
            measured = None
        if measured is not None:
            return measured
    return measure(model, traced, example.tensors, fake=fake)


def _tiers(
    model: Any, example: Any, chosen: list, seconds: float
) -> tuple[Any, Any, dict[str, str]]:
    """The first tier whose graph traces and whose cost pass succeeds, with every earlier
    tier's one-line failure; (None, None, failures) when none does."""
    from pytest_graphbudget.engine.trace import analysis, timed
    from pytest_graphbudget.engine.watch import restored

    failures: dict[str, str] = {}
    for tier_name, tier in chosen:
        try:  # a trace's assignments (proxies in LeViT's cache) never outlive it
            with analysis(model, example) as live, restored(model):
                traced = timed(tier, model, live)
        except Exception as exc:  # every tier's failure is reported, none is fatal alone
            failures[tier_name] = one_line(exc)
            continue
        for fake in _passes(model, seconds):
            try:
                return traced, _measure(model, traced, example, fake), failures
            except FormulaError:  # a custom formula's mistake is the same in every tier
                raise
            except Exception as exc:
                failures[tier_name] = f"cost pass failed: {one_line(exc)}"
    return None, None, failures
