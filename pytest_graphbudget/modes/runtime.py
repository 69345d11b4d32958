"""Measured runtime: run the model for real on this machine, next to the static figures.

The static profile says what a forward costs on a hardware profile; this says what it took
here: the seconds the zoo spent building or loading the model, the process's resident memory
after loading, and the forward's latency over ``runs`` timed runs after ``warmup`` untimed ones.

The figure budgets check (``latency_measured_s``, bounded by ``latency_measured_max``) is the
MINIMUM of the timed runs. On a shared CI runner every disturbance (another job, a page fault,
a frequency change, the scheduler) only ever adds time, so the fastest run is the one that
carries the least noise and the best estimate of what the machine can do; the mean and the
median move with the runner's load. More runs make the minimum steadier (``measure_runs``).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.case import rss_bytes
from pytest_graphbudget.errors import GraphBudgetError, one_line

if TYPE_CHECKING:  # the engine's profile and hardware: not at pytest's start-up, which
    # imports this module for its constants (gate.budgets) with or without --graph-budget
    from pytest_graphbudget.engine.profile import Runtime

DEFAULT_RUNS = 20
"""Timed runs when none are given: enough for a steady minimum, few enough for CI."""
DEFAULT_WARMUP = 3
"""Untimed runs first: allocator pools, lazy initialisation and caches settle in them."""


def noise_note(profile: Any, key: str) -> str:
    """What a measured-latency verdict compared (``; the fastest of 20 runs on cpu``), so a
    reader knows noise cannot explain it away; ``""`` for every other budget key."""
    if key != "latency_measured_max":
        return ""
    data = profile.get("runtime") if isinstance(profile, dict) else profile.runtime
    if data is None:
        return ""
    measured = data if isinstance(data, dict) else data.to_dict()
    runs = measured["runs"]
    which = f"the fastest of {runs} runs" if runs > 1 else "its one timed run"
    return f"; {which} on {measured['device']}"


def eager_note(execution: str, flag: str = "measure") -> str:
    """The note for a measured latency set against an estimate priced as ``execution``: the
    timed forwards are eager (no ``torch.compile``); "" when the estimate is eager too."""
    if execution == "eager":
        return ""
    return (
        f"{flag} times eager forwards (no torch.compile): the measured latency and roofline / "
        f"measured set an eager run against the estimate priced {execution}"
    )


def check_runs(runs: Any, where: str = "measure_runs") -> int:
    """``runs`` as a positive integer, or a one-line error naming ``where``."""
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise GraphBudgetError(f"{where}: a positive number of timed runs, e.g. 20, got {runs!r}")
    return runs


def runs_asked(
    measure: bool | int, mode: str = "eval", zoo_options: Any = None, zoo_name: bool = False
) -> int:
    """The timed runs ``profile_model(measure=...)`` asks for (True: ``DEFAULT_RUNS``; a number:
    that many; 0 or False: not measured). What is timed is one eval forward: a training step or
    a decode step is refused. A zoo model to time (``zoo_name``) is built with real weights
    (``meta=False`` in ``zoo_options``), even where the zoo would pick the meta device."""
    if measure is False or measure is None or measure == 0:
        return 0
    runs = DEFAULT_RUNS if measure is True else check_runs(measure, "measure")
    zoo_options = {} if zoo_options is None else zoo_options
    if mode != "eval" or zoo_options.get("decode") or "context" in zoo_options:
        raise GraphBudgetError(
            "measure times one eval forward of the model: drop mode='train' or decode, "
            "or drop measure"
        )
    if zoo_name:
        zoo_options.setdefault("meta", False)
    return runs


def check_where(
    device: Any, runs: int, label: str | None = None, measure: str = "measure=True"
) -> None:
    """A ``device`` only says where ``measure`` runs the model: refused without it, checked
    (``device.check_device``) before anything is profiled. ``label`` and ``measure`` name the
    device and the measuring as the caller spells them (``--device cuda``, ``--measure``)."""
    if device is None:
        return
    if not runs:
        raise GraphBudgetError(
            f"{label or f'device={device!r}'} says where measure runs the model: "
            f"add {measure}, or drop it"
        )
    from pytest_graphbudget.modes.device import check_device

    check_device(device, label)


def batch_of(args: tuple, kwargs: dict[str, Any]) -> int:
    """Samples per forward: the leading dimension of the first input of rank 2 or more (a
    batch of images, of token sequences); 1 when every input is a vector or a scalar."""
    import torch

    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim() >= 2:
            return int(value.shape[0])
    return 1


def timed_runs(
    call: Callable[[], Any],
    runs: int,
    warmup: int,
    sync: Callable[[], None],
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """``warmup`` untimed calls, then the seconds of each of ``runs`` timed calls."""
    for _ in range(warmup):
        call()
    sync()
    seconds = []
    for _ in range(runs):
        start = clock()
        call()
        sync()
        seconds.append(clock() - start)
    return seconds


def cpu_clock(threads: int) -> tuple[str, Callable[[], float]]:
    """The clock a CPU forward is timed by, as the calibration times its kernels
    (``calibrate.clock_for``): on one thread the process's CPU time, which a shared runner's
    other jobs do not add to (resnet18 at 112 px beside three busy processes on two cores:
    96 ms by the wall clock, 50 ms by CPU time, 44 and 47 ms on the quiet machine); with
    several, the wall clock, which is all that says when they all finished."""
    if threads == 1:
        return "cpu", time.process_time
    return "wall", time.perf_counter


def measure(
    model: Any,
    args: tuple,
    kwargs: dict[str, Any],
    est_latency_s: float,
    *,
    runs: int = DEFAULT_RUNS,
    warmup: int = DEFAULT_WARMUP,
    load_s: float | None = None,
    rss: int | None = None,
    device: str | None = None,
) -> Runtime:
    """Time ``model(*args, **kwargs)`` in eval mode without autograd; the model keeps its mode.

    ``rss`` is the resident memory read after the model was loaded (read now when None).
    ``device`` ("cpu", "cuda", "cuda:N"; None: where the model is) runs a copy of the model
    there (``device.py``); on CUDA, events time the runs and the allocator gives their peak.
    """
    import torch

    from pytest_graphbudget.modes.device import check_device, cuda_runs, on_device

    check_runs(runs, "runs")
    program = _is_program(model)
    if program:  # its graph fixed the mode at export (and its module refuses eval())
        model = model.module()
    here = _device(model, args, kwargs)
    if device is not None:
        here = check_device(device)
        model, args, kwargs = on_device(model, args, kwargs, here)
    elif here.type == "cuda":
        here = check_device(here)
    modes = {} if program else {module: module.training for module in model.modules()}
    for module in modes:
        module.training = False
    peak, (clock, timer) = None, cpu_clock(torch.get_num_threads())
    try:
        with torch.inference_mode():
            if here.type == "cuda":
                clock = "cuda events"
                seconds, peak = cuda_runs(lambda: model(*args, **kwargs), runs, warmup, here)
            else:
                call = lambda: model(*args, **kwargs)  # noqa: E731
                seconds = timed_runs(call, runs, warmup, lambda: None, timer)
    except Exception as exc:  # the model's own error, not ours: say so in one line
        raise GraphBudgetError(
            f"the model raised while being timed: {one_line(exc, 200, typed=True)}"
        ) from exc
    finally:
        for module, training in modes.items():
            module.training = training
    batch = batch_of(args, kwargs)
    fastest, mean = min(seconds), statistics.fmean(seconds)
    from pytest_graphbudget.engine.profile import Runtime

    return Runtime(
        device=str(here),
        threads=torch.get_num_threads(),
        batch=batch,
        runs=runs,
        warmup=warmup,
        mean_s=mean,
        std_s=statistics.stdev(seconds) if runs > 1 else 0.0,
        min_s=fastest,
        median_s=statistics.median(seconds),
        max_s=max(seconds),
        throughput=batch / mean if mean > 0 else math.inf,
        roofline_ratio=est_latency_s / fastest if fastest > 0 else math.inf,
        load_s=load_s,
        rss_bytes=rss if rss is not None else rss_bytes(),
        peak_measured_bytes=peak,
        clock=clock,
    )


def loaded(model: Any) -> tuple[float | None, int | None]:
    """A model's load seconds and resident memory after loading: what the zoo recorded on its
    ``ModelCase``, else (a module given directly) no load time and the memory now, read before
    it is profiled."""
    seconds = getattr(model, "load_seconds", None)
    if seconds is not None:
        return seconds, model.load_rss_bytes
    return None, rss_bytes()


def attach(
    prof: Any,
    model: Any,
    args: tuple,
    kwargs: dict[str, Any],
    runs: int,
    load: Any,
    device: str | None = None,
) -> Any:
    """The profile with ``runs`` timed forwards of the model it describes (``Profile.runtime``),
    on ``device`` (None: where the model is); ``load`` is the model's ``loaded`` record."""
    load_s, rss = load
    prof.runtime = measure(
        model, args, kwargs, prof.est_latency_s, runs=runs, load_s=load_s, rss=rss, device=device
    )
    if prof.runtime.device.startswith("cuda"):
        with_allocator(prof, model, args, kwargs)
    return prof


