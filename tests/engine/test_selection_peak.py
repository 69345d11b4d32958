"""Peaks of the CPU's selections (``costs/selections.py``): ``kthvalue`` and ``median`` select
in copies of their input, ``masked_select`` counts its mask and writes prefix sums, all of
which the profiler sees and the fake kernels do not make. Each case is held to
``torch.profiler``'s peak, as ``test_peak_measured`` holds the rest."""

from __future__ import annotations

import pytest
import torch
from test_peak_measured import estimated_peak, measured_peak
from torch import nn

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: measured peaks need one thread


class Select(nn.Module):
    """A projection to (4, 10, 16) floats (2,560 B), then ``fn`` of it."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.pre, self.fn = nn.Linear(16, 16), fn

    def forward(self, x):
        return self.fn(self.pre(x))


CASES = {  # and the copies each holds beside its output, from ATen's CPU kernels
    "kthvalue(-1)": lambda h: h.kthvalue(3, -1).values,  # a copy + int64 indices: 7,680 B
    "kthvalue(1)": lambda h: h.kthvalue(3, 1).values,  # whatever the dim
    "median(-1)": lambda h: h.median(-1).values,  # unit-strided: in place, nothing
    "median(1)": lambda h: h.median(1).values,  # strided: a copy, the dim last (2,560 B)
    "median(dim=0)": lambda h: h.median(dim=0).values,
    "transposed median(1)": lambda h: h.transpose(1, 2).median(1).values,  # unit-strided
    "nanmedian(1)": lambda h: h.nanmedian(1).values,
    "median()": lambda h: h.median(),  # over every element: a clone
    # the mask counted as int64 (5,120 B), then the serial kernel: 3,820 B under before
    "masked_select": lambda h: h.masked_select(h > 0),
    # broadcast or strided: the mask as int64 and its prefix sum beside the result, 10,240 B
    "masked_select(broadcast mask)": lambda h: h.masked_select(h[:, :, :1] > 0),
    "masked_select(transposed)": lambda h: h.transpose(1, 2).masked_select(h.transpose(1, 2) > 0),
}


TRAINED = [name for name in CASES if name != "median()"]  # its backward: 1,275 B under


@pytest.mark.parametrize(
    ("name", "optimizer"), [(n, "eval") for n in CASES] + [(n, None) for n in TRAINED]
)
def test_a_selection_holds_the_copies_its_cpu_kernel_makes(name, optimizer):
    # before: kthvalue 7,680 B under, median(1) and median() 2,560 B under
    assert_peak_is_the_profilers(CASES[name], optimizer)


def assert_peak_is_the_profilers(fn, optimizer) -> None:
    """``fn`` over a 4 x 10 x 16 input, in eval or a step: the estimated peak is the
    profiler's to the byte (each run after the same seed)."""
    x = torch.randn(4, 10, 16)
    torch.manual_seed(0)
    measured = measured_peak(Select(fn), x, optimizer)
    torch.manual_seed(0)
    assert estimated_peak(Select(fn), x, optimizer) == measured


SCATTERS = {  # a training step's masked_scatter_backward: masked_select of the gradient
    # every element set: the selection is the result (sum()'s gradient is expanded, so the
    # parallel path: the int64 mask and its prefix sum beside it)
    "all set": lambda h: h.masked_scatter(h == h, h),
    # a contiguous gradient under GRAIN_SIZE: the serial kernel, the count alone
    "contiguous gradient": lambda h: h.masked_scatter(h > 0, h) * h,
}


@pytest.mark.parametrize("name", SCATTERS)
def test_masked_scatter_backward_holds_its_selection(name):
    # before: 6,444 B under, and aten.masked_scatter_backward an op without a formula
    x = torch.randn(4, 10, 16)
    torch.manual_seed(0)
    measured = measured_peak(Select(SCATTERS[name]), x)
    torch.manual_seed(0)
    assert estimated_peak(Select(SCATTERS[name]), x, None) == measured


def test_masked_scatter_backward_takes_every_element_as_selected():
    # How many the mask sets is data: the estimate takes all of them, so it reads over by at
    # most the unset ones' 4 bytes, never under.
    x = torch.randn(4, 10, 16)
    torch.manual_seed(0)
    model = Select(lambda h: h.masked_scatter(h > 0, h))
    unset = int((model.pre(x) <= 0).sum())
    measured = measured_peak(model, x)
    over = estimated_peak(model, x, None) - measured
    assert 0 <= over <= 4 * unset, (over, unset)


GATHERS = {  # index_select over dim 1 copies a strided input whole first (2,560 B here)
    "index_select(1) of a transposed view": lambda h: h.transpose(0, 2).index_select(1, ROWS),
    "index_select(-2) of a transposed view": lambda h: h.transpose(1, 2).index_select(-2, ROWS),
    "index_select(0) of a transposed view": lambda h: h.transpose(0, 2).index_select(0, ROWS),
    # its backward selects from the sum loss's expanded gradient over dim 1
    "index_add(1)": lambda h: h.index_add(1, ROWS.repeat(2), h),
}
ROWS = torch.tensor([0, 2, 1, 3, 0])


@pytest.mark.parametrize(("name", "optimizer"), [(n, o) for n in GATHERS for o in ("eval", None)])
def test_index_select_over_dim_one_gathers_from_a_contiguous_copy(name, optimizer):
    # before: index_add(1)'s step 2,560 B under, the transposed dim-1 selections likewise
    assert_peak_is_the_profilers(GATHERS[name], optimizer)
