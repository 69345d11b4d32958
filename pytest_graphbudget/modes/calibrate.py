"""Calibration: what this machine achieves, written as a hardware profile for the roofline.

Vendors' datasheet peaks are what a chip could do; a CI runner or a laptop does less. Two
measurements give the roofline's two figures here:

- compute: a float32 matrix product ``(n, n) @ (n, n)``, ``2 n^3`` FLOPs. ``n`` doubles from
  512 until the faster of two products takes ``MIN_SECONDS`` (or ``n`` reaches ``max_n``), so
  timer resolution and call overhead are negligible; the best of ``repeats`` runs counts (on a
  shared machine noise only ever adds time).
- bandwidth: a copy between two buffers of ``copy_bytes`` each (256 MiB by default, beyond
  the last-level cache of most machines), which reads ``copy_bytes`` and writes as many; the
  best of ``repeats`` runs counts.

The profile is ``[hardware.<name>]`` TOML, as ``--hardware-file`` and
``[tool.graph_budget.hardware_profiles.<name>]`` read it (``hardware.from_table``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError

MIN_SECONDS = 0.05
"""The least time one timed matrix product should take: several scheduler time slices, so
that a thread descheduled once on a busy machine costs it a small share."""
MIB = 2**20


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
    repeats: int
    # dtype -> kernel kind -> its measured rate (``modes.kernels``), written as [kernels...]
    kernels: dict[str, dict[str, Any]] = field(default_factory=dict)

    def table(self) -> dict[str, Any]:
        """The ``[hardware.<name>]`` table: ``hardware.from_table``'s keys."""
        table: dict[str, Any] = {
            "description": f"{self.device} as measured by graph-budget hardware --calibrate",
            "peak_tflops": {"float32": float(f"{self.flops / 1e12:.4g}")},
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
        and a table of the same name is replaced."""
        import tomlkit

        doc = tomlkit.parse(existing) if existing.strip() else tomlkit.document()
        if "hardware" not in doc:
            doc.add("hardware", tomlkit.table(is_super_table=True))
        table = tomlkit.table()
        for line in self.notes():
            table.add(tomlkit.comment(line))
        for key, value in self.table().items():
            if key.startswith("kernels"):  # [hardware.NAME.kernels.KIND] tables
                kinds = tomlkit.table(is_super_table=True)
                for kind, figures in value.items():
                    inline = tomlkit.table()
                    inline.update(figures)
                    kinds.add(kind, inline)
                table.add(key, kinds)
                continue
            if isinstance(value, dict):  # one line: peak_tflops = { float32 = 0.25 }
                inline = tomlkit.inline_table()
                inline.update(value)
                value = inline
            table.add(key, value)
        doc["hardware"][self.name] = table
        return tomlkit.dumps(doc)

    def notes(self) -> list[str]:
        when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        return [
            f"measured {when} on {self.device} with {self.threads} threads, best of "
            f"{self.repeats}: float32 matmul n={self.matmul_n} ({self.flops / 1e9:.4g} GFLOP/s), "
            f"copy of {self.copy_bytes // MIB} MiB ({self.bandwidth / 1e9:.4g} GB/s read+write)",
            "peak_tflops and bandwidth_gbs: the roofline; [kernels.KIND] (float32) and "
            "[kernels_bfloat16.KIND]: each kernel kind's FLOP/s, bytes/s and launch overhead, "
            "which the latency estimate prices each op with",
        ]


def best_seconds(call: Callable[[], Any], repeats: int, sync: Callable[[], None]) -> float:
    """The fastest of ``repeats`` timed calls, after one untimed call."""
    call()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def matmul_flops(device: Any, repeats: int, max_n: int, sync: Callable[[], None]):
    """Achieved float32 FLOP/s of an ``n x n`` product, and ``n``."""
    import torch

    def product(n: int) -> Callable[[], Any]:
        a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
        out = torch.empty(n, n, device=device)
        return lambda: torch.mm(a, b, out=out)

    n = 512
    while n < max_n and best_seconds(product(n), 2, sync) < MIN_SECONDS:
        n *= 2
    return 2 * n**3 / best_seconds(product(n), repeats, sync), n


def copy_bandwidth(device: Any, copy_bytes: int, repeats: int, sync: Callable[[], None]):
    """Achieved bytes/s of copying a ``copy_bytes`` buffer (read once, written once)."""
    import torch

    source = torch.ones(copy_bytes // 4, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    seconds = best_seconds(lambda: target.copy_(source), repeats, sync)
    return 2 * source.numel() * 4 / seconds


def calibrate(
    name: str = "calibrated",
    device: str = "cpu",
    *,
    repeats: int = 5,
    max_n: int = 4096,
    copy_bytes: int = 256 * MIB,
    threads: int | None = None,
    quick: bool = False,
) -> Calibration:
    """Measure this machine's achievable float32 FLOP/s and memory bandwidth on ``device``,
    and on a CPU each kernel kind's rates in float32 and bfloat16 (``modes.kernels``), with
    ``threads`` intra-op threads (default: torch's); ``quick`` measures small sizes only."""
    import torch

    if threads is not None and threads < 1:
        raise GraphBudgetError(f"--threads must be at least 1, got {threads}")
    if quick:
        repeats, max_n, copy_bytes = 2, 512, 4 * MIB
    try:
        target = torch.device(device)
        torch.empty(1, device=target)
    except (RuntimeError, AssertionError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GraphBudgetError(f"cannot calibrate on device {device!r}: {reason}") from None
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:  # the caller's thread count comes back: calibrating is no setting of the process
        with torch.inference_mode():
            return _measure(name, target, repeats, max_n, copy_bytes, quick)
    finally:
        torch.set_num_threads(before)


def _measure(
    name: str, target: Any, repeats: int, max_n: int, copy_bytes: int, quick: bool
) -> Calibration:
    import torch

    sync = (lambda: torch.cuda.synchronize(target)) if target.type == "cuda" else (lambda: None)
    flops, n = matmul_flops(target, repeats, max_n, sync)
    bandwidth = copy_bandwidth(target, copy_bytes, repeats, sync)
    kernels = {}
    if target.type == "cpu":  # the micro-benchmarks time host calls: CPU only for now
        kernels = _kernels(flops, bandwidth, repeats, quick)
    label = torch.cuda.get_device_name(target) if target.type == "cuda" else _cpu_name()
    return Calibration(
        name,
        label,
        torch.get_num_threads(),
        flops,
        n,
        bandwidth,
        copy_bytes,
        repeats,
        kernels,
    )


def _kernels(flops: float, bandwidth: float, repeats: int, quick: bool) -> dict:
    """Each kind's rates (``modes.kernels``), per dtype."""
    import torch

    from pytest_graphbudget.modes.kernels import measure_kernels

    return {
        dtype: measure_kernels(getattr(torch, dtype), repeats, quick, flops, bandwidth)
        for dtype in ("float32", "bfloat16")
    }


def _cpu_name() -> str:
    import platform

    return f"CPU {platform.processor() or platform.machine()}".strip()
