"""Capture one training step as one joint graph, each node tagged with its phase and module.

``make_fx`` (fake tensors) traces a functional step that calls the model, the loss,
``torch.autograd.grad`` over the trainable parameters and, when an optimizer is named, its
update written out as torch's single-tensor loop writes it (Adam: two moments per parameter,
in its dtype; SGD with momentum: one buffer). We chose ``make_fx`` over AOTAutograd's joint graph
(``aot_function``): it keeps the autograd engine's own backward ops in the order eager
training runs them (``convolution_backward``, ``threshold_backward``: what FlopCounterMode and
the memory profiler see in eager), needs no partitioner or compiler hooks, and keeps the
optimizer's in-place updates in place, so liveness sees no second copy of the weights.

A step fake tensors cannot take (a Python branch on a tensor's value, ``.item()``) is traced
with ``real=True``: on real copies of the weights, the optimizer's state and the inputs (the
model's own are never touched), so the graph is the path one real step takes, as the eval
tiers after a failed trace price the path one real forward takes (``breaks.py``).

Attribution: while tracing, a dispatch mode tags every node with its phase (forward, which
includes the loss; backward; optimizer) and module. A forward node takes the innermost module
running; a backward node takes the module whose forward op created the autograd node being
run (matched by autograd sequence number); an optimizer node takes its parameter's module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_graphbudget.engine.accumulate import Accumulation, handed_over
from pytest_graphbudget.engine.eager_kernels import saved_workspaces
from pytest_graphbudget.engine.fakes import eager_linear, fake_mode, traced_as_eager
from pytest_graphbudget.engine.hf_masks import real_input_masks
from pytest_graphbudget.engine.optimizer_step import optimizer_state, state_made, update
from pytest_graphbudget.engine.watch import restored, tensors_held
from pytest_graphbudget.errors import GraphBudgetError


def default_loss(outputs: Any) -> Any:
    """The loss the model computed, when it returns one (a Hugging Face model given
    ``labels``: ``outputs.loss``, what its ``Trainer`` steps on); else the sum of every
    floating-point output that needs a gradient (in tuples, dicts, a ``ModelOutput`` or a
    dataclass of the model's own). Summing the logits beside a returned loss had added a
    reduction over the vocabulary and a second gradient into them."""
    from pytest_graphbudget.engine.tree import tensors

    own = outputs.get("loss") if isinstance(outputs, Mapping) else getattr(outputs, "loss", None)
    if _differentiable(own) and own.dim() == 0:
        return own
    leaves = [t for t in tensors(outputs) if _differentiable(t)]
    if not leaves:
        raise GraphBudgetError(
            "mode='train': no output of the model needs a gradient; give loss= a callable "
            "that returns a scalar computed from the outputs"
        )
    total = leaves[0].sum()
    for leaf in leaves[1:]:
        total = total + leaf.sum()
    return total


def _differentiable(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.requires_grad


@dataclass
class Tags:
    """Phase and module of every graph node, filled while the step is traced."""

    phase: str = "forward"
    modules: list[str] = field(default_factory=lambda: [""])
    by_sequence: dict[int, str] = field(default_factory=dict)  # autograd seq nr -> module
    node_phase: dict[str, str] = field(default_factory=dict)
    node_module: dict[str, str] = field(default_factory=dict)
    optimizer_module: str = ""
    last: Any = None  # the last node tagged
    died: dict[str, list[str | None]] = field(default_factory=dict)
    """Node -> for each new storage among its outputs, in their order, the last node tagged
    when it died; None while it lives (``watch``)."""
    owner: dict[int, tuple[str, int]] = field(default_factory=dict)  # live storage -> its slot
    holders: dict[int, int] = field(default_factory=dict)  # live storage -> tensors on it
    watched: set[int] = field(default_factory=set)  # ``id`` of each live tensor followed
    done: bool = False  # the step returned: what dies now, make_fx let go of, not the step
    made: Any = None  # the first node the last op added: the one that writes its outputs
    sums: Accumulation = field(default_factory=Accumulation)  # the engine's gradient sums
    accumulating: str | None = None  # the module of the parameter whose gradient is copied
    kept_on_ctx: set[int] = field(default_factory=set)  # storages (``ctx_tensors``)

    def module_now(self) -> str:
        import torch

        if self.accumulating is not None:
            return self.accumulating
        if self.phase == "forward":
            return self.modules[-1]
        if self.phase == "optimizer":
            return self.optimizer_module
        running = torch._C._current_autograd_node()
        return self.by_sequence.get(running._sequence_nr(), "") if running is not None else ""

    def tag(self, graph: Any) -> None:
        """Tag the nodes added to ``graph`` since the last call."""
        import torch

        module = self.module_now()
        if self.phase == "forward":  # the autograd node this op just created, if any
            self.by_sequence.setdefault(torch.autograd._get_sequence_nr() - 1, module)
        node = (self.last or graph._root).next
        while node.op == "placeholder":  # the step's inputs, before its first op's node
            node = node.next
        self.made = node if node.op != "root" else None  # the op's own node, not its getitems
        while node.op != "root":
            self.node_phase[node.name] = self.phase
            self.node_module[node.name] = module
            node.meta["nn_module_stack"] = {module: (module, None)} if module else {}
            self.last, node = node, node.next

    def watch(self, out: Any) -> None:
        """Follow the storages of an op's outputs until the step lets go of them: the
        frames' locals, rebound names and autograd's saved tensors (kept until their node
        has run) decide it, as in eager. A module call's own rule (``_held_by_calls``) had
        kept a Hugging Face attention's scores, computed in a plain function and freed at
        once, live to the end of the call (Llama's step read +19 MB), and the last-reader rule
        had freed a saved tensor in the middle of its backward node (-2.8 MB)."""
        import weakref

        import torch
        from torch.utils import _pytree as pytree

        for tensor in pytree.tree_leaves(out):
            fresh = isinstance(tensor, torch.Tensor) and id(tensor) not in self.watched
            if not fresh or self.made is None:  # an in-place op's result: counted once
                continue
            storage = tensor.untyped_storage()._cdata
            if storage not in self.holders:
                slots = self.died.setdefault(self.made.name, [])
                self.owner[storage], self.holders[storage] = (self.made.name, len(slots)), 0
                slots.append(None)
            self.holders[storage] += 1
            self.watched.add(id(tensor))
            weakref.finalize(tensor, self._gone, storage, id(tensor))

    def _gone(self, storage: int, tensor: int) -> None:
        self.watched.discard(tensor)
        self.holders[storage] -= 1
        if self.holders[storage] or self.done:
            return
        del self.holders[storage]  # its address may hold another storage from now on
        made, slot = self.owner.pop(storage)
        self.died[made][slot] = self.last.name if self.last is not None else made

    def backward_starts(self, loss: Any) -> None:
        """Follow the gradient sums and note what custom Functions keep on ``ctx``."""
        self.sums.follow(loss)
        self.kept_on_ctx = ctx_tensors(loss)

    def backward_ended(self, graph: Any) -> None:
        """Tag the backward's nodes. What custom Functions keep on ``ctx`` (``ctx_tensors``)
        dies after its last: eager's ``loss.backward()`` lets go of the graph as it returns;
        the trace holds it to the end of the step, which would count as their last reader."""
        self.tag(graph)
        for storage in self.kept_on_ctx & self.owner.keys():
            made, slot = self.owner[storage]
            self.died[made][slot] = self.last.name if self.last is not None else made

    def frees(self, nodes: list[Any]) -> dict[Any, int]:
        """``Measured.frees`` of the joint graph: the node after which each activation the
        step let go of may die (its last reader, if later, still holds it); one it held to
        the end dies at its last reader, or at the end as a graph output. Each storage of a
        node has its own (max_pool2d's indices die at once where no backward needs them, its
        values much later); where the node's storages do not pair one to one with its writes,
        the latest death of them, or the last reader while one lives, stands for all."""
        index = {node.name: i for i, node in enumerate(nodes)}
        found: dict[Any, int] = {}
        for i, node in enumerate(nodes):
            marks = [index.get(m, i) if m else None for m in self.died.get(node.name, ())]
            if len(marks) != len(node.writes):
                marks = [max(marks) if marks and None not in marks else i] * len(node.writes)
            for key, after in zip(node.writes, marks, strict=True):
                found.setdefault(key, i if after is None else after)
        return found


def _tagging_mode(tags: Tags, graph: Any) -> Any:
    """A dispatch mode above make_fx's: after each ATen call, the nodes it added get tagged
    while the phase, module and running autograd node are still those of the call."""
    from torch._ops import HigherOrderOperator
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Tagging(TorchDispatchMode):
        supports_higher_order_operators = True  # refused by name, not in torch's words

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if isinstance(func, HigherOrderOperator):
                name = f"torch.{func.name()}"
                raise NotImplementedError(
                    f"{name} is a higher-order op the step's trace cannot follow"
                )
            func = tags.sums.before(func, args, kwargs, tags)
            out = func(*args, **(kwargs or {}))
            tags.tag(graph)
            tags.sums.after(tags.made)
            tags.watch(out)
            return out

    return _Tagging()


@contextlib.contextmanager
def _module_hooks(model: Any, tags: Tags) -> Iterator[None]:
    """Keep ``tags.modules`` the stack of modules whose forward is running."""
    handles = []
    for path, module in model.named_modules():  # a module reused at two paths: its first
        if not path:
            continue

        def enter(_module, _args, path=path):
            tags.modules.append(path)

        def leave(_module, _args, _out):
            tags.modules.pop()

        handles.append(module.register_forward_pre_hook(enter))
        handles.append(module.register_forward_hook(leave, always_call=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@dataclass
class Joint:
    """The traced step, the module its cost pass reads state from, and the node tags."""

    traced: Any  # trace.Traced
    holder: Any  # nn.Module: the model under ``model.``, optimizer state under ``optimizer.``
    tags: Tags
    state_bytes: int  # the optimizer's state, allocated before the step


def _holder(model: Any, slots: dict[str, Any], real: bool = False) -> Any:
    """A module whose state is the model's (under ``model.``) and the optimizer's: its slots
    as they are when ``real`` (zeros, as a step's first update finds them), else on the meta
    device (shapes only, as the fake cost pass needs)."""
    import torch
    from torch import nn

    holder = nn.Module()
    holder.model, holder.optimizer = model, nn.Module()
    for i, tensor in enumerate(slots.values()):
        value = tensor if real else torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")
        holder.optimizer.register_buffer(f"s{i}", value)
    return holder


def real_state(model: Any) -> dict[str, Any]:
    """A real copy of every parameter and buffer by name (tied ones stay tied, parameters stay
    parameters): what a real step may write in place instead of the model's own."""
    from torch import nn

    from pytest_graphbudget.engine.trace import model_state

    copies: dict[int, Any] = {}
    state = {}
    for name, tensor in model_state(model).items():
        if id(tensor) not in copies:
            copy = tensor.detach().clone()
            if isinstance(tensor, nn.Parameter):
                copy = nn.Parameter(copy, requires_grad=tensor.requires_grad)
            copies[id(tensor)] = copy
        state[name] = copies[id(tensor)]
    return state


def real_like(tensors: list[Any]) -> list[Any]:
    """Copies of the example's tensors, which the step may write in place."""
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


@contextlib.contextmanager
def _tracing(model: Any, example: Any, real: bool) -> Iterator[None]:
    """Around ``make_fx``: the model as it was after (a forward keeping a tensor, a memory,
    must not keep the twin), float32 ``_grouped_mm`` on fakes, transformers' masks decided
    from the real inputs, read here, outside the trace, and eager's own kernels kept whole."""
    with (
        restored(model),
        traced_as_eager(fake=not real),
        real_input_masks(model, example.args, example.kwargs),
    ):
        yield


def ctx_tensors(loss: Any) -> set[int]:
    """The storages of tensors custom autograd Functions keep on their ``ctx`` as attributes
    (``ctx.offs = offs``, transformers' ``grouped_mm_fallback``) in the graph behind ``loss``:
    unlike what ``save_for_backward`` keeps, freed once its node has run, they live as long as
    the node, to the end of the backward."""
    import torch
    from torch.utils import _pytree as pytree

    found: set[int] = set()
    seen: dict[int, Any] = {}  # each node kept, so that no id is reused by another's wrapper
    todo = [getattr(loss, "grad_fn", None)]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        todo.extend(fn for fn, _ in node.next_functions)
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            values = pytree.tree_leaves(list(vars(node).values()))
            tensors = (v for v in values if isinstance(v, torch.Tensor))
            found.update(t.untyped_storage()._cdata for t in tensors)
    return found


def _forward(model: Any, state: dict, args: tuple, kwargs: dict) -> tuple[Any, list]:
    """The model's forward on ``state``, and the tensors it left on its modules (a recurrent
    layer's last state): eager torch holds them after the step, so the step returns them."""
    import torch

    held = {id(t) for t in tensors_held(model)}
    out = torch.func.functional_call(model, state, args, kwargs)
    return out, [t for t in tensors_held(model) if id(t) not in held]


def capture(
    model: Any,
    example: Any,
    loss: Callable | None,
    optimizer: str | None,
    real: bool = False,
    autocast: Callable[[], Any] | None = None,
    scale: float | None = None,
) -> Joint:
    """One training step of ``model`` at ``example`` as one joint graph, on fakes or (``real``)
    on real copies; ``autocast`` makes the forward's and the loss's context (AMP: the backward
    runs outside it), ``scale`` is a ``GradScaler``'s, undone before the update."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils import _pytree as pytree

    from pytest_graphbudget.compat import make_fx_keywords, proxy_mode
    from pytest_graphbudget.engine.trace import Binding, Traced, fake_like, fake_state

    mode = None if real else fake_mode()  # fake twins allocate nothing, real copies leave
    twins = real_state(model) if real else fake_state(model, mode)  # the model as it was
    named = list(model.named_parameters())
    params = {k: twins[k] for k, p in named if p.requires_grad}
    if not params:
        raise GraphBudgetError("mode='train': the model has no parameter that requires grad")
    frozen = {k: twins[k] for k, p in named if not p.requires_grad}
    frozen.update((k, twins[k]) for k, _ in model.named_buffers())
    slots = optimizer_state(params, optimizer, mode)
    leaves, spec = pytree.tree_flatten((example.args, example.kwargs))
    where = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    distinct, slot_of = _distinct_inputs([leaves[i] for i in where])
    tags = Tags()
    loss = loss or default_loss
    counts = (len(params), len(frozen), len(slots))
    used: list[bool] = []  # which parameters got a gradient: torch.optim makes their state only

    def step(*flat: Any) -> Any:
        graph = proxy_mode().tracer.graph
        p, rest = flat[: counts[0]], flat[counts[0] :]
        b, rest = rest[: counts[1]], rest[counts[1] :]
        s, tensors = rest[: counts[2]], rest[counts[2] :]
        values = list(leaves)
        for i, slot in zip(where, slot_of, strict=True):
            values[i] = tensors[slot]
        args, kwargs = pytree.tree_unflatten(values, spec)
        state = dict(zip(params, p, strict=True)) | dict(zip(frozen, b, strict=True))
        with _tagging_mode(tags, graph), _module_hooks(model, tags), eager_linear():
            with autocast() if autocast else contextlib.nullcontext():
                out, kept = _forward(model, state, args, kwargs)
                value = loss(out)
            del out  # as `loss(model(x)).backward()` holds no output through the backward
            value = value * scale if scale else value
            tags.tag(graph)
            tags.phase = "backward"
            tags.backward_starts(value)
            with handed_over(p, [name.rpartition(".")[0] for name in params], tags):
                grads = torch.autograd.grad(value, p, allow_unused=True)
            used[:] = [g is not None for g in grads]
            tags.backward_ended(graph)
            tags.phase = "optimizer"
            if optimizer is not None:
                update(optimizer, list(params), p, grads, s, tags, scale)
        tags.done = True  # what the step still holds dies at its last reader, not after make_fx
        return value, [g for g in grads if g is not None], kept

    tensors = [leaves[where[n]] for n in distinct]
    flat = [*params.values(), *frozen.values(), *slots.values()]
    flat += real_like(tensors) if real else fake_like(tensors, mode)
    # Real: a branch or ``.item()`` reads this step's values; the graph takes the path they do
    tracing = make_fx_keywords(_error_on_data_dependent_ops=False) if real else {}
    with _tracing(model, example, real):
        gm = make_fx(step, tracing_mode="real" if real else "fake", **tracing)(*flat)
    saved_workspaces(gm.graph)  # a real step's are the kernel's own
    tags.sums.rewrite(gm, tags.died)  # in place where eager sums gradients in place
    placeholders = [Binding("state", f"model.{name}") for name in (*params, *frozen)]
    placeholders += [Binding("state", f"optimizer.s{i}") for i in range(len(slots))]
    placeholders += [Binding("input", n) for n in distinct]
    traced = Traced(gm, "joint-real" if real else "joint", placeholders, state_in_module=False)
    state_bytes = state_made(slots, used, optimizer)
    return Joint(traced, _holder(model, slots, real), tags, state_bytes)


def _distinct_inputs(tensors: list[Any]) -> tuple[list[int], list[int]]:
    """The positions of the distinct tensors among the example's ``tensors`` (one passed
    several times, ``mha(x, x, x)``, counted at its first), and for each position the index
    of its tensor among those: the step takes each once, as one placeholder, so that its
    storage is one input, as in eager and in an eval profile (``Measured.input_bytes``)."""
    first: dict[int, int] = {}
    for n, tensor in enumerate(tensors):
        first.setdefault(id(tensor), n)
    distinct = list(first.values())
    index = {n: k for k, n in enumerate(distinct)}
    return distinct, [index[first[id(tensor)]] for tensor in tensors]
