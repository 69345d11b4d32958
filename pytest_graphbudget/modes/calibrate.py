"""Calibration: what this machine achieves, written as a hardware profile for the roofline.

Vendors' datasheet peaks are what a chip could do; a CI runner or a laptop does less. Two
measurements give the roofline's two figures here, on the device calibrated (``cpu`` or
``cuda``/``cuda:N``, the same code for both: a GPU's clock waits for its queue):

- compute: a matrix product ``(n, n) @ (n, n)``, ``2 n^3`` FLOPs. ``n`` doubles from 512 until
  one product takes ``MIN_SECONDS`` (or ``n`` reaches ``max_n``), so timer resolution and call
  overhead are negligible. float32 on a CPU; on a GPU bfloat16 and float16 too.
- bandwidth: a copy between two buffers of ``copy_bytes`` each (256 MiB by default, on a CPU
  at least its last-level cache), which reads ``copy_bytes`` and writes as many.

Then each kernel kind (``modes.kernels``). Everything is timed in rounds (``modes.rounds``):
the median of ``rounds`` rounds, each the best of ``samples`` runs, the rounds interleaving
the benchmarks so that a machine's drift reaches them all alike; how far each strayed between
rounds is its spread, which says when the machine was too noisy to trust (``too_noisy``).
The intra-op thread count is pinned while it measures and written in the profile.

The profile is ``[hardware.<name>]`` TOML, as ``--hardware-file`` and
``[tool.graph_budget.hardware_profiles.<name>]`` read it (``hardware.from_table``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError

MIN_SECONDS = 0.05
"""The least time one timed matrix product should take: several scheduler time slices, so
that a thread descheduled once on a busy machine costs it a small share."""
MIB = 2**20
ROUNDS = 7
"""Rounds of a calibration (``--quick``: ``QUICK_ROUNDS``): the median of seven is off by one
outlier at most a quartile's width."""
QUICK_ROUNDS = 3
QUICK_COPY_BYTES = 64 * MIB
"""``--quick``'s copy on a CPU: beyond a large server's last-level cache (32 MiB) still. Its
4 MiB copy had timed the cache, not the memory (16 GB/s on a 36 MiB L3 that streams 14 from
DRAM), and a smoke check's profile is still used. A GPU copies the full 256 MiB (a B200's L2
holds 126 MB), in microseconds."""
CPU_DTYPES = ("float32", "bfloat16")
CUDA_DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class Calibration:
    """What one calibration measured on one device."""

    name: str
    device: str
    threads: int
    flops: float  # achieved float32 FLOP/s of the matrix product
    matmul_n: int
    bandwidth: float  # achieved bytes/s of the copy, bytes read plus bytes written
    copy_bytes: int  # the size of each buffer
    rounds: int
    samples: int = 2  # the best of this many runs in each round
    # dtype -> kernel kind -> its measured rate (``modes.kernels``), written as [kernels...]
    kernels: dict[str, dict[str, Any]] = field(default_factory=dict)
    # what strayed between rounds (``rounds.spread``): "peak DTYPE", "bandwidth", "KIND DTYPE"
    spreads: dict[str, float] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)  # dtype -> matmul FLOP/s

    def table(self) -> dict[str, Any]:
        """The ``[hardware.<name>]`` table: ``hardware.from_table``'s keys."""
        peaks = {"float32": self.flops, **self.peaks}
        table: dict[str, Any] = {
            "description": f"{self.device} as measured by graph-budget hardware --calibrate",
            "peak_tflops": {dtype: float(f"{flops / 1e12:.4g}") for dtype, flops in peaks.items()},
            "bandwidth_gbs": float(f"{self.bandwidth / 1e9:.4g}"),
        }
        for dtype, rates in self.kernels.items():
            key = "kernels" if dtype == "float32" else f"kernels_{dtype}"
            table[key] = {
                kind: {
                    "flops_per_s": float(f"{r.flops_per_s:.4g}"),
                    "bytes_per_s": float(f"{r.bytes_per_s:.4g}"),
                    "overhead_s": float(f"{r.overhead_s:.4g}"),
                }
                for kind, r in rates.items()
            }
        return table

    def toml(self, existing: str = "") -> str:
        """The profile as TOML; given a file's ``existing`` text, its other tables are kept
        and a table of the same name is replaced (``merged``)."""
        return merged(existing, self.name, self.table(), self.notes())

    def notes(self) -> list[str]:
        when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        rounds = f"median of {self.rounds} rounds" if self.rounds > 1 else "one round"
        return [
            f"measured {when} on {self.device} with {self.threads} threads, {rounds} "
            f"(each the best of {self.samples}): float32 matmul "
            f"n={self.matmul_n} ({self.flops / 1e9:.4g} GFLOP/s), copy of "
            f"{self.copy_bytes // MIB} MiB ({self.bandwidth / 1e9:.4g} GB/s read+write)",
            "peak_tflops and bandwidth_gbs: the roofline; [kernels.KIND] (float32) and "
            "[kernels_DTYPE.KIND]: each kernel kind's FLOP/s, bytes/s and launch overhead, "
            "which the latency estimate prices each op with",
            *self._spread_lines(),
        ]

    def _spread_lines(self) -> list[str]:
        """The spreads, the roofline's on one line, then each dtype's kinds on one; one round
        measures none, which is said rather than written as ±0%."""
        if self.rounds < 2:
            return ["no spread between rounds: one round measures none (--rounds 2 or more do)"]
        lines: dict[str, list[str]] = {}
        for key, value in self.spreads.items():
            kind, _, dtype = key.partition(" ")
            group = dtype if kind not in ("peak", "bandwidth") and dtype else "roofline"
            lines.setdefault(group, []).append(f"{kind} ±{value:.1%}")
        return [
            "spread between rounds (half the interquartile range over the median):",
            *(f"  {group}: {', '.join(found)}" for group, found in lines.items()),
        ]

    def too_noisy(self, limit: float) -> str | None:
        """What strayed more than ``limit`` between rounds, said for the user; None if
        nothing did."""
        from pytest_graphbudget.modes.rounds import noisiest

        name, worst = noisiest(self.spreads)
        if worst <= limit:
            return None
        over = sum(value > limit for value in self.spreads.values())
        others = f" (and {over - 1} more)" if over > 1 else ""
        return (
            f"the machine was too noisy to trust: {name} varied ±{worst:.0%} between rounds"
            f"{others}, over the ±{limit:.0%} allowed; close other programs and run again"
        )


