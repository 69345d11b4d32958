"""FX's symbolic trace, with a tracer that names parameters and buffers from one table.

``fx.symbolic_trace``'s tracer finds the name of each parameter or buffer the forward reads
(or passes on as an argument: ``F.batch_norm(x, self.running_mean, ...)``) by walking
``named_parameters()`` or ``named_buffers()`` for each: quadratic in the model's tensors, a
tenth of a second per trace of timm's mobilenetv3_small_050, whose norm layers read their
weights in Python. ``PathTracer`` makes the table once per trace; the graph is the same
(each tensor gets the first name those walks give it), which a test checks against
``fx.symbolic_trace`` on real models.
"""

from __future__ import annotations

import dis
import operator
import re
import sys
from typing import Any

import torch
from torch import fx, nn
from torch.utils._python_dispatch import TorchDispatchMode

from pytest_graphbudget.compat import lazy_graph_modules, make_graph_module


def symbolic_trace(model: nn.Module, concrete_args: dict[str, Any] | None) -> fx.GraphModule:
    """``fx.symbolic_trace(model, concrete_args)``, through ``PathTracer``. Lazy: the graph's
    Python code is generated only if something calls it (the cost pass interprets the graph
    node by node, and code generation is a third of the trace). A forward that computes on
    tensors it makes itself is refused (``ComputedAtTrace``)."""
    try:
        with lazy_graph_modules(), ComputedAtTrace() as eager:
            tracer = PathTracer(eager.made)
            graph = tracer.trace(model, concrete_args=concrete_args)
    except TypeError as err:  # torch before 2.5 refuses the proxy as the buffer's new value
        refused = re.match(r"cannot assign '.*' as buffer '(\w+)'", str(err))
        if refused is None:
            raise
        raise TypeError(_assigns_buffers([refused[1]])) from None
    if eager.ops:
        raise TypeError(
            f"the forward computes on tensors it makes itself ({', '.join(sorted(eager.ops))}), "
            "which FX runs once while tracing and keeps as a constant: their cost would be "
            "left out"
        )
    assigned = [
        f"{path}.{key}" if path else key
        for path, module in model.named_modules()
        for key, value in vars(module)["_buffers"].items()
        if isinstance(value, fx.Proxy)
    ]
    if assigned:  # the graph module would hold the proxy, and every run would grow the graph
        raise TypeError(_assigns_buffers(assigned))
    if cached := _cached(model):
        named = ", ".join(cached[:2]) + (f" and {len(cached) - 2} more" if len(cached) > 2 else "")
        raise TypeError(
            f"the forward keeps what it computes in module state ({named}), which its next "
            "call reads back instead: FX's graph of one call would price it every time"
        )
    with lazy_graph_modules():
        return make_graph_module(tracer.root, graph, type(model).__name__)


def _cached(model: nn.Module) -> list[str]:
    """The containers of module state the trace put proxies in: a cache a forward fills once
    and reads after (timm LeViT's and EfficientFormer's ``attention_bias_cache``, keyed by
    ``str(x.device)``, which a proxy never matches), whose graph is the first call's."""
    return [
        f"{path}.{key}" if path else key
        for path, module in model.named_modules()
        for key, value in vars(module).items()
        if isinstance(value, dict | list | set)
        and any(
            isinstance(v, fx.Proxy) for v in (value.values() if isinstance(value, dict) else value)
        )
    ]


def _assigns_buffers(names: list[str]) -> str:
    return (
        f"the forward assigns its buffer {', '.join(names)} (`self.x = ...`, `self.x += ...`), "
        "a change of the module's state that FX's graph cannot replay"
    )


