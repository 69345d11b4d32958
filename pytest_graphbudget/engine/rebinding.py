"""Where a forward's code rebinds a local: an exported graph records the line that called each
op but not which names hold which values, so the source says when a local's old value was
dropped (``x = self.ln(x)`` ... ``x = a + r``), as eager Python drops it.

Read with ``ast`` from the file the stack trace names. Only the plain case counts: one name
bound by one statement and bound again by a later one (in its block, or in a loop or a branch
after it: the graph says whether that ran), with nothing in between that could keep a second
reference (an alias, a container, a method of another object, a closure, a jump). Anything
else gives ``None``: the caller holds the value longer, over rather than under what eager
holds.
"""

from __future__ import annotations

import ast
import builtins
import functools
import linecache
import os
from collections.abc import Callable
from dataclasses import dataclass

SAFE_CALLERS = frozenset({"self", "torch", "F", "nn", "functional", "math"})
"""Objects whose methods take a tensor without keeping it: the module's submodules, torch's
functions. A method of any other object (``cache.update(k, v)``) may store its argument."""

TENSOR_METHODS = frozenset(
    {"type_as", "expand_as", "view_as", "reshape_as", "to", "copy_", "masked_fill", "where"}
    | {"matmul", "mul", "div", "sub", "pow", "bmm", "mm", "eq", "ne", "lt", "le", "gt", "ge"}
)
"""Tensor methods that read a tensor argument without keeping it (``x.type_as(y)``): a
method of another object may store it; ``add`` is left out (a ``set`` has one)."""

