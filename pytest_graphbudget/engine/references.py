"""What a statement of a forward does with a local's value: keeps a second reference to it
(an alias, a container, a method of another object that may store it), hands it on
(``x = self.drop(x)``), views it into another name, or returns it to the caller.

Read with ``ast`` (``engine/rebinding.py`` parses the functions). Where the code may keep the
value, the answer is that it does: the caller then holds it longer, over rather than under
what eager holds. ``safe``: names the function binds to its own submodules (``down =
self.downsamp[i]``, ``for block in self.blocks``), whose calls keep nothing, as ``self``'s.
"""

from __future__ import annotations

import ast

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


DEFS = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda  # a closure may keep what it reads


BLOCKS = ("body", "orelse", "finalbody", "handlers")


def viewed_into(stmt: ast.stmt, name: str) -> list[str]:
    """The other names ``stmt`` binds to a view of the name (``windows = shifted.view(-1,
    C)``, ``a, b = x.chunk(2)``, ``q, k = qk[0], qk[1]``): they hold the storage after the
    name is bound again, until the function returns, though no later op may read it. A view
    into its own name (``x = x.view(...)``, ``x = x[:, :, perm]``) is a rebinding that hands
    the value on."""
    return [bound for bound in binds(stmt) if bound != name] if bound_view(stmt, name) else []


def bound_view(stmt: ast.stmt, name: str) -> bool:
    """Whether ``stmt`` binds a view of the name, or an item of it, as its value or an item
    of the tuple it unpacks (``viewed_into``): a new name for the storage, not a second
    reference some object keeps."""
    parents = {child: node for node in own(stmt) for child in ast.iter_child_nodes(node)}
    for node in reads(stmt.value, name) if binds(stmt) else ():
        viewed: ast.AST = node
        while True:
            parent = parents.get(viewed)
            if isinstance(parent, ast.Subscript) and parent.value is viewed:
                viewed = parent  # ``qk[0]``: a view, or an item the name held
                continue
            call = parents.get(parent)
            if not (isinstance(parent, ast.Attribute) and parent.attr in VIEWS):
                break
            if not (isinstance(call, ast.Call) and call.func is parent):
                break
            viewed = call
        whole = parents.get(viewed) is stmt  # or an item of a tuple bound (``q, k = ...``)
        item = isinstance(stmt.value, ast.Tuple) and parents.get(viewed) is stmt.value
        if viewed is not node and (whole or item):
            return True
    return False


def binds(stmt: ast.stmt) -> list[str]:
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


def own(stmt: ast.stmt) -> list[ast.AST]:
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


def reads(node: ast.AST, name: str) -> list[ast.Name]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name and load(n)]


def hands_on(value: ast.AST, name: str) -> bool:
    """Whether a value may be the name's old tensor, or a view of it: it reads the name other
    than for what the tensor says of itself (``x.size(0)``)."""
    parents = {child: node for node in ast.walk(value) for child in ast.iter_child_nodes(node)}
    return any(
        not (isinstance(parents.get(n), ast.Attribute) and parents[n].attr in METADATA)
        for n in reads(value, name)
    )


def returned(node: ast.AST, parents: dict, safe: frozenset = SAFE_CALLERS) -> bool:
    """Whether a ``return`` hands this read of the name to the caller: the value itself, in a
    container or an object (``return x, w``, ``Output(hidden=x)``), or a view a method of it
    makes (``return x.view(b, -1)``); not a new tensor that an operator, torch's functions or
    a submodule make of it (``return torch.cat((a, b), dim)``). ``safe``: as ``kept``'s."""
    parent = parents.get(node)
    if isinstance(parent, ast.keyword):
        node, parent = parent, parents.get(parent)
    if isinstance(parent, ast.Return):
        return True
    if isinstance(parent, ast.Call) and node is not parent.func:  # kept by a constructor,
        func = parent.func  # (``Output(hidden=x)``), not made anew by torch's functions
        while isinstance(func, ast.Attribute | ast.Subscript):
            func = func.value
        made = isinstance(func, ast.Name) and func.id in safe
        return not made and returned(parent, parents, safe)
    if isinstance(parent, ast.IfExp):
        return node is not parent.test and returned(parent, parents, safe)
    if isinstance(parent, ast.Tuple | ast.List | ast.Starred | ast.Dict):
        return returned(parent, parents, safe)
    if isinstance(parent, ast.Subscript):
        return node is parent.value and returned(parent, parents, safe)
    if isinstance(parent, ast.Attribute) and parent.attr not in METADATA:
        call = parents.get(parent)
        called = isinstance(call, ast.Call) and call.func is parent
        return returned(call if called else parent, parents, safe)
    return False


