"""Budgets written as markers. The figures are checked after each test body."""

from __future__ import annotations

import pytest
import torch
import torchvision


@pytest.mark.flops_max("3.7G")
@pytest.mark.memory_max("120MB")
@pytest.mark.params_max("12M")
@pytest.mark.bottleneck(compute_bound_min=0.25)
def test_resnet18_fits(resnet18): ...


@pytest.mark.flops_max("300M")
@pytest.mark.memory_max("16MB")  # as a T4 holds it: cuBLAS's 8 MiB workspace and cuDNN's too
@pytest.mark.graph_budget(hardware="t4")
def test_tiny_classifier_fits(tiny):
    # Parametrized: batch 1 and batch 8, each profiled and checked.
    ...


@pytest.mark.flops_max("150M")
def test_explicit_profile(graph_profile):
    # graph_profile returns the profile, for assertions of your own; markers apply too.
    model = torchvision.models.mobilenet_v3_small()
    prof = graph_profile(model, (torch.randn(1, 3, 224, 224),), name="mobilenet_v3_small")
    assert prof.params == 2_542_856  # torchvision's published num_params
    assert prof.coverage.unsupported_ops == {}
