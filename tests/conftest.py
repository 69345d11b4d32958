"""Shared helpers for the test suite.

Nothing here imports torch (or anything heavy) at module level: some tests check that importing
``pytest_graphbudget`` does not import torch, and a conftest that imported it first would make
those tests meaningless. Every helper imports what it needs when it is called.

The helpers read *independent references* (torchvision's published metadata, the comments
ultralytics ships in its model YAMLs, PyTorch's own FLOP counter). They never compute anything
with pytest-graphbudget itself.
"""

from __future__ import annotations

import contextlib
import functools
import re
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

# --------------------------------------------------------------------------------------------
# Relative tolerance helper


def rel_err(got: float, expected: float) -> float:
    """|got - expected| / |expected| (expected must be non-zero)."""
    assert expected != 0, "a reference of zero cannot anchor a relative comparison"
    return abs(got - expected) / abs(expected)


# --------------------------------------------------------------------------------------------
# torchvision's published metadata


@dataclass(frozen=True)
class TorchvisionReference:
    name: str
    gmacs: float  # meta["_ops"]: GMACs of contraction ops at the weights' eval size
    num_params: int  # meta["num_params"]

    @property
    def macs(self) -> float:
        return self.gmacs * 1e9


def torchvision_reference(name: str) -> TorchvisionReference:
    """The MACs and parameter count torchvision publishes for ``name``'s default weights.

    Read from the weights' metadata, which ships inside torchvision: no download happens.
    """
    import torchvision

    meta = torchvision.models.get_model_weights(name).DEFAULT.meta
    return TorchvisionReference(name, float(meta["_ops"]), int(meta["num_params"]))


# --------------------------------------------------------------------------------------------
# ultralytics' YAML summary comments


@dataclass(frozen=True)
class YoloYamlSummary:
    yaml_file: Path
    scale: str
    layers: int
    parameters: int
    gradients: int
    gflops: float  # thop's MACs * 2 (ultralytics reports "GFLOPs" = 2 * thop count)
    line: str


_SUMMARY = re.compile(
    r"^\s*(?P<scale>[nslmx])\s*:\s*\[[^\]]*\]\s*#.*?summary:\s*"
    r"(?P<layers>[\d,]+)\s+layers,\s*(?P<params>[\d,]+)\s+parameters,\s*"
    r"(?P<grads>[\d,]+)\s+gradients,\s*(?P<gflops>[\d.]+)\s+GFLOPs",
    re.IGNORECASE,
)


def ultralytics_yaml_path(model_yaml: str) -> Path:
    """The YAML file inside the installed ultralytics package that ``model_yaml`` resolves to.

    ultralytics maps a scaled name to its family file by dropping the scale letter after the
    version digits (``yolov8n.yaml`` -> ``yolov8.yaml``, ``yolo11n.yaml`` -> ``yolo11.yaml``;
    ``ultralytics.nn.tasks.yaml_model_load``) and picks the scale with
    ``guess_model_scale`` (``re.search(r"yolo(e-)?[v]?\\d+([nslmx])", stem)``). We repeat that
    mapping here on the package directory, so nothing is searched for elsewhere or downloaded.
    """
    import ultralytics

    family = re.sub(r"(\d+)([nslmx])(.+)?$", r"\1\3", Path(model_yaml).stem) + ".yaml"
    root = Path(ultralytics.__file__).parent / "cfg" / "models"
    hits = sorted(root.rglob(family))
    assert len(hits) == 1, f"expected one {family} under {root}, found {hits}"
    return hits[0]


def ultralytics_scale(model_yaml: str) -> str:
    """The scale letter ultralytics selects for ``model_yaml`` (its own regex, repeated)."""
    match = re.search(r"yolo(e-)?[v]?\d+([nslmx])", Path(model_yaml).stem)
    assert match, f"no scale letter in {model_yaml}"
    return match.group(2)