def merged(existing: str, name: str, table: dict[str, Any], notes: Iterable[str] = ()) -> str:
    """``existing`` TOML text with ``[hardware.<name>]`` set to ``table`` (``notes`` its
    comments), every other table kept as it was; a one-line error saying why when it cannot
    be (not TOML, ``hardware`` not a table of tables). The CLI calls it before measuring, with
    a stand-in table, so that a file it could not write into fails first."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError
    from tomlkit.items import InlineTable

    try:
        doc = tomlkit.parse(existing) if existing.strip() else tomlkit.document()
    except TOMLKitError as exc:
        raise GraphBudgetError(f"not valid TOML ({exc})") from None
    found = doc.get("hardware")
    if found is not None and (isinstance(found, InlineTable) or not isinstance(found, dict)):
        lines = tomlkit.dumps({"hardware": found}).strip().splitlines()
        shown = lines[0][:50] + (" ..." if len(lines) > 1 or len(lines[0]) > 50 else "")
        raise GraphBudgetError(f"{shown} is not a table of [hardware.<name>] tables")
    if found is None:
        doc.add("hardware", tomlkit.table(is_super_table=True))
    item = tomlkit.table()
    for line in notes:
        item.add(tomlkit.comment(line))
    for key, value in table.items():
        if key.startswith("kernels"):  # [hardware.NAME.kernels.KIND] tables
            kinds = tomlkit.table(is_super_table=True)
            for kind, figures in value.items():
                rates = tomlkit.table()
                rates.update(figures)
                kinds.add(kind, rates)
            item.add(key, kinds)
        elif isinstance(value, dict):  # one line: peak_tflops = { float32 = 0.25 }
            inline = tomlkit.inline_table()
            inline.update(value)
            item.add(key, inline)
        else:
            item.add(key, value)
    doc["hardware"][name] = item
    text = tomlkit.dumps(doc)
    _check_merged(existing, text, name, table)
    return text


def _check_merged(existing: str, text: str, name: str, table: dict[str, Any]) -> None:
    """Refuse ``text`` unless it reads back as ``existing`` with ``[hardware.<name>]`` set to
    ``table``: tomlkit moves the keys of a dotted ``hardware.x.key = ...`` into the table
    added after them."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    try:
        expected = tomllib.loads(existing)
    except tomllib.TOMLDecodeError as exc:  # what tomlkit lets through
        raise GraphBudgetError(f"not valid TOML ({exc})") from None
    expected["hardware"] = {**expected.get("hardware", {}), name: table}
    if tomllib.loads(text) != expected:
        raise GraphBudgetError(
            f"cannot add [hardware.{name}] without changing its other tables; write them as "
            "[hardware.<name>] tables, or give another file"
        )