def with_allocator(prof: Any, model: Any, args: tuple, kwargs: dict[str, Any]) -> None:
    """A profile timed on a GPU counts its memory as that GPU's caching allocator does
    (``engine.allocator``): its ``peak_memory_bytes`` becomes the replayed
    ``max_memory_allocated`` of a fresh process (the block rounding of every tensor, the
    weights' included, and the cuBLAS and cuDNN workspaces), the part beyond the weights and
    inputs' own bytes its ``activation_peak_bytes``."""
    from pytest_graphbudget.engine.allocator import set_peak
    from pytest_graphbudget.modes.device import allocator_peak, check_device, cuda_memory

    memory = cuda_memory(check_device(prof.runtime.device))
    if _is_program(model):
        model = model.module()
    found = allocator_peak(model, args, kwargs, memory)
    set_peak(prof, found, memory)  # the device's capability and workspace settings
    # what of that is no tensor of the model's: a small model's peak can be mostly workspace
    prof.runtime.cublas_workspace_bytes = found.cublas_bytes
    prof.runtime.conv_workspace_bytes = found.conv_workspace_bytes


def peak_row(runtime: Runtime) -> list[tuple[str, str]]:
    """The measured peak's row, on a CUDA device only (CPU runs have no allocator to ask)."""
    from pytest_graphbudget.units import format_bytes

    if runtime.peak_measured_bytes is None:
        return []
    rows = [
        (
            "peak measured",
            f"{format_bytes(runtime.peak_measured_bytes)} (max_memory_allocated during the "
            "timed runs, less what was allocated before them)",
        )
    ]
    if runtime.cublas_workspace_bytes is not None:
        cublas, conv = runtime.cublas_workspace_bytes, runtime.conv_workspace_bytes or 0
        rows.append(
            (
                "workspaces",
                f"cuBLAS {format_bytes(cublas)}, cuDNN {format_bytes(conv)} (in the estimated "
                "peak, as the allocator holds them)",
            )
        )
    return rows


