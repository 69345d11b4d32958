"""The second forward of a model with lazy state, replayed from the first without computing.

A forward that builds lazy state (YOLO's anchors, ``MultiScaleRoIAlign``'s scales) runs ops
that a later forward does not, and the figures are those of a later forward. Taping a second
real forward doubled the time of a cold profile. Instead the first tape keeps a ``Memo``: each
call (the op, its tensors by the op that made them, its other arguments) and how to rebuild
its result (a small tensor's values, a larger one's layout). The second forward then runs
under ``Replay``, which answers every op from the memo and runs no kernel: the model's Python
code takes the path it takes after its first call (same values, so the same branches and the
same ``.item()``s), and the first tape, less the calls the second forward never made, is the
tape of that forward (``pruned``).

The replay gives up (``Miss``) as soon as the second forward calls an op the first did not, on
tensors the first never made, or out of order: the caller then tapes a real second forward.
The memo holds no result of the first forward (weak references, copies of small tensors), so
the first tape allocates and frees as it would without one.
"""

from __future__ import annotations

import bisect
import functools
import weakref
from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pytest_graphbudget.engine import tree, walk
from pytest_graphbudget.engine.nodes import QUERIES, Measured, _op_name, _storage
from pytest_graphbudget.engine.trace import Example, collector_paused, tensor_leaves
from pytest_graphbudget.engine.watch import restored

SMALL = 256
"""A result of at most this many elements is kept (a copy): Python may read its values
without an op (``.tolist()``); a larger one is replayed as an empty stand-in of its layout.
A tensor no op made (``torch.tensor([...])`` made anew on every call) of at most this many
elements is matched by its values; any other by its identity."""


PLAIN = frozenset({int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout})
PLAIN |= {torch.memory_format}
"""Argument types that are part of a key as they are, without a call per argument."""


class Miss(Exception):
    """The second forward called an op the first forward's memo cannot answer."""


class Memo:
    """The first forward's calls and how to rebuild their results (see the module's doc).

    A tensor an op of the first forward made is known by a token, (node index, position among
    the node's output tensors), through a weak reference: the memo keeps no result alive, so
    the first forward allocates and frees as it would without one."""

    def __init__(self, stable: set[int]):
        self.stable = stable  # ids of the weights and inputs: matched by identity, never read
        self.calls: dict[Any, list[tuple[int, Any]]] = {}  # call -> [(node index, recipe)]
        self.tokens: dict[int, tuple[Any, tuple[int, int]]] = {}  # id -> (weak ref, token)

    def key_of(self, func: Any, args: tuple, kwargs: dict, own: dict | None = None) -> Any:
        """What identifies a call: the op, its tensors by token (a small one no op made by its
        values, any other by identity) and its other arguments as they are; None when an
        argument cannot be part of a key. ``own``: the replay's stand-ins' tokens, by id."""
        describe = self._describe
        try:
            # The op by id: an OpOverload hashes in Python, and lives as long as the process
            key = [id(func), *[a if type(a) in PLAIN else describe(a, own) for a in args]]
            if kwargs:
                key += [(k, v if type(v) in PLAIN else describe(v, own)) for k, v in kwargs.items()]
            return tuple(key)
        except Exception:  # unhashable, or a tensor whose values cannot be read: no key
            return None

    def _describe(self, value: Any, own: dict | None) -> Any:
        if isinstance(value, torch.Tensor):
            found = id(value)
            token = _token(own, value) if own else None
            token = token or _token(self.tokens, value)
            if token is not None:
                return token
            if found in self.stable or value.numel() > SMALL:
                return ("id", found)
            values = tuple(value.reshape(-1).tolist())
            return ("value", value.dtype, tuple(value.shape), value.device, values)
        kind = type(value)
        if kind is tuple or kind is list:
            describe = self._describe
            return (kind, *[v if type(v) in PLAIN else describe(v, own) for v in value])
        if kind is dict:
            return (dict, *[(k, self._describe(v, own)) for k, v in value.items()])
        hash(value)  # an unhashable argument: TypeError, the call cannot be matched
        return value

    def add(self, key: Any, index: int, args: tuple, kwargs: dict, out: Any) -> None:
        """Remember node ``index``, called as ``key`` on ``args`` and ``kwargs``, and what it
        returned."""
        try:
            recipe = _recipe(out, _top_tensors(args, kwargs))
        except Exception:  # an output no stand-in can play: a replay reaching it misses
            recipe = None
        calls = self.calls.get(key)
        if calls is None:
            self.calls[key] = [(index, recipe)]
        else:
            calls.append((index, recipe))
        if type(out) is torch.Tensor:
            self.tokens[id(out)] = (weakref.ref(out), (index, 0))
            return
        for position, t in enumerate(tree.tensors(out)):
            self.tokens[id(t)] = (weakref.ref(t), (index, position))