def clock_for(target: Any, threads: int) -> Callable[[], float]:
    """The clock that times ``target``: on a GPU one that waits for its queue first; on a
    CPU with one thread the process's CPU time, which a shared machine's other processes do
    not add to (wall-clock time, with several threads, counts each of their waits)."""
    import torch

    if target.type == "cuda":

        def synced() -> float:
            torch.cuda.synchronize(target)
            return time.perf_counter()

        return synced
    return time.process_time if threads == 1 else time.perf_counter


def matmul_flops(dtype: Any, timing: Any, max_n: int):
    """Achieved FLOP/s of an ``n x n`` product in ``dtype`` (on torch's default device),
    ``n``, and each round's FLOP/s."""
    import torch

    from pytest_graphbudget.modes.rounds import best_of, interleaved

    def product(n: int) -> Callable[[], Any]:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        out = torch.empty(n, n, dtype=dtype)
        call = lambda: torch.mm(a, b, out=out)  # noqa: E731
        call()  # the untimed first call
        return call

    n = 512
    while n < max_n and best_of(product(n), 2, timing.clock) < MIN_SECONDS:
        n *= 2
    call = product(n)
    rounds = interleaved({0: lambda: best_of(call, timing.samples, timing.clock)}, timing.rounds)
    return [2 * n**3 / seconds for seconds in rounds[0]], n


