"""Profile every model of the zoo and write the results as a Markdown table (``make zoo``).

    python -m pytest_graphbudget.zoo.sweep                     # everything -> docs/zoo.md
    python -m pytest_graphbudget.zoo.sweep resnet18 gpt2       # a few names -> stdout
    python -m pytest_graphbudget.zoo.sweep --family ultralytics --output yolo.md

Models are built and profiled in a worker process, one at a time; a model that runs past
``--timeout`` seconds or kills its worker is recorded as a failure with that reason, and a fresh
worker takes the next model. Nothing is downloaded: the worker runs with the hubs offline.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError, one_line

DEFAULT_OUTPUT = Path("docs") / "zoo.md"
DEFAULT_TIMEOUT = 300.0
STARTUP_TIMEOUT = 600.0
MODELS_PER_WORKER = 20  # a fresh worker now and then keeps memory from piling up
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "YOLO_OFFLINE": "1",
    "YOLO_AUTOINSTALL": "0",
}


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


# ---------------------------------------------------------------------------------------------
# Worker side: one JSON line in (a name), one JSON line out (a Result).


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
            result.tier_failures = {
                tier: _shorten(str(why), 1000) for tier, why in failures.items()
            }
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
        return "; ".join(f"{tier}: {_shorten(str(why), each)}" for tier, why in failures.items())
    return one_line(exc, limit, typed=True)


def _first_sentence(text: str) -> str:
    """``"Proxy object cannot be iterated. This can be ..."`` -> its first sentence."""
    head, sep, _ = text.partition(". ")
    return head + "." if sep and len(head) >= 20 else text


def _reason(result: Result) -> str:
    """Why a model failed, one line: each tier's first sentence, or the error."""
    if result.tier_failures and not result.ok:
        return "; ".join(
            f"{tier}: {_shorten(_first_sentence(why), 200)}"
            for tier, why in result.tier_failures.items()
        )
    return result.error


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def worker_main() -> int:
    """Read ``{"name", "family"}`` lines on stdin; answer each with a Result line on stdout.

    Anything the models print goes to stderr: stdout carries only results.
    """
    results = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import pytest_graphbudget.profile  # noqa: F401  (imports torch: not timed against a model)

    results.write(json.dumps({"ready": True}) + "\n")

    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        result = profile_one(request["name"], request["family"])
        results.write(json.dumps(result.__dict__) + "\n")
    return 0


# ---------------------------------------------------------------------------------------------
# Controller side


class Worker:
    """A worker process and a thread that forwards its result lines to a queue."""

    def __init__(self, stderr: Any) -> None:
        env = {**os.environ, **{k: v for k, v in OFFLINE_ENV.items() if k not in os.environ}}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pytest_graphbudget.zoo.sweep", "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.done = 0
        threading.Thread(target=self._read, daemon=True).start()
        try:  # the imports (torch...) are not timed against the first model
            ready = self.lines.get(timeout=STARTUP_TIMEOUT)
        except queue.Empty:
            ready = None
        if ready is None:
            self.stop()
            raise GraphBudgetError(
                "the sweep's worker process did not start (run with --verbose to see why)"
            )

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)  # end of output: the worker died or exited

    def run(self, name: str, family: str, timeout: float) -> Result:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps({"name": name, "family": family}) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return Result(name, family, error="the worker process was gone before it started")
        start = time.perf_counter()
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            return Result(
                name,
                family,
                seconds=time.perf_counter() - start,
                error=f"timed out after {timeout:g} s",
            )
        if line is None:
            code = self.process.wait()
            return Result(
                name,
                family,
                seconds=time.perf_counter() - start,
                error=f"the worker process died (exit code {code}), e.g. out of memory",
            )
        self.done += 1
        return Result(**json.loads(line))

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def sweep(
    names: list[tuple[str, str, str]],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Any = None,
    worker_stderr: Any = subprocess.DEVNULL,
) -> list[Result]:
    """Profile ``(name, family, group)`` triples one by one in worker processes."""
    results = []
    worker: Worker | None = None
    try:
        for index, (name, family, group) in enumerate(names, 1):
            if worker is None or not worker.alive() or worker.done >= MODELS_PER_WORKER:
                if worker is not None:
                    worker.stop()
                worker = Worker(worker_stderr)
            result = worker.run(name, family, timeout)
            result.group = group
            results.append(result)
            if progress is not None:
                status = result.tier if result.ok else f"FAILED: {result.error}"
                print(
                    f"[{index}/{len(names)}] {name}: {status} ({result.seconds:.1f} s)",
                    file=progress,
                    flush=True,
                )
    finally:
        if worker is not None:
            worker.stop()
    return results


