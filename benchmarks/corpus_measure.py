"""One corpus model measured in this process: our profile beside one FlopCounterMode forward.

``measure(family, name)`` builds the model (``corpus_models.build``) and returns its row, a
plain dict (one JSON line of the run's file); ``measure_built`` does the same for a model
already built. What the row holds:

- ``status``: ``ok`` (we profiled it), ``failed`` (we raised where the model's forward ran
  under FlopCounterMode), ``skipped`` (the model does not build, or its forward fails on its
  default inputs; not a finding about us), or, written by the controller, ``timeout`` and
  ``crashed``; ``reason``: one line, for all but ``ok``;
- ours: ``tier`` (``Profile.trace.method``), ``params`` (``Profile.params``), ``macs``,
  ``flops``, ``unsupported`` (ops we could not price, by name);
- the reference: ``params_ref`` (``sum(p.numel() for p in model.parameters())``), ``flops_ref``
  (FlopCounterMode's total, under ``no_grad`` with SDPA forced to the math backend) and
  ``macs_ref`` (its half: it counts 2 FLOPs per multiply-add of a matmul or convolution);
- ``agreement``: ``equal`` (our MACs are exactly ``macs_ref``), ``known gap`` (ours are higher
  and the model ran an op FlopCounterMode counts as 0, named in ``gap_ops``), ``differs``
  (anything else: to investigate) or ``no reference`` (FlopCounterMode's forward failed);
- timings, warm: one call of each first (``first_ours_s``, ``first_theirs_s``), then
  ``repeats`` alternating pairs (``repeats`` is 1 when a first call took over ``SLOW_S``), whose
  medians are ``ours_s`` and ``theirs_s``; ``ratio`` = ours / theirs (``repeats=0``: the
  figures only, no timing). ``build_s`` is the model's build, never counted in either.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from corpus_models import THRESHOLD, Built, Skip, build, count_params, one_line  # benchmarks/

SLOW_S = 2.0  # a first call slower than this is timed once more, not ``repeats`` times
# Ops FlopCounterMode counts as 0 FLOPs (when absent from its counts): its known gaps.
KNOWN_GAPS = {
    "lstm": "fused RNN",
    "gru": "fused RNN",
    "rnn_tanh": "fused RNN",
    "rnn_relu": "fused RNN",
    "_thnn_fused_lstm_cell": "fused RNN",
    "_thnn_fused_gru_cell": "fused RNN",
    "mkldnn_rnn_layer": "fused RNN",
    "_native_multi_head_attention": "MultiheadAttention fast path",
    "_transformer_encoder_layer_fwd": "TransformerEncoderLayer fast path",
    "_scaled_dot_product_flash_attention_for_cpu": "CPU flash attention",
    # cdist: hand-counted in tests/costs/test_small_modules.py (test_cdist_counts_its_pairs)
    "_euclidean_dist": "cdist",
    "_cdist_forward": "cdist",
}


def measure(family: str, name: str, *, repeats: int = 3, threshold: int = THRESHOLD) -> dict:
    """Build ``name`` of ``family`` and measure it; a model that cannot be built is a row.

    A model on the meta device whose forward (ours or the reference's) reads a value there
    (``.item()``, ``nonzero``: Longformer, LED, XLM, Mamba2) is built again with real weights
    when it has at most ``REAL_LIMIT`` parameters, as a user who has them profiles it; the row
    says so (``real_after``)."""
    row: dict[str, Any] = {"family": family, "name": name}
    try:
        built = build(family, name, threshold)
    except Skip as exc:
        return {**row, "status": "skipped", "reason": str(exc)}
    try:
        measured = measure_built(built, repeats=repeats)
        if not (built.meta and reads_values(measured)) or count_params(built.model) > REAL_LIMIT:
            return {**row, **measured}
    finally:
        del built
        gc.collect()
    try:
        real = build(family, name, REAL_LIMIT)
    except Skip as exc:  # the meta row stands, saying why no second build
        return {**row, **measured, "reason": f"{measured['reason']}; with weights, {exc}"}
    try:
        return {**row, **measure_built(real, repeats=repeats), "real_after": measured["reason"]}
    finally:
        del real
        gc.collect()


REAL_LIMIT = 2_000_000_000  # parameters: 8 GB of float32 weights, built again for real
_READS_VALUES = ("DataDependentOutputException", "DynamicOutputShapeException", "not allocated")


def reads_values(row: dict) -> bool:
    """Whether a row failed, or lost its reference, on a value the meta device does not have."""
    lost = row.get("status") != "ok" or row.get("agreement") == "no reference"
    return lost and any(marker in row.get("reason", "") for marker in _READS_VALUES)


def measure_built(built: Built, *, repeats: int = 3) -> dict:
    """The row of a built model: ours, the reference, their agreement and their warm times."""
    model, args, kwargs = built.model, built.args, built.kwargs
    row: dict[str, Any] = {
        "meta": built.meta,
        "build_s": round(built.build_s, 3),
        "input": _shapes(args, kwargs),
        "params_ref": count_params(model),
    }
    first_theirs, reference = _timed(lambda: reference_flops(model, args, kwargs))
    first_ours, prof = _timed(lambda: ours(model, args, kwargs))
    if isinstance(prof, BaseException):
        if isinstance(reference, BaseException):
            why = f"forward: {one_line(reference)} (ours: {one_line(prof, 120)})"
            return {**row, "status": "skipped", "reason": why}
        return {**row, "status": "failed", "reason": one_line(prof)}
    row.update(
        status="ok",
        tier=prof.trace.method,
        params=int(prof.params),
        macs=int(prof.macs),
        flops=int(prof.flops),
        unsupported=dict(prof.coverage.unsupported_ops),
        first_ours_s=round(first_ours, 4),
    )
    if isinstance(reference, BaseException):
        return {**row, "agreement": "no reference", "reason": f"reference: {one_line(reference)}"}
    total, counted = reference
    row.update(flops_ref=total, macs_ref=total // 2, first_theirs_s=round(first_theirs, 4))
    row.update(agreement(row["macs"], row["macs_ref"], counted, model, args, kwargs))
    if repeats < 1:  # figures only
        return row
    row.update(
        timings(
            lambda: ours(model, args, kwargs),
            lambda: reference_flops(model, args, kwargs),
            repeats=1 if max(first_ours, first_theirs) > SLOW_S else repeats,
        )
    )
    return row


# Both sides draw the same random numbers: a model that draws them decides shapes by them
# (transformers' VITS: its stochastic duration predictor sets the spectrogram's length), and two
# unseeded forwards had priced two different spectrograms (3.7% apart).
SEED = 0


def ours(model: Any, args: tuple, kwargs: dict) -> Any:
    import torch

    from pytest_graphbudget import profile_model

    torch.manual_seed(SEED)
    return profile_model(model, args, kwargs)


def reference_flops(model: Any, args: tuple, kwargs: dict) -> tuple[int, set[str]]:
    """FlopCounterMode's total over one forward, and the ops it counted (by base name).

    A float32 mixture of experts on the meta device runs its experts through ``_grouped_mm``,
    whose CPU meta kernel takes bfloat16 alone and which FlopCounterMode has no formula for:
    the reference then runs them as transformers' ``batched_mm`` (every routed token against
    its expert's gathered weights, a ``bmm`` that FlopCounterMode counts), the same products.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, experts_counted(model):
        forward(model, args, kwargs)
    counted = {_base(op) for op in counter.get_flop_counts().get("Global", {})}
    return counter.get_total_flops(), counted


@contextlib.contextmanager
def experts_counted(model: Any) -> Iterator[None]:
    """transformers' experts as ``batched_mm`` in the block, where they were ``grouped_mm``:
    the model's own, or a submodel's (Kimi K2.5's language model, inside a vision wrapper)."""
    grouped = [
        module
        for module in model.modules()
        if hasattr(module, "set_experts_implementation")
        and getattr(module.config, "_experts_implementation", None) == "grouped_mm"
    ]
    for module in grouped:
        module.set_experts_implementation("batched_mm")
    try:
        yield
    finally:
        for module in grouped:
            module.set_experts_implementation("grouped_mm")


def forward(model: Any, args: tuple, kwargs: dict) -> Any:
    """One forward under ``no_grad`` with SDPA on the math backend, seeded as ``ours``. A
    model on the meta device runs on fake CPU twins of its weights (``FakeTensorMode``: shapes,
    no storage; meta tensors alone refuse ``.item()``, which transformers' masks call), the
    inputs as they are."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(SEED)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        if not any(p.is_meta for p in model.parameters()):
            return model(*args, **kwargs)
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.func import functional_call

        with FakeTensorMode(allow_non_fake_inputs=True):
            state = {
                name: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
                for name, t in (*model.named_parameters(), *model.named_buffers())
            }
            return functional_call(model, state, args, kwargs, tie_weights=True)


def agreement(
    macs: int, macs_ref: int, counted: set[str], model: Any, args: tuple, kwargs: dict
) -> dict:
    """``equal``, else the ops FlopCounterMode leaves at 0 that the model ran (one more
    forward, only for a model that disagrees): a ``known gap`` when ours are the higher."""
    if macs == macs_ref:
        return {"agreement": "equal"}
    try:
        ran = ops_run(model, args, kwargs)
    except Exception:  # the reference's forward ran; a recording that fails says nothing more
        ran = set()
    gaps = sorted(op for op in ran if op in KNOWN_GAPS and op not in counted)
    if gaps and macs > macs_ref:
        return {"agreement": "known gap", "gap_ops": gaps}
    return {"agreement": "differs", **({"gap_ops": gaps} if gaps else {})}


def ops_run(model: Any, args: tuple, kwargs: dict) -> set[str]:
    """The ATen ops (base names) one forward runs, under the reference's own settings."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[str] = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with Record():
        forward(model, args, kwargs)
    return seen


def timings(our_call: Callable, their_call: Callable, *, repeats: int) -> dict:
    """``repeats`` alternating pairs after the first calls: medians and their ratio."""
    mine, theirs = [], []
    for _ in range(repeats):
        mine.append(_timed(our_call, catch=False)[0])
        theirs.append(_timed(their_call, catch=False)[0])
    ours_s, theirs_s = statistics.median(mine), statistics.median(theirs)
    return {
        "repeats": repeats,
        "ours_s": round(ours_s, 4),
        "theirs_s": round(theirs_s, 4),
        "ratio": round(ours_s / theirs_s, 3) if theirs_s > 0 else None,
    }


def _timed(call: Callable, *, catch: bool = True) -> tuple[float, Any]:
    """Seconds and the value of ``call()``; with ``catch``, its exception as the value."""
    start = time.perf_counter()
    try:
        value = call()
    except Exception as exc:
        if not catch:
            raise
        value = exc
    return time.perf_counter() - start, value


def _base(op: Any) -> str:
    """``aten.convolution`` or ``aten.convolution.default`` -> ``convolution``."""
    parts = str(op).split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _shapes(args: tuple, kwargs: dict) -> str:
    """The tensor inputs' shapes, short: ``1x3x224x224`` or ``input_ids=1x128 ...``."""
    import torch

    def shape(value: Any) -> str:
        return "x".join(map(str, value.shape)) if isinstance(value, torch.Tensor) else "-"

    named = [shape(a) for a in args if isinstance(a, torch.Tensor)]
    named += [f"{k}={shape(v)}" for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    return " ".join(named)