def _top_tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors among an op's arguments themselves (not inside lists): those an in-place
    op or an ``out=`` argument gives back."""
    found = [a for a in args if isinstance(a, torch.Tensor)]
    return found + [v for v in kwargs.values() if isinstance(v, torch.Tensor)] if kwargs else found


def _token(known: dict[int, tuple[Any, tuple[int, int]]], t: torch.Tensor) -> Any:
    """The token of ``t`` among ``known`` (id -> weak ref, token), if it is the tensor there."""
    entry = known.get(id(t))
    return entry[1] if entry is not None and entry[0]() is t else None


def _recipe(out: Any, inputs: list[torch.Tensor]) -> Any:
    """How a replay rebuilds ``out``: an input given back, a small tensor's copy, a larger
    one's layout; containers and plain values as they are. TypeError for anything else.
    A small tensor's values are kept as the op left them (Python reads them without an op:
    ``.tolist()``); a larger one is an empty stand-in with the same layout."""
    if type(out) is torch.Tensor:  # most results: the checks in the order they pay off
        for j, given in enumerate(inputs):
            if given is out:  # in place: a small one's values as the op left them
                return ("input", j, _small_storage(out))
        numel = out.numel()
        if out.is_contiguous() and not out.storage_offset():
            nbytes = out.untyped_storage().nbytes()
            if nbytes == numel * out.element_size():  # dense: clone or empty_strided
                if numel <= SMALL:
                    return ("clone", out.clone())
                return ("dense", out.shape, out.stride(), out.dtype, out.device)
        layout = (out.dtype, out.storage_offset(), tuple(out.shape), out.stride())
        storage = _small_storage(out) if numel <= SMALL else None
        if storage is not None:
            return ("copy", storage, layout)
        return ("layout", out.untyped_storage().nbytes(), layout, out.device)
    if isinstance(out, torch.Tensor):  # a subclass: its own layout, nothing to rebuild
        raise TypeError(type(out).__name__)
    if isinstance(out, (tuple, list)):
        return ("many", type(out), [_recipe(v, inputs) for v in out])
    hash(out)
    return ("plain", out)


def _small_storage(t: torch.Tensor) -> Any:
    """A copy of ``t``'s storage when it is small (its values, as Python may read them)."""
    storage = t.untyped_storage()
    return storage.clone() if t.numel() <= SMALL and storage.nbytes() <= SMALL * 8 else None


def _rebuilt(recipe: Any, inputs: list[torch.Tensor]) -> Any:
    kind = recipe[0]
    if kind == "clone":  # a fresh tensor each time: the replay must not share the memo's
        return recipe[1].clone()
    if kind == "dense":
        shape, stride, dtype, device = recipe[1:]
        return torch.empty_strided(shape, stride, dtype=dtype, device=device)
    if kind == "input":
        if recipe[2] is not None:
            inputs[recipe[1]].untyped_storage().copy_(recipe[2])
        return inputs[recipe[1]]
    if kind == "copy":
        storage, (dtype, offset, shape, stride) = recipe[1].clone(), recipe[2]
    elif kind == "layout":
        storage = torch.UntypedStorage(recipe[1], device=recipe[3])
        dtype, offset, shape, stride = recipe[2]
    if kind in ("copy", "layout"):
        empty = torch.empty(0, dtype=dtype, device=storage.device)
        return empty.set_(storage, offset, shape, stride)
    if kind == "many":
        items = [_rebuilt(r, inputs) for r in recipe[2]]
        return items if recipe[1] is list else recipe[1](items)
    return recipe[1]


