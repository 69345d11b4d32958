"""The zoo sweep's worker side: one JSON line in (a name), one JSON line out (a ``Result``).

``zoo_sweep.py`` starts ``python -m pytest_graphbudget.cli.zoo_sweep --worker`` and feeds it
names; here a
model is resolved and profiled in this process, and every failure becomes a row, never a crash.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field

from pytest_graphbudget.errors import one_line


@dataclass
class Result:
    """One model's row: its figures, or the reason it failed."""

    name: str
    family: str
    group: str = ""  # the section of the table: the family, or family and task
    ok: bool = False
    tier: str = ""
    flops: int = 0
    macs: int = 0
    params: int = 0
    peak_memory_bytes: int = 0
    compute_bound_share: float = 0.0
    seconds: float = 0.0
    unsupported_ops: dict[str, int] = field(default_factory=dict)
    tier_failures: dict[str, str] = field(default_factory=dict)
    graphs: int = 0  # graphs stitched by the dynamo-breaks tier
    breaks: int = 0  # its graph breaks
    reference: str = ""
    note: str = ""
    error: str = ""


def profile_one(name: str, family: str) -> Result:
    """Resolve and profile ``name`` in this process."""
    from pytest_graphbudget import profile_model
    from pytest_graphbudget.zoo import resolve

    result = Result(name=name, family=family)
    start = time.perf_counter()
    try:
        case = resolve(name)
        result.note = case.note or ""
        result.reference = _reference(name, family)
        prof = profile_model(case.model, case.inputs, case.kwargs, name=name)
    except Exception as exc:  # every failure becomes a row, never a crash of the sweep
        result.error = _one_line(exc)
        failures = getattr(exc, "failures", None)
        if isinstance(failures, dict):  # a TraceError: keep every tier's reason
            result.tier_failures = {tier: shorten(str(why), 1000) for tier, why in failures.items()}
        result.seconds = time.perf_counter() - start
        return result
    result.ok = True
    result.seconds = time.perf_counter() - start
    result.tier = prof.trace.method
    result.tier_failures = dict(prof.trace.failures)
    if prof.trace.method == "dynamo-breaks":
        result.graphs, result.breaks = prof.trace.graphs, len(prof.trace.breaks)
    result.flops = int(prof.flops)
    result.macs = int(prof.macs)
    result.params = int(prof.params)
    result.peak_memory_bytes = int(prof.peak_memory_bytes)
    result.compute_bound_share = float(prof.bottleneck["compute_bound"]["share"])
    result.unsupported_ops = dict(prof.coverage.unsupported_ops)
    return result


def _reference(name: str, family: str) -> str:
    """A published figure to read ours against, where the model's authors publish one."""
    try:
        if family == "torchvision":
            from pytest_graphbudget.zoo.torchvision import published

            gmacs = published(name).get("gmacs")
            return f"{gmacs:g} GMACs" if gmacs is not None else ""
        if family == "ultralytics":
            import re

            from pytest_graphbudget.zoo.ultralytics import parse, yaml_file

            parsed = parse(name)
            if parsed is None:
                return ""
            _, prefix, scale = parsed
            text = yaml_file(prefix).read_text()
            match = re.search(
                rf"^\s*{scale}:\s*\[.*?([\d.]+)\s+GFLOPs", text, re.MULTILINE | re.IGNORECASE
            )
            return f"{match.group(1)} GFLOPs (thop)" if match else ""
    except Exception:
        return ""
    return ""


def _one_line(exc: BaseException, limit: int = 300) -> str:
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:  # a TraceError: every tier, each shortened
        each = max(limit // len(failures), 60)
        return "; ".join(f"{tier}: {shorten(str(why), each)}" for tier, why in failures.items())
    return one_line(exc, limit, typed=True)


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def worker_main() -> int:
    """Read ``{"name", "family"}`` lines on stdin; answer each with a Result line on stdout.

    Anything the models print goes to stderr: stdout carries only results.
    """
    results = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # What every model needs, done once before the first is timed: torch, the engine, the op
    # registry (one tiny profile loads them) and the zoo's loaders (entry points scanned).
    # Otherwise the first model of a worker pays for them, and on a loaded machine times out.
    import torch

    from pytest_graphbudget import profile_model, zoo

    profile_model(torch.nn.Linear(2, 2), (torch.ones(1, 2),))
    zoo.loaders()
    results.write(json.dumps({"ready": True}) + "\n")

    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        result = profile_one(request["name"], request["family"])
        results.write(json.dumps(result.__dict__) + "\n")
    return 0
