"""A budget option that would have no effect is an error, not a note: a zoo option the model
cannot take (``refuse_ignored``), timed runs with no latency limit (``refuse_idle_runs``).

The CLI prints the zoo's note (``seq_len ignored: resnet18 takes images``) and goes on, since
the user sees it. A budget table is read by nobody at run time: ``seq_len = [128, 2048]`` on an
image model would check the same profile twice and pass, a budget that checks nothing of
what it says. ``refuse_ignored`` turns those notes into the table's one-line error.
"""

from __future__ import annotations

from typing import Any

from pytest_graphbudget.errors import GraphBudgetError

MARK = " ignored: "
"""How a zoo loader's note says an option had no effect (``zoo/torchvision.py``)."""
PARTIAL = "text only: "
"""How a zoo loader's note says its example inputs reach part of the model: a vision-language
model given its text alone (``zoo/_images.py``)."""


def refuse_ignored(case: Any, name: str) -> Any:
    """``case`` when the zoo used every option of table ``name`` and its inputs reach the whole
    model, else a one-line error: a budget on a vision-language model's text alone would pass
    with its vision tower never checked."""
    notes = (case.note or "").split("; ")
    ignored = [part for part in notes if MARK in part]
    if ignored:
        option = ignored[0].split(MARK)[0]
        raise GraphBudgetError(
            f"{ignored[0]} (budget table {name}); remove {option} from the table: "
            "it would check the same profile as without it"
        )
    partial = [part for part in notes if part.startswith(PARTIAL)]
    if partial:
        raise GraphBudgetError(
            f"{partial[0]} (budget table {name}); a budget on these inputs would check the "
            "text alone"
        )
    return case


def refuse_idle_runs(given: Any, budget: Any, where: str) -> None:
    """``measure_runs`` or ``measure_device`` (among the keys ``given``) set on a budget that
    times nothing (no ``latency_measured_max``) is an error: the user meant a measured-latency
    check that no limit asks for."""
    for key in ("measure_runs", "measure_device"):
        if key in given and "latency_measured_max" not in budget.limits:
            raise GraphBudgetError(
                f"{key} in {where} has no effect without latency_measured_max: "
                f"add that limit or remove {key}"
            )


def refuse_idle_optimizer(budget: Any, where: str, mode_key: str) -> None:
    """An optimizer or ``parallel`` on an eval budget, or ``memory_per_rank_max`` without
    ``parallel`` (no rank to bound: a silent pass), is refused where it is written, in the
    budget's own spelling (``mode_key``), before any model is built."""
    for key in ("optimizer", "parallel"):
        if getattr(budget.variant, key) and budget.variant.mode != "train":
            raise GraphBudgetError(
                f"{key} in {where} needs {mode_key}: an eval forward has no optimizer step"
                " and no sharded state"
            )
    if "memory_per_rank_max" in budget.limits and not budget.variant.parallel:
        raise GraphBudgetError(
            f"memory_per_rank_max in {where} needs parallel (e.g. {{fsdp = 8}}): "
            "without it there is no rank to bound"
        )


PEAK_KEYS = ("latency_max", "intensity_min", "compute_bound_min", "memory_bound_max")
"""Limits whose figure rests on the hardware's peak FLOP/s for the profile's dtype."""


def missing_peak(profile: Any, limits: Any) -> str | None:
    """Why a limit of a profile in a dtype its hardware has no figure for is judged on
    float32's (``Hardware.peak`` and ``Hardware.kernel`` fall back without a word), else
    None. A calibrated profile prices the latency with its kernel rates, not its peaks: what
    it lacks for the latency is a ``kernels_<dtype>`` table, which no peak stands in for."""
    hardware = getattr(profile, "hardware", None)
    peaks = getattr(hardware, "peak_flops", None) or {}
    kernels = getattr(hardware, "kernels", None) or {}
    dtype = getattr(profile, "dtype", None)
    if not peaks or dtype is None:
        return None
    said = []
    if kernels and "latency_max" in limits and dtype not in kernels:
        said.append(
            f"hardware {hardware.name} has no kernels_{dtype} table: latency is priced with its "
            f"float32 kernel rates (calibrate in {dtype}, or give that table)"
        )
    on_peak = [key for key in PEAK_KEYS if key in limits and not (kernels and key == "latency_max")]
    if dtype not in peaks and on_peak:
        judged = "latency and bottleneck are judged on its float32 peak"
        if kernels:
            judged = "bottleneck is judged on its float32 peak"
            if dtype in kernels:
                judged += f", latency on its calibrated {dtype} kernels"
        said.append(
            f"hardware {hardware.name} has no {dtype} peak: {judged} ({_fix(hardware, dtype)})"
        )
    return "; ".join(said) or None


def _fix(hardware: Any, dtype: str) -> str:
    """What to do about a missing peak: a user's profile can give it; a turing card runs
    bfloat16 without tensor cores (its float32 peak is right); a shipped card's datasheet
    gives none."""
    from pytest_graphbudget.hardware import BUILTIN, FAMILIES

    family = FAMILIES.get(getattr(hardware, "family", "") or "")
    if dtype == "bfloat16" and family is not None and not family.bfloat16:
        return f"{family.name} has no bfloat16 tensor cores: the card runs it at that peak"
    if any(hardware == shipped for shipped in BUILTIN):
        return "its datasheet gives none"
    return f"give it {dtype} in peak_tflops"