METADATA = frozenset(
    {"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "layout", "size", "dim"}
    | {"numel", "stride", "element_size", "is_contiguous", "is_floating_point", "get_device"}
)
"""What a tensor says of itself that is not a tensor: ``b = x.shape[0]``, ``x.size(1)``."""

VIEWS = frozenset(
    {"view", "reshape", "flatten", "unflatten", "permute", "transpose", "swapaxes", "movedim"}
    | {"unsqueeze", "squeeze", "expand", "narrow", "select", "unfold", "diagonal", "t"}
    | {"chunk", "split", "unbind", "view_as", "expand_as", "reshape_as", "detach"}
)
"""Tensor methods whose result may be a view of the tensor: bound to another name
(``windows = shifted.view(-1, C)``), that name holds the storage too."""

JUMPS = ast.Break | ast.Continue | ast.Yield | ast.YieldFrom | ast.Await
LOOPS = (ast.For, ast.AsyncFor, ast.While)
DEFS = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda  # a closure may keep what it reads
BLOCKS = ("body", "orelse", "finalbody", "handlers")


@dataclass(frozen=True)
class Rebound:
    """The statements from the one that binds a name to the one that binds it again."""

    spans: list[tuple[int, int]]  # each statement's (first, last) line, in order; [] none
    confirm: bool  # in a block that may not run (a loop's, a branch's): it ran if an op did
    hands_on: bool  # its value is computed from the old one (``x = self.drop(x)``)
    returned: bool  # the function returns the name (``return x``, ``return x, w``)
    # bound in a loop: its next turn rebinds it first; the spans end with the loop's body and
    # the binding again where nothing after the loop rebinds it
    turns: bool = False
    maybe: bool = False  # a container may keep it (``MAYBE``): kept if read after it is rebound


Unit = tuple[ast.stmt, tuple[int, int], tuple]  # a statement, its lines, the blocks holding it


def rebinding(
    where: str, line: int, sources: dict, read_at: frozenset = frozenset()
) -> Rebound | None:
    """From the statement at ``line`` (``name = ...``) to the next that binds ``name`` again;
    no spans where nothing later binds it (it lives until the function returns); ``None``
    where the code does not say (a second reference it may keep). A rebinding after the loop
    that binds it is the last turn's (``Rebound.turns``): the graph says whether another ran.
    Where the statement unpacks a tuple (``x, _ = self.attn(x)``), the names are those of them
    the statements at the lines ``read_at`` read: to the last of their rebindings
    (``q, k, v = qkv.unbind(2)``, views of one tensor, each pooled in turn).
    ``where``: ``"file:function"``, as in ``NodeCost.stack``; ``sources``: a cache of parsed
    files, their functions' statements and these answers, one per profile."""
    if (where, line, read_at) not in sources:
        sources[where, line, read_at] = _rebinding(where, line, sources, read_at)
    return sources[where, line, read_at]


def _rebinding(where: str, line: int, sources: dict, read_at: frozenset) -> Rebound | None:
    file, _, function = where.rpartition(":")
    units, returns = _statements(file, function, line, sources)
    at = _at(units, line)
    names = _binds(units[at][0]) if at is not None else []
    readers = [units[i][0] for i in {_at(units, r) for r in read_at} if i is not None]
    if len(names) > 1:
        names = [n for n in names if any(_reads(stmt, n) for stmt in readers)]
    found = [_rebound_name(units, at, name, returns) for name in names]
    if not found or None in found:
        return None
    if len(found) == 1:
        return found[0]
    last = max(found, key=lambda f: len(f.spans) if f.spans else len(units) + 1)
    if not last.spans or not all(f.spans for f in found):
        return Rebound([], False, False, any(f.returned for f in found))
    confirm, turns = any(f.confirm for f in found), any(f.turns for f in found)
    return Rebound(last.spans, confirm, False, any(f.returned for f in found), turns)


def _rebound_name(units: list[Unit], at: int, name: str, returns: set) -> Rebound | None:
    """``rebinding`` for one name the statement ``units[at]`` binds."""
    held = units[at][2]
    loops = {block for block in held if isinstance(block[0], LOOPS)}
    maybe = False
    for i in range(at + 1, len(units)):
        stmt, _, blocks = units[i]
        escapes = _escapes(stmt, name)
        if escapes is True and _branch_alias(stmt, name, blocks, held):
            escapes = MAYBE
        if escapes is True:
            return None
        maybe = maybe or escapes == MAYBE
        if viewed := _viewed_into(stmt, name):  # held by that name until the function returns
            returned = any(n in returns for n in (name, *viewed))
            return Rebound([], False, False, returned, False, maybe)
        if name in _binds(stmt):
            turns = not loops <= set(blocks)  # after the loop that binds it: its last turn's
            spans = [u[1] for u in units[at : i + 1]]
            entered = [b for b in blocks if b not in held]  # a loop's, a branch's: may not run
            hands_on = _hands_on(stmt.value, name)
            return Rebound(spans, bool(entered), hands_on, name in returns, turns, maybe)
        if _stores(stmt, name):
            return None
    if not loops:
        return Rebound([], False, False, name in returns, False, maybe)
    # Nothing after the loop binds it: the loop's next turn, running the statement again, does
    body = [u for u in units[at + 1 :] + units[:at] if loops <= set(u[2])]
    escapes = [_escapes(u[0], name) for u in body]
    if True in escapes:
        return None
    spans = [units[at][1], *(u[1] for u in body), units[at][1]]
    hands_on = _hands_on(units[at][0].value, name)
    return Rebound(spans, False, hands_on, name in returns, True, maybe or MAYBE in escapes)


def _viewed_into(stmt: ast.stmt, name: str) -> list[str]:
    """The other names ``stmt`` binds to a view of the name (``windows = shifted.view(-1,
    C)``, ``a, b = x.chunk(2)``): they hold the storage after the name is bound again, until
    the function returns, though no later op may read it. A view into its own name
    (``x = x.view(...)``) is a rebinding that hands the value on."""
    parents = {child: node for node in _own(stmt) for child in ast.iter_child_nodes(node)}
    for node in _reads(stmt.value, name) if _binds(stmt) else ():
        viewed: ast.AST = node
        while isinstance(parents.get(viewed), ast.Attribute) and parents[viewed].attr in VIEWS:
            call = parents.get(parents[viewed])
            if not (isinstance(call, ast.Call) and call.func is parents[viewed]):
                break
            viewed = call
        if viewed is not node and parents.get(viewed) is stmt:
            return [bound for bound in _binds(stmt) if bound != name]
    return []


def _branch_alias(stmt: ast.stmt, name: str, blocks: tuple, held: tuple) -> bool:
    """Whether ``stmt`` only binds another name to the value (``x = shifted_x``), in a branch
    of an ``if`` the binding statement is outside: it keeps the value only if that branch ran,
    and then the graph reads the value where it reads the other name (``MAYBE``)."""
    branch = any(isinstance(b[0], ast.If) for b in blocks if b not in held)
    alias = isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name)
    return branch and alias and stmt.value.id == name and len(_binds(stmt)) == 1


