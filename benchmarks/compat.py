"""``make compat``: the package on every torch release from the floor up, and every Python.

One cached virtual environment per row of ``matrix()`` (a torch release with its torchvision,
on one Python), built with uv from the registry and kept under ``$GRAPHBUDGET_COMPAT_DIR``
(default ``~/.cache/pytest-graphbudget/compat``): the torch pair, the package's extras and
``constraints.txt`` less its torch and CUDA lines, so that every row runs the same ultralytics
and pytest as the pinned one, and the same transformers from torch 2.6 up (below it, the last
transformers that runs there: ``OLDER``), and a difference in figures is torch's. A row is
rebuilt only when what it was built from changes (a stamp file). In each row the golden figures
(``tests/test_golden.py``) and the core tests run, the package installed from this checkout;
the table goes to ``benchmarks/COMPAT_RESULTS.md`` (version, Python, result, seconds).

    python benchmarks/compat.py                    # every row
    python benchmarks/compat.py --torch 2.4 2.15   # some torch releases (on Python 3.11)
    python benchmarks/compat.py --python 3.13      # the pinned torch on one Python
    python benchmarks/compat.py --torch 2.4 2.9 2.15 --no-write   # what .ci/run does
    python benchmarks/compat.py --env 2.4          # print the row's python (build it first)

uv ignores pip's configuration (the cap on torch these machines' pip has) and hard-links the
files of a package that several rows share, such as the CUDA libraries of the pinned torch under
four Pythons. torch's wheels on the registry are CUDA builds: each row runs on the CPU.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from notes import save_results  # benchmarks/notes.py

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "COMPAT_RESULTS.md"
PINNED_PYTHON = "3.11"

# Each torch minor release from pyproject's floor to the newest, with the torchvision that runs on
# it (None: none released yet, so vision and YOLO tests skip in that row). torchvision 0.29.2 is
# the first built on torch's stable C ABI (its ops are ``_C_stable.so``, its wheel py3-none): it
# loads on torch 2.14 and on 2.15, for which no torchvision of its own is out yet.
TORCH = {
    "2.4": ("2.4.1", "0.19.1"),
    "2.5": ("2.5.1", "0.20.1"),
    "2.6": ("2.6.0", "0.21.0"),
    "2.7": ("2.7.1", "0.22.1"),
    "2.8": ("2.8.0", "0.23.0"),
    "2.9": ("2.9.1", "0.24.1"),
    "2.10": ("2.10.0", "0.25.0"),
    "2.11": ("2.11.0", "0.26.0"),
    "2.12": ("2.12.1", "0.27.1"),
    "2.13": ("2.13.0", "0.28.0"),
    "2.14": ("2.14.1", "0.29.1"),
    "2.15": ("2.15.0", "0.29.2"),
}
PINNED_TORCH = "2.14"
TORCH_FLOOR_ROW = next(iter(TORCH))
BELOW_FLOOR = "2.3.1"  # refused in one line (tests/test_below_floor.py)

# What a user of an older torch runs instead of a pin of constraints.txt: transformers 5 needs
# torch>=2.6, so the rows below it run the last 4.x release (and the hub client it takes).
OLDER = {"transformers": "4.57.6"}
OLDER_UNPINNED = ("transformers", "huggingface_hub", "huggingface-hub", "tokenizers")
ROWS_WITH_OLDER = ("2.4", "2.5")
PYTHONS = ("3.10", "3.11", "3.12", "3.13")

# The core tests: the engine, the formulas and the modes on small models, besides the golden
# figures. The plugin, gate and reports layers do not touch torch's internals.
GOLDEN = ["tests/test_golden.py"]
CORE = [
    "tests/test_compat.py",
    "tests/test_units.py",
    "tests/costs/test_registry.py",
    "tests/costs/test_small_modules.py",
    "tests/costs/test_losses.py",
    "tests/engine/test_trace.py",
    "tests/engine/test_taped_tier.py",
    "tests/engine/test_replay.py",
    "tests/engine/test_memory.py",
    "tests/engine/test_peak_measured.py",
    "tests/engine/test_profile.py",
    "tests/engine/test_lookups.py",
    "tests/engine/test_meta_tape.py",
    "tests/zoo/test_huggingface.py",  # example inputs against each release's transformers
    "tests/engine/test_reasons.py",
    "tests/costs/test_workspace.py",
    "tests/costs/test_quantized_ops.py",
    "tests/costs/test_gate_costs.py",
    "tests/modes/test_train.py",
    "tests/modes/test_decode.py",
    "tests/modes/test_dtype.py",
    "tests/modes/test_shape_sweep.py",
    "tests/gate/test_environment.py",
    "tests/pytest_plugin/test_plugin.py",
]


@dataclass(frozen=True)
class Row:
    torch: str  # the minor release, "2.4"
    python: str

    @property
    def pair(self) -> tuple[str, str | None]:
        return TORCH[self.torch]

    @property
    def name(self) -> str:
        return f"torch-{self.pair[0]}-py{self.python}"

    @property
    def path(self) -> Path:
        return compat_dir() / self.name

    @property
    def python_bin(self) -> Path:
        return self.path / "bin" / "python"


def matrix() -> list[Row]:
    """Every torch on the pinned Python, then the pinned torch on every other Python."""
    rows = [Row(t, PINNED_PYTHON) for t in TORCH]
    rows += [Row(PINNED_TORCH, p) for p in PYTHONS if p != PINNED_PYTHON]
    return rows


def compat_dir() -> Path:
    default = Path.home() / ".cache" / "pytest-graphbudget" / "compat"
    return Path(os.environ.get("GRAPHBUDGET_COMPAT_DIR", default))


def uv() -> str:
    """uv beside this Python (the dev extra installs it), else on PATH."""
    here = Path(sys.executable).parent / "uv"
    found = str(here) if here.exists() else shutil.which("uv")
    if not found:
        sys.exit("compat: uv is missing; run `make setup` (the dev extra installs it)")
    return found


def interpreter(version: str) -> str:
    """A CPython ``version``: pyenv's install of it, else pythonX.Y on PATH (setup-python's)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(pyenv.glob(f"{version}.*/bin/python{version}"), reverse=True)
    candidates += [Path(p) for p in [shutil.which(f"python{version}")] if p]
    for candidate in candidates:
        if _runs(str(candidate), version):
            return str(candidate)
    sys.exit(f"compat: no Python {version} found (under pyenv, or on PATH as python{version})")