def _is_program(model: Any) -> bool:
    return type(model).__name__ == "ExportedProgram" and hasattr(model, "graph_signature")


def _device(model: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    """Where the model runs (its first parameter's or input's device); a model on the meta
    device has no weights to run and cannot be timed."""
    import torch

    tensors = [*model.parameters(), *model.buffers()]
    tensors += [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)]
    devices = {t.device for t in tensors}
    if any(d.type == "meta" for d in devices):
        raise GraphBudgetError(
            "cannot measure a model built on the meta device (it has no weights to run): "
            "build it with real weights (meta=False, no --meta) to measure it"
        )
    return next(iter(sorted(devices, key=lambda d: d.type != "cuda")), torch.device("cpu"))


CLOCKS = {"cpu": "CPU time", "wall": "wall clock", "cuda events": "CUDA events"}
"""What timed the runs (``Runtime.clock``), as the latency row says it."""


def rows(runtime: Runtime, hardware: str, execution: str = "eager") -> list[tuple[str, str]]:
    """The measured runtime as (label, value) rows for the profile table; ``execution`` is
    what the estimate was priced as, which the timed forwards (always eager) may not be."""
    from pytest_graphbudget.units import format_bytes, format_seconds

    def sec(value: float) -> str:
        return format_seconds(value)

    load = "n/a (a module given directly)" if runtime.load_s is None else sec(runtime.load_s)
    rss = (
        "n/a (no /proc on this system)"
        if runtime.rss_bytes is None
        else format_bytes(runtime.rss_bytes)
    )
    ratio = runtime.roofline_ratio
    timed = "min latency" if execution == "eager" else "min latency of eager runs, not compiled"
    clock = CLOCKS.get(runtime.clock, runtime.clock)
    return [
        ("measured on", f"{runtime.device}, {runtime.threads} threads, batch {runtime.batch}"),
        ("load", load),
        ("RSS after load", rss),
        *peak_row(runtime),
        (
            "latency",
            f"min {sec(runtime.min_s)}, median {sec(runtime.median_s)}, mean "
            f"{sec(runtime.mean_s)} +/- {sec(runtime.std_s)}, max {sec(runtime.max_s)} "
            f"({runtime.runs} runs after {runtime.warmup} warm-up, {clock})",
        ),
        ("throughput", f"{runtime.throughput:.4g} samples/s (batch / mean latency)"),
        (
            "roofline / measured",
            f"{ratio:.3g} (est. latency on {hardware}, {execution} / {timed}; "
            "1 means this machine reached that roofline)",
        ),
    ]