class Replay(TorchDispatchMode):
    """Answers every op of a forward from a ``Memo``, in the first forward's order; runs no
    kernel but the metadata ``QUERIES``. ``hits``: the node index each call was answered by."""

    def __init__(self, memo: Memo):
        super().__init__()
        self.memo = memo
        self.hits: list[int] = []
        self.cursor: dict[Any, int] = {}  # key -> its next call that may answer
        # Stand-ins by id, each through a weak reference (a factory op's result that someone
        # else still holds is detached by the caller: another tensor, the token lost)
        self.own: dict[int, tuple[Any, tuple[int, int]]] = {}

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # as the tape (``measure._Recorder``): no Dynamo import at the first op

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _query(func):
            return func(*args, **kwargs)
        key = self.memo.key_of(func, args, kwargs, self.own)
        calls = self.memo.calls.get(key, ()) if key is not None else ()
        # The calls of a key in order, and the hits only ever move on: each key's cursor skips
        # for good what lies behind the last hit (a weight's ``t()`` at every step of a loop)
        last, at = self.hits[-1] if self.hits else -1, self.cursor.get(key, 0)
        while at < len(calls) and calls[at][0] <= last:
            at += 1
        if at == len(calls):
            raise Miss(f"the first forward never called {func} so")
        index, recipe = calls[at]
        self.cursor[key] = at + 1
        if recipe is None:
            raise Miss(f"{func} returned what no stand-in can play")
        self.hits.append(index)
        out = _rebuilt(recipe, _top_tensors(args, kwargs))
        for position, t in enumerate(tree.tensors(out)):
            self.own[id(t)] = (weakref.ref(t), (index, position))
        return out


@functools.cache
def _query(func: Any) -> bool:
    return _op_name(func) in QUERIES


def pruned(first: Measured, kept: list[int], outputs: set[str]) -> Measured:
    """The first tape with only the nodes ``kept`` (indices, ascending): named, numbered and
    freed as a tape of the forward that ran only those would be. ``outputs``: the names (in
    the first tape) of the nodes that made the second forward's outputs."""
    nodes = [first.nodes[i] for i in kept]
    dropped = {n.name for n in first.nodes} - {n.name for n in nodes}
    taken: Counter = Counter()
    renamed: dict[str, str] = {}
    for index, node in enumerate(nodes):
        base = node.target.removeprefix("aten.")
        taken[base] += 1
        renamed[node.name] = base if taken[base] == 1 else f"{base}_{taken[base] - 1}"
        node.name, node.index = renamed[node.name], index
        node.inputs = [renamed.get(p, p) for p in node.inputs if p not in dropped]
    written = set().union(*(n.writes for n in nodes))
    frees = None
    if first.frees is not None:  # freed after old node i: after the last kept node up to i
        frees = {k: bisect.bisect_right(kept, i) - 1 for k, i in first.frees.items()}
        frees = {k: i for k, i in frees.items() if k in written}
    kept_outputs = {renamed[name] for name in outputs if name in renamed}
    measured = Measured(nodes, kept_outputs, first.inputs, first.mode)
    measured.frees = frees
    measured.input_masks = first.input_masks
    measured.input_channels = first.input_channels
    return measured


def replay_forward(
    model: torch.nn.Module, example: Example, first: Measured, memo: Memo, stored: Any
) -> Measured:
    """The tape of the forward after ``first``, replayed from its ``memo`` (see the module's
    doc). ``stored``: what the first forward assigned to the model's attributes; a tensor in it
    that a kept node wrote (a module keeping an activation) would be freed by a later forward,
    which only a real one shows. Raises ``Miss`` when the replay cannot stand for a forward."""
    replay = Replay(memo)
    # What the replayed forward assigns is put back: stand-ins hold no values to keep.
    with restored(model), collector_paused(), torch.no_grad(), replay:
        out = model(*example.args, **example.kwargs)
    kept = replay.hits
    written = {key for i in kept for key in first.nodes[i].writes}
    if any(_storage(t) in written for t in tensor_leaves(stored)):
        raise Miss("the first forward stored a tensor that a later forward makes again")
    outputs = set()
    for t in tensor_leaves(out):
        token = _token(replay.own, t) or _token(memo.tokens, t)
        if token is not None:
            outputs.add(first.nodes[token[0]].name)
    return held_state(pruned(first, kept, outputs), model)


def held_state(measured: Measured, model: torch.nn.Module) -> Measured:
    """The first forward's lazy state, which the model now keeps as plain attributes (YOLO's
    anchors), read as the weights it is to a later forward: as the same model warmed up first
    reads it (its bytes had been in neither figure)."""
    from pytest_graphbudget.engine.quantized import stored_bytes

    held = {_storage(t): (path, t) for path, t in walk.plain_tensors(model)}
    for node in measured.nodes:
        for key in node.reads:
            if key in held:
                path, tensor = held[key]
                node.weights[path] = max(node.weights.get(path, 0), stored_bytes(tensor))
    return measured
