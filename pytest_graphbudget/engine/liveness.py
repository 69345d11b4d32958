"""Liveness: when each activation is allocated and freed, and what is live at the peak.

A storage is born at the node that first writes it and dies after its last reader, unless
something still refers to it: the forward's frames (the tape's real frees, FX's records of
what each frame held), or, where neither was recorded (an exported graph), a module call's
rules (``_held_by_calls``). Graph outputs live to the end.
"""

from __future__ import annotations

from typing import Any

from pytest_graphbudget.engine.held import common_frames, held_by_composites, held_by_helpers
from pytest_graphbudget.engine.nodes import Measured, NodeCost
from pytest_graphbudget.engine.rebinding import (
    appends_to_parameter,
    calls_helper,
    holds_past_reads,
    rebinding,
    returns_argument,
    stores_attribute,
)
from pytest_graphbudget.engine.source import in_loop, one_function, one_statement
from pytest_graphbudget.engine.turns import call_of, held_until


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

    A call is a run of consecutive nodes in one call of a module (``NodeCost.calls``: one
    module's second call is another), or under one module path where the graph does not
    record its calls; a storage born before the run and read inside it dies no earlier than
    the run's last node, as does every input of a ``GATHERED`` op that the module's own code
    calls, and a module's locals (``_locals``). A container never called (``_uncalled``: an
    ``nn.ModuleList`` that the caller's loop walks) holds nothing: its blocks are calls of
    their own, not one call."""
    uncalled = _uncalled(nodes)
    calls: list[tuple[str, int, int]] = []  # (path, first node, last node)
    open_: dict[str, int] = {}
    for i, node in enumerate(nodes):
        paths = set(node.calls or _prefixes(node.module)) if node.in_call else set()
        for call in [p for p in open_ if p not in paths]:
            calls.append((call.partition("@")[0], open_.pop(call), i - 1))
        for call in paths - open_.keys():
            open_[call] = i
    calls += [(call.partition("@")[0], first, len(nodes) - 1) for call, first in open_.items()]
    for path, first, last in calls:
        for node in nodes[first : last + 1]:
            own = node.module == path
            gathered = own and node.kind in GATHERED and not node.stack
            for key in node.reads:
                if key in born and (born[key] < first or gathered):
                    dies[key] = max(dies[key], last)
            if own and not node.stack:  # no record of the code: what it returns is a local
                for key in node.views:
                    if key in born and dies[key] > born[key]:
                        dies[key] = max(dies[key], last)
    held_by_composites(nodes, born, dies)
    held_by_helpers(nodes, born, dies)
    sources: dict = {}  # file -> its parsed code, and what ``rebinding`` read of it
    _locals(nodes, born, dies, calls, (sources, uncalled))
    _unread(nodes, born, dies, calls, (sources, uncalled))
    _handed_back(nodes, born, dies, calls, (sources, uncalled))
    _helpers(nodes, born, dies, sources)


def _uncalled(nodes: list[NodeCost]) -> frozenset[str]:
    """The module paths that hold modules the graph calls but were never called themselves:
    an ``nn.ModuleList`` or ``ModuleDict``, whose blocks the caller's own loop calls, where a
    ``Sequential``'s call runs them. Only where the graph records each node's calls."""
    called = {call.partition("@")[0] for node in nodes for call in node.calls}
    held = {path for node in nodes if node.calls for path in _prefixes(node.module)}
    return frozenset(held - called)


def _helpers(
    nodes: list[NodeCost], born: dict[Any, int], dies: dict[Any, int], sources: dict
) -> None:
    """Hold what a helper function makes across the module calls it makes after. An export
    keeps only ``forward`` frames, so a helper's ops (densenet's ``self.bn_function(x)``,
    timm swin's ``self._attn(x)``) all read as its caller's one line, where its locals cannot
    be told from one expression's temporaries; eager holds them until it returns or rebinds
    them. Held to the end of the last module call the statement makes (``cat`` ... ``conv1``,
    the windows ... ``self.attn``): a helper's locals outlive its submodules' calls, as these
    do; what it makes after its last call, and a helper that calls no module (torchvision's
    ``shifted_window_attention``), read as temporaries, under eager by a local or two. A
    helper whose lines were recorded (``engine/helper_frames.py``) runs its ops in frames of
    its own, and they are not held so; nor one whose code, and its helpers', holds no name
    past its last read (``rebinding.holds_past_reads``: timm ResNet's ``forward_features``,
    ``x = self.conv1(x)`` ... ``x = self.layer4(x)``)."""
    paths = {p for node in nodes for p in _prefixes(node.module)}
    run: tuple[tuple, int, int] = ((), -1, -1)  # a statement's stack, last node, last call's
    for key, start in born.items():
        node = nodes[start]
        if not (node.stack and node.in_call) or start > dies[key]:
            continue
        where, line = node.stack[-1]
        own = f"{node.module}." if node.module else ""
        helpers = calls_helper(where, line, sources, lambda name, own=own: own + name in paths)
        if not any(holds_past_reads(where, name, sources) for name in helpers):
            continue  # none, or each drops every value at its last read
        if run[0] != node.stack or run[1] < start:
            end, depth, called = start, len(node.stack), -1
            while end + 1 < len(nodes) and nodes[end + 1].stack[:depth] in (node.stack, ()):
                end += 1
                called = end if len(nodes[end].stack) > depth else called
            run = (node.stack, end, called)
        dies[key] = max(dies[key], run[2])


def _locals(
    nodes: list[NodeCost], born: dict[Any, int], dies: dict[Any, int], calls: list, read: tuple
) -> None:
    """Keep what a module's forward binds to a local alive until its call ends: a value made
    by one statement of the forward and read by another (``e = self.wte(ids)`` ...
    ``h = e + p``; ``h = x * 2`` ... ``self.fc(h)``). A temporary of one expression
    (``0.5 * x * (1 + tanh(...))``, GELU's) is freed after its last reader, as Python frees it.
    Told apart by the code that called each op (``NodeCost.stack``, the graph's record): below
    the frames the maker and the reader share, both ran in one function at different lines.
    The function is the innermost module's that holds both (``path``), not one of its
    children's: in a loop over blocks, one block's function is another block's call. It is
    that module's if each child it called (maker's, reader's) ran from one line of it
    (``_shared``). ``read``: the parsed sources, and the containers never called (a
    ``ModuleList``: the function that walks it is its caller's). Where the code rebinds the name
    (``x = self.ln(x)`` ... ``x = a + r``), the old value dies once that statement has run
    (``held_until``), not at the call's end."""
    ends: dict[str, list[tuple[int, int]]] = {}
    sources, uncalled = read
    for path, first, last in calls:
        ends.setdefault(path, []).append((first, last))
    shared: dict = {}  # (path, first node) -> frames shared by that call's nodes
    rebound: dict = {}  # (key, frame, end) -> ``held_until``
    for i, reader in enumerate(nodes):
        for key in reader.reads if reader.stack and reader.in_call else ():
            maker = nodes[born[key]] if key in born else reader
            if maker is reader or not maker.stack:
                continue
            path = _common(maker.module, reader.module, uncalled)
            frame = _two_statements(maker, reader, sources)
            if frame >= 0 and not all(
                _shared(nodes, ends, _child(path, node.module, uncalled), at, shared) > frame
                for node, at in ((maker, born[key]), (reader, i))
                if node.module != path
            ):
                frame = -1
            if frame < 0:
                pair = ((maker, born[key]), (reader, i))
                frame = _two_turns(nodes, ends, path, pair, (uncalled, shared, sources))
            if frame >= 0:
                runs = ends.get(path, [(0, len(nodes) - 1)])  # the root's: the whole graph
                end = max(last for first, last in runs if first <= i <= last)
                if (key, frame, end) not in rebound:
                    rebound[key, frame, end] = held_until(
                        nodes, key, (born[key], i), (frame, end, path), sources, uncalled
                    )
                until = rebound[key, frame, end]  # None: the code does not say more of it
                if until is None and appends_to_parameter(*maker.stack[frame], sources):
                    end = _caller_end(calls, maker, path, (i, len(nodes) - 1))  # its list's
                dies[key] = max(dies[key], end if until is None else until)


def _caller_end(calls: list, node: NodeCost, path: str, at: tuple[int, int]) -> int:
    """The last node of the call that called ``path``'s call running node ``at[0]``: the
    module call ``node`` runs in just outside it; the root's (the graph's last node,
    ``at[1]``) where none is."""
    names = [call.partition("@")[0] for call in node.calls]
    outer = names[names.index(path) - 1] if path in names[1:] else ""
    runs = [last for p, first, last in calls if p == outer and first <= at[0] <= last]
    return max(runs, default=at[1])


def _unread(
    nodes: list[NodeCost], born: dict[Any, int], dies: dict[Any, int], calls: list, read: tuple
) -> None:
    """Hold a value no op reads until its name is bound again, where the statement that made
    it binds it to one (DeBERTa's ``token_type_ids = torch.zeros(...)``, which an embedding
    with no token types never reads): Python holds a local until then, or until the function
    returns, and frees only a temporary at once; to the graph's end where it binds it to an
    object's attribute (``rebinding.stores_attribute``). Not an op's output where another of
    its outputs is read: that one is the name's. ``read``: as ``_locals``'s."""
    sources, uncalled = read
    readers = {key for node in nodes for key in node.reads}
    for i, node in enumerate(nodes):
        if readers.intersection(node.writes):  # what the statement binds is what is read; the
            continue  # rest its op's own (``F.batch_norm``'s saved mean, timm's ScaledStdConv2d)
        for key in node.writes if node.stack and node.in_call else ():
            if born.get(key) != i or dies[key] > i:
                continue
            if rebinding(*node.stack[-1], sources) is None:  # a temporary, or the code won't say
                if stores_attribute(*node.stack[-1], sources):  # an object's: held to the end
                    dies[key] = len(nodes) - 1
                continue
            runs = [last for path, first, last in calls if path == node.module and first <= i]
            end = min((last for last in runs if last >= i), default=len(nodes) - 1)
            within = (len(node.stack) - 1, end, node.module)
            until = held_until(nodes, key, (i, i), within, sources, uncalled)
            dies[key] = max(dies[key], end if until is None else until)


def _handed_back(
    nodes: list[NodeCost], born: dict[Any, int], dies: dict[Any, int], calls: list, read: tuple
) -> None:
    """Hold what a module's call hands back as it was handed in (SelecSLS's block returns
    ``[self.conv6(torch.cat([d1, d2, d3, x[1]], 1)), x[1]]``) as its caller holds the call's
    result (``x = module(x)``: until the next turn's call returns), and its caller's caller
    where the caller returns it in turn, though nothing the graph records reads it after: a
    value made before the call and last read by the ``return`` statement of its ``forward``
    (``rebinding.returns_argument``). ``read``: as ``_locals``'s."""
    sources, uncalled = read
    last: dict = {}
    for i, node in enumerate(nodes):
        last.update(dict.fromkeys(node.reads, i))
    for key, i in last.items():
        reader = nodes[i]
        if key not in born or not (reader.calls and reader.stack and reader.in_call):
            continue
        path, modules = reader.calls[-1].partition("@")[0], _frame_modules(reader)
        if path != reader.module or not reader.stack[-1][0].endswith(":forward") or not modules:
            continue
        run = next(((f, t) for p, f, t in calls if p == path and f <= i <= t), (0, 0))
        if born[key] >= run[0] or not returns_argument(*reader.stack[-1], sources):
            continue
        for frame in range(len(reader.stack) - 2, -1, -1):  # each caller it is handed back to
            if reader.stack[frame][0].endswith("_call_impl"):
                continue  # torch's own, that torch 2.4's export records: not the caller's code
            path = modules[frame]
            end = next((t for p, f, t in calls if p == path and f <= i <= t), len(nodes) - 1)
            until = held_until(nodes, key, (i, i), (frame, end, path), sources, uncalled)
            dies[key] = max(dies[key], end if until is None else until)
            found = rebinding(*reader.stack[frame], sources)
            if until is None or until < end or not (found and found.returned):
                break


def _frame_modules(node: NodeCost) -> list[str] | None:
    """The module whose code each frame of ``node``'s stack runs: ``""`` (the root's) from the
    first frame, each recorded call's from its ``forward``, a helper's its caller's; None
    where the frames of ``forward`` are not one a call."""
    modules, calls = [], ["", *(call.partition("@")[0] for call in node.calls)]
    at = -1
    for where, _ in node.stack:
        at += where.endswith(":forward") or at < 0
        modules.append(calls[at] if at < len(calls) else None)
    return None if None in modules or at != len(calls) - 1 else modules


def _two_turns(nodes: list[NodeCost], ends: dict, path: str, pair: tuple, memo: tuple) -> int:
    """The frame of the line that called both, where the maker and the reader ran in two
    blocks of one container never called, from one line: one turn's result read by the next
    turn's call (``for block in self.h: x = block(x)``), so a name held it between them; -1
    where not. ``memo``: the containers never called, ``_shared``'s answers and the parsed
    sources."""
    uncalled, shared, sources = memo
    (maker, made), (reader, read) = pair
    a, b = _child(path, maker.module, uncalled), _child(path, reader.module, uncalled)
    container = a.rpartition(".")[0]
    one_container = container in uncalled and container == b.rpartition(".")[0]
    if not one_container or call_of(maker, a) == call_of(reader, b):
        return -1
    calls = _shared(nodes, ends, a, made, shared), _shared(nodes, ends, b, read, shared)
    for frame in range(min(len(common_frames(maker.stack, reader.stack)), *calls) - 1, -1, -1):
        if in_loop(*maker.stack[frame], sources):  # a block's one-line forward shares its line
            return frame
    return -1


def _shared(nodes: list[NodeCost], ends: dict, path: str, at: int, memo: dict) -> int:
    """How many outer frames every node of the call of ``path`` that runs node ``at`` shares:
    the frames of its callers, down to the line that called it."""
    for first, last in ends.get(path, ()):
        if first <= at <= last:
            if (path, first) not in memo:
                common: tuple = ()
                for k, node in enumerate(n for n in nodes[first : last + 1] if n.stack):
                    common = node.stack if k == 0 else common_frames(common, node.stack)
                memo[path, first] = len(common)
            return memo[path, first]
    return 0


def _child(path: str, module: str, uncalled: frozenset) -> str:
    """The call ``path`` makes that holds ``module`` (``path`` holds it): its child, or the
    child's child where the child is a container never called."""
    parts = module.split(".")
    depth = len(path.split(".")) if path else 0
    while ".".join(parts[: depth + 1]) in uncalled:
        depth += 1
    return ".".join(parts[: depth + 1])


def _common(a: str, b: str, uncalled: frozenset) -> str:
    """The innermost module call that holds both ``a`` and ``b`` (``""``: the root): a
    container never called holds none."""
    shared = []
    for x, y in zip(a.split(".") if a else [], b.split(".") if b else [], strict=False):
        if x != y:
            break
        shared.append(x)
    while ".".join(shared) in uncalled:
        shared.pop()
    return ".".join(shared)


def _two_statements(maker: NodeCost, reader: NodeCost, sources: dict) -> int:
    """The frame at which, below the frames they share, the two ops ran in one function at
    two statements; -1 where they did not (two lines of one statement are one)."""
    for k, (made, read) in enumerate(zip(maker.stack, reader.stack, strict=False)):
        if made != read:
            lines = made[1], read[1]
            same = made[0] == read[0] and one_function(made[0], lines, sources)
            return k if same and not one_statement(made[0], lines, sources) else -1
    return -1


def _prefixes(path: str) -> list[str]:
    """``a.b.c`` -> ``a``, ``a.b``, ``a.b.c`` (the calls a node runs inside); none at the root."""
    parts = path.split(".") if path else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]
