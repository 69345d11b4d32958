"""Which module of the model the Python stack is in, for each op of the eager tape.

``tape.Tape`` names every ATen op of a taped forward after the innermost module of the model
whose code is on the stack: the ``self`` of each frame, read from the frame's locals. Reading
a frame's locals renews their snapshot (``f_locals`` before PEP 667 is a copy the frame keeps,
holding what the frame held when it was read), and the tape's frees depend on every snapshot
staying current. Most of the stack is the same from one op to the next (the model's outer
modules wait on the same calls): a frame still waiting on the same call as at the last op has
not run since, nor have its callers: its snapshot is current, and the chain of modules from it
outward is the one found then. Only the frames that ran are read again: about two a op on a
deep detector, whose stack is 26 frames deep.

Frames are held from one op to the next (so that an id is never another frame's), from the
innermost frame of the model up: never the frames below it (the tape's own, the functions it
calls), which hold the op's output. A factory op's output must be referenced once when it
returns: torch detaches it otherwise (``make_variable``), which the tape would see as an op.
"""

from __future__ import annotations

import inspect
from typing import Any

RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
"""Code flags of frames that a caller resumes where they stopped: a caller waiting on one may
have run between two resumptions, its locals changed."""


Chain = tuple  # of the module paths lists met, innermost first, a repeat merged into one


class _Frame:
    """A frame met at an op, with the frame it was calling then (both held from one op to the
    next, so that an id is never another frame's), its instruction and its module. ``tail``:
    the chain of modules from this frame outward; ``tail_inside``: the same when the walk has
    passed a frame of the model itself, so that it stops at the first frame of no module (None:
    not known, the walk stopped before). A class with slots: several are made at every op."""

    __slots__ = (
        "frame",
        "child",
        "lasti",
        "found",
        "root",
        "parent",
        "tail",
        "tail_inside",
        "names",
    )

    def __init__(self, frame: Any, child: Any, found: list[str] | None, root: bool):
        self.frame = frame
        self.child = child
        self.lasti = frame.f_lasti if frame is not None else -1
        self.found = found  # the module's paths in the model, None for any other frame
        self.root = root  # a frame of the model itself
        self.parent: _Frame | None = None  # the next frame held, outward
        self.tail: Chain | None = ()
        self.tail_inside: Chain = ()
        self.names: dict[tuple, str] | None = None  # the paths named with this as boundary

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
        self.held: dict[int, _Frame] = {}  # the frames held, by id: those of ``innermost`` up
        self.innermost: _Frame | None = None

    def module(self, frame: Any) -> str:
        """The innermost module of the model whose code runs in ``frame`` or its callers,
        named by where it is called from: a module shared by several parents (ultralytics'
        one ``nn.SiLU``) is charged under the parent that called it, as FX names its call
        site. The frames up to the first that has not run since the last op are read; the
        chain from that one outward is the one found then."""
        fresh, boundary, inside = self._walk(frame)
        if boundary is None:
            path = self._path(fresh, ())
        else:  # named once per boundary and frames read
            key = (inside, *[id(record.found) for record in fresh])
            if boundary.names is None:
                boundary.names = {}
            path = boundary.names.get(key)
            if path is None:
                tail = boundary.tail_inside if inside else boundary.tail
                if tail is None:  # not known: walk the whole stack again
                    self.forget()
                    return self.module(frame)
                path = boundary.names[key] = self._path(fresh, tail)
        self._hold(fresh, boundary)
        return path

    def _path(self, fresh: list[_Frame], tail: Chain) -> str:
        """The path of the chain of the frames read, then ``tail``."""
        chain: list[list[str]] = []
        for record in fresh:
            if record.found is not None and (not chain or chain[-1] is not record.found):
                chain.append(record.found)
        chain += tail[1:] if chain and tail and chain[-1] is tail[0] else tail
        key = tuple(map(id, chain))  # the lists of ``self.paths``: named once per chain
        path = self.named.get(key)
        if path is None:
            path = self.named[key] = _call_path(chain)
        return path

    def _walk(self, frame: Any) -> tuple[list[_Frame], _Frame | None, bool]:
        """The frames read (innermost first) up to the first that has not run since the last
        op (the boundary, or None), and whether a frame of the model itself was among them."""
        held, fresh = self.held, []
        inside = False  # past the root model's frames, the rest of the stack is the caller's
        child = None  # the frame ``frame`` calls, once the model's innermost frame is met
        while frame is not None:
            last = held.get(id(frame))
            if last is not None and last.waiting(frame, child):
                return fresh, last, inside
            owner = frame.f_locals.get("self")
            found = None if owner is None else self.paths.get(id(owner))
            if found is not None:
                root = id(owner) == self.root
                inside = inside or root
            elif inside:
                fresh.append(_Frame(None, None, None, False))  # the model's caller: it stops
                break
            elif child is None:  # below the model's innermost frame: never held
                frame = frame.f_back
                continue
            else:
                root = False
            fresh.append(_Frame(frame, child, found, root))
            child, frame = frame, frame.f_back
        return fresh, None, inside

    def _hold(self, fresh: list[_Frame], boundary: _Frame | None) -> None:
        """Hold the frames read from the model's innermost one up, each with the chain from it
        outward, and let go of those that returned since the last op (and their locals)."""
        old = self.innermost
        while old is not None and old is not boundary:
            del self.held[id(old.frame)]
            old = old.parent
        tail, tail_in = (boundary.tail, boundary.tail_inside) if boundary else ((), ())
        parent = boundary
        for record in reversed(fresh):  # outermost first: each chain from its caller's
            found = record.found
            if record.frame is None:  # the caller of the model: the walk stopped there
                tail, tail_in = None, ()
                continue
            if found is not None:
                outside = tail_in if record.root else tail
                tail = None if outside is None else _prepend(found, outside)
                tail_in = _prepend(found, tail_in)
            else:
                tail_in = ()
            record.tail, record.tail_inside, record.parent = tail, tail_in, parent
            self.held[id(record.frame)] = parent = record
        self.innermost = parent

    def forget(self) -> None:
        """Let go of the frames held since the last op: a frame that returned keeps its
        locals (the values it held) alive while it is held."""
        self.held = {}
        self.innermost = None


def _prepend(found: list[str], chain: Chain) -> Chain:
    return chain if chain and chain[0] is found else (found, *chain)


def _call_path(chain: list[list[str]]) -> str:
    """The path of the innermost module of ``chain`` (innermost first, each module's paths),
    named under the path its caller was given."""
    path = ""
    for found in reversed(chain):  # outermost first: each inner name under its caller's
        if len(found) == 1:  # a module at one path (most): that path, whoever calls it
            path = found[0]
            continue
        under = [p for p in found if p.startswith(f"{path}.")] if path else found
        path = min(under or found, key=len)
    return path