def _runs(python: str, version: str) -> bool:
    out = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
    )
    return out.returncode == 0 and out.stdout.strip() == version


# torch, torchvision and what each torch release pins for itself (CUDA libraries, sympy...).
TORCH_OWN = (
    r"torch|torchvision|torchao|triton|nvidia-[\w-]+|cuda-[\w-]+|sympy|mpmath|networkx"
    r"|jinja2|markupsafe|fsspec|filelock|typing-extensions|typing_extensions|setuptools"
)


def constraints(row: Row) -> str:
    """constraints.txt less the lines of torch, torchvision and what a torch release pins."""
    own = TORCH_OWN + ("|" + "|".join(OLDER_UNPINNED) if row.torch in ROWS_WITH_OLDER else "")
    skip = re.compile(rf"^({own})\s*[=<>~;]", re.IGNORECASE)
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return "\n".join(line for line in lines if not skip.match(line)) + "\n"


def extras(row: Row) -> str:
    """No torchvision released for this torch: no vision, and no YOLO (ultralytics needs it)."""
    return "hf,vision,yolo,dev" if row.pair[1] else "hf,dev"


def requirements(row: Row) -> list[str]:
    torch, vision = row.pair
    older = [f"{k}=={v}" for k, v in OLDER.items()] if row.torch in ROWS_WITH_OLDER else []
    return [f"torch=={torch}"] + ([f"torchvision=={vision}"] if vision else []) + older


def stamp_of(row: Row) -> str:
    pyproject = (ROOT / "pyproject.toml").read_text()
    text = "\n".join([*requirements(row), extras(row), constraints(row), pyproject])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build(row: Row, log) -> None:
    """Create or refresh ``row``'s environment; the package is installed from this checkout."""
    stamp = row.path / ".stamp"
    env = {**os.environ, "VIRTUAL_ENV": str(row.path), "UV_LINK_MODE": "hardlink"}
    if not stamp.exists() or stamp.read_text() != stamp_of(row):
        if row.path.exists():
            shutil.rmtree(row.path)
        row.path.parent.mkdir(parents=True, exist_ok=True)
        _run([uv(), "venv", "-q", "--python", interpreter(row.python), str(row.path)], env, log)
        cons = row.path / "constraints.txt"
        cons.write_text(constraints(row))
        spec = f"{ROOT}[{extras(row)}]"
        _run([uv(), "pip", "install", "-q", "-c", str(cons), *requirements(row), spec], env, log)
        stamp.write_text(stamp_of(row))
    # The checkout, editable and without dependencies: seconds, and always this tree's code.
    _run([uv(), "pip", "install", "-q", "--no-deps", "-e", str(ROOT)], env, log)


def fresh_env(path: Path, *requirements: str, pip: bool = False) -> Path:
    """A new environment at ``path`` on the pinned Python with ``requirements`` (uv, files
    hard-linked from its cache); ``pip``: with pip in it, to install as a user does. Its python."""
    seed = ["--seed"] if pip else []
    cmd = [uv(), "venv", "-q", *seed, "--python", interpreter(PINNED_PYTHON), str(path)]
    subprocess.run(cmd, check=True, capture_output=True)
    env = {**os.environ, "VIRTUAL_ENV": str(path), "UV_LINK_MODE": "hardlink"}
    if requirements:
        done = subprocess.run(
            [uv(), "pip", "install", "-q", *requirements], env=env, capture_output=True, text=True
        )
        if done.returncode:
            raise RuntimeError(f"uv pip install {' '.join(requirements)}: {done.stderr.strip()}")
    return path / "bin" / "python"


def _run(cmd: list[str], env: dict, log) -> None:
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    done = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        raise RuntimeError(f"{cmd[0]} {cmd[1]} {cmd[2]} exited {done.returncode}")


