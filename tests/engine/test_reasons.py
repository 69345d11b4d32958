"""Dynamo's break reasons as the reports say them (``engine/reasons.py``)."""

from __future__ import annotations

import traceback
from types import SimpleNamespace

import pytest_graphbudget.engine.tape as tape
import pytest_graphbudget.modes.decode_step as decode_step
from pytest_graphbudget.engine.reasons import plain_breaks


def _reason(text: str, *files: str) -> SimpleNamespace:
    stack = [traceback.FrameSummary(f, 10 + i, "forward") for i, f in enumerate(files)]
    return SimpleNamespace(reason=text, user_stack=stack)


def test_a_break_in_the_tapes_own_code_is_not_the_models():
    """Dynamo on torch 2.9 traced into the tape's dispatch and reported ten breaks in
    ``tape.py``, ``nodes.py`` and ``extents.py`` beside the model's one."""
    model = "/home/user/project/net.py"
    found = plain_breaks(
        [
            _reason("generic_jump TensorVariable()", model),
            _reason("id() with unsupported args", model, tape.__file__),
            _reason("Unexpected type in sourceless builder", tape.__file__, "torch/polyfills.py"),
            _reason("generic_jump TensorVariable()", model),  # the same place again
            # a decoded model's break: its stack starts in the package's decode-step wrapper
            _reason("Tensor.item", decode_step.__file__, model),
        ]
    )
    assert [str(b) for b in found] == [
        f"{model}:10: a Python branch on a tensor's value (generic_jump TensorVariable())",
        f"{model}:11: a tensor read into a Python number (Tensor.item)",
    ]