# ---------------------------------------------------------------------------------------------
# Markdown


def render(results: list[Result], *, total_seconds: float, environment: str) -> str:
    lines = [
        "# Model zoo sweep",
        "",
        "Every model the zoo names, built offline and profiled at its default inputs "
        "(`python -m pytest_graphbudget.zoo.sweep`, run by `make zoo`; this file is generated).",
        "",
        f"{environment}. Hardware profile `generic`; one forward pass, batch 1, float32. "
        f"Building and profiling took {total_seconds / 60:.1f} min in all.",
        "",
        "- **tier**: the tracing tier that captured the graph: `fx`, else `dynamo` (export), "
        "else `dynamo-breaks` (the graphs between Dynamo's graph breaks, stitched, on the path "
        "one real forward took), else `eager` (every op of one real forward).",
        "- **compute-bound**: share of fused subgraphs that are compute-bound on `generic`.",
        "- **peak memory**: weights + inputs + peak of live activations.",
        "- **seconds**: building the model and profiling it, on a shared 2-core machine.",
        "- **published**: the model authors' own figure (torchvision's `_ops` GMACs at the "
        "weights' input size; ultralytics' YAML comment, thop GFLOPs at 640).",
        "",
        "## Summary",
        "",
        f"| family | models | {' | '.join(TIERS)} | failed | with unsupported ops |",
        "| --- | ---: |" + " ---: |" * len(TIERS) + " ---: | ---: |",
    ]
    groups = list(dict.fromkeys(r.group or r.family for r in results))
    for group in groups:
        rows = [r for r in results if (r.group or r.family) == group]
        lines.append(_summary_row(group, rows))
    lines.append(_summary_row("**all**", results))
    for group in groups:
        lines += [
            "",
            f"## {group}",
            "",
            "| model | tier | GFLOPs | GMACs | params | peak memory | compute-bound | seconds "
            "| published | notes |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
        ]
        for r in (r for r in results if (r.group or r.family) == group):
            lines.append(_row(r))
    failures = [r for r in results if not r.ok]
    if failures:
        lines += ["", "## Failures", ""]
        lines += [f"- `{r.name}` ({r.family}): {_escape(_reason(r))}" for r in failures]
    fallbacks: dict[tuple[str, str], list[str]] = {}
    for r in results:
        if r.ok:
            for tier, why in r.tier_failures.items():
                key = (tier, _shorten(_first_sentence(why), 200))
                fallbacks.setdefault(key, []).append(r.name)
    if fallbacks:
        lines += [
            "",
            "## Earlier tiers that failed, for models a later tier traced",
            "",
            "| tier | reason | models |",
            "| --- | --- | --- |",
        ]
        for (tier, why), names in sorted(fallbacks.items(), key=lambda kv: -len(kv[1])):
            shown = ", ".join(f"`{n}`" for n in names)
            lines.append(f"| {tier} | {_escape(why)} | {len(names)}: {shown} |")
    return "\n".join(lines) + "\n"


TIERS = ("fx", "dynamo", "dynamo-breaks", "eager")
"""The tracing tiers, in the order they are tried: one column each in the summary."""


def _summary_row(group: str, rows: list[Result]) -> str:
    by_tier = [str(sum(r.ok and r.tier == tier for r in rows)) for tier in TIERS]
    return (
        f"| {group} | {len(rows)} | {' | '.join(by_tier)} | {sum(not r.ok for r in rows)} | "
        f"{sum(r.ok and bool(r.unsupported_ops) for r in rows)} |"
    )


