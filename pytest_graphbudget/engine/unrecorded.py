"""Helper functions whose lines an exported graph does not record, said in the profile.

``torch.export`` records the line that called each op in ``forward`` methods only (this
project's own export records the model's helper functions too, ``engine/helper_frames.py``,
on torch 2.13 and later). The ops of a helper it did not record all read as its caller's one
line, so ``engine/liveness.py`` cannot tell the helper's locals, which eager holds until it
returns, from one expression's temporaries, and reads them freed after their last reader: the
peak can read under eager's. That under is not measured, so the profile names the helpers.
"""

from __future__ import annotations

from pytest_graphbudget.engine.nodes import Measured
from pytest_graphbudget.engine.rebinding import calls_helper, holds_past_reads

UNRECORDED = "peak memory may read under"


def unrecorded_note(measured: Measured) -> str:
    """A note naming the helper functions the graph ran without recording their lines, or
    ``""``: a statement that runs ops one of which reads another's result (a helper's body,
    read as one line), or one that a submodule's result returned into dies inside of
    (``_returned_into``) where the function's code holds a name past its last read
    (``holds_past_reads``), calls a function whose name no frame bears. Only a graph that
    records lines and no frees (an export) is read so."""
    nodes = measured.nodes
    if measured.frees is not None or not any(node.stack for node in nodes):
        return ""
    frames = {where for node in nodes for where, _ in node.stack} - measured.placed
    named = {where.rpartition(":")[2] for where in frames}  # recorded, not placed
    parts = [node.module.split(".") for node in nodes if node.module]
    paths = {".".join(p[: i + 1]) for p in parts for i in range(len(p))}  # every module's
    made: dict[tuple, set] = {}  # a statement's frames -> what its own ops wrote
    chained: dict[tuple, str] = {}  # statements one of whose ops reads another's, -> module
    for node in nodes:
        if node.stack and node.in_call:
            if node.reads & made.get(node.stack, set()):
                chained[node.stack] = node.module
            made.setdefault(node.stack, set()).update(node.writes)
    sources: dict = {}
    found: dict[str, None] = {}
    for statements, chain in ((chained, True), (_returned_into(nodes), False)):
        for stack, module in statements.items():
            own = f"{module}." if module else ""
            where = stack[-1][0]
            called = calls_helper(*stack[-1], sources, lambda name, own=own: own + name in paths)
            called = [c for c in called if chain or holds_past_reads(where, c, sources)]
            found.update(dict.fromkeys(name for name in called if name not in named))
    if not found:
        return ""
    return (
        f"{UNRECORDED}: the graph records no lines of {', '.join(sorted(found))}, functions "
        "its forward calls, so their locals read as freed after their last use; profile the "
        "model itself, not an export of it, on torch 2.13 or later to count them"
    )


def _returned_into(nodes: list) -> dict[tuple, str]:
    """The statements of an outer frame (``y = self.forward_features(x)``) inside whose run a
    value made by a submodule it calls is last read, with ops of that statement after: a
    helper's local (HRNet's ``x = self.bn2(x)`` ... ``self.stages(x)``) that eager holds to
    the helper's end. -> the module whose code the statement is, where the graph says (one
    frame a module call: ``""``, then each call's)."""
    last: dict = {}
    for i, node in enumerate(nodes):
        last.update(dict.fromkeys(node.reads, i))
    found: dict[tuple, str] = {}
    for i, node in enumerate(nodes):
        stack, calls = node.stack, node.calls
        if not (stack and node.in_call) or len(stack) != len(calls) + 1:
            continue
        modules = ["", *(call.partition("@")[0] for call in calls)]
        for key in node.writes:
            reader = last.get(key, -1)
            after = next((nodes[j] for j in range(reader + 1, len(nodes)) if nodes[j].stack), None)
            after = after if reader > i else None
            for k in range(len(stack) - 1) if after is not None else ():
                statement = stack[: k + 1]
                if nodes[reader].stack[: k + 1] == after.stack[: k + 1] == statement:
                    found.setdefault(statement, modules[k])
    return found