def load(node: ast.Name) -> bool:
    return isinstance(node.ctx, ast.Load)


def stores(stmt: ast.stmt, name: str) -> bool:
    """Whether the statement binds or deletes ``name`` some other way (a tuple, a loop's
    target, ``x += ...``, ``del x``)."""
    return any(isinstance(n, ast.Name) and n.id == name and not load(n) for n in own(stmt))


def escapes(stmt: ast.stmt, name: str, safe: frozenset = SAFE_CALLERS) -> bool | str:
    """Whether ``stmt`` could keep a reference to ``name``'s value or leave the block early:
    ``MAYBE`` where it keeps it only if a condition holds (``kept``, with ``safe``)."""
    nodes = own(stmt)
    parents = {child: node for node in nodes for child in ast.iter_child_nodes(node)}
    found: bool | str = False
    for node in nodes:
        if isinstance(node, JUMPS | DEFS):
            return True
        if isinstance(node, ast.Name) and node.id == name and load(node):
            keeps = kept(node, parents, safe)
            if keeps is True:
                return True
            found = found or keeps
    return found


MAYBE = "maybe"
"""A container keeps the value only if a condition holds (``y.append(x if m.i in self.save
else None)``, YOLO's saved outputs): kept where the graph reads it later."""


def kept(node: ast.AST, parents: dict, safe: frozenset = SAFE_CALLERS) -> bool | str:
    """Whether this read of the name could hand its value to something that keeps it
    (``MAYBE``: only if a condition holds). ``safe``: the names whose methods keep nothing
    (``SAFE_CALLERS``, and the function's names for its submodules: ``submodules``)."""
    parent = parents.get(node)
    if isinstance(parent, ast.keyword):
        node, parent = parent, parents.get(parent)
    if isinstance(parent, ast.IfExp) and node is not parent.test:
        return MAYBE if kept(parent, parents, safe) else False
    if isinstance(parent, ast.Tuple | ast.List) and isinstance(parents.get(parent), ast.BinOp):
        joined = parents[parent]  # joined to another container: kept where that is kept
        while isinstance(parents.get(joined), ast.BinOp):  # (``states = states + (x,)``),
            joined = parents[joined]  # not where a call reads it (``torch.cat(a + [x])``)
        return kept(joined, parents, safe)
    if isinstance(parent, ast.BinOp | ast.UnaryOp | ast.Compare):
        return False  # an operator: a new value
    if isinstance(parent, ast.AugAssign) and node is parent.value:
        return False  # added into another (``attn += rel_pos``)
    if isinstance(parent, ast.Return):
        return False  # to the caller (``Rebound.returned``)
    if isinstance(parent, ast.Tuple | ast.List | ast.Starred):  # kept if the container is
        return kept(parent, parents, safe)  # (``torch.cat([t, x])`` keeps neither)
    if isinstance(parent, ast.Subscript | ast.Attribute) and isinstance(parent.ctx, ast.Store):
        return False  # written into (``mask[a:b] = 1``), not handed on
    if isinstance(parent, ast.Subscript):  # an index is read; ``x[0]`` of a tuple is x's
        return node is parent.value and kept(parent, parents, safe)
    if isinstance(parent, ast.Attribute):  # a method's result is new or a view the graph has
        called = isinstance(parents.get(parent), ast.Call) and parents[parent].func is parent
        return not (called or parent.attr in METADATA) and kept(parent, parents, safe)
    if isinstance(parent, ast.Call) and node is not parent.func:
        func = parent.func
        if isinstance(func, ast.Name):
            return False  # a function: its locals die when it returns
        if isinstance(func, ast.Attribute) and func.attr in TENSOR_METHODS:
            return False
        while isinstance(func, ast.Attribute | ast.Subscript):  # ``self.layer[1](x)``
            func = func.value
        return not (isinstance(func, ast.Name) and func.id in safe)
    return True  # an alias, a container, a return: kept


ITERATORS = frozenset({"enumerate", "zip", "reversed", "list", "tuple"})
"""Builtins whose items are the items of what they are given (``enumerate(self.blocks)``)."""


def submodules(func: ast.AST) -> frozenset[str]:
    """The names ``func`` binds only to its own attributes, their items, or the items of such
    names (``down = self.downsamp_modules[i - 1]``; ``for i, incre in
    enumerate(self.incre_modules)``; ``for j, f in enumerate(fuse_outer)``): its submodules,
    whose calls (``incre(x)``, ``down.forward(y)``) keep nothing, as ``self``'s methods' do.
    A name bound anything else anywhere in ``func`` is not one."""
    return _bound_only(func, frozenset({"self"}), (_of, _items_of, lambda arg: False))


