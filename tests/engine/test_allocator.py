"""GPU memory as the CUDA caching allocator counts it (``engine.allocator``, issue 36), on the
host: the rules of ``c10/cuda/CUDACachingAllocator.cpp`` and ``CublasHandlePool.cpp`` checked
against hand counts (no GPU asks; ``benchmarks/gpu_memory.py`` holds them to
``torch.cuda.max_memory_allocated()`` where one is lent)."""

from __future__ import annotations

import pytest
import torch

from pytest_graphbudget.engine.allocator import (
    CudaMemory,
    Simulator,
    cublas_workspace,
    round_size,
    segment_size,
)
from pytest_graphbudget.modes.device import allocator_peak

MIB = 2**20
HOPPER = CudaMemory.of((9, 0))  # cuBLAS 32 MiB, cuBLASLt 1 MiB
AMPERE = CudaMemory.of((8, 6))  # cuBLAS 8 MiB + 128 KiB


def test_a_block_is_a_multiple_of_512_bytes():
    assert round_size(1000) == 1024
    assert (round_size(1), round_size(512), round_size(513), round_size(0)) == (512, 512, 1024, 0)


def test_segments_follow_the_size_of_the_request():
    assert segment_size(512) == segment_size(MIB) == 2 * MIB  # the small pool's
    assert segment_size(MIB + 512) == segment_size(10 * MIB - 512) == 20 * MIB
    assert segment_size(10 * MIB) == 10 * MIB and segment_size(19 * MIB + 512) == 20 * MIB


def test_a_block_too_close_to_its_segment_is_counted_whole():
    sim = Simulator()
    sim.malloc(19 * MIB + MIB // 2)  # 19.5 MiB: a 20 MiB segment, 0.5 MiB left: no split
    assert (sim.allocated, sim.reserved) == (20 * MIB, 20 * MIB)
    other = Simulator()
    other.malloc(5 * MIB)  # a 20 MiB segment, 15 MiB left (over 1 MiB): split
    assert (other.allocated, other.reserved) == (5 * MIB, 20 * MIB)


def test_freed_blocks_merge_and_are_reused_best_fit():
    sim = Simulator()
    a, b = sim.malloc(1000), sim.malloc(1000)  # 1024 + 1024 of one 2 MiB small segment
    assert sim.allocated == 2048
    sim.free(a)
    sim.free(b)  # merges with a's block and the rest: the segment is one free block again
    assert sim.allocated == 0 and len(sim.segments[0]) == 1
    sim.malloc(MIB)  # fits there: no new segment
    assert (sim.allocated, sim.reserved, sim.peak) == (MIB, 2 * MIB, MIB)


def test_cublas_workspace_by_architecture_and_setting():
    assert cublas_workspace((9, 0)) == cublas_workspace((10, 0)) == 32 * MIB
    assert cublas_workspace((8, 0)) == 4096 * 1024 * 2 + 16 * 1024 * 8 == 8_519_680
    assert cublas_workspace((8, 0), ":4096:8") == 32 * MIB
    assert cublas_workspace((9, 0), ":16:8") == 131_072  # the deterministic setting
    assert CudaMemory.of((9, 0), None, "4096").cublaslt_bytes == 4 * MIB


def test_two_linear_layers_add_the_cublas_workspace_once():
    model = torch.nn.Sequential(torch.nn.Linear(16, 4), torch.nn.Linear(4, 4)).eval()
    found = allocator_peak(model, (torch.randn(2, 16),), {}, HOPPER)
    # weights 4x16x4 = 256 B, 16 B, 4x4x4 = 64 B, 16 B: 4 blocks of 512 = 2,048
    # input 2x16x4 = 128 B: 512; outputs 2x4x4 = 32 B each: 512 + 512 (the first is freed
    # after the second layer read it, when both were live)
    # cuBLAS: 32 MiB, its own 32 MiB segment (nothing left to split); cuBLASLt (addmm with a
    # bias): 1 MiB, from the small pool's segment (2 MiB less 3,584 B free): split
    assert found.peak_bytes == 2_048 + 512 + 512 + 512 + 32 * MIB + MIB
    assert found.cublas_bytes == 33 * MIB and found.conv_workspace_bytes == 0
    assert found.reserved_bytes == 2 * MIB + 32 * MIB
    # 8 MiB + 128 KiB on an Ampere card: a 20 MiB segment, split
    assert allocator_peak(model, (torch.randn(2, 16),), {}, AMPERE).peak_bytes == (
        2_048 + 1_536 + 8_519_680 + MIB
    )


def test_a_saved_program_is_counted_as_the_module_it_was_exported_from():
    # `graph-budget profile model.pt2 --measure --device cuda` failed on an H200: the module
    # ExportedProgram.module() unlifts refuses eval()
    model = torch.nn.Sequential(torch.nn.Linear(16, 4), torch.nn.Linear(4, 4)).eval()
    x = torch.randn(2, 16)
    unlifted = torch.export.export(model, (x,)).module()
    found = allocator_peak(unlifted, (x,), {}, HOPPER)
    # as the eager module above: 2,048 of weights, 512 input, two outputs, both workspaces
    assert found.peak_bytes == 2_048 + 512 + 512 + 512 + 32 * MIB + MIB


def test_a_convolution_holds_cudnns_layout_workspace_while_it_runs():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1)).eval()
    x = torch.randn(1, 3, 16, 16)
    found = allocator_peak(model, (x,), {}, HOPPER)
    # weights 8x3x3x3x4 = 864 B: 1,024; bias 32 B: 512; input 3x16x16x4 = 3,072 B;
    # output 8x16x16x4 = 8,192 B; workspace: input and output again in NHWC, 11,264 B
    assert found.conv_workspace_bytes == 3_072 + 8_192
    assert found.peak_bytes == 1_024 + 512 + 3_072 + 8_192 + 11_264
    assert found.cublas_bytes == 0  # no cuBLAS call: no workspace
    pascal = CudaMemory.of((6, 1))  # no tensor cores: no layout change
    assert allocator_peak(model, (x,), {}, pascal).peak_bytes == 1_024 + 512 + 3_072 + 8_192