def ultralytics_yaml_summary(model_yaml: str) -> YoloYamlSummary:
    """Parse the summary comment on the ``scales:`` line of ``model_yaml``'s scale.

    For example, in ``cfg/models/v8/yolov8.yaml``::

        n: [0.33, 0.25, 1024] # YOLOv8n summary: 129 layers, 3157200 parameters, ...8.9 GFLOPS
    """
    path = ultralytics_yaml_path(model_yaml)
    scale = ultralytics_scale(model_yaml)
    for line in path.read_text().splitlines():
        match = _SUMMARY.match(line)
        if match and match["scale"] == scale:
            return YoloYamlSummary(
                yaml_file=path,
                scale=scale,
                # YOLO12 and YOLO26 write thousands separators: 2,602,288 parameters
                layers=int(match["layers"].replace(",", "")),
                parameters=int(match["params"].replace(",", "")),
                gradients=int(match["grads"].replace(",", "")),
                gflops=float(match["gflops"]),
                line=line.strip(),
            )
    raise AssertionError(f"no summary comment for scale {scale!r} in {path}")


# --------------------------------------------------------------------------------------------
# PyTorch's own FLOP counter (an independent reference for contraction ops)


def flop_counter(model, inputs=(), kwargs=None):
    """Per-op FLOP counts from ``torch.utils.flop_counter.FlopCounterMode``.

    Runs one real forward in eval mode without gradients, the way pytest-graphbudget's warm-up
    does, and returns ``{op name: flops}`` (e.g. ``{"aten.convolution": ..., "aten.addmm": ...}``).
    FlopCounterMode counts 2 FLOPs per MAC, contractions only; it has no formula for CPU
    flash attention, the MultiheadAttention fast path or recurrent layers.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model.eval()
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(*inputs, **(kwargs or {}))
    counts = counter.get_flop_counts().get("Global", {})  # absent when nothing was counted
    return {str(op): int(n) for op, n in counts.items()}


def eager_aten_ops(model, inputs=(), kwargs=None) -> set[str]:
    """Names of the ATen ops one eager forward (eval, no grad) dispatches, e.g.
    ``{"aten._native_multi_head_attention.default", ...}``: lets a test check that the case it
    builds is the code path it claims to test (a fused fast path, a CPU kernel)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[str] = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(str(func))
            return func(*args, **(kwargs or {}))

    model.eval()
    with torch.no_grad(), Record():
        model(*inputs, **(kwargs or {}))
    return seen


# --------------------------------------------------------------------------------------------
# Network guard


class NetworkAttempts(list):
    """Every attempt to open a network connection or resolve a host while the guard is on."""


def refuse_network(monkeypatch: pytest.MonkeyPatch) -> NetworkAttempts:
    """Refuse and record every outbound connection and DNS lookup until ``monkeypatch`` is
    undone (``pytest.MonkeyPatch.context()`` in a module-scoped fixture)."""
    attempts = NetworkAttempts()

    def refuse(what):
        def _refuse(*args, **kwargs):
            attempts.append((what, args[1:] if what.startswith("socket.") else args))
            raise OSError(f"network disabled in tests ({what})")

        return _refuse

    monkeypatch.setattr(socket.socket, "connect", refuse("socket.connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("socket.connect_ex"))
    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    monkeypatch.setattr(socket, "create_connection", refuse("create_connection"))
    return attempts


@pytest.fixture
def no_network(monkeypatch):
    """Refuse and record every outbound connection and DNS lookup.

    Code under test that quietly catches the error would hide the attempt, so the attempts are
    recorded as well: assert the returned list is empty at the end of the test.
    """
    return refuse_network(monkeypatch)


# --------------------------------------------------------------------------------------------
# Bytecode: cached for the package, never for a test's scratch project


@pytest.fixture(autouse=True)
def _no_bytecode_for_scratch_files(monkeypatch):
    """Write no ``.pyc`` while a test runs, here or in the processes it starts.

    ``make test`` turns bytecode caches on, so the package and the test files compile once, not
    once per process. A test that rewrites a scratch module (``HIDDEN = 32`` to ``48``) within
    the second it was imported, at the same size, would otherwise import the stale cache: a
    timestamp ``.pyc`` is checked by whole seconds and size. Caches already written are still
    read."""
    import sys

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module's tests (``pytestmark = pytest.mark.usefixtures(
    "one_thread")``): a measured CPU peak holds oneDNN's per-thread scratch."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def avx512() -> bool:
    """Whether this CPU runs oneDNN's AVX-512 kernels: the peaks' workspaces are modelled on
    them (``costs/workspace.py``), and its AVX2 ones hold other buffers (a resnet18 step on
    one thread: 72.2 MB measured on an AVX2 EPYC, 49.3 MB estimated and within 10% of it on
    an AVX-512 one)."""
    import torch

    return torch.backends.cpu.get_cpu_capability() == "AVX512"  # "AVX2", "DEFAULT" below


