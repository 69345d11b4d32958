"""Profile the models of the zoo and write the results as a Markdown table (``make zoo``).

    python -m pytest_graphbudget.cli.zoo_sweep                     # by default -> docs/zoo.md
    python -m pytest_graphbudget.cli.zoo_sweep resnet18 gpt2       # a few names -> stdout
    python -m pytest_graphbudget.cli.zoo_sweep --family ultralytics --output yolo.md
    python -m pytest_graphbudget.cli.zoo_sweep --family timm       # every timm model -> stdout

Without names or ``--family``, every family but timm and diffusers (``CORPUS_FAMILIES``): their
models (timm's are over a thousand) are the corpus run's (``make corpus``,
``benchmarks/corpus.py``), which profiles each beside FlopCounterMode. ``--family timm`` or a
name (``timm:resnet50``) still sweeps them.

Models are built and profiled in a worker process, one at a time; a model that runs past
``--timeout`` seconds or kills its worker is recorded as a failure with that reason, and a fresh
worker takes the next model. Nothing is downloaded: the worker runs with the hubs offline.

This module runs the sweep (the command line and the worker processes); a worker's own side is
``zoo_sweep_worker.py`` (``Result``) and the Markdown is ``zoo_sweep_table.py`` (``render``).
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
from pathlib import Path
from typing import Any

from pytest_graphbudget.cli.zoo_sweep_table import environment, render
from pytest_graphbudget.cli.zoo_sweep_worker import Result, worker_main
from pytest_graphbudget.errors import GraphBudgetError

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


# ---------------------------------------------------------------------------------------------
# Controller side: worker processes, one model at a time (the worker side is sweep_worker.py)


class Worker:
    """A worker process and a thread that forwards its result lines to a queue."""

    def __init__(self, stderr: Any) -> None:
        env = {**os.environ, **{k: v for k, v in OFFLINE_ENV.items() if k not in os.environ}}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pytest_graphbudget.cli.zoo_sweep", "--worker"],
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
# Command line

FAMILY_ORDER = ("torchvision", "huggingface", "ultralytics")
CORPUS_FAMILIES = ("timm", "diffusers")
"""Left out of the default sweep: ``make corpus`` profiles their every model (hours)."""
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_graphbudget.cli.zoo_sweep",
        description="Profile the models of the zoo and write a Markdown table.",
        allow_abbrev=False,  # as graph-budget's commands: --fam is no --family
    )
    parser.add_argument(
        "names", nargs="*", help="models to sweep (default: every name of the default families)"
    )
    parser.add_argument(
        "--family",
        action="append",
        help="only these families (repeatable; default: every family but "
        f"{' and '.join(CORPUS_FAMILIES)}, whose models `make corpus` sweeps)",
    )
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.worker:
        return worker_main()

    from pytest_graphbudget.zoo import find_loader, list_models

    if args.from_json is not None:
        results = [Result(**row) for row in json.loads(args.from_json.read_text())]
        total = sum(r.seconds for r in results)
        text = render(results, total_seconds=total, environment=environment())
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
        families = args.family or [f for f in catalogue if f not in CORPUS_FAMILIES]
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
    text = render(results, total_seconds=sum(r.seconds for r in results), environment=environment())
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