def _row(r: Result) -> str:
    notes = []
    if r.graphs:
        notes.append(f"{r.graphs} graphs, {r.breaks} breaks")
    if r.unsupported_ops:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(r.unsupported_ops.items()))
        notes.append(f"unsupported: {ops}")
    if r.note:
        notes.append(r.note)
    if not r.ok:
        return (
            f"| `{r.name}` | failed | | | | | | {r.seconds:.1f} | {r.reference} | "
            f"{_escape(_reason(r))} |"
        )
    return (
        f"| `{r.name}` | {r.tier} | {r.flops / 1e9:.3f} | {r.macs / 1e9:.3f} | "
        f"{r.params / 1e6:.2f}M | {r.peak_memory_bytes / 1e6:.1f} MB | "
        f"{r.compute_bound_share * 100:.0f}% | {r.seconds:.1f} | {r.reference} | "
        f"{_escape('; '.join(notes))} |"
    )


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _environment() -> str:
    from importlib import metadata

    versions = []
    for dist in ("torch", "torchvision", "transformers", "ultralytics"):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(versions) or "no model libraries installed"


# ---------------------------------------------------------------------------------------------
# Command line

FAMILY_ORDER = ("torchvision", "huggingface", "ultralytics")
TASK_ORDER = (
    "classification",
    "quantization",
    "segmentation",
    "video",
    "detection",
    "optical_flow",
)


def _grouped(selected: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """``(name, family, group)`` in table order: TorchVision by task, then the other families."""

    def group_of(name: str, family: str) -> str:
        if family != "torchvision":
            return family
        from pytest_graphbudget.zoo.torchvision import task_of

        return f"torchvision {task_of(name).replace('_', ' ')}"

    def order(item: tuple[str, str, str]) -> tuple:
        name, family, group = item
        rank = FAMILY_ORDER.index(family) if family in FAMILY_ORDER else len(FAMILY_ORDER)
        task = group.removeprefix("torchvision ").replace(" ", "_")
        task_rank = TASK_ORDER.index(task) if task in TASK_ORDER else 0
        return rank, family, task_rank

    triples = [(name, family, group_of(name, family)) for name, family in selected]
    return sorted(triples, key=order)  # stable: names keep their order within a group


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_graphbudget.zoo.sweep",
        description="Profile every model of the zoo and write a Markdown table.",
    )
    parser.add_argument("names", nargs="*", help="models to sweep (default: every name)")
    parser.add_argument("--family", action="append", help="only these families (repeatable)")
    parser.add_argument(
        "--output",
        type=Path,
        help=f"Markdown file to write (default: {DEFAULT_OUTPUT} for a full sweep, else stdout)",
    )
    parser.add_argument("--json", type=Path, help="also write every result as JSON")
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="FILE",
        help="render the Markdown from a --json file of an earlier sweep, profiling nothing",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds per model (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument("--verbose", action="store_true", help="show what the models print")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main()

    from pytest_graphbudget.zoo import find_loader, list_models

    if args.from_json is not None:
        results = [Result(**row) for row in json.loads(args.from_json.read_text())]
        total = sum(r.seconds for r in results)
        text = render(results, total_seconds=total, environment=_environment())
        return _write(text, args.output or DEFAULT_OUTPUT)

    catalogue = list_models()
    if args.names:
        selected = []
        for name in args.names:
            found = find_loader(name)
            if found is None:
                from pytest_graphbudget.zoo import _unknown_message

                print(f"error: {_unknown_message(name)}", file=sys.stderr)
                return 2
            selected.append((found[1], found[0].family))
        selected = _grouped(selected)
    else:
        families = args.family or list(catalogue)
        unknown = [f for f in families if f not in catalogue]
        if unknown:
            print(
                f"error: unknown family {', '.join(unknown)}; known: {', '.join(catalogue)}",
                file=sys.stderr,
            )
            return 2
        selected = _grouped([(name, family) for family in families for name in catalogue[family]])

    full = not args.names and not args.family
    output = args.output or (DEFAULT_OUTPUT if full else None)
    try:
        results = sweep(
            selected,
            timeout=args.timeout,
            progress=sys.stderr,
            worker_stderr=None if args.verbose else subprocess.DEVNULL,
        )
    except GraphBudgetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = render(
        results, total_seconds=sum(r.seconds for r in results), environment=_environment()
    )
    if args.json is not None:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=2) + "\n")
    return _write(text, output)


def _write(text: str, output: Path | None) -> int:
    if output is None:
        sys.stdout.write(text)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        print(f"wrote {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
