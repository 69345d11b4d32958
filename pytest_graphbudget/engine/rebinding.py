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
from collections.abc import Callable
from dataclasses import dataclass, replace

from pytest_graphbudget.engine import references as refs
from pytest_graphbudget.engine import source as src


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
    # where ``turns``: the statements before the binding in its loop that bind the name, the
    # first a next turn runs (twins' ``x = blk(x, size)`` before ``x = pos_blk(x, size)``)
    before: tuple = ()


def rebinding(
    where: str, line: int, sources: dict, read_at: frozenset = frozenset(), callee: tuple = ()
) -> Rebound | None:
    """From the statement at ``line`` (``name = ...``) to the next that binds ``name`` again;
    no spans where nothing later binds it (it lives until the function returns); ``None``
    where the code does not say (a second reference it may keep). A rebinding after the loop
    that binds it is the last turn's (``Rebound.turns``): the graph says whether another ran.
    Where the statement unpacks a tuple (``x, _ = self.attn(x)``), the names are those of them
    the statements at the lines ``read_at`` read: to the last of their rebindings
    (``q, k, v = qkv.unbind(2)``, views of one tensor, each pooled in turn); of a call's
    result other than a view's, the one every such statement reads, where one is (``x, size =
    embed(x)`` ... ``x = drop(x)``: x holds it, not size); or, where ``callee`` (the frame
    the value was made in, below this one) returns it by place, the name at that place.
    ``where``: ``"file:function"``, as in ``NodeCost.stack``; ``sources``: a cache of parsed
    files, their functions' statements and these answers, one per profile."""
    if (where, line, read_at, callee) not in sources:
        found = _rebinding(where, line, sources, read_at, callee)
        sources[where, line, read_at, callee] = found
    return sources[where, line, read_at, callee]


def _rebinding(
    where: str, line: int, sources: dict, read_at: frozenset, callee: tuple
) -> Rebound | None:
    file, _, function = where.rpartition(":")
    units, returns, safe = src.statements(file, function, line, sources)
    at = src.index_of(units, line)
    names = refs.binds(units[at][0]) if at is not None else []
    readers = [units[i][0] for i in {src.index_of(units, r) for r in read_at} if i is not None]
    if len(names) > 1 and (placed := _returned_at(units[at][0], file, callee, sources)):
        names = [placed]
    elif len(names) > 1:
        read = [{n for n in names if refs.reads(stmt, n)} for stmt in readers]
        names = [n for n in names if any(n in r for r in read)]
        value = units[at][0].value
        views = not isinstance(value, ast.Call) or getattr(value.func, "attr", "") in refs.VIEWS
        every = [n for n in names if all(n in r for r in read)]
        names = every if every and not views else names  # a call's items: one holds it
    found = [_rebound_name(units, at, name, (returns, safe)) for name in names]
    if not found or None in found:
        return None
    if len(found) == 1:
        return found[0]
    last = max(found, key=lambda f: len(f.spans) if f.spans else len(units) + 1)
    if not last.spans or not all(f.spans for f in found):
        return Rebound([], False, False, any(f.returned for f in found))
    confirm, turns = any(f.confirm for f in found), any(f.turns for f in found)
    return Rebound(last.spans, confirm, False, any(f.returned for f in found), turns)


def _returned_at(stmt: ast.stmt, file: str, callee: tuple, sources: dict) -> str:
    """The name ``stmt`` (``x, rope = self._pos_embed(x)``) binds to the value that its
    callee, at ``callee`` (``"file:function"`` and line), bound to one name and returns at
    one place of each ``return`` (``return x, rope``): Qwen3-ViT's rope is read by every
    block, its x rebound by the first. ``""`` where the code does not say."""
    call, targets = getattr(stmt, "value", None), refs.binds(stmt)
    if not (callee and isinstance(call, ast.Call) and len(targets) > 1):
        return ""
    (where, line), called = callee, getattr(call.func, "attr", getattr(call.func, "id", ""))
    name = where.rpartition(":")[2]
    module = name == "forward" and called not in src.definitions(file)  # a submodule's call
    if name != called and not module:
        return ""
    units, *_ = src.statements(*where.rsplit(":", 1), line, sources)
    at = src.index_of(units, line)
    bound = refs.binds(units[at][0]) if at is not None else []
    if len(bound) != 1 or any(bound[0] in refs.binds(u[0]) for u in units[at + 1 :]):
        return ""  # bound again before a return: another value goes back by that name
    places = set()
    for node in (n for u in units for n in refs.own(u[0]) if isinstance(n, ast.Return)):
        items = node.value.elts if isinstance(node.value, ast.Tuple) else []
        if len(items) != len(targets):
            return ""
        places |= {i for i, e in enumerate(items) if isinstance(e, ast.Name) and e.id == bound[0]}
    return targets[places.pop()] if len(places) == 1 else ""


