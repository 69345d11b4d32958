"""What a call holds: an op's or a function's arguments, alive until it returns.

Two rules of ``liveness``'s for an exported graph, which records no frees: torch's own
composite ops (``matmul`` run as several ATen ops) and the user's helper functions
(``self._attn(self.norm1(x))``) hold what they are handed until their last op, though no
line of the caller's names it after the call starts. Inside a composite, what it makes
lives as its C++ code holds it: a ``matmul`` it calls holds its operands, a local of the
kernel lives to its end.
"""

from __future__ import annotations

import re
from typing import Any

from pytest_graphbudget.engine.nodes import NodeCost


def held_by_composites(nodes: list[NodeCost], born: dict[Any, int], dies: dict[Any, int]) -> None:
    """Keep an op's arguments alive until its last ATen op returns, where torch runs it as
    several (``matmul``'s expand, clone and ``bmm``; ``engine/split.py`` names them
    ``matmul_2.clone``): the call holds them, as a module's call holds its arguments. So
    ``F.normalize(q) @ F.normalize(k).T`` holds both normalized tensors through the ``bmm``."""
    first = 0
    for i in range(len(nodes) + 1 if nodes else 0):
        group = nodes[first].name.partition(".")
        if i < len(nodes) and group[1] and nodes[i].name.partition(".")[0] == group[0]:
            continue
        for node in nodes[first:i] if group[1] else ():
            for key in node.reads:
                if key in born and born[key] < first:
                    dies[key] = max(dies[key], i - 1)
        if group[1]:
            _held_inside(nodes, (first, i - 1), born, dies)
        first = i if i < len(nodes) else first


KERNEL_LOCALS = {"scaled_dot_product_attention": frozenset({"mul"})}
"""ATen composites' own locals, held until the kernel returns: the math attention kernel's
(``_scaled_dot_product_attention_math``, CPU attention on 5-D inputs or with dropout) scaled
query, ``query_ * scaling_factor``. Its weights, which it returns too, are the last matmul's
operand, held to the end by that."""

MATMUL_OPERANDS = frozenset({"expand", "clone", "_unsafe_view", "view", "reshape"})
"""What ``matmul`` runs before its ``bmm``: its operands broadcast, copied and flattened."""


def _held_inside(nodes: list[NodeCost], span: tuple[int, int], born: dict, dies: dict) -> None:
    """Inside one composite's ops (``span``): a ``matmul`` it calls holds its operands and its
    copies of them until its last op (the ``bmm`` and the view after it), and the kernel's
    locals (``KERNEL_LOCALS``) live until the composite's last op."""
    first, last = span
    kernel = re.sub(r"_\d+$", "", nodes[first].name.partition(".")[0])
    for j in range(first, last + 1):
        if nodes[j].name.partition(".")[2] in KERNEL_LOCALS.get(kernel, ()):
            for key in nodes[j].writes:
                dies[key] = max(dies[key], last)
        if _op(nodes[j]) != "bmm":
            continue
        start, end = j, min(j + 1, last)
        while start > first and _op(nodes[start - 1]) in MATMUL_OPERANDS:
            start -= 1
        end = end if _op(nodes[end]) in MATMUL_OPERANDS else j
        for node in nodes[start : end + 1]:
            for key in node.reads | node.writes.keys():
                if key in born and born[key] <= end:
                    dies[key] = max(dies[key], end)


def _op(node: NodeCost) -> str:
    """The ATen op a composite's node ran: ``matmul_2.clone_1`` -> ``clone``."""
    return re.sub(r"_\d+$", "", node.name.partition(".")[2])


def held_by_helpers(nodes: list[NodeCost], born: dict[Any, int], dies: dict[Any, int]) -> None:
    """Keep what a function is handed alive until it returns: ``self._attn(self.norm1(x))``
    binds norm1's result to ``_attn``'s parameter, which holds it through the call, though no
    line of the caller's names it. Told by the stacks: the reader runs in a call its maker's
    stack does not enter (``_entered``), and that call lasts while the nodes after it run
    inside it (``_inside``)."""
    runs: dict[tuple, tuple[int, int]] = {}  # a call -> the first and last node of its run
    for i, reader in enumerate(nodes):
        for key in reader.reads if reader.stack else ():
            maker = nodes[born[key]] if key in born else reader
            call = _entered(maker, reader) if maker is not reader else None
            if call is None:
                continue
            first, last = runs.get(call, (-1, -1))
            if not first <= i <= last:
                first = last = i
                while last + 1 < len(nodes) and _inside(nodes[last + 1], call):
                    last += 1
                runs[call] = (first, last)
            dies[key] = max(dies[key], last)


MODULE_CALLS = (":forward", "_call_impl")
"""Frames of a module's call: its ``forward``, and torch's ``Module._call_impl`` (and
``_wrapped_call_impl``), which torch 2.4's export records in its stacks too."""


def _entered(maker: NodeCost, reader: NodeCost) -> tuple | None:
    """The call the reader runs in and the maker does not: the frames they share and the
    function of the reader's next frame (one frame further where both stand in one function
    at two lines: a loop's body, not a call). None where the reader runs in no such call, or
    where the call is a module's (``MODULE_CALLS``), which ``liveness._held_by_calls`` holds
    by the module calls the graph records (a stack cannot tell ``layer1``'s from
    ``layer2``'s where both ran from one line, ResNet's ``_forward_impl``)."""
    if not maker.stack:
        return None
    k = len(common_frames(maker.stack, reader.stack))
    if k < min(len(maker.stack), len(reader.stack)) and maker.stack[k][0] == reader.stack[k][0]:
        k += 1
    if k >= len(reader.stack) or reader.stack[k][0].endswith(MODULE_CALLS):
        return None
    return reader.stack[:k], reader.stack[k][0]


def _inside(node: NodeCost, call: tuple) -> bool:
    """Whether ``node`` runs inside ``call``; one that records no code (torch's own) does."""
    frames, function = call
    k = len(frames)
    return not node.stack or (
        len(node.stack) > k and node.stack[:k] == frames and node.stack[k][0] == function
    )


def common_frames(a: tuple, b: tuple) -> tuple:
    """The outermost frames two stacks share."""
    for k, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return a[:k]
    return a if len(a) <= len(b) else b