def copy_bandwidth(copy_bytes: int, timing: Any) -> list[float]:
    """Each round's bytes/s of copying a ``copy_bytes`` buffer (read once, written once),
    each round between two buffers of its own: where the pages of one pair land (huge pages
    or not, which memory channels) held one calibration's bandwidth 30% off another's on
    this machine, so each round draws its own pair."""
    import torch

    from pytest_graphbudget.modes.rounds import best_of, interleaved

    def one_round() -> float:
        source = torch.ones(copy_bytes // 4, dtype=torch.float32)
        target = torch.empty_like(source)
        call = lambda: target.copy_(source)  # noqa: E731
        call()  # the pages touched before the clock starts
        return 2 * source.numel() * 4 / best_of(call, timing.samples, timing.clock)

    return interleaved({0: one_round}, timing.rounds)[0]


def settings(
    device: str, rounds: int | None = None, threads: int | None = None, quick: bool = False
) -> tuple[Any, int]:
    """``device`` as a ``torch.device`` and the rounds to time (``ROUNDS``, ``QUICK_ROUNDS``
    with ``quick``, unless ``rounds`` says), or a one-line error: what ``calibrate`` checks
    before it measures anything, for the CLI to check before it says it calibrates."""
    from pytest_graphbudget.modes.device import check_device

    if threads is not None and threads < 1:
        raise GraphBudgetError(f"--threads must be at least 1, got {threads}")
    cpus = usable_cpus()
    if threads is not None and cpus and threads > cpus and device == "cpu":
        raise GraphBudgetError(  # oversubscribed, every rate is the scheduler's, not the CPU's
            f"--threads {threads} is more than the {cpus} CPUs this process may use: its rates "
            f"would be timed oversubscribed; calibrate with --threads {cpus} or fewer"
        )
    if rounds is not None and rounds < 1:
        raise GraphBudgetError(f"--rounds must be at least 1, got {rounds}")
    target = check_device(device, f"cannot calibrate on device {device!r}")
    return target, (QUICK_ROUNDS if quick else ROUNDS) if rounds is None else rounds


def usable_cpus() -> int | None:
    """The CPUs this process may run on (its affinity, else the machine's count)."""
    import os

    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def calibrate(
    name: str = "calibrated",
    device: str = "cpu",
    *,
    rounds: int | None = None,
    max_n: int = 4096,
    copy_bytes: int = 256 * MIB,
    threads: int | None = None,
    quick: bool = False,
) -> Calibration:
    """Measure this machine's achievable FLOP/s and memory bandwidth on ``device``, and each
    kernel kind's rates (``modes.kernels``; float32 and bfloat16, and float16 on a GPU), with
    ``threads`` intra-op threads (default: torch's), in ``rounds`` rounds (default
    ``ROUNDS``); ``quick`` measures small sizes and copies ``QUICK_COPY_BYTES`` on a CPU, in
    ``QUICK_ROUNDS`` rounds by default. A CPU's copy buffers are never smaller than its
    last-level cache (``last_level_cache``)."""
    import torch

    target, rounds = settings(device, rounds, threads, quick)
    if quick:
        max_n = 512
        copy_bytes = copy_bytes if target.type == "cuda" else min(copy_bytes, QUICK_COPY_BYTES)
    if target.type == "cpu":  # the copy times the memory only where it spills the cache
        copy_bytes = max(copy_bytes, last_level_cache() or 0)
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:  # the caller's thread count comes back: calibrating is no setting of the process
        with torch.inference_mode(), torch.device(target):
            return _measure(name, target, rounds, max_n, copy_bytes, quick)
    finally:
        torch.set_num_threads(before)


def last_level_cache() -> int | None:
    """The largest cache Linux reports for the first CPU, in bytes (None elsewhere): a
    server's L3 reaches 480 MiB (a Xeon here), where a 64 MiB copy and its source sit in the
    cache and even 256 MiB nearly do, so a CPU copy takes buffers at least this large."""
    from pathlib import Path

    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = path.read_text().strip()
        except OSError:  # a sandbox that hides it: the copy keeps its size
            continue
        if text[-1:] in units and text[:-1].isdigit():
            sizes.append(int(text[:-1]) * units[text[-1]])
        elif text.isdigit():
            sizes.append(int(text))
    return max(sizes, default=None)


def _measure(
    name: str, target: Any, rounds: int, max_n: int, copy_bytes: int, quick: bool
) -> Calibration:
    import statistics

    import torch

    from pytest_graphbudget.modes.kernels import CUDA_BATCH, Timing, measure_kernels
    from pytest_graphbudget.modes.rounds import spread

    threads = torch.get_num_threads()
    gpu = target.type == "cuda"
    timing = Timing(clock_for(target, threads), rounds, batches=(1, CUDA_BATCH) if gpu else (1,))
    if gpu:  # the larger batch's shapes move twice the L2, as a model's at a serving batch do
        timing.spill = 2 * getattr(torch.cuda.get_device_properties(target), "L2_cache_size", 0)
    peaks: dict[str, float] = {}
    spreads: dict[str, float] = {}
    n = 0
    for dtype in CUDA_DTYPES if gpu else ("float32",):
        found, size = matmul_flops(getattr(torch, dtype), timing, max_n)
        peaks[dtype], spreads[f"peak {dtype}"] = statistics.median(found), spread(found)
        n = n or size  # float32's, which the notes name
    copies = copy_bandwidth(copy_bytes, timing)
    bandwidth, spreads["bandwidth"] = statistics.median(copies), spread(copies)
    kernels = {}
    for dtype in CUDA_DTYPES if gpu else CPU_DTYPES:
        found = measure_kernels(getattr(torch, dtype), quick, peaks["float32"], bandwidth, timing)
        kernels[dtype] = found.rates
        spreads.update({f"{kind} {dtype}": value for kind, value in found.spreads.items()})
    label = torch.cuda.get_device_name(target) if gpu else _cpu_name()
    flops = peaks.pop("float32")
    return Calibration(
        name, label, threads, flops, n, bandwidth, copy_bytes, rounds, timing.samples,
        kernels, spreads, peaks,
    )  # fmt: skip


def _cpu_name() -> str:
    import platform

    return f"CPU {platform.processor() or platform.machine()}".strip()
