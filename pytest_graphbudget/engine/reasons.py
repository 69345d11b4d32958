"""Dynamo's graph breaks as the reports say them: where (``file:line``) and why, in plain words;
and Dynamo's source expressions of modules as module paths.

Apart from ``breaks.py``, which captures them: the reasons are text work, not tracing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_graphbudget.errors import one_line


@dataclass
class Break:
    """One graph break: where it happened (``file:line``) and Dynamo's explanation."""

    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}" if self.where else self.reason


PLAIN_WORDS = {
    "generic_jump": "a Python branch on a tensor's value",
    "Dynamic shape operator": "an op whose output shape depends on tensor values",
    "Tensor.item": "a tensor read into a Python number",
}
"""Dynamo's terse reasons, said plainly; Dynamo's own words follow in parentheses."""


def _plain(text: str) -> str:
    for key, words in PLAIN_WORDS.items():
        if key in text:
            return f"{words} ({text})"
    return text


OWN = str(Path(__file__).resolve().parent) + os.sep
"""The engine's directory: a break whose stack passes through it is the tape's, not the
model's. Not the whole package: a decode step's wrapper (``modes/decode_step.py``) is the
frame every break of a decoded model's stack starts from."""


def plain_breaks(found_reasons: list[Any]) -> list[Break]:
    """Dynamo's break reasons as ``Break``s, in order, each place once. Dynamo on torch 2.9
    also traces into the tape's own dispatch (a mode that asks it not to) and breaks there:
    those are left out, since the model's graphs and figures are the same either way (it
    reported ten such breaks, in ``tape.py``, ``nodes.py`` and ``extents.py``, beside the
    model's one)."""
    found: dict[tuple[str, str], Break] = {}
    for reason in found_reasons:
        stack = list(getattr(reason, "user_stack", []) or [])
        if any(str(frame.filename).startswith(OWN) for frame in stack):
            continue
        where = f"{_short(stack[-1].filename)}:{stack[-1].lineno}" if stack else ""
        text = _plain(one_line(Exception(str(getattr(reason, "reason", reason))), limit=200))
        found.setdefault((where, text), Break(where, text))
    return list(found.values())


def _short(filename: str) -> str:
    """A source file as a short path: from its package down (``torchvision/ops/boxes.py``)."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename
