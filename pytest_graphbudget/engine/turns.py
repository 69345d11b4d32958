"""When the statement that rebinds a local ran, read from the stacks an exported graph records.

``rebinding.rebinding`` reads from the source which statements run from the one that binds
a name to the one that binds it again; the graph's nodes, in the order they ran, say whether
and where those statements ran: a branch not taken, a loop's next turn (told apart by the
block of a container each turn calls), a function that returned first. ``liveness._locals``
holds a value until then.
"""

from __future__ import annotations

from typing import Any

from pytest_graphbudget.engine.nodes import NodeCost
from pytest_graphbudget.engine.rebinding import Rebound, from_binding, rebinding


def held_until(
    nodes: list[NodeCost], key: Any, pair: tuple, within: tuple, sources: dict, uncalled: frozenset
) -> int | None:
    """The last node before the statement that rebinds the name the value ``key`` is bound to
    has run (``rebinding.rebinding``, at ``frame`` of the stacks of ``pair``: the nodes that
    made it and that read it in another statement), or before its function returned if none
    does; ``end`` where another name may still hold it (it is read after, or returned);
    ``None`` where the code does not say. A rebinding that hands the value on
    (``x = self.drop(x)``, the same tensor) is followed to the next, and so is one in a
    branch not taken, from the statement that bound it still. ``within``: ``frame``,
    ``end`` and the module whose code that frame runs; ``uncalled``: the containers whose
    blocks a loop calls (``where_ran``)."""
    start, (frame, end, path) = pair[0], within
    prefix, (where, line) = nodes[start].stack[:frame], nodes[start].stack[frame]
    read_at = frozenset(
        n.stack[frame][1]
        for n in nodes[start + 1 : end + 1]
        if key in n.reads
        and n.stack[:frame] == prefix
        and len(n.stack) > frame
        and n.stack[frame][0] == where  # fmt: skip
    )
    callee = nodes[start].stack[frame + 1] if len(nodes[start].stack) > frame + 1 else ()
    found = rebinding(where, line, sources, read_at, callee)
    if found is None:
        return None
    after, spans = start + 1, []
    for _ in range(64):
        # from the binding to this rebinding; None where nothing rebinds it: to the return
        spans = spans[:-1] + found.spans if found.spans else None
        block = block_of(nodes[after - 1], uncalled, path)
        code = (frame, prefix, where, turn_of(nodes[after - 1], path, block), path)
        at, how = where_ran(nodes[after : end + 1], code, spans, found, uncalled)
        if how == "skipped":  # in a branch not taken or a loop that did not turn: the next one
            found = rebinding(where, found.spans[-1][0], sources, read_at)
            if found is None:
                return end
            found = from_binding(found, where, line, sources)  # what bound it ran, not this
            continue
        if how is None:
            return end
        at += after
        read = any(key in n.reads for n in nodes[at : end + 1])
        if how == "turned":  # the binding statement, run again, rebound it
            return end if read else at - 1
        if how == "returned":  # its locals go; a value it returns, its caller holds if it reads
            copied = key in nodes[at - 1].reads and nodes[at - 1].writes  # ``.contiguous()``
            return end if found.returned and not (read or copied) else at - 1
        if not read:
            return at - 1
        if not found.hands_on:  # another name holds it (a container that may: read after)
            return end
        line = found.spans[-1][0]  # it ran: the value is bound there now
        found, after, spans = rebinding(where, line, sources, read_at), at, []
        if found is None:
            return end
    return end