def test_max_pool1d_writes_its_indices_on_cuda_while_it_runs():
    # The host's eager kernel writes no indices (``eager_kernels.eager_cpu_max_pool1d``); CUDA's
    # max_pool1d is max_pool1d_with_indices, whose int64 indices die with the call.
    model = torch.nn.MaxPool1d(2).eval()
    found = allocator_peak(model, (torch.randn(2, 16, 30),), {}, HOPPER)
    # input 2x16x30x4 = 3,840 B: 4,096; output 2x16x15x4 = 1,920 B: 2,048; indices 2x16x15x8
    # = 3,840 B: 4,096
    assert found.peak_bytes == 4_096 + 2_048 + 4_096


@pytest.mark.parametrize("dtype", ["float64"])
def test_a_convolution_cudnn_runs_without_tensor_cores_takes_no_layout_workspace(dtype):
    assert HOPPER.conv_workspace(3_072, 8_192, dtype) == 0


def two_linear() -> tuple[torch.nn.Module, torch.Tensor]:
    model = torch.nn.Sequential(torch.nn.Linear(16, 4), torch.nn.Linear(4, 4)).eval()
    return model, torch.randn(2, 16)


def test_a_profile_for_a_gpu_counts_its_memory_as_that_gpus_allocator_on_any_host():
    """A ``memory_max`` for the card a model ships to had been checked, on the CPU runner of
    a CI, against the host's figure: the tensors' own bytes, without the allocator's blocks or
    cuBLAS's workspace. A GPU's profile now counts it as that GPU's allocator would."""
    from pytest_graphbudget.api import profile_model

    model, x = two_linear()
    host = profile_model(model, x)  # generic: the tensors' own bytes
    # weights 256 + 16 + 64 + 16 B, input 128 B, both outputs (32 B each) live at the second
    assert host.peak_memory_bytes == 352 + 128 + 64 and host.cuda_memory is None
    h100 = profile_model(model, x, hardware="h100")  # compute capability 9.0
    # as test_two_linear_layers_add_the_cublas_workspace_once counts it by hand
    assert h100.peak_memory_bytes == 2_048 + 512 + 512 + 512 + 32 * MIB + MIB
    assert h100.cuda_memory == {
        "compute_capability": "9.0",
        "cublas_workspace_bytes": 33 * MIB,
        "conv_workspace_bytes": 0,
    }
    assert h100.weights_bytes == host.weights_bytes and h100.flops == host.flops
    t4 = profile_model(model, x, hardware="t4")  # 7.5: cuBLAS 8 MiB + 128 KiB
    assert t4.peak_memory_bytes == 2_048 + 1_536 + 8_519_680 + MIB


