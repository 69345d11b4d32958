"""Where ``measure`` runs a model (issue 26): ``device=`` / ``--device``, on any machine.

What needs a GPU is in ``test_cuda_device.py``; here: the one-line refusals (a device torch does
not know, CUDA asked for where ``torch.cuda.is_available()`` is False, a device without
``measure``), ``device="cpu"`` timing the caller's own module exactly as no device does (its
forward counts its calls: 3 warm-up + N timed), and a model moved elsewhere being a copy, its
inputs copies, the caller's untouched (shown with the meta device, the other device every
machine has).
"""

from __future__ import annotations

import json
import time

import pytest
import torch

from pytest_graphbudget import cli
from pytest_graphbudget.api import profile_model
from pytest_graphbudget.engine.profile import Runtime
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.modes.device import on_device
from pytest_graphbudget.modes.runtime import measure, rows

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")


class Counted(torch.nn.Module):
    """A linear layer whose forward counts its calls on the instance."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.fc(x)


def forwards_timed(device: str | None) -> tuple[int, Runtime]:
    """Calls of the caller's own module while it is timed 4 times (profiling may trace it
    too: the count before ``measure`` is subtracted by profiling once without it)."""
    plain = Counted()
    profile_model(plain, torch.randn(2, 8))
    model = Counted()
    prof = profile_model(model, torch.randn(2, 8), measure=4, device=device)
    return model.calls - plain.calls, prof.runtime


def test_device_cpu_times_the_callers_module_as_no_device_does():
    for device in (None, "cpu"):
        calls, runtime = forwards_timed(device)
        assert calls == 3 + 4  # 3 warm-up runs and 4 timed runs, on the module itself
        assert runtime.device == "cpu" and runtime.peak_measured_bytes is None


def test_a_model_moved_elsewhere_is_a_copy():
    model = torch.nn.Linear(8, 4)
    weight = model.weight.detach().clone()
    x = torch.randn(2, 8)
    moved, args, kwargs = on_device(model, (x,), {"y": x}, torch.device("meta"))
    assert moved is not model and moved.weight.device.type == "meta"
    assert args[0].device.type == "meta" and kwargs["y"].device.type == "meta"
    assert model.weight.device.type == "cpu" and torch.equal(model.weight, weight)
    assert x.device.type == "cpu"
    same = on_device(model, (x,), {}, torch.device("cpu"))
    assert same[0] is model and same[1][0] is x  # already there: nothing copied


@NO_CUDA
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_without_cuda_is_one_line(device):
    with pytest.raises(GraphBudgetError, match=r"torch.cuda.is_available\(\) is False"):
        profile_model(torch.nn.Linear(4, 4), torch.randn(1, 4), measure=1, device=device)


@pytest.mark.parametrize("device", ["gpu", "meta", "cuda:x", ""])
def test_a_device_that_cannot_run_it_is_one_line(device):
    with pytest.raises(GraphBudgetError, match="give cpu, cuda or cuda:N"):
        profile_model(torch.nn.Linear(4, 4), torch.randn(1, 4), measure=1, device=device)


def test_a_device_without_measure_is_refused():
    with pytest.raises(GraphBudgetError) as info:
        profile_model(torch.nn.Linear(4, 4), torch.randn(1, 4), device="cpu")
    assert str(info.value) == (
        "device='cpu' says where measure runs the model: add measure=True, or drop it"
    )


def cli_error(argv: list[str], capsys) -> str:
    """The one line ``graph-budget`` writes for ``argv``, which must exit 2."""
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    return err.strip()


@pytest.fixture
def tiny_file(tmp_path):
    path = tmp_path / "tiny.pt2"
    linear = torch.nn.Sequential(torch.nn.Linear(8, 4)).eval()
    torch.export.save(torch.export.export(linear, (torch.randn(3, 8),)), path)
    return str(path)


@NO_CUDA
def test_cli_device_cuda_without_cuda(tiny_file, capsys):
    line = cli_error(["profile", tiny_file, "--measure", "--device", "cuda"], capsys)
    assert line.endswith("--device cuda: torch.cuda.is_available() is False on this machine")


def test_cli_bad_device_and_device_without_measure(tiny_file, capsys):
    line = cli_error(["profile", tiny_file, "--measure", "--device", "tpu"], capsys)
    assert "--device tpu: not a device to measure on" in line
    line = cli_error(["profile", tiny_file, "--device", "cpu"], capsys)
    assert line.endswith(
        "--device cpu says where measure runs the model: add --measure, or drop it"
    )


def test_cli_device_cpu_measures_on_cpu(tiny_file, capsys):
    argv = ["profile", tiny_file, "--measure-runs", "2", "--device", "cpu", "--format", "json"]
    assert cli.main(argv) == 0
    runtime = json.loads(capsys.readouterr().out)["runtime"]
    assert (runtime["device"], runtime["runs"], runtime["peak_measured_bytes"]) == ("cpu", 2, None)


def test_the_measured_peak_reads_back_and_shows_only_where_measured():
    seconds = ("mean_s", "min_s", "median_s", "max_s", "throughput", "roofline_ratio")
    fields = {"device": "cuda:0", "threads": 1, "batch": 1, "runs": 1, "warmup": 3, "std_s": 0.0}
    fields.update(dict.fromkeys(seconds, 1.0))
    gpu = Runtime(
        **fields,
        peak_measured_bytes=3 * 2**20,
        cublas_workspace_bytes=33 * 2**20,
        conv_workspace_bytes=2**20,
    )
    assert Runtime.from_dict(json.loads(json.dumps(gpu.to_dict()))) == gpu
    shown = dict(rows(gpu, "generic"))
    assert shown["peak measured"].startswith("3")
    assert shown["workspaces"].startswith("cuBLAS 34.6MB, cuDNN 1.05MB (in the estimated peak")
    cpu = Runtime(**fields)
    assert "peak measured" not in dict(rows(cpu, "generic"))
    assert "workspaces" not in dict(rows(cpu, "generic"))
    old = {k: v for k, v in cpu.to_dict().items() if not k.endswith("_bytes")}
    assert Runtime.from_dict(old) == cpu  # JSON written before the field reads back


class Sleeps(torch.nn.Module):
    """A forward that waits 20 ms without computing: wall-clock time, no CPU time."""

    def forward(self, x):
        time.sleep(0.02)
        return x + 1


@pytest.mark.parametrize("threads", [1, 2])
def test_one_thread_is_timed_by_cpu_time_as_the_calibration_times_it(threads):
    # On one thread a loaded runner's other jobs added to the wall clock: resnet18 read 96 ms
    # beside three busy processes, 44 ms quiet; its CPU time 50 and 47.
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        runtime = measure(Sleeps(), (torch.zeros(1),), {}, 1e-6, runs=3, warmup=0)
    finally:
        torch.set_num_threads(before)
    if threads == 1:
        assert runtime.clock == "cpu" and runtime.min_s < 0.01
    else:
        assert runtime.clock == "wall" and runtime.min_s >= 0.02
    assert ("CPU time" if threads == 1 else "wall clock") in dict(rows(runtime, "generic"))[
        "latency"
    ]


def test_a_model_that_cannot_be_copied_is_one_line():
    class Holds(torch.nn.Linear):
        """A module holding a generator, which ``copy.deepcopy`` cannot copy."""

        def __init__(self) -> None:
            super().__init__(2, 2)
            self.pending = (n for n in range(3))

    with pytest.raises(GraphBudgetError, match="cannot copy the model to meta: TypeError"):
        on_device(Holds(), (torch.randn(1, 2),), {}, torch.device("meta"))