def _statements(file: str, function: str, line: int, sources: dict) -> tuple[list[Unit], set]:
    """The units of the innermost ``def function`` in ``file`` holding ``line``, and the names
    its ``return`` statements hand back; parsed once a profile."""
    if file not in sources:
        sources[file] = _definitions(file)
    found = None
    for node in sources[file].get(function, ()):
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            if found is None or node.lineno > found.lineno:
                found = node
    if found is None:
        return [], set()
    if id(found) not in sources:
        units = _units(found)
        returns = set()
        for node in (n for unit in units for n in _own(unit[0]) if isinstance(n, ast.Return)):
            parents = {child: n for n in ast.walk(node) for child in ast.iter_child_nodes(n)}
            names = [n for n in ast.walk(node) if isinstance(n, ast.Name) and _load(n)]
            returns |= {n.id for n in names if _returned(n, parents)}
        sources[id(found)] = units, returns, found  # the node kept: its id stays its own
    return sources[id(found)][:2]


def _at(units: list[Unit], line: int) -> int | None:
    return next((i for i, u in enumerate(units) if u[1][0] <= line <= u[1][1]), None)


def _definitions(file: str) -> dict[str, list[ast.AST]]:
    """Each function's definitions in ``file`` by name; none where its source is not found.
    A file on disk is parsed once while its size and time stay (``_parsed``): a model's
    profiles, and each pass of one, read the same files (ultralytics' and torch's modules
    took 0.4 s a profile to parse)."""
    try:
        stat = os.stat(file)
    except OSError:  # not a file (a notebook's cell): read from linecache each time
        return _parse(file)
    return _parsed(file, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=32)  # a model reads a dozen files; an AST is 10-50x its source
def _parsed(file: str, size: int, mtime: int) -> dict[str, list[ast.AST]]:
    linecache.checkcache(file)
    return _parse(file)


def _parse(file: str) -> dict[str, list[ast.AST]]:
    try:
        source = "".join(linecache.getlines(file))
        tree = ast.parse(source) if source else None
    except (SyntaxError, ValueError):
        tree = None
    found: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.setdefault(node.name, []).append(node)
    return found


def _units(func: ast.AST | None) -> list[Unit]:
    """The function's statements in the order of its code: each simple statement, and each
    compound one's header (its lines before its first block), with the blocks that hold it."""
    units: list[Unit] = []

    def visit(body: list[ast.stmt], blocks: tuple) -> None:
        for stmt in body:
            inner = [(f, getattr(stmt, f, None)) for f in BLOCKS[:3]]
            inner += [("handlers", h.body) for h in getattr(stmt, "handlers", ())]
            inner = [(f, b) for f, b in inner if b and isinstance(b, list)]
            if not inner or isinstance(stmt, DEFS | ast.ClassDef):
                units.append((stmt, (stmt.lineno, stmt.end_lineno or stmt.lineno), blocks))
                continue
            first = min(b[0].lineno for _, b in inner)
            units.append((stmt, (stmt.lineno, max(stmt.lineno, first - 1)), blocks))
            for field, block in inner:
                visit(block, (*blocks, (stmt, field)))

    visit(getattr(func, "body", []), ())
    return units