def _bound_only(func: ast.AST, start: frozenset, rules: tuple) -> frozenset[str]:
    """The names ``func`` binds only where ``rules`` hold of what it binds them to, given the
    names found so far: an assignment's value, a loop's iterable (each ``(node, found)``),
    a parameter (``arg``); ``self`` always. Each pass starts from the last one's names (from
    ``start``: a name bound from another such name is found on the next), until none
    changes."""
    value_ok, items_ok, arg_ok = rules
    found = start | {"self"}
    for _ in range(8):
        bound: dict[str, bool] = {}
        for node in ast.walk(func):
            if isinstance(node, ast.arg):  # a parameter: whatever the caller passes
                bound[node.arg] = node.arg == "self" or arg_ok(node)
                continue
            if isinstance(node, ast.Assign):
                targets, ok = node.targets, value_ok(node.value, found)
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                targets, ok = [node.target], items_ok(node.iter, found)
            elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
                targets, ok = [node.target], False
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                targets, ok = [node.optional_vars], False
            else:
                continue
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and not load(name):
                        bound[name.id] = bound.get(name.id, True) and ok
        now = frozenset(name for name, ok in bound.items() if ok) | {"self"}
        if now == found:
            break
        found = now
    return found - {"self"}


def _of(value: ast.AST, names: frozenset) -> bool:
    """``self.a``, ``self.a[i]``, ``down.b`` (``down`` one of ``names``): not a call's result."""
    while isinstance(value, ast.Attribute | ast.Subscript):
        value = value.value
    return isinstance(value, ast.Name) and value.id in names


def _items_of(value: ast.AST, names: frozenset) -> bool:
    """An iterable whose items are those of ``names``' attributes (``self.blocks``,
    ``zip(self.a, self.b)``, ``self.stages.items()``, ``fuse_outer``)."""
    if isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Name) and func.id in ITERATORS:
            return bool(value.args) and all(_items_of(a, names) for a in value.args)
        method = isinstance(func, ast.Attribute) and func.attr in ("items", "values")
        return method and not value.args and _of(func.value, names)
    return _of(value, names)


SHAPES = frozenset({"len", "int", "float", "bool", "tuple", "list", "range", "min", "max"})
SHAPES |= {"round", "abs"}
"""Builtins that, given sizes, give sizes (``int(N ** 0.5)``): no op of the forward's."""


def statics(func: ast.AST) -> frozenset[str]:
    """The names ``func`` binds only to what no op of the forward makes: what a tensor says
    of itself (``B, N, C = x.shape``), its module's attributes, their items and views
    (``self.pos_embed``, ``cls = self.cls_token.expand(B, -1, -1)``), sizes computed from
    these or handed in (a parameter annotated ``Tuple[int, int]``), and its submodules. A
    name bound anything else anywhere in ``func`` is not one."""
    stored = frozenset(n.id for n in ast.walk(func) if isinstance(n, ast.Name) and not load(n))
    items = lambda value, found: _static(value, found) or _items_of(value, found)  # noqa: E731
    return _bound_only(func, stored, (_static, items, lambda arg: _sizes(arg.annotation)))


SIZES = frozenset({"int", "float", "bool", "str", "Tuple", "tuple", "List", "list", "Optional"})
"""Annotations of a parameter that holds no tensor (``ss: Tuple[int, int]``)."""


def _sizes(annotation: ast.AST | None) -> bool:
    """Whether a parameter's annotation names no type but ``SIZES``: no tensor in it."""
    names = [n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)] if annotation else []
    return bool(names) and all(name in SIZES for name in names)


def _static(value: ast.AST, names: frozenset) -> bool:
    """Whether no op of the forward makes ``value``: it reads only ``names``, constants and
    what tensors say of themselves, through attributes, items, views and size builtins."""
    parents = {child: node for node in ast.walk(value) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(value):
        if isinstance(node, ast.Name) and load(node) and node.id not in names:
            parent = parents.get(node)
            said = isinstance(parent, ast.Attribute) and parent.attr in METADATA
            if not (said or node.id in SHAPES):
                return False
        if isinstance(node, ast.Call):
            func = node.func
            method = isinstance(func, ast.Attribute) and func.attr in VIEWS | METADATA
            if not (method or (isinstance(func, ast.Name) and func.id in SHAPES)):
                return False
    return True