def _rebound_name(units: list[src.Unit], at: int, name: str, names: tuple) -> Rebound | None:
    """``rebinding`` for one name the statement ``units[at]`` binds. ``names``: those the
    function returns, and those whose methods keep nothing (``source.statements``)."""
    (returns, safe), held = names, units[at][2]
    loops = {block for block in held if isinstance(block[0], src.LOOPS)}
    maybe = False
    for i in range(at + 1, len(units)):
        stmt, _, blocks = units[i]
        viewed = refs.viewed_into(stmt, name)  # views bound to names: held to the return
        view = viewed or refs.bound_view(stmt, name)  # or to its own: a rebinding, handed on
        escapes = refs.escapes(stmt, name, safe) if not view else False
        if escapes is True and _branch_alias(stmt, name, blocks, held):
            escapes = refs.MAYBE
        if escapes is True and (kept := _appended(stmt, name, units, safe)):
            return Rebound([], False, False, kept in returns, False, maybe)  # the list's
        if escapes is True:
            return None
        maybe = maybe or escapes == refs.MAYBE
        if viewed:  # held by those names until the function returns
            returned = any(n in returns for n in (name, *viewed))
            return Rebound([], False, False, returned, False, maybe)
        if name in refs.binds(stmt):
            turns = not loops <= set(blocks)  # after the loop that binds it: its last turn's
            spans = [u[1] for u in units[at : i + 1]]
            entered = [b for b in blocks if b not in held]  # a loop's, a branch's: may not run
            hands_on = refs.hands_on(stmt.value, name)
            left = loops - set(blocks)
            before = tuple(u[1] for u in units[:at] if left & set(u[2]) and refs.stores(u[0], name))
            rebound = Rebound(spans, bool(entered), hands_on, name in returns, turns, maybe)
            return replace(rebound, before=before) if before and turns else rebound
        if refs.stores(stmt, name):
            return None
    if not loops:
        return Rebound([], False, False, name in returns, False, maybe)
    # Nothing after the loop binds it: the loop's next turn, running the statement again, does
    body = [u for u in units[at + 1 :] + units[:at] if loops <= set(u[2])]
    escapes = [refs.escapes(u[0], name, safe) for u in body]
    if True in escapes:
        return None
    spans = [units[at][1], *(u[1] for u in body), units[at][1]]
    hands_on = refs.hands_on(units[at][0].value, name)
    maybe = maybe or refs.MAYBE in escapes
    before = tuple(u[1] for u in units[:at] if loops <= set(u[2]) and refs.stores(u[0], name))
    return Rebound(spans, False, hands_on, name in returns, True, maybe, before)


def from_binding(found: Rebound, where: str, line: int, sources: dict) -> Rebound:
    """``found``, a rebinding read from a statement that did not run (a branch not taken),
    with its loops' turns read from the statement at ``line`` that bound the value: a
    rebinding in a loop after it is the last turn's only where that statement is in the
    loop too (eva's ``x = blk(x)``, after ``x = self.norm_pre(x)``)."""
    if not found.spans or found.spans[-1] == found.spans[0]:
        return found  # nothing rebinds it, or the loop's next turn: read where it ran
    file, _, function = where.rpartition(":")
    units, *_ = src.statements(file, function, line, sources)
    at, end = src.index_of(units, line), src.index_of(units, found.spans[-1][0])
    if at is None or end is None:
        return found
    loops = {block for block in units[at][2] if isinstance(block[0], src.LOOPS)}
    left, names = loops - set(units[end][2]), set(refs.binds(units[at][0]))
    names &= set(refs.binds(units[end][0]))
    again = [u for u in units[:at] if left & set(u[2]) and any(refs.stores(u[0], n) for n in names)]
    return replace(found, turns=bool(left), before=tuple(u[1] for u in again))