class ComputedAtTrace(TorchDispatchMode):
    """The ATen ops that run on real tensors while FX traces. The forward's inputs, weights and
    buffers are proxies, so such an op works on a tensor the forward made (``torch.ones(64,
    64) @ torch.ones(64, 64)``) or a plain tensor attribute; FX keeps its result as a constant
    and the op is priced at nothing, where the tape prices it on every forward. Ops that only
    make, copy or view a tensor (a constant mask, ``torch.tensor([...])``) are let be, and the
    addresses of the storages they make kept (``made``): the graph makes each where the
    forward uses it (``PathTracer._made_in_forward``)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()
        self.made: set[int] = set()  # where the storages those ops made lie (``_address``)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from pytest_graphbudget.costs.registry import ZERO_ROLES, lookup, op_key

        key = op_key(func)
        entry = lookup(key)
        if entry is None or entry.role not in ZERO_ROLES:
            self.ops.add(key)
        out = func(*args, **(kwargs or {}))
        self.made.update(a for t in _fresh(out, args) if (a := _address(t)))  # 0: meta, empty
        return out


def _fresh(out: Any, args: tuple) -> list[torch.Tensor]:
    """The tensors among ``out`` on storages none of ``args`` is on: made by the op."""
    import torch.utils._pytree as pytree

    def tensors(value: Any) -> list[torch.Tensor]:
        return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]

    known = {_address(t) for t in tensors(args)}
    return [t for t in tensors(out) if _address(t) not in known]


def _address(t: torch.Tensor) -> int:
    """Where ``t``'s storage lies: while tracing, a tensor made then is never at the address
    of one that was there before (a weight, a global), which stays alive throughout."""
    return t.untyped_storage().data_ptr()


class PathTracer(fx.Tracer):
    """``fx.Tracer``, finding parameters' and buffers' names in a table made once per trace."""

    # Buffers are proxies as parameters are: an op on one (``relative_position_index.view(-1)``)
    # is a node, priced and read as the tape reads it, not run at trace time into a constant
    proxy_buffer_attributes = True

    def __init__(self, made: set[int] | frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.made = made  # where tensors made while tracing lie (``ComputedAtTrace``), as it runs
        self._cloned: dict[Any, fx.Node] = {}

    def trace(self, root: Any, concrete_args: dict[str, Any] | None = None) -> fx.Graph:
        self._stack = Frames(sys._getframe(), self._cloned)
        # id -> (name, the table that holds it, its key there): each tensor's first name, a
        # parameter's before a buffer's, as ``named_parameters()`` and ``named_buffers()`` give
        self._names: dict[int, tuple[str, dict, str]] = {}
        self._opcodes: dict[tuple[Any, int], bool] = {}  # (code, offset): an augmented op?
        self._paths: dict[int, list[str]] = {}  # a module held under several names: them all
        if isinstance(root, nn.Module):
            for path, module in root.named_modules(remove_duplicate=False):
                self._paths.setdefault(id(module), []).append(path)
            modules = list(root.named_modules())
            for kind in ("_parameters", "_buffers"):
                for path, module in modules:
                    table = vars(module)[kind]
                    for key, t in table.items():
                        if t is not None:
                            name = f"{path}.{key}" if path else key
                            self._names.setdefault(id(t), (name, table, key))
        try:
            graph = super().trace(root, concrete_args)
        finally:
            self._stack = Frames(None, {})  # lets go of the frames (and their locals) held
        if isinstance(root, nn.Module):  # what the forward left on its modules (self.last = y)
            kept = set().union(*(_names(vars(m).values(), 2, {}) for m in root.modules()))
            output = next(n for n in reversed(graph.nodes) if n.op == "output")
            output.meta[KEPT] = frozenset(kept & {n.name for n in graph.nodes})
        return graph

    def _owned(self, value: Any) -> str | None:
        """The name the table gives ``value`` while its module still holds it there (read in
        the module's own table: ``get_submodule`` for every weight a forward reads was a
        tenth of the trace of a network of many norm layers)."""
        found = self._names.get(id(value))
        if found is None:
            return None
        name, table, key = found
        return name if table.get(key) is value else None

    def path_of_module(self, mod: nn.Module) -> str:
        """A module held by several parents (ultralytics' one ``nn.SiLU``) is named where it is
        called, under the parent running now, as the tape and export name it; FX's own name
        is its first, which charged every call to the first parent."""
        paths = self._paths.get(id(mod), ())
        if len(paths) > 1:
            parent = self.scope.module_path
            for path in paths:
                if path.rpartition(".")[0] == parent:
                    return path
        return super().path_of_module(mod)

    def _augmented(self, frame: Any) -> bool:
        """Whether the code that made this operator's node wrote ``y += z``: a proxy has no
        ``__iadd__``, so Python falls back to ``__add__`` and FX records a new tensor where
        eager PyTorch adds in place (an activation more at the peak)."""
        while frame is not None and machinery(frame):
            frame = frame.f_back
        if frame is None:
            return False
        key = (frame.f_code, frame.f_lasti)
        if key not in self._opcodes:
            found = next(
                (i for i in dis.get_instructions(frame.f_code) if i.offset == frame.f_lasti),
                None,
            )
            self._opcodes[key] = found is not None and (
                found.opname.startswith("INPLACE_")  # Python 3.10
                or (found.opname == "BINARY_OP" and found.argrepr.endswith("="))
            )
        return self._opcodes[key]

    def create_arg(self, a: Any) -> Any:
        # A tensor passed as it is (``F.batch_norm(x, self.running_mean, ...)``): FX's own
        # search walks every buffer for each one.
        if isinstance(a, torch.Tensor) and (name := self._owned(a)) is not None:
            return self.create_node("get_attr", name, (), {})
        if isinstance(a, torch.Tensor) and _address(a) in self.made:
            return self._made_in_forward(a)
        return super().create_arg(a)

    def _made_in_forward(self, a: torch.Tensor) -> fx.Node:
        """A tensor the forward made from constants (``torch.zeros(2, 1, 256)``, ``torch.
        tensor([...])``): FX runs the factory once and keeps its result as a constant, where
        the forward makes it on every call. The graph reads a clone of the constant, made where
        the forward first uses it, so the cost pass counts its bytes as the tape counts the
        factory's (a (4, 10, 16) ``torch.zeros`` added to an activation had read 2,560 B under
        the profiler's peak, and its kernel at nothing)."""
        if id(a) not in self._cloned:
            constant = super().create_arg(a)
            constant.meta[MADE] = True  # no weight: ``trace.graph_constants`` leaves it out
            self._cloned[id(a)] = self.create_node("call_function", torch.clone, (constant,), {})
        return self._cloned[id(a)]

    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict[str, Any]) -> Any:
        found = self._names.get(id(attr_val))
        if found is None or not isinstance(attr_val, torch.Tensor):
            return super().getattr(attr, attr_val, parameter_proxy_cache)
        if not self.proxy_buffer_attributes and not isinstance(attr_val, nn.Parameter):
            return attr_val
        name = self._owned(attr_val)
        if name is None:  # moved since the table was made: FX's own search
            return super().getattr(attr, attr_val, parameter_proxy_cache)
        if name not in parameter_proxy_cache:
            parameter_proxy_cache[name] = self.create_proxy("get_attr", name, (), {})
        return parameter_proxy_cache[name]

    def create_proxy(self, kind: str, target: Any, args: tuple, kwargs: dict, *rest, **more):
        if (
            kind == "call_function"
            and target in AUGMENTED
            and args
            and isinstance(args[0], fx.Proxy)
            and self._augmented(sys._getframe(1))
        ):
            target = AUGMENTED[target]
        proxy = super().create_proxy(kind, target, args, kwargs, *rest, **more)
        if kind.startswith("call_"):
            proxy.node.meta[HELD] = self._stack.held(sys._getframe(1))
        if kind in ("call_function", "call_method"):
            self._own_module(proxy.node, sys._getframe(1))
        return proxy

    def _own_module(self, node: fx.Node, frame: Any) -> None:
        """A module's forward called directly (``self.a.forward(x)``) is no module call to
        FX, and its ops were charged to the caller: the module whose code made the node, as
        the tape finds it, goes on the node's ``nn_module_stack``."""
        while frame is not None and machinery(frame):
            frame = frame.f_back
        if frame is None or "self" not in frame.f_code.co_varnames:
            return
        owner = frame.f_locals.get("self")
        paths = self._paths.get(id(owner), ()) if isinstance(owner, nn.Module) else ()
        path = self.path_of_module(owner) if paths else ""
        if not path or path == self.scope.module_path:
            return
        stack = dict(node.meta.get("nn_module_stack") or {})
        if path not in (entry[0] for entry in stack.values()):
            stack[path] = (path, type(owner))
            node.meta["nn_module_stack"] = stack


