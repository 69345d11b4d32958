"""CPU kernels that allocate differently by release: torch's own (``count_nonzero``, ``mean``,
SDPA's ``_safe_softmax``) and those of the oneDNN it bundles (LSTM layers, bfloat16 products).
The peaks' workspaces follow them; ``make compat`` holds them to the memory profiler on every
release (``tests/engine/test_peak_measured.py``, ``tests/costs/test_workspace.py``).

Nothing here imports torch at module level.
"""

from __future__ import annotations

import re
from functools import cache

from pytest_graphbudget.compat import torch_version

COUNT_NONZERO_SUMS_BOOL = (2, 5)
"""The first torch whose ``count_nonzero`` over some dimensions sums a bool input as it is
(pytorch/pytorch#134254): before it, ``(x != 0).sum(dims)`` copies a bool mask too."""


def count_nonzero_compares_bool() -> bool:
    return torch_version() < COUNT_NONZERO_SUMS_BOOL


SAFE_SOFTMAX_IN_PLACE = (2, 6)
"""The first torch whose ``_safe_softmax`` (SDPA's math path, from 2.5) zeroes its rows of -inf
in the softmax's own result: in 2.5 ``where`` makes a new one, held beside the softmax's."""


def safe_softmax_in_place() -> bool:
    return torch_version() >= SAFE_SOFTMAX_IN_PLACE


MEAN_KEEPS_ITS_OUTPUT = (2, 6)
"""The first torch whose CPU ``mean`` of 16-bit floats copies its float32 sum into the output
it was given (pytorch/pytorch#135174): before it, the sum replaced that output, freed while
the op ran, and a new one was made at the end."""


def mean_replaces_its_output() -> bool:
    return torch_version() < MEAN_KEEPS_ITS_OUTPUT


ONEDNN_LEAN = (3, 10)
"""The first oneDNN whose RNN books its per-step scratch once and lays out no unused state
arrays (uxlfoundation/oneDNN d3fb569), and whose bfloat16 brgemm product accumulates every
result block in float32: torch 2.4 bundles 3.4, 2.9 3.7, 2.11 3.10, 2.14 3.12."""


@cache
def onednn_version() -> tuple[int, int] | None:
    """The oneDNN torch was built with (``torch.__config__.show()``), None without one."""
    import torch

    found = re.search(r"MKL-DNN v(\d+)\.(\d+)", torch.__config__.show())
    return (int(found[1]), int(found[2])) if found else None


def onednn_rnn_books_twice() -> bool:
    return (onednn_version() or ONEDNN_LEAN) < ONEDNN_LEAN  # no oneDNN: no rule


def onednn_brgemm_accumulates() -> bool:
    """Whether a bfloat16 product's result block is accumulated in float32 whatever its inner
    dimension; before 3.10, only across more than one inner block (``costs/brgemm.py``)."""
    return (onednn_version() or ONEDNN_LEAN) >= ONEDNN_LEAN