def _binds(stmt: ast.stmt) -> list[str]:
    """The names a statement binds to its value or its value's items (``x = ...``,
    ``x: T = ...``, ``x, _ = ...``); none for an attribute, a starred item, ``x += ...``."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        target = stmt.target
    else:
        return []
    items = target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
    return [t.id for t in items] if all(isinstance(t, ast.Name) for t in items) else []


def _own(stmt: ast.stmt) -> list[ast.AST]:
    """The nodes of a statement, less the blocks of a compound one (they are units of their own)."""
    if isinstance(stmt, DEFS | ast.ClassDef):
        return list(ast.walk(stmt))
    fields = [v for f, v in ast.iter_fields(stmt) if f not in BLOCKS]
    found: list[ast.AST] = [stmt]
    for value in fields:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, ast.AST):
                found += ast.walk(item)
    return found


def _reads(node: ast.AST, name: str) -> list[ast.Name]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name and _load(n)]


def _hands_on(value: ast.AST, name: str) -> bool:
    """Whether a value may be the name's old tensor, or a view of it: it reads the name other
    than for what the tensor says of itself (``x.size(0)``)."""
    parents = {child: node for node in ast.walk(value) for child in ast.iter_child_nodes(node)}
    return any(
        not (isinstance(parents.get(n), ast.Attribute) and parents[n].attr in METADATA)
        for n in _reads(value, name)
    )


def _returned(node: ast.AST, parents: dict) -> bool:
    """Whether a ``return`` hands this read of the name to the caller: the value itself, in a
    container or an object (``return x, w``, ``Output(hidden=x)``), or a view a method of it
    makes (``return x.view(b, -1)``); not a new tensor that an operator, torch's functions or
    a submodule make of it (``return torch.cat((a, b), dim)``)."""
    parent = parents.get(node)
    if isinstance(parent, ast.keyword):
        node, parent = parent, parents.get(parent)
    if isinstance(parent, ast.Return):
        return True
    if isinstance(parent, ast.Call) and node is not parent.func:  # kept by a constructor,
        func = parent.func  # (``Output(hidden=x)``), not made anew by torch's functions
        while isinstance(func, ast.Attribute | ast.Subscript):
            func = func.value
        safe = isinstance(func, ast.Name) and func.id in SAFE_CALLERS
        return not safe and _returned(parent, parents)
    if isinstance(parent, ast.IfExp):
        return node is not parent.test and _returned(parent, parents)
    if isinstance(parent, ast.Tuple | ast.List | ast.Starred | ast.Dict):
        return _returned(parent, parents)
    if isinstance(parent, ast.Subscript):
        return node is parent.value and _returned(parent, parents)
    if isinstance(parent, ast.Attribute) and parent.attr not in METADATA:
        call = parents.get(parent)
        called = isinstance(call, ast.Call) and call.func is parent
        return _returned(call if called else parent, parents)
    return False


def _load(node: ast.Name) -> bool:
    return isinstance(node.ctx, ast.Load)


def _stores(stmt: ast.stmt, name: str) -> bool:
    """Whether the statement binds or deletes ``name`` some other way (a tuple, a loop's
    target, ``x += ...``, ``del x``)."""
    return any(isinstance(n, ast.Name) and n.id == name and not _load(n) for n in _own(stmt))


def _escapes(stmt: ast.stmt, name: str) -> bool | str:
    """Whether ``stmt`` could keep a reference to ``name``'s value or leave the block early:
    ``MAYBE`` where it keeps it only if a condition holds (``_kept``)."""
    nodes = _own(stmt)
    parents = {child: node for node in nodes for child in ast.iter_child_nodes(node)}
    found: bool | str = False
    for node in nodes:
        if isinstance(node, JUMPS | DEFS):
            return True
        if isinstance(node, ast.Name) and node.id == name and _load(node):
            kept = _kept(node, parents)
            if kept is True:
                return True
            found = found or kept
    return found


MAYBE = "maybe"
"""A container keeps the value only if a condition holds (``y.append(x if m.i in self.save
else None)``, YOLO's saved outputs): kept where the graph reads it later."""


def _kept(node: ast.AST, parents: dict) -> bool | str:
    """Whether this read of the name could hand its value to something that keeps it
    (``MAYBE``: only if a condition holds)."""
    parent = parents.get(node)
    if isinstance(parent, ast.keyword):
        node, parent = parent, parents.get(parent)
    if isinstance(parent, ast.IfExp) and node is not parent.test:
        return MAYBE if _kept(parent, parents) else False
    if isinstance(parent, ast.Tuple | ast.List) and isinstance(parents.get(parent), ast.BinOp):
        joined = parents[parent]  # joined to another container: kept where that is kept
        while isinstance(parents.get(joined), ast.BinOp):  # (``states = states + (x,)``),
            joined = parents[joined]  # not where a call reads it (``torch.cat(a + [x])``)
        return _kept(joined, parents)
    if isinstance(parent, ast.BinOp | ast.UnaryOp | ast.Compare):
        return False  # an operator: a new value
    if isinstance(parent, ast.AugAssign) and node is parent.value:
        return False  # added into another (``attn += rel_pos``)
    if isinstance(parent, ast.Return):
        return False  # to the caller (``Rebound.returned``)
    if isinstance(parent, ast.Tuple | ast.List | ast.Starred):  # kept if the container is
        return _kept(parent, parents)  # (``torch.cat([t, x])`` keeps neither)
    if isinstance(parent, ast.Subscript | ast.Attribute) and isinstance(parent.ctx, ast.Store):
        return False  # written into (``mask[a:b] = 1``), not handed on
    if isinstance(parent, ast.Subscript):  # an index is read; ``x[0]`` of a tuple is x's
        return node is parent.value and _kept(parent, parents)
    if isinstance(parent, ast.Attribute):  # a method's result is new or a view the graph has
        called = isinstance(parents.get(parent), ast.Call) and parents[parent].func is parent
        return not (called or parent.attr in METADATA) and _kept(parent, parents)
    if isinstance(parent, ast.Call) and node is not parent.func:
        func = parent.func
        if isinstance(func, ast.Name):
            return False  # a function: its locals die when it returns
        if isinstance(func, ast.Attribute) and func.attr in TENSOR_METHODS:
            return False
        while isinstance(func, ast.Attribute | ast.Subscript):  # ``self.layer[1](x)``
            func = func.value
        return not (isinstance(func, ast.Name) and func.id in SAFE_CALLERS)
    return True  # an alias, a container, a return: kept


def one_statement(where: str, lines: tuple[int, int], sources: dict) -> bool:
    """Whether two lines of a function are one statement's (a call written over lines)."""
    file, _, function = where.rpartition(":")
    units, _ = _statements(file, function, lines[0], sources)
    at = _at(units, lines[0])
    return at is not None and at == _at(units, lines[1])


def one_function(where: str, lines: tuple[int, int], sources: dict) -> bool:
    """Whether two lines named by one ``"file:function"`` are of one function: a file may
    define several of that name (two classes' ``forward``)."""
    file, _, function = where.rpartition(":")
    units, _ = _statements(file, function, lines[0], sources)
    return _at(units, lines[1]) is not None


def in_loop(where: str, line: int, sources: dict) -> bool:
    """Whether the statement at ``line`` of the function runs in a loop of it."""
    file, _, function = where.rpartition(":")
    units, _ = _statements(file, function, line, sources)
    at = _at(units, line)
    return at is not None and any(isinstance(block[0], LOOPS) for block in units[at][2])


def calls_helper(
    where: str, line: int, sources: dict, submodule: Callable[[str], bool]
) -> tuple[str, ...]:
    """The Python functions the statement at ``line`` calls whose own lines an export may not
    have recorded (``torch.export`` keeps ``forward`` frames only): a function by name that
    is not a builtin (``window_partition(x)``), or a method of ``self`` that is not a
    submodule (``self._attn(x)``; ``submodule(name)`` says) nor an attribute the file's code
    binds (``self.drop_path1 = nn.Identity()``, a submodule that runs no op). The ops they run
    then all read as that one line's. Empty where it calls none."""
    if ("helper", where, line) not in sources:
        file, _, function = where.rpartition(":")
        units, _ = _statements(file, function, line, sources)
        at = _at(units, line)
        found: list[str] = []
        for node in _own(units[at][0]) if at is not None else ():
            func = getattr(node, "func", None) if isinstance(node, ast.Call) else None
            if isinstance(func, ast.Name) and not hasattr(builtins, func.id):
                found.append(func.id)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                method = func.value.id == "self" and not submodule(func.attr)
                found += [func.attr] if method and func.attr not in _attributes(file) else []
        sources["helper", where, line] = tuple(dict.fromkeys(found))
    return sources["helper", where, line]


def _attributes(file: str) -> frozenset[str]:
    """The names the file's functions bind on ``self`` (``self.a, self.b = ...``)."""
    nodes = (n for defs in _definitions(file).values() for d in defs for n in ast.walk(d))
    return frozenset(
        node.attr
        for node in nodes
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
        if isinstance(node.value, ast.Name) and node.value.id == "self"
    )