MACHINERY = frozenset(
    m.__file__
    for m in (torch.fx._symbolic_trace, torch.fx.proxy, torch.overrides, torch.nn.modules.module)
)
"""Files of the frames between a traced op and the code that called it (FX's proxies and
module calls, torch's function overrides): they hold only the op's arguments."""

OURS = frozenset({"pytest_graphbudget.engine.fakes"})
"""Our modules whose frames stand between a traced op and its caller: ``F.linear`` is
``fakes.linear`` while a model is profiled."""


def machinery(frame: Any) -> bool:
    """Whether ``frame`` stands between a traced op and the model's code that called it."""
    return frame.f_code.co_filename in MACHINERY or frame.f_globals.get("__name__") in OURS


AUGMENTED = {
    operator.add: operator.iadd,
    operator.sub: operator.isub,
    operator.mul: operator.imul,
    operator.truediv: operator.itruediv,
    operator.floordiv: operator.ifloordiv,
    operator.mod: operator.imod,
    operator.pow: operator.ipow,
    operator.matmul: operator.imatmul,
    operator.and_: operator.iand,
    operator.or_: operator.ior,
    operator.xor: operator.ixor,
    operator.lshift: operator.ilshift,
    operator.rshift: operator.irshift,
}
"""The operator FX records for ``y op= z`` (Python's fallback to ``op``), and the in-place
operator eager PyTorch runs for it."""

