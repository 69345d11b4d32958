"""Issue 35's corpus as a benchmark: every timm architecture, every transformers model type that
builds from its default configuration, and diffusers' UNets, VAEs and transformers, each
profiled by ``profile_model`` beside one ``FlopCounterMode`` forward (``make corpus``).

For each model, in one worker process: the model built without weights (on the meta device
above ``--threshold`` parameters), then our MACs, FLOPs, parameters and tier beside
FlopCounterMode's (under ``no_grad``, SDPA forced to the math backend), their agreement, and
both timed warm (one call each, then ``--repeats`` alternating pairs, medians); see
``corpus_measure.py`` for the row and ``corpus_models.py`` for how each family is built. A
model that hangs past ``--timeout`` or kills its worker is a row with that reason, and a fresh
worker takes the next one.

Rows are appended to a JSON-lines file (``benchmarks/data/corpus.jsonl``, committed with the
page it renders, so that a later run of a few models adds to it) as they come, so a
long run can be stopped and continued: a model already in the file is skipped (``--fresh``
starts the file again, ``--retry-failed`` measures the failed, timed-out and crashed ones
again, and names given with ``--models`` are always measured again; the last row counts).
``docs/corpus.md`` is rendered from the whole file (``corpus_render.py``), keeping its hand
notes, and the figures of a family the file has no row of (a run of ``--family hf`` alone).

    python benchmarks/corpus.py                                  # everything (hours)
    python benchmarks/corpus.py --family timm --sample 30        # 30 names spread over timm
    python benchmarks/corpus.py --family hf --limit 10 --jobs 2
    python benchmarks/corpus.py --models resnet18,bert,UNet2DModel
    python benchmarks/corpus.py --render-only
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from corpus_models import FAMILIES, THRESHOLD, names, one_line  # benchmarks/
from corpus_render import read_rows, render
from notes import write_keeping_notes

from pytest_graphbudget.cli.zoo_sweep import OFFLINE_ENV  # what make zoo runs offline with

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
JSONL = HERE / "data" / "corpus.jsonl"
DOC = ROOT / "docs" / "corpus.md"
DEFAULT_TIMEOUT = 600.0
STARTUP_TIMEOUT = 600.0
MODELS_PER_WORKER = 25  # a fresh worker now and then keeps memory from piling up
RETRIED = {"failed", "timeout", "crashed"}


# ---------------------------------------------------------------------------------------------
# Controller side: worker processes, one model at a time each


class Worker:
    """A worker process (``corpus.py --worker``) and a thread forwarding its result lines."""

    def __init__(self, args: argparse.Namespace, log: Any) -> None:
        env = {**os.environ, **{k: v for k, v in OFFLINE_ENV.items() if k not in os.environ}}
        command = [sys.executable, __file__, "--worker", "--repeats", str(args.repeats)]
        command += ["--threshold", str(args.threshold)]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.done = 0
        threading.Thread(target=self._read, daemon=True).start()
        try:  # imports and a first tiny profile, never timed against the first model
            ready = self.lines.get(timeout=STARTUP_TIMEOUT)
        except queue.Empty:
            ready = None
        if ready is None:
            self.stop()
            raise RuntimeError(f"the corpus worker did not start; see {log.name}")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)  # the worker exited or died

    def run(self, family: str, name: str, timeout: float) -> dict:
        row: dict[str, Any] = {"family": family, "name": name}
        assert self.process.stdin is not None
        start = time.perf_counter()
        try:
            self.process.stdin.write(json.dumps(row) + "\n")
            self.process.stdin.flush()
            line = self.lines.get(timeout=timeout)
        except (BrokenPipeError, OSError):
            line = None
        except queue.Empty:
            self.stop()
            reason = f"timed out after {timeout:g} s"
            return {**row, "status": "timeout", "reason": reason, "seconds": timeout}
        seconds = round(time.perf_counter() - start, 3)
        if line is None:
            code = self.process.wait()
            reason = f"the worker died (exit code {code}), e.g. out of memory"
            return {**row, "status": "crashed", "reason": reason, "seconds": seconds}
        self.done += 1
        return {**json.loads(line), "seconds": seconds}

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def run_all(todo: list[tuple[str, str]], args: argparse.Namespace, path: Path) -> None:
    """Measure ``todo`` on ``args.jobs`` workers, appending each row to ``path`` as it comes."""
    pending: queue.Queue[tuple[int, str, str]] = queue.Queue()
    for index, (family, name) in enumerate(todo, 1):
        pending.put((index, family, name))
    lock = threading.Lock()
    path.parent.mkdir(parents=True, exist_ok=True)

    def drain(log: Any) -> None:
        worker: Worker | None = None
        try:
            while True:
                try:
                    index, family, name = pending.get_nowait()
                except queue.Empty:
                    return
                if worker is None or not worker.alive() or worker.done >= MODELS_PER_WORKER:
                    if worker is not None:
                        worker.stop()
                    worker = Worker(args, log)
                row = {"kind": "model", **worker.run(family, name, args.timeout)}
                with lock, path.open("a") as out:
                    out.write(json.dumps(row) + "\n")
                    print(f"[{index}/{len(todo)}] {progress(row)}", file=sys.stderr, flush=True)
        finally:
            if worker is not None:
                worker.stop()

    with path.with_name(path.stem + "-workers.log").open("a") as log:  # what the models print
        threads = [threading.Thread(target=drain, args=(log,)) for _ in range(args.jobs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def progress(row: dict) -> str:
    head = f"{row['family']} {row['name']}: {row['status']}"
    if row["status"] != "ok":
        return f"{head} ({row.get('reason', '')})"
    ratio = row.get("ratio")
    timing = f", {ratio:.2f}x" if ratio is not None else ""
    return f"{head} {row['tier']}, {row['agreement']}{timing} ({row.get('seconds', 0):.1f} s)"


# ---------------------------------------------------------------------------------------------
# Worker side


def worker_main(repeats: int, threshold: int) -> int:
    """Read ``{"family", "name"}`` lines on stdin, answer each with its row on stdout; what
    the models print goes to stderr."""
    results = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import torch
    from corpus_measure import measure, reference_flops

    from pytest_graphbudget import profile_model

    tiny = torch.nn.Linear(2, 2)  # imports and first-call costs, paid before any model
    profile_model(tiny, (torch.ones(1, 2),))
    reference_flops(tiny, (torch.ones(1, 2),), {})
    results.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if line.strip():
            request = json.loads(line)
            family, name = request["family"], request["name"]
            try:
                row = measure(family, name, repeats=repeats, threshold=threshold)
            except Exception as exc:  # the harness's own failure: a row, not a dead worker
                row = {**request, "status": "failed", "reason": f"harness: {one_line(exc)}"}
            results.write(json.dumps(row) + "\n")
    return 0


# ---------------------------------------------------------------------------------------------
# Command line


def select(args: argparse.Namespace) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """``(family, name)`` to measure, and how many names each family lists."""
    families = [f.strip() for f in args.family.split(",") if f.strip()]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise SystemExit(f"error: unknown family {', '.join(unknown)}; known: {FAMILIES}")
    listed = {family: names(family) for family in families}
    if args.models:
        chosen = []
        for name in (n.strip() for n in args.models.split(",") if n.strip()):
            family, _, bare = name.partition(":")
            if family in listed:  # hf:bert
                chosen.append((family, bare))
                continue
            owners = [f for f in families if name in listed[f]]
            if not owners:
                raise SystemExit(f"error: {name} is not a name of {', '.join(families)}")
            chosen.append((owners[0], name))
        return chosen, {f: len(n) for f, n in listed.items()}
    chosen = []
    for family, found in listed.items():
        if args.sample:
            step = max(len(found) / args.sample, 1.0)
            found = [found[int(i * step + step / 2)] for i in range(min(args.sample, len(found)))]
        if args.limit:
            found = found[: args.limit]
        chosen += [(family, name) for name in found]
    return chosen, {f: len(n) for f, n in listed.items()}


def environment(args: argparse.Namespace, listed: dict[str, int], todo: int) -> dict:
    """What this run was: versions, machine, load, the options; one line of the file."""
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for dist in ("torch", "timm", "transformers", "diffusers", "pytest-graphbudget"):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            versions[dist] = None
    return {
        "kind": "run",
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "versions": versions,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} logical CPUs, {platform.system()}",
        "processor": _processor(),
        "load": round(os.getloadavg()[0], 2),
        "listed": listed,
        "measured": todo,
        "options": {k: getattr(args, k) for k in ("repeats", "threshold", "timeout", "jobs")},
        "argv": sys.argv[1:],
    }


def _processor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default=",".join(FAMILIES), help="timm,hf,diffusers")
    parser.add_argument("--models", help="these names, measured again (hf:bert names a family)")
    parser.add_argument("--limit", type=int, help="the first N names of each family")
    parser.add_argument("--sample", type=int, help="N names of each family, spread evenly")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes at once (1)")
    parser.add_argument("--repeats", type=int, default=3, help="timed pairs per model (3)")
    parser.add_argument("--threshold", type=int, default=THRESHOLD, help="meta above this")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="s per model")
    parser.add_argument("--out", type=Path, default=JSONL, help="the JSON-lines file")
    parser.add_argument("--doc", type=Path, default=DOC, help="the Markdown to render")
    parser.add_argument("--fresh", action="store_true", help="start the JSON-lines file again")
    parser.add_argument("--retry-failed", action="store_true", help="measure those again")
    parser.add_argument("--render-only", action="store_true", help="render, measure nothing")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.worker:
        return worker_main(args.repeats, args.threshold)
    if not args.render_only:
        todo, listed = select(args)
        if args.fresh and args.out.exists():
            args.out.unlink()
        kept = read_rows(args.out) if args.out.exists() else {}
        done = (
            set()
            if args.models
            else {  # names given are measured again
                key
                for key, row in kept.items()
                if not (args.retry_failed and row["status"] in RETRIED)
            }
        )
        todo = [key for key in todo if key not in done]
        print(f"{len(todo)} models to measure ({len(done)} already in {args.out})", file=sys.stderr)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as out:
            out.write(json.dumps(environment(args, listed, len(todo))) + "\n")
        run_all(todo, args, args.out)
    previous = args.doc.read_text() if args.doc.exists() else ""
    write_keeping_notes(args.doc, render(args.out, previous))
    print(f"wrote {args.doc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
