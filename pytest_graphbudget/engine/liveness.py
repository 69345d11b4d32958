"""Liveness: when each activation is allocated and freed, and what is live at the peak.

A storage is born at the node that first writes it and dies after its last reader, unless
something still refers to it: the forward's frames (the tape's real frees, FX's records of
what each frame held), or, where neither was recorded (an exported graph), a module call's
rules (``_held_by_calls``). Graph outputs live to the end.
"""

from __future__ import annotations

from typing import Any

from pytest_graphbudget.engine.nodes import Measured, NodeCost


def live_at_peak(measured: Measured, stop: int | None = None) -> dict[str, int]:
    """The activations live at the peak, in bytes by the node that allocated them: what a
    memory limit that fails should point at; their sum is the activation peak.

    Liveness over the node order: a storage is allocated by the node that first writes it and
    freed after its last reader; graph outputs live to the end. Views and in-place ops write
    no new storage. ``Measured.frees`` says when each storage was freed: the taped forward's
    real frees, or, on an FX graph, what the forward's frames held when each op was traced (a
    local until rebound, a call's arguments until it returns). Without them (a joint training
    graph) a rule guesses: a module's call holds its arguments until it returns
    (``_held_by_calls``), which over-holds what a module's code rebinds. A node's workspace
    (``costs/workspace.py``, ``costs/scratch.py``) is live while it runs only, beside its inputs
    and outputs; at the peak it is charged to that node. ``stop``: the peak before that node (a
    training step's before its update).
    """
    born, dies, size = lifetimes(measured)
    end = len(measured.nodes)
    delta = [0] * (end + 2)
    for key, start in born.items():
        delta[start] += size[key]
        delta[dies[key] + 1] -= size[key]
    for i, node in enumerate(measured.nodes):
        delta[i] += node.workspace
        delta[i + 1] -= node.workspace
    peak = live = 0
    at = -1
    for step, change in enumerate(delta[:stop]):
        live += change
        if live > peak:
            peak, at = live, step
    found: dict[str, int] = {}
    for key, start in born.items():
        if start <= at <= dies[key] and size[key]:
            name = measured.nodes[start].name
            found[name] = found.get(name, 0) + size[key]
    if 0 <= at < end and measured.nodes[at].workspace:
        name = measured.nodes[at].name
        found[name] = found.get(name, 0) + measured.nodes[at].workspace
    return found


def lifetimes(measured: Measured) -> tuple[dict[Any, int], dict[Any, int], dict[Any, int]]:
    """Each activation storage's first node, last node live and bytes (``live_at_peak``'s
    rules: freed after its last reader, a module call's arguments held to its end, the taped
    forward's frees where there are any, graph outputs to the end)."""
    born: dict[Any, int] = {}
    dies: dict[Any, int] = {}
    size: dict[Any, int] = {}
    for i, node in enumerate(measured.nodes):
        for key, nbytes in node.writes.items():
            born.setdefault(key, i)
            size[key] = max(size.get(key, 0), nbytes)
            dies[key] = max(dies.get(key, i), i)
        for key in node.reads:
            if key in born:
                dies[key] = i
    end = len(measured.nodes)
    if measured.frees is None:
        _held_by_calls(measured.nodes, born, dies)
    else:  # the forward that ran freed them: what no one freed is live to the end
        for key in born:
            dies[key] = max(dies[key], measured.frees.get(key, end))
    for key in measured.outputs():
        if key in born:
            dies[key] = end
    return born, dies, size


GATHERED = frozenset({"cat", "stack"})
"""Ops whose inputs a module's forward gathers in a Python list first (``torch.cat(y, 1)``
after ``y.append(...)``): the list is one of its locals, so they live until it returns."""


def _held_by_calls(nodes: list[NodeCost], born: dict[Any, int], dies: dict[Any, int]) -> None:
    """Keep a module call's arguments alive until the call ends: the caller's frame
    (``x = self.block(x)``) and the callee's parameter both refer to them while it runs, so an
    input read only by the call's first op is freed after its last op, not after that op.

    A call is a run of consecutive nodes under one module path; a storage born before the run
    and read inside it dies no earlier than the run's last node, as does every input of a
    ``GATHERED`` op that the module's own code calls, and a module's locals (``_locals``)."""
    calls: list[tuple[str, int, int]] = []  # (path, first node, last node)
    open_: dict[str, int] = {}
    for i, node in enumerate(nodes):
        paths = set(_prefixes(node.module)) if node.in_call else set()
        for path in [p for p in open_ if p not in paths]:
            calls.append((path, open_.pop(path), i - 1))
        for path in paths - open_.keys():
            open_[path] = i
    calls += [(path, first, len(nodes) - 1) for path, first in open_.items()]
    for path, first, last in calls:
        for node in nodes[first : last + 1]:
            own = node.module == path
            gathered = own and node.kind in GATHERED
            for key in node.reads:
                if key in born and (born[key] < first or gathered):
                    dies[key] = max(dies[key], last)
            if own and not node.stack:  # no record of the code: what it returns is a local
                for key in node.views:
                    if key in born and dies[key] > born[key]:
                        dies[key] = max(dies[key], last)
    _locals(nodes, born, dies, calls)


def _locals(nodes: list[NodeCost], born: dict[Any, int], dies: dict[Any, int], calls: list) -> None:
    """Keep what a module's forward binds to a local alive until its call ends: a value made
    by one statement of the forward and read by another (``e = self.wte(ids)`` ...
    ``h = e + p``; ``h = x * 2`` ... ``self.fc(h)``). A temporary of one expression
    (``0.5 * x * (1 + tanh(...))``, GELU's) is freed after its last reader, as Python frees it.
    Told apart by the code that called each op (``NodeCost.stack``, the graph's record): below
    the frames the maker and the reader share, both ran in one function at different lines.
    The forward is the maker's or the reader's module, whichever holds the other: in a loop
    over blocks, one block's function is another block's call. Where a rebinding
    (``x = x + 1``) freed the old value sooner, this holds it to the call's end."""
    ends: dict[str, list[tuple[int, int]]] = {}
    for path, first, last in calls:
        ends.setdefault(path, []).append((first, last))
    for i, reader in enumerate(nodes):
        for key in reader.reads if reader.stack and reader.in_call else ():
            maker = nodes[born[key]] if key in born else reader
            if maker is reader or not maker.stack:
                continue
            path = _common(maker.module, reader.module)
            if path in (maker.module, reader.module) and _two_statements(maker, reader):
                runs = ends.get(path, [(0, len(nodes) - 1)])  # the root's: the whole graph
                dies[key] = max(dies[key], *(last for first, last in runs if first <= i <= last))


def _common(a: str, b: str) -> str:
    """The innermost module path that holds both ``a`` and ``b`` (``""``: the root)."""
    shared = []
    for x, y in zip(a.split(".") if a else [], b.split(".") if b else [], strict=False):
        if x != y:
            break
        shared.append(x)
    return ".".join(shared)


def _two_statements(maker: NodeCost, reader: NodeCost) -> bool:
    """Whether, below the frames they share, the two ops ran in one function at two lines."""
    for made, read in zip(maker.stack, reader.stack, strict=False):
        if made != read:
            return made[0] == read[0]
    return False


def _prefixes(path: str) -> list[str]:
    """``a.b.c`` -> ``a``, ``a.b``, ``a.b.c`` (the calls a node runs inside); none at the root."""
    parts = path.split(".") if path else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]