@dataclass
class Result:
    row: Row
    outcome: str  # pytest's closing counts, or why the row could not run
    ok: bool
    seconds: float
    versions: str = ""


def run(row: Row, tests: list[str], log) -> Result:
    start = time.monotonic()
    try:
        build(row, log)
    except RuntimeError as exc:
        return Result(row, f"environment failed: {exc}", False, time.monotonic() - start)
    built = time.monotonic()
    env = {**os.environ, "VIRTUAL_ENV": str(row.path)}
    env.pop("PYTHONPATH", None)
    cmd = [str(row.python_bin), "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    log.write(done.stdout + done.stderr)
    counts = _closing(done.stdout)
    versions = subprocess.run(
        [str(row.python_bin), "-c", _VERSIONS], capture_output=True, text=True
    ).stdout.strip()
    return Result(row, counts, done.returncode == 0, time.monotonic() - built, versions)


_VERSIONS = (
    "import importlib.metadata as m\n"
    "names = ('torch', 'torchvision', 'transformers', 'ultralytics')\n"
    "def v(n):\n"
    "    try: return m.version(n)\n"
    "    except m.PackageNotFoundError: return '-'\n"
    "print(' '.join(f'{n} {v(n)}' for n in names))"
)


def _closing(stdout: str) -> str:
    lines = [
        line.strip("= ")
        for line in stdout.splitlines()
        if re.search(r"\d+ (passed|failed|error)", line)
    ]
    return lines[-1] if lines else "no pytest summary (see the log)"


def table(results: list[Result], tests: list[str]) -> str:
    head = [
        "# Compatibility matrix",
        "",
        "Written by `make compat` (`benchmarks/compat.py`): one environment per row, the torch",
        "pair from the registry (CUDA wheels, run on the CPU) and every other package at",
        "`constraints.txt`'s pins (below torch 2.6, the newest transformers that runs there).",
        "Skips say why (a tier or a package a release lacks: docs/compat.md); the golden",
        "figures' differences are listed in `tests/golden/differences.toml`. Seconds are the",
        "tests' own (the environment is cached), on this 2-core machine. Tests run in each row:",
        "",
        ", ".join(f"`{t}`" for t in tests),
        "",
        "| torch | torchvision | transformers | ultralytics | Python | result | tests | seconds |",
        "| --- | --- | --- | --- | --- | --- | --- | ---: |",
    ]
    body = []
    for r in results:
        found = dict(zip(r.versions.split()[::2], r.versions.split()[1::2], strict=True))
        torch, vision = r.row.pair
        verdict = "pass" if r.ok else "**FAIL**"
        cells = [
            torch,
            vision or "none released",
            found.get("transformers", "?"),
            "not installed" if found.get("ultralytics") == "-" else found.get("ultralytics", "?"),
            r.row.python,
            verdict,
            r.outcome,
            f"{r.seconds:.0f}",
        ]
        body.append("| " + " | ".join(cells) + " |")
    return "\n".join(head + body) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", nargs="+", choices=list(TORCH), help="torch minor releases")
    parser.add_argument("--python", nargs="+", choices=PYTHONS, help="Pythons (pinned torch)")
    parser.add_argument("--golden-only", action="store_true", help="only the golden figures")
    parser.add_argument("--build-only", action="store_true", help="build, run nothing")
    parser.add_argument("--no-write", action="store_true", help="leave COMPAT_RESULTS.md alone")
    parser.add_argument("--env", choices=list(TORCH), help="print that row's python and exit")
    parser.add_argument("tests", nargs="*", help="test paths instead of the golden and core sets")
    args = parser.parse_args(argv)

    if args.env:
        print(Row(args.env, PINNED_PYTHON).python_bin)
        return 0
    rows = matrix()
    if args.torch or args.python:
        wanted_torch = set(args.torch or ())
        wanted_python = set(args.python or ())
        rows = [
            r
            for r in rows
            if (r.torch in wanted_torch and r.python == PINNED_PYTHON)
            or (r.python in wanted_python and r.torch == PINNED_TORCH)
        ]
    tests = args.tests or (GOLDEN if args.golden_only else GOLDEN + CORE)
    logs = compat_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results = []
    for row in rows:
        with open(logs / f"{row.name}.log", "w") as log:
            if args.build_only:
                start = time.monotonic()
                try:
                    build(row, log)
                    print(f"{row.name}: built in {time.monotonic() - start:.0f} s", flush=True)
                except RuntimeError as exc:
                    print(f"{row.name}: {exc} (log: {log.name})", flush=True)
                continue
            result = run(row, tests, log)
        results.append(result)
        state = "ok" if result.ok else "FAILED"
        print(f"{row.name}: {state}, {result.outcome}, {result.seconds:.0f} s", flush=True)
        if not result.ok:
            print(f"  log: {logs / (row.name + '.log')}", flush=True)
    if results and not args.no_write:
        partial = len(rows) < len(matrix()) or bool(args.tests) or args.golden_only
        save_results(RESULTS, table(results, tests), partial=partial)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
