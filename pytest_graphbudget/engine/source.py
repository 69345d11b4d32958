"""A model's source as the liveness rules read it: each function's statements in the order
of its code, with the blocks (a loop's, a branch's) that hold them, parsed once a file.

An exported graph's stack traces name a ``"file:function"`` and a line; the statement at that
line, and the function around it, are what ``rebinding``'s rules read.
"""

from __future__ import annotations

import ast
import functools
import linecache
import os
from collections.abc import Iterable

from pytest_graphbudget.engine import references as refs

LOOPS = (ast.For, ast.AsyncFor, ast.While)

Unit = tuple[ast.stmt, tuple[int, int], tuple]  # a statement, its lines, the blocks holding it


def statements(
    file: str, function: str, line: int, sources: dict
) -> tuple[list[Unit], set, frozenset]:
    """The units of the innermost ``def function`` in ``file`` holding ``line``, the names its
    ``return`` statements hand back, and the names whose methods keep nothing (``self``,
    torch's, its submodules': ``references.submodules``); parsed once a profile."""
    found = definition(file, function, line, sources)
    if found is None:
        return [], set(), refs.SAFE_CALLERS
    if id(found) not in sources:
        units, safe = _units(found), refs.SAFE_CALLERS | refs.submodules(found)
        returns = set()
        for node in (n for unit in units for n in refs.own(unit[0]) if isinstance(n, ast.Return)):
            parents = {child: n for n in ast.walk(node) for child in ast.iter_child_nodes(n)}
            names = [n for n in ast.walk(node) if isinstance(n, ast.Name) and refs.load(n)]
            returns |= {n.id for n in names if refs.returned(n, parents, safe)}
        sources[id(found)] = units, returns, safe, found  # the node kept: its id its own
    return sources[id(found)][:3]


def definition(file: str, function: str, line: int, sources: dict) -> ast.AST | None:
    """The innermost ``def function`` in ``file`` holding ``line``."""
    if file not in sources:
        sources[file] = definitions(file)
    found = None
    for node in sources[file].get(function, ()):
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            if found is None or node.lineno > found.lineno:
                found = node
    return found


def index_of(units: list[Unit], line: int) -> int | None:
    """The index of the unit whose lines hold ``line``; None where none does."""
    return next((i for i, u in enumerate(units) if u[1][0] <= line <= u[1][1]), None)


def parameters(func: ast.AST) -> set[str]:
    """The names of the function's parameters but ``self``."""
    args = func.args
    return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} - {"self"}


def one_statement(where: str, lines: tuple[int, int], sources: dict) -> bool:
    """Whether two lines of a function are one statement's (a call written over lines)."""
    file, _, function = where.rpartition(":")
    units, *_ = statements(file, function, lines[0], sources)
    at = index_of(units, lines[0])
    return at is not None and at == index_of(units, lines[1])


def one_function(where: str, lines: tuple[int, int], sources: dict) -> bool:
    """Whether two lines named by one ``"file:function"`` are of one function: a file may
    define several of that name (two classes' ``forward``)."""
    file, _, function = where.rpartition(":")
    units, *_ = statements(file, function, lines[0], sources)
    return index_of(units, lines[1]) is not None


def in_loop(where: str, line: int, sources: dict) -> bool:
    """Whether the statement at ``line`` of the function runs in a loop of it."""
    file, _, function = where.rpartition(":")
    units, *_ = statements(file, function, line, sources)
    at = index_of(units, line)
    return at is not None and any(isinstance(block[0], LOOPS) for block in units[at][2])


def called_functions(nodes: Iterable[ast.AST], file: str) -> set[str]:
    """The functions of ``file`` that calls among ``nodes`` call: by name
    (``window_partition(x)``), or as a method of ``self`` (``self._pos_embed(x)``)."""
    defined, found = definitions(file), set()
    for node in nodes:
        target = getattr(node, "func", None) if isinstance(node, ast.Call) else None
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            name = target.attr if target.value.id == "self" else ""
        else:
            name = target.id if isinstance(target, ast.Name) else ""
        if name in defined:
            found.add(name)
    return found


def enclosing_class(file: str, line: int) -> ast.ClassDef | None:
    """The innermost class of ``file`` whose body holds ``line``; None at module level."""
    try:
        stat = os.stat(file)
    except OSError:
        return None
    found = None
    for node in _classes(file, stat.st_size, stat.st_mtime_ns):
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            found = node if found is None or node.lineno > found.lineno else found
    return found


@functools.lru_cache(maxsize=32)
def _classes(file: str, size: int, mtime: int) -> list[ast.ClassDef]:
    linecache.checkcache(file)  # as ``_parsed``: linecache keeps a file's old lines until told
    try:
        tree = ast.parse("".join(linecache.getlines(file)))
    except (SyntaxError, ValueError):
        return []
    return [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]


def definitions(file: str) -> dict[str, list[ast.AST]]:
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
            inner = [(f, getattr(stmt, f, None)) for f in refs.BLOCKS[:3]]
            inner += [("handlers", h.body) for h in getattr(stmt, "handlers", ())]
            inner = [(f, b) for f, b in inner if b and isinstance(b, list)]
            if not inner or isinstance(stmt, refs.DEFS | ast.ClassDef):
                units.append((stmt, (stmt.lineno, stmt.end_lineno or stmt.lineno), blocks))
                continue
            first = min(b[0].lineno for _, b in inner)
            units.append((stmt, (stmt.lineno, max(stmt.lineno, first - 1)), blocks))
            for field, block in inner:
                visit(block, (*blocks, (stmt, field)))

    visit(getattr(func, "body", []), ())
    return units