MADE = "graph_budget_made"
"""Set on the ``get_attr`` of a constant the forward made (``PathTracer._made_in_forward``):
what the clone after it reads is no weight of the model, and its clone writes it as the
forward's factory did."""
HELD = "graph_budget_held"
"""A call node's meta: the nodes whose values the forward's frames held when it ran."""

KEPT = "graph_budget_kept"
"""The output node's meta: the nodes whose values the forward left on its modules' attributes
(``self.last = y``), which eager torch holds after the forward as it holds its outputs."""


class Frames:
    """The nodes the Python stack refers to when each op is traced: what eager PyTorch holds
    while that op runs. A frame's locals (``y = conv(x)`` while later ops run, until rebound)
    and the tuples, lists and dicts in them (a module call's ``*args``, held by its caller's
    frames until it returns).

    Most of the stack is the same from one op to the next: a frame still waiting on the same
    call (the same callee frame, at the same instruction) has not run since, nor have its
    callers, so what they hold is what it was then: the walk stops there. Every frame met is
    held until the trace ends, so that an id is never another frame's."""

    def __init__(self, top: Any, made: dict[int, fx.Node]):
        self.top = top  # the trace's own frame, where walks stop
        self.made = made  # a tensor made in the forward, by id -> the node that clones it
        # id -> (frame, the frame it was calling, its instruction, what it and its callers hold)
        self.seen: dict[int, tuple[Any, Any, int, frozenset[str]]] = {}

    def held(self, frame: Any) -> frozenset[str]:
        met: list[tuple[Any, Any, set[str]]] = []  # frames that ran since: (frame, child, names)
        tail: frozenset[str] = frozenset()
        child = None
        while frame is not None and machinery(frame):
            child, frame = frame, frame.f_back  # the op's own call: it holds its arguments
        while frame is not None and frame is not self.top:
            last = self.seen.get(id(frame))
            if last and last[0] is frame and last[1] is child and last[2] == frame.f_lasti:
                tail = last[3]  # it and its callers have not run since the last op
                break
            met.append((frame, child, _names(frame.f_locals.values(), 2, self.made)))
            child, frame = frame, frame.f_back
        for frame, child, names in reversed(met):
            tail = tail | names
            self.seen[id(frame)] = (frame, child, frame.f_lasti, tail)
        return tail


def _names(values: Any, depth: int, made: dict[int, fx.Node]) -> set[str]:
    """The nodes ``values`` refer to: proxies', and the clones of tensors made in the forward
    (``made``: a local ``state = torch.zeros(...)`` holds its clone until rebound)."""
    names: set[str] = set()
    for value in values:
        if isinstance(value, fx.Proxy):  # not ``.node``: an attribute's makes its node then
            node = vars(value).get("node") or vars(value).get("_node")
            names.update([node.name] if node is not None else [])
        elif isinstance(value, torch.Tensor) and id(value) in made:
            names.add(made[id(value)].name)
        elif depth and isinstance(value, (tuple, list)):
            names |= _names(value, depth - 1, made)
        elif depth and isinstance(value, dict):
            names |= _names(value.values(), depth - 1, made)
    return names
