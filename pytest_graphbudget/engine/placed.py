"""Where a helper an export did not record called a submodule: the helper's line, placed.

``torch.export`` records ``forward`` frames only. The ops of a submodule that a helper calls
(timm PNASNet's ``forward_features``: ``x_cell_8 = self.cell_8(x_cell_6, x_cell_7)``) then
read as run from the forward's one line that called the helper, and the helper's locals,
which eager holds until it returns, read as one expression's temporaries: NASNet-A Large's
export read 43% under eager. Where the helper's code calls that submodule at one statement
(``self.cell_8(...)``, ``self.blocks[i](x)``, ``blk(x)`` of ``for blk in self.blocks``), that
statement's frame is placed between the two, as this project's own export records it
(``engine/helper_frames.py``), and ``engine/liveness.py`` reads the helper's names as any
function's. Only where no op runs at the caller's line itself: a helper's own ops (HRNet's
``y = incre(yl[i]) + down.forward(y)``) have no line to place, and its locals read half
placed, half not, would be neither eager's nor the unplaced reading; ``engine/unrecorded.py``
names such helpers.
"""

from __future__ import annotations

import ast
from typing import Any

from pytest_graphbudget.engine import references as refs
from pytest_graphbudget.engine import source as src
from pytest_graphbudget.engine.nodes import NodeCost
from pytest_graphbudget.engine.rebinding import calls_helper


def place_helper_lines(nodes: list[NodeCost]) -> frozenset[str]:
    """Place, in each node's stack, the lines of the unrecorded helpers that called the
    submodule the next frame runs; the helpers placed (``"file:function"``). Only a stack of
    one frame a module call (an export's, ``NodeCost.calls``) is read."""
    parts = [node.module.split(".") for node in nodes if node.module]
    paths = {".".join(p[: i + 1]) for p in parts for i in range(len(p))}
    named = {where.rpartition(":")[2] for node in nodes for where, _ in node.stack}
    direct = {node.stack for node in nodes}  # a statement that runs ops of its own, not placed
    sources: dict = {}
    lines: dict[tuple, tuple] = {}
    for node in nodes:
        stack, calls = node.stack, node.calls
        if not stack or len(stack) != len(calls) + 1:
            continue
        modules = ["", *(call.partition("@")[0] for call in calls)]
        placed: list = []
        for k, frame in enumerate(stack):
            key = (frame, *modules[k : k + 2])
            if k + 1 < len(stack) and key not in lines:
                mixed = stack[: k + 1] in direct
                lines[key] = () if mixed else _helper_lines(*key, paths, named, sources)
            placed += [frame, *lines.get(key, ())]
        node.stack = tuple(placed)
    return frozenset(frame[0] for found in lines.values() for frame in found)


def _helper_lines(
    frame: tuple, parent: str, child: str, paths: set, named: set, sources: dict
) -> tuple:
    """The frames of the statements of the helpers, called at ``frame`` (of module
    ``parent``), that led to the call of the submodule ``child``: one helper's statement
    that calls it, or one that calls another helper of the file that does (``yl =
    self.stages(x)`` in one helper, ``x = self.layer1(x)`` in ``stages``). ``()``
    where the statement at ``frame`` calls it itself, or no helper does, or more than one
    statement may."""
    (where, line), own = frame, f"{parent}." if parent else ""
    if not child.startswith(own):
        return ()
    attribute, (file, _, function) = child[len(own) :].split(".")[0], where.rpartition(":")
    units, *_ = src.statements(file, function, line, sources)
    at = src.index_of(units, line)
    if at is None or _calls(units[at][0], attribute, _loop_names(units, attribute)):
        return ()
    helpers = calls_helper(where, line, sources, lambda name: own + name in paths)
    owner = src.enclosing_class(file, line)
    found = [c for h in helpers if h not in named for c in _chains(file, h, attribute, owner)]
    return found[0] if len(found) == 1 else ()


def _chains(file: str, helper: str, attribute: str, owner: Any, depth: int = 3) -> list:
    """Each chain of statements, from one of ``helper``'s in ``file`` (a method of the class
    ``owner``, or a function of the module), that calls ``self.<attribute>``: directly, or
    through another helper of the file, ``depth`` deep."""
    found, sources = [], {}
    for func in src.definitions(file).get(helper, []) if depth > 0 else ():
        if src.enclosing_class(file, func.lineno) not in (owner, None):
            continue  # another class's method of that name
        body, *_ = src.statements(file, helper, func.lineno, sources)
        names, where = _loop_names(body, attribute), f"{file}:{helper}"
        for stmt, (first, _), _ in body:
            if _calls(stmt, attribute, names):
                found.append(((where, first),))
                continue
            for inner in src.called_functions(refs.own(stmt), file) - {helper}:
                deeper = _chains(file, inner, attribute, owner, depth - 1)
                found += [((where, first), *chain) for chain in deeper]
    return found


def _calls(stmt: ast.stmt, attribute: str, names: frozenset) -> bool:
    """Whether the statement calls ``self.<attribute>``, an item of it, its ``forward``, or a
    name a loop binds to its items (``names``)."""
    for node in refs.own(stmt):
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(func, ast.Attribute) and func.attr == "forward":
            func = func.value
        while isinstance(func, ast.Subscript):
            func = func.value
        if isinstance(func, ast.Name) and func.id in names:
            return True
        if isinstance(func, ast.Attribute) and func.attr == attribute:
            if isinstance(func.value, ast.Name) and func.value.id == "self":
                return True
    return False


def _loop_names(units: list[src.Unit], attribute: str) -> frozenset:
    """The names a ``for`` binds to the items of ``self.<attribute>`` (``for blk in
    self.blocks``, ``enumerate(...)``, ``.items()``, ``.values()``)."""
    found: set[str] = set()
    for stmt, _, _ in units:
        if not isinstance(stmt, ast.For):
            continue
        over = stmt.iter
        if isinstance(over, ast.Call) and isinstance(over.func, ast.Name) and over.args:
            over = over.args[0]  # enumerate(self.blocks)
        if isinstance(over, ast.Call) and isinstance(over.func, ast.Attribute):
            over = over.func.value if over.func.attr in ("items", "values") else over
        if isinstance(over, ast.Attribute) and over.attr == attribute:
            if isinstance(over.value, ast.Name) and over.value.id == "self":
                found |= {n.id for n in ast.walk(stmt.target) if isinstance(n, ast.Name)}
    return frozenset(found)