def _appended(stmt: ast.stmt, name: str, units: list[src.Unit], safe: frozenset) -> str:
    """The list ``stmt`` appends the name to (``xs.append(x_)``, crossvit's ``_embed``), where
    the function makes the list (``xs = []``) and nothing it does keeps the list: the value
    lives while the list does, until the function returns (``Rebound.returned`` where it
    returns it). ``""`` where ``stmt`` does anything else."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    func = getattr(call, "func", None)
    appended = isinstance(func, ast.Attribute) and func.attr == "append"
    if not (appended and isinstance(func.value, ast.Name) and len(call.args) == 1):
        return ""
    if not (isinstance(call.args[0], ast.Name) and call.args[0].id == name):
        return ""
    made = [u[0] for u in units if func.value.id in refs.binds(u[0])]
    lists = all(isinstance(u.value, ast.List) and not u.value.elts for u in made)
    kept = any(refs.escapes(u[0], func.value.id, safe) for u in units)
    return func.value.id if made and lists and not kept else ""


def _branch_alias(stmt: ast.stmt, name: str, blocks: tuple, held: tuple) -> bool:
    """Whether ``stmt`` only binds another name to the value (``x = shifted_x``), in a branch
    of an ``if`` the binding statement is outside: it keeps the value only if that branch ran,
    and then the graph reads the value where it reads the other name (``MAYBE``)."""
    alias = isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name)
    single = alias and stmt.value.id == name and len(refs.binds(stmt)) == 1
    return single and _in_branch(blocks, held)


def _in_branch(blocks: tuple, held: tuple) -> bool:
    """Whether a statement in ``blocks`` is in a branch of an ``if`` that the statement in
    ``held`` is outside of: it runs only if that branch is taken (timm mobilenetv5's
    ``if feat_idx in self.msfa_indices: intermediates.append(x)``)."""
    return any(isinstance(b[0], ast.If) for b in blocks if b not in held)


def returns_argument(where: str, line: int, sources: dict) -> bool:
    """Whether the statement at ``line`` returns one of its function's parameters or an item
    of one, as it is (SelecSLS's ``return [self.conv6(...), x[1]]``; not a method's result,
    ``x.mul_(gamma)``): its caller gets back what it passed in, and holds it as the call's
    result."""
    file, _, function = where.rpartition(":")
    func = src.definition(file, function, line, sources)
    units, _, safe = src.statements(file, function, line, sources)
    at = src.index_of(units, line)
    if func is None or at is None or not isinstance(units[at][0], ast.Return):
        return False
    params, (found, value) = src.parameters(func), ([], units[at][0].value)
    while value is not None:  # the returned value's items, down to a parameter's name
        if isinstance(value, ast.Name) and value.id in params:
            return True
        if isinstance(value, ast.Subscript):
            found.append(value.value)
        elif isinstance(value, ast.Tuple | ast.List):
            found += value.elts
        elif isinstance(value, ast.IfExp):
            found += [value.body, value.orelse]
        value = found.pop() if found else None
    return False


def stores_attribute(where: str, line: int, sources: dict) -> bool:
    """Whether the statement at ``line`` binds its value to an object's attribute
    (diffusers' ``DiagonalGaussianDistribution``: ``self.std = torch.exp(...)``): the object
    holds it as long as anything holds the object, which the graph does not say."""
    file, _, function = where.rpartition(":")
    units, *_ = src.statements(file, function, line, sources)
    at = src.index_of(units, line)
    stmt = units[at][0] if at is not None else None
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
    items = [t for target in targets for t in getattr(target, "elts", [target])]
    return any(isinstance(item, ast.Attribute) for item in items)


def appends_to_parameter(where: str, line: int, sources: dict) -> bool:
    """Whether the statement at ``line`` appends to a list its caller passed in (timm
    VoVNet's ``concat_list.append(module(x))``, ``output`` in the caller): the caller's list
    holds what it appends, past this function's return."""
    file, _, function = where.rpartition(":")
    func = src.definition(file, function, line, sources)
    units, *_ = src.statements(file, function, line, sources)
    at = src.index_of(units, line)
    if func is None or at is None or not isinstance(units[at][0], ast.Expr):
        return False
    method = getattr(units[at][0].value, "func", None)
    if not (isinstance(method, ast.Attribute) and method.attr in ("append", "extend", "insert")):
        return False
    return isinstance(method.value, ast.Name) and method.value.id in src.parameters(func)


def calls_helper(
    where: str, line: int, sources: dict, submodule: Callable[[str], bool]
) -> tuple[str, ...]:
    """The Python functions the statement at ``line`` calls whose own lines an export may not
    have recorded (``torch.export`` keeps ``forward`` frames only): a function by name that
    is not a builtin nor a name for a submodule (``window_partition(x)``, not ``block(x)`` of
    ``for block in self.blocks``), or a method of ``self`` that is not a
    submodule (``self._attn(x)``; ``submodule(name)`` says) nor an attribute the file's code
    binds (``self.drop_path1 = nn.Identity()``, a submodule that runs no op). The ops they run
    then all read as that one line's. Empty where it calls none."""
    if ("helper", where, line) not in sources:
        file, _, function = where.rpartition(":")
        units, _, safe = src.statements(file, function, line, sources)
        at = src.index_of(units, line)
        found: list[str] = []
        for node in refs.own(units[at][0]) if at is not None else ():
            func = getattr(node, "func", None) if isinstance(node, ast.Call) else None
            if isinstance(func, ast.Name) and not (hasattr(builtins, func.id) or func.id in safe):
                found.append(func.id)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                method = func.value.id == "self" and not submodule(func.attr)
                found += [func.attr] if method and func.attr not in _attributes(file) else []
        sources["helper", where, line] = tuple(dict.fromkeys(found))
    return sources["helper", where, line]


def holds_past_reads(where: str, function: str, sources: dict, depth: int = 3) -> bool:
    """Whether ``function``, a helper called from ``where`` (``"file:function"``), or one it
    calls, binds a name that a later statement reads last without binding it again, with
    statements after: eager holds its value past that read (HRNet's ``x`` after ``yl =
    self.stages(x)``), where a chain of ``x = self.f(x)`` drops each value at its last read.
    Names no op makes (``references.statics``: ``B = x.shape[0]``) hold nothing. True where
    its code is not in that file (a base class's, elsewhere), or calls run deeper than
    ``depth``."""
    file = where.rpartition(":")[0]
    definitions = src.definitions(file).get(function, [])
    if not definitions or depth <= 0:
        return True
    for func in definitions:
        units, *_ = src.statements(file, function, func.lineno, sources)
        static = refs.statics(func)
        for i, (stmt, _, _) in enumerate(units):
            for name in set(refs.binds(stmt)) - static:
                last = None
                for j in range(i + 1, len(units)):
                    if refs.reads(units[j][0], name):
                        last = j
                    if name in refs.binds(units[j][0]) or refs.stores(units[j][0], name):
                        break
                reader = units[last][0] if last is not None else None
                if reader is None or name in refs.binds(reader) or _appends(reader):
                    continue  # rebound, or into a list that holds it as long (``_appended``)
                if last < len(units) - 1 or not _read_last(reader, name):
                    return True
        for called in src.called_functions(ast.walk(func), file) - {function}:
            if holds_past_reads(where, called, sources, depth - 1):
                return True
    return False


def _appends(stmt: ast.stmt) -> bool:
    """Whether the statement appends to a list (``xs.append(x_)``)."""
    value = stmt.value if isinstance(stmt, ast.Expr) else None
    return isinstance(value, ast.Call) and getattr(value.func, "attr", "") == "append"


def _read_last(stmt: ast.stmt, name: str) -> bool:
    """Whether the statement's last op reads the name: it is the value (``return x``), or
    an argument or operand of the value's own call or operator (``return self.fc(x)``), not
    of one nested in it (``return self.fc(self.act(joined))``: joined outlives act)."""
    value = getattr(stmt, "value", None)
    if value is None:
        return False
    top = [value]
    if isinstance(value, ast.Call):
        top += [*value.args, *(k.value for k in value.keywords)]
    elif isinstance(value, ast.BinOp):
        top += [value.left, value.right]
    elif isinstance(value, ast.Tuple | ast.List):
        top += value.elts
    return all(any(read is t for t in top) for read in refs.reads(value, name))


def _attributes(file: str) -> frozenset[str]:
    """The names the file's functions bind on ``self`` (``self.a, self.b = ...``)."""
    nodes = (n for defs in src.definitions(file).values() for d in defs for n in ast.walk(d))
    return frozenset(
        node.attr
        for node in nodes
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
        if isinstance(node.value, ast.Name) and node.value.id == "self"
    )