def where_ran(
    nodes: list[NodeCost], code: tuple, spans: list | None, found: Rebound, uncalled: frozenset
) -> tuple[int, str | None]:
    """The first of ``nodes`` after the last of ``spans`` (statements, the rebinding last) ran,
    and how: ``"ran"``, at a statement of that function's call outside them or at an earlier
    one of them (a loop's next turn); ``"skipped"``, the same with no op seen of a rebinding
    that might not run (``Rebound.confirm``); ``"returned"``, outside the function's call
    before the rebinding ran (or at all where ``spans`` is None: nothing rebinds it);
    ``"turned"``, after the loop's next turn ran the binding statement again, or a statement
    before it that binds the name (``Rebound.turns``, ``Rebound.before``: a value bound in a
    loop, rebound after it); ``None`` where none is, or where the graph does not say.
    ``code``: the function's frame, the frames above it, its ``"file:function"``, the turn
    the value's statement ran in (``turn_of``), and the module whose code it is.

    A loop whose one statement calls the next block of a container (``for block in self.h:
    x = block(x)``) runs its next turn at the same line: the turn changes where the block
    does (``h.0`` ... ``h.1``, ``uncalled`` holding ``h``), where the rebinding may run."""
    frame, prefix, where, first, path = code
    seen, ran, again, called, turn = 0, False, False, {}, ""
    for j, node in enumerate(nodes):
        stack = node.stack
        if not stack:
            continue
        if len(stack) <= frame or stack[:frame] != prefix or stack[frame][0] != where:
            return j, "ran" if ran else "turned" if again else "returned"
        if spans is None:
            continue
        at = next((k for k, (a, b) in enumerate(spans) if a <= stack[frame][1] <= b), -1)
        block = block_of(node, uncalled, path)
        if found.turns and not ran:  # the loop's next turn may run before the rebinding after it
            line = stack[frame][1]
            if again:  # the statement that rebinds it in the next turn, till it has run
                if not (again[0] <= line <= again[1] and turn_of(node, path, block) == turn):
                    return j, "turned"
                continue
            before = next((s for s in found.before if s[0] <= line <= s[1]), None)
            now = turn_of(node, path, block)
            before = before if now != first else None  # a new turn
            if before or (at == 0 and ((now and now != first) or seen > 0)):
                again, turn = before or spans[0], now  # a new turn: another block, or the
                continue  # body run from its start again
            if at < 0 and spans[-1] == spans[0]:
                continue  # past the loop, and nothing after it rebinds the name: to the return
            if at < seen:
                return 0, None  # a turn the graph cannot tell apart: the caller holds it
        if at < seen:
            return j, "ran" if ran or not found.confirm else "skipped"
        if block and at == len(spans) - 1:  # a block of a container it
            container = block.partition("@")[0].rpartition(".")[0]  # called, called anew: the
            if ran and called.get(container, block) != block:  # rebinding ran, the loop's
                return j, "ran"  # next turn runs it again
            called[container] = block
        seen, ran = at, ran or at == len(spans) - 1
    return 0, None


def turn_of(node: NodeCost, path: str, block: str) -> str:
    """What tells a loop's turns apart at one line: the first module call ``node`` runs in
    below ``path`` (twins' ``blocks.0.1`` inside the ``blocks.0`` that ``block_of`` names), or
    ``block`` where the graph records none."""
    below = f"{path}." if path else ""
    return next((c for c in node.calls if c.startswith(below) and c != path), block)


def block_of(node: NodeCost, uncalled: frozenset, path: str) -> str:
    """The call of a block of a container never called that runs ``node`` (``h.0`` for an op
    of ``h.0.attn`` where ``h`` is a ``ModuleList``; ``layers.0@2`` for its third call), a
    container of ``path``'s own, whose code the loop is: not one inside a module it calls
    (res2net's ``convs``, inside the ``layer1`` that ``x = self.layer1(x)`` calls); ``""``
    where none holds it."""
    parts = node.module.split(".") if node.module else []
    start = len(path.split(".")) if path else 0
    called = {call.partition("@")[0] for call in node.calls}
    for i in range(max(start, 1), len(parts)):
        if ".".join(parts[:i]) in uncalled:
            return call_of(node, ".".join(parts[: i + 1]))
        if i > start and ".".join(parts[:i]) in called:
            return ""
    return ""


def call_of(node: NodeCost, path: str) -> str:
    """The call of ``path`` that runs ``node``: ``path@k`` for its k-th call after the first."""
    return next((c for c in node.calls if c.partition("@")[0] == path), path)