def test_a_gpu_profiles_peak_by_module_is_the_allocators_blocks_at_its_peak():
    """A baseline's split of a GPU profile's peak had come from the host's figures: the
    workspaces and block rounding landed in ``<root>`` ("grew most: <root> +9.28MB"), and a
    T4's split summed to more than its peak. Each layer now holds its blocks at the peak."""
    from pytest_graphbudget.api import profile_model
    from pytest_graphbudget.gate.baseline import entry_from

    model, x = two_linear()
    split = entry_from(profile_model(model, x, hardware="h100")).by_module["peak_memory_bytes"]
    # the first layer's output (512) and the workspaces its cuBLAS call set up (33 MiB), the
    # second's output (512), each with its own weights' bytes (272 and 80 B); the model's:
    # the input's block (512) and the weights' rounding to blocks (2,048 - 352)
    assert split == {"0": 272 + 512 + 33 * MIB, "1": 80 + 512, "<root>": 512 + 2_048 - 352}
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()).eval()
    t4 = profile_model(conv, torch.randn(1, 3, 16, 16), hardware="t4")
    split = entry_from(t4).by_module["peak_memory_bytes"]
    # at the convolution: its output (8,192) and cuDNN's layout copies (3,072 + 8,192) beside
    # its weights (864 + 32 B), and the input (3,072) and the weights' rounding (1,536 - 896)
    assert split == {"0": 896 + 8_192 + 11_264, "<root>": 3_072 + 1_536 - 896}
    assert sum(split.values()) == t4.peak_memory_bytes


def test_a_float8_weight_is_allocated_as_the_tensors_it_stores():
    # torchao's float8 weight is a tensor subclass with no storage of its own: a GPU profile
    # of dtype="float8_e4m3fn" had raised "Attempted to access the data pointer on an invalid
    # python storage"
    pytest.importorskip("torchao")
    from pytest_graphbudget.api import profile_model

    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    prof = profile_model(model, torch.randn(4, 64), hardware="h100", dtype="float8_e4m3fn")
    # weights: 64x64 float8 (4,096 B), 64 float32 row scales (256: 512), bias (256: 512);
    # input 4x64x4 = 1,024; the weight dequantized to float32 (16,384) as mm reads it, mm's
    # output (1,024) and cuBLAS's 32 MiB (mm and add: no cuBLASLt)
    assert prof.peak_memory_bytes == 4_096 + 512 + 512 + 1_024 + 16_384 + 1_024 + 32 * MIB


def test_a_gpu_profile_takes_its_familys_compute_capability_unless_it_gives_its_own():
    from pytest_graphbudget.hardware import from_table

    card = {"peak_tflops": {"float32": 40, "float16": 160}, "bandwidth_gbs": 900}
    assert from_table("mine", {**card, "family": "ada"}).compute_capability == (8, 9)
    assert from_table("mine", {**card, "family": "turing"}).compute_capability == (7, 5)
    own = {**card, "family": "ada", "compute_capability": "9.0"}
    assert from_table("mine", own).compute_capability == (9, 0)
    assert from_table("mine", {**card, "compute_capability": 8.0}).compute_capability == (8, 0)
    assert from_table("mine", card).compute_capability is None  # a roofline: maybe a CPU
    assert from_table("mine", {**card, "family": "cdna3"}).compute_capability is None


@pytest.mark.parametrize("value", [9, "sm_90", "90", "8.9.1", "2.0", True])
def test_a_compute_capability_not_written_major_dot_minor_is_refused(value):
    from pytest_graphbudget.errors import GraphBudgetError
    from pytest_graphbudget.hardware import from_table

    card = {"peak_tflops": {"float32": 40}, "bandwidth_gbs": 900, "compute_capability": value}
    with pytest.raises(GraphBudgetError, match=r'compute_capability must be .* as "major.minor"'):
        from_table("mine", card)


def test_memory_not_counted_by_a_gpus_allocator_says_so():
    """A GPU with no CUDA compute capability (the MI300X), and a training step, keep the
    host's figure, and the profile says so rather than pass it off as the card's."""
    from pytest_graphbudget.api import profile_model

    model, x = two_linear()
    amd = profile_model(model, x, hardware="mi300x")
    assert amd.peak_memory_bytes == 352 + 128 + 64 and amd.cuda_memory is None
    assert any("is no CUDA GPU" in note for note in amd.notes)
    step = profile_model(model, x, hardware="h100", mode="train")
    assert step.cuda_memory is None
    assert any("applied to forwards only" in note for note in step.notes)
    assert not any("CUDA" in note for note in profile_model(model, x).notes)


def test_the_allocators_figures_survive_the_profiles_json():
    from pytest_graphbudget.api import profile_model
    from pytest_graphbudget.engine.profile import profile_from_dict

    model, x = two_linear()
    prof = profile_model(model, x, hardware="h200")
    again = profile_from_dict(prof.to_dict())
    assert again.cuda_memory == prof.cuda_memory and again.to_dict() == prof.to_dict()
    assert again.peak_memory_bytes == prof.peak_memory_bytes
