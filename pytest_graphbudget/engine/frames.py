"""Which module of the model the Python stack is in, for each op of the eager tape.

``breaks._Tape`` names every ATen op of a taped forward after the innermost module of the model
whose code is on the stack: the ``self`` of each frame, read from the frame's locals. Reading
a frame's locals renews their snapshot (``f_locals`` before PEP 667 is a copy the frame keeps,
holding what the frame held when it was read), and the tape's frees depend on every snapshot
staying current. Most of the stack is the same from one op to the next (the model's outer
modules wait on the same calls): a frame still waiting on the same call as at the last op has
not run since, so its snapshot is current and its module the one found then. Only the frames
that ran are read again: on a deep detector, a fifth of the stack instead of all of it.

Frames are held from one op to the next (so that an id is never another frame's), from the
innermost frame of the model up: never the frames below it (the tape's own, the functions it
calls), which hold the op's output. A factory op's output must be referenced once when it
returns: torch detaches it otherwise (``make_variable``), which the tape would see as an op.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
"""Code flags of frames that a caller resumes where they stopped: a caller waiting on one may
have run between two resumptions, its locals changed."""


@dataclass
class _Frame:
    """A frame on the stack at the last op, held (so that its id is never another frame's)
    with the frame it was calling then, its instruction and the module it belongs to."""

    frame: Any
    child: Any
    lasti: int
    found: list[str] | None  # the module's paths in the model, None for any other frame
    root: bool  # the frame of the model itself

    def waiting(self, frame: Any, child: Any) -> bool:
        """Whether ``frame`` is this one, still in the call it was in: it has not run since."""
        return (
            self.frame is frame
            and self.child is child
            and child is not None
            and not child.f_code.co_flags & RESUMABLE
            and frame.f_lasti == self.lasti
        )


class ModuleStack:
    """The module path of the code running at each op (``module``), from the Python stack."""

    def __init__(self, paths: dict[int, list[str]], root: int):
        self.paths = paths  # id of each module of the model -> its paths
        self.root = root  # id of the model
        self.named: dict[tuple[int, ...], str] = {}  # module chains met -> their paths
        self.frames: dict[int, _Frame] = {}  # the stack at the last op, by id

    def module(self, frame: Any) -> str:
        """The innermost module of the model whose code runs in ``frame`` or its callers,
        named by where it is called from: a module shared by several parents (ultralytics'
        one ``nn.SiLU``) is charged under the parent that called it, as FX names its call
        site."""
        seen, stack = self.frames, {}
        chain: list[list[str]] = []
        inside = False  # past the root model's frames, the rest of the stack is the caller's
        child = None  # the frame ``frame`` calls, when it is held
        while frame is not None:
            last = seen.get(id(frame))
            if last is None or not last.waiting(frame, child):
                owner = frame.f_locals.get("self")
                found = None if owner is None else self.paths.get(id(owner))
                last = _Frame(frame, child, frame.f_lasti, found, id(owner) == self.root)
            found = last.found
            if found is not None:
                if not chain or chain[-1] is not found:
                    chain.append(found)
                inside = inside or last.root
            elif inside:
                break
            if chain:  # never the frames below the model's (the tape's own, functions it calls)
                stack[id(frame)] = last
                child = frame
            frame = frame.f_back
        self.frames = stack  # frames that returned since the last op (and their locals) go
        key = tuple(map(id, chain))  # the lists of ``self.paths``: named once per chain
        path = self.named.get(key)
        if path is None:
            path = self.named[key] = _call_path(chain)
        return path

    def forget(self) -> None:
        """Let go of the frames held since the last op: a frame that returned keeps its
        locals (the values it held) alive while it is held."""
        self.frames = {}


def _call_path(chain: list[list[str]]) -> str:
    """The path of the innermost module of ``chain`` (innermost first, each module's paths),
    named under the path its caller was given."""
    path = ""
    for found in reversed(chain):  # outermost first: each inner name under its caller's
        under = [p for p in found if p.startswith(f"{path}.")] if path else found
        path = min(under or found, key=len)
    return path