@functools.cache
def half_kernels_modelled() -> str | None:
    """Why this CPU's bfloat16 and float16 kernels are not those the peaks model, or None: an
    AVX-512 CPU with BF16 instructions and without AMX (oneDNN's AMX kernels take other
    buffers) or FP16 ones (with them float16 convolutions run on oneDNN, not the slow path)."""
    import torch

    if not avx512():
        return "this CPU has no AVX-512"
    flags = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if "avx512_bf16" not in flags:
        return "this CPU has no AVX-512 BF16 instructions (or no /proc/cpuinfo says so)"
    fp16 = getattr(torch.ops.mkldnn, "_is_mkldnn_fp16_supported", lambda: False)()
    if "amx_bf16" in flags or fp16:
        return "this CPU has AMX or FP16 instructions, whose oneDNN kernels take other buffers"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``onednn_avx512`` (its measured CPU peak holds oneDNN's convolution
    buffers) is skipped, saying why, on a CPU without AVX-512; one marked ``onednn_bf16``, on
    a CPU whose 16-bit kernels are not the modelled ones."""
    if item.get_closest_marker("onednn_avx512") is not None and not avx512():
        pytest.skip(
            "measures oneDNN's AVX-512 convolution buffers, which the peak is modelled on "
            "(costs/workspace.py); this CPU has no AVX-512, so oneDNN runs other kernels"
        )
    if item.get_closest_marker("onednn_bf16") is not None and half_kernels_modelled():
        pytest.skip(f"measures the modelled CPU's 16-bit kernels; {half_kernels_modelled()}")


# --------------------------------------------------------------------------------------------
# The helpers above as fixtures (session scope, so module-scoped fixtures can use them too)


@pytest.fixture(scope="session", name="rel_err")
def _rel_err_fixture():
    return rel_err


@pytest.fixture(scope="session", name="torchvision_reference")
def _torchvision_reference_fixture():
    return torchvision_reference


@pytest.fixture(scope="session", name="ultralytics_yaml_summary")
def _ultralytics_yaml_summary_fixture():
    return ultralytics_yaml_summary


@pytest.fixture(scope="session", name="eager_aten_ops")
def _eager_aten_ops_fixture():
    return eager_aten_ops


@pytest.fixture(scope="session", name="flop_counter")
def _flop_counter_fixture():
    return flop_counter


@pytest.fixture(scope="session", name="refuse_network")
def _refuse_network_fixture():
    return refuse_network


# --------------------------------------------------------------------------------------------
# In-process pytester that keeps torch loaded


def _forgets_only(project: Path, snapshot_class: type) -> type:
    """A ``SysModulesSnapshot`` that forgets only the modules loaded from ``project``.

    pytester's in-process runs drop every module imported during the run, so the next run imports
    torch's lazily loaded parts (and their C extensions) a second time, which crashes the
    interpreter. Libraries stay loaded; the project's own ``conftest`` and test modules are still
    forgotten, so each run sees the files its test wrote.
    """
    import sys

    def is_library(name: str) -> bool:
        path = getattr(sys.modules.get(name), "__file__", None) or ""
        return not path.startswith(str(project))

    class KeepLibraries(snapshot_class):
        def __init__(self, preserve=None):
            super().__init__(preserve=is_library)

    return KeepLibraries


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    import _pytest.pytester

    snapshot = _forgets_only(pytester.path, _pytest.pytester.SysModulesSnapshot)
    monkeypatch.setattr(_pytest.pytester, "SysModulesSnapshot", snapshot)
    pytester._sys_modules_snapshot = snapshot()  # the one restored when the test ends
    return pytester


# --------------------------------------------------------------------------------------------
# Older transformers: the compat rows below torch 2.6 run transformers 4.57 (benchmarks/compat.py)


def transformers_major() -> int | None:
    """The installed transformers' major release (None: not installed)."""
    from importlib import metadata

    try:
        return int(metadata.version("transformers").split(".")[0])
    except metadata.PackageNotFoundError:
        return None


def skip_before_transformers_5(reason: str) -> None:
    """Skip, saying ``reason``, where transformers 4.x builds the model under test: its code
    differs from 5's in what the test relies on (docs/compat.md lists the figures it moves)."""
    from importlib import metadata

    major = transformers_major()
    if major is None:
        pytest.skip("transformers is not installed")
    if major < 5:
        pytest.skip(f"transformers {metadata.version('transformers')}: {reason}")


# --------------------------------------------------------------------------------------------
# Tests measured slow: `make test` leaves them to `make test-slow`

SLOW_TESTS = Path(__file__).with_name("slow_tests.txt")


@functools.cache
def slow_tests() -> frozenset[str]:
    """The node ids ``slow_tests.txt`` lists (measured slow, not marked in their files)."""
    lines = SLOW_TESTS.read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def pytest_itemcollected(item: pytest.Item) -> None:
    """A test ``slow_tests.txt`` lists is marked ``slow``, before ``-m`` selects."""
    if item.nodeid in slow_tests():
        item.add_marker(pytest.mark.slow)


# --------------------------------------------------------------------------------------------
# The order xdist hands files out in

LONGEST_FIRST = (
    "tests/modes/test_parallel.py",  # a gloo run of two ranks
    "tests/test_examples.py",  # the example project's suite, in a subprocess
    "tests/cli/test_zoo_sweep.py",  # worker processes, one waits out a hang
    "tests/pytest_plugin/test_base_ref.py",  # each test profiles a git base in a subprocess
    "tests/pytest_plugin/test_base_imports.py",
    "tests/engine/test_breaks.py",  # a detector through Dynamo's graph breaks
    "tests/pytest_plugin/test_plugin.py",
    "tests/test_workflows.py",
)
"""Files that take longest, collected first: ``make test`` (``--dist worksteal``) starts each
worker on its half of the collection order and lets one that runs dry take from the end of
the other's, so slow tests collected last kept one worker busy alone (under ``--dist
loadfile`` the suite's wall time moved by 20 s from run to run), while quick ones at the end
even the two out. The order within each file, and of the rest, is kept."""


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}

    def first(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return rank.get(path, len(rank))

    items.sort(key=first)  # stable: each file's items stay together, in their order


def skip_detr_without_timm(name: str = "facebook/detr-resnet-50") -> None:
    """transformers 4 (torch 2.4 and 2.5) builds DETR's backbone with timm, which the core
    environments lack: loading it is then a one-line error naming timm. transformers 5 builds
    the backbone itself."""
    import importlib.util

    major = transformers_major()
    if "detr" in name and major is not None and major < 5 and not importlib.util.find_spec("timm"):
        pytest.skip("transformers 4 builds DETR's backbone with timm, which is not installed")


def ultralytics_safe_load() -> bool:
    """Whether ultralytics can load a checkpoint with weights_only safety on this torch: its
    safe loader needs ``torch.serialization.get_unsafe_globals_in_checkpoint`` (2.5 on)."""
    import torch

    return hasattr(torch.serialization, "get_unsafe_globals_in_checkpoint")
