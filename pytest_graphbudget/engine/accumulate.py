"""The autograd engine's sum of the gradients that reach one tensor by several paths, in place
where eager sums them in place.

A tensor read twice (``g = b(h) + h``) or a weight used twice (a tied embedding and LM head)
gets one gradient per path; the engine sums them in the input buffer of the node they flow
into, as it routes the second one (``InputBuffer::accumulate`` in
``torch/csrc/autograd/input_buffer.cpp``). With grad mode off (a backward that builds no
graph), it writes the sum into the first gradient (``old_var.add_(var)``) when that one can be
reused (``can_accumulate_inplace``): a plain strided tensor, non-overlapping and dense, which
no other tensor refers to and whose storage nothing else holds; else it makes a new tensor.
Traced (fake tensors are a tensor subclass, and any dispatch mode reads as one, which that
rule refuses), every sum is a new ``add``, live beside both of its operands: one gradient too
many at the step's peak (T5's shared embedding, the residual stream's gradient).

``Accumulation`` tells the engine's sum apart from an ``add`` inside a backward formula: a
post-hook on every autograd node marks the node whose formula has returned, and an ``add``
dispatched while that node is still the one running is the engine routing its outputs. A sum
whose first operand died at it (nothing else held it, as ``Tags.watch`` follows) and that
keeps that operand's shape and dtype becomes ``add_`` in the graph: the sum lives in the first
gradient's storage, which dies where the sum does; the values of the sum's views (``t`` for a
weight's gradient) are made again on it. ``holders`` counts tensors, not results: an in-place
op returns the tensor it wrote, which counts once (``CopySlices``' buffer is written by
``copy_`` before the copied slice's gradient is summed into it; counted twice, a circular
pad's step had read a third padded tensor, +12%).

A leaf's gradient is then handed to its ``AccumulateGrad`` node, which the engine runs before
any other ready node. On a first backward it keeps the tensor it is given as ``.grad`` when
nothing else refers to it and its strides are the parameter's
(``torch/csrc/autograd/functions/accumulate_grad.h``), and else keeps a copy. The copy is
eager's when one gradient goes two ways: ``x + pos_embed`` at batch 1 gives the position
embedding the very tensor that flows on to the patch embedding's backward, which holds it
until it has run, beside the copy (ViT's step at batch 1 read one tokens x width tensor
under). ``torch.autograd.grad`` captures gradients and copies none, so ``handed_over`` asks
each leaf's gradient, as it is handed over, what ``AccumulateGrad`` would, and makes the copy.

A backward formula's own arithmetic is in place where ATen's is on plain tensors and out of
place on a subclass: a gradient of zeros filled (``filled_in_place``), a chain of ops on a
tensor the formula made (``chained_in_place``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Accumulation:
    """The engine's gradient sums seen while the step is traced."""

    finished: Any = None  # the autograd node whose formula has returned: its outputs are routed
    pending: tuple[str, int] | None = None  # the first operand's slot, of the sum dispatched now
    found: dict[str, tuple[str, int]] = field(default_factory=dict)
    """A sum's graph node -> the node and slot (``Tags.died``) of its first operand's storage."""
    alone: int = field(default_factory=lambda: _references_alone())  # made before the trace
    formula: Any = None  # the autograd node of ``CHAINED`` whose formula runs now
    made_here: set[str] = field(default_factory=set)  # the graph nodes its formula made

    def follow(self, loss: Any) -> None:
        """Hook every autograd node ``loss`` is computed by (its graph dies with the backward)."""
        seen, stack = set(), [loss.grad_fn]
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            node.register_hook(self._returned)
            stack.extend(edge for edge, _ in node.next_functions)

    def _returned(self, _grad_inputs: Any, _grad_outputs: Any) -> None:
        import torch

        self.finished = torch._C._current_autograd_node()

    def before(self, func: Any, args: tuple, kwargs: dict | None, tags: Any) -> Any:
        """The op to run for the call about to run (``filled_in_place``), noting it if it is the
        engine's sum of two gradients, the first dense and the only tensor on its storage
        (``tags``: ``joint.Tags``, whose ``holders`` count the tensors on each live storage and
        whose ``owner`` gives its node and slot). A view keeps its base alive (the weight
        gradient ``t`` makes of a product's): two tensors on one storage, which eager sums out
        of place."""
        import torch

        self.pending = None
        self._note_sum(func, args, kwargs, tags)
        running = torch._C._current_autograd_node()
        if running is not self.formula:
            chained = running is not None and running.name() in CHAINED
            self.formula, self.made_here = (running if chained else None), set()
        if self.formula is not None:
            return chained_in_place(func, args, tags, self)
        return filled_in_place(func, args, tags)

    def _note_sum(self, func: Any, args: tuple, kwargs: dict | None, tags: Any) -> None:
        import torch

        if func is not torch.ops.aten.add.Tensor or kwargs or len(args) != 2:
            return
        running = torch._C._current_autograd_node()
        if running is None or running is not self.finished or torch.is_grad_enabled():
            return
        first, second = args
        tensors = isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)
        if not tensors or first.layout != torch.strided or second.layout != torch.strided:
            return
        storage = first.untyped_storage()._cdata
        if _dense(first) and tags.holders.get(storage) == 1:
            self.pending = tags.owner.get(storage)

    def after(self, made: Any) -> None:
        """The call has run and ``made`` (its graph node) been tagged."""
        if self.pending is not None and made is not None:
            self.found[made.name] = self.pending
        if self.formula is not None and made is not None:
            self.made_here.add(made.name)
        self.pending = None

    def rewrite(self, gm: Any, died: dict[str, list[str | None]]) -> None:
        """Make each sum in ``gm`` whose first operand died at it an ``add_`` into that
        operand, which now dies where the sum does (``died``: ``Tags.died``, updated)."""
        import torch

        self.finished = None  # the backward's graph, let go of
        into: dict[str, tuple[str, int]] = {}  # a rewritten sum -> the storage it writes
        stale: set[int] = set()  # the storages the rewritten sums' own values had
        for node in gm.graph.nodes:
            slot = self.found.get(node.name)
            if slot is None or node.target is not torch.ops.aten.add.Tensor:
                _refresh(node, stale)
                continue
            made, n = into.get(slot[0], slot)  # a sum into a sum: into the first's operand
            first, value = node.args[0].meta.get("val"), node.meta.get("val")
            if died.get(made, [])[n : n + 1] != [node.name] or not _same(first, value):
                continue
            died[made][n] = died.pop(node.name, [None])[0]
            into[node.name] = (made, n)
            node.target = torch.ops.aten.add_.Tensor
            node.meta["val"] = first  # the first operand, written in place
            stale.add(value.untyped_storage()._cdata)
        gm.graph.lint()
        gm.recompile()


def _refresh(node: Any, stale: set[int]) -> None:
    """Make again the value of ``node`` (a view of a rewritten sum, ``t`` for a weight's
    gradient) on its arguments' values: the cost pass reads each node's value (``meta["val"]``),
    and the one the trace left views the sum's own storage, which no longer exists."""
    import torch
    from torch.fx.node import map_arg
    from torch.utils import _pytree as pytree

    value = node.meta.get("val")
    tensors = [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]
    if node.op != "call_function" or not any(t.untyped_storage()._cdata in stale for t in tensors):
        return
    args, kwargs = map_arg((node.args, node.kwargs), lambda arg: arg.meta.get("val"))
    node.meta["val"] = node.target(*args, **kwargs)


def _same(first: Any, value: Any) -> bool:
    """Whether the sum ``value`` fits in the first operand (no broadcast, no promotion)."""
    import torch

    tensors = isinstance(first, torch.Tensor) and isinstance(value, torch.Tensor)
    return tensors and first.shape == value.shape and first.dtype == value.dtype


def _dense(tensor: Any) -> bool:
    """Whether ``tensor``'s elements fill its storage's extent without overlap or gaps, in some
    order of its dimensions (``is_non_overlapping_and_dense``)."""
    expected = 1
    for size, stride in sorted(zip(tensor.shape, tensor.stride(), strict=True), key=_stride):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def _stride(dim: tuple[int, int]) -> int:
    return dim[1]


@contextlib.contextmanager
def handed_over(params: Sequence[Any], modules: Sequence[str], tags: Any) -> Iterator[None]:
    """While the step's ``autograd.grad`` runs, give each of ``params`` the gradient its
    ``AccumulateGrad`` would keep: a copy where eager makes one (attributed to ``modules``,
    the parameters' modules, through ``tags.accumulating``)."""
    alone = tags.sums.alone
    handles = [
        param.register_hook(functools.partial(_accumulate_grad, param, module, alone, tags))
        for param, module in zip(params, modules, strict=True)
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _accumulate_grad(param: Any, module: str, alone: int, tags: Any, grad: Any) -> Any:
    """The tensor pre-hook that runs where ``AccumulateGrad`` would: ``grad`` if eager would
    keep it, else eager's copy (``clone_obey_contract``: in the parameter's strides)."""
    import torch

    if not isinstance(grad, torch.Tensor) or grad.layout != torch.strided:
        return None
    if grad._use_count() <= alone and _obeys_layout(grad, param):
        return None
    tags.accumulating = module
    try:
        if _dense(param):
            copy = torch.empty_strided(
                param.shape, param.stride(), dtype=param.dtype, device=param.device
            )
            return copy.copy_(grad)
        return grad.clone(memory_format=torch.contiguous_format)
    finally:
        tags.accumulating = None


@functools.cache
def _references_alone() -> int:
    """The references a gradient nothing else holds has inside a leaf's tensor pre-hook under
    ``torch.autograd.grad`` (the engine's own), measured once: one more is another node's
    input buffer, or another leaf's, holding the same tensor."""
    import torch

    seen: list[int] = []
    with torch.enable_grad():
        leaf = torch.ones(2, requires_grad=True)
        leaf.register_hook(lambda grad: seen.append(grad._use_count()))
        torch.autograd.grad((leaf * 2).sum(), leaf)
    return seen[0]


def _obeys_layout(grad: Any, param: Any) -> bool:
    """``obeys_layout_contract``: a dense parameter's gradient has its strides (size-1
    dimensions aside, unless broadcast), any other's is contiguous."""
    if not _dense(param):
        return grad.is_contiguous()
    for size, stride, want in zip(grad.shape, grad.stride(), param.stride(), strict=True):
        if (size != 1 and stride != want) or (size == 1 and stride == 0):
            return False
    return True


FILLED = {
    "scatter.src": "scatter_.src",
    "scatter.value": "scatter_.value",
    "scatter_add.default": "scatter_add_.default",
    "index_add.default": "index_add_.default",
}
"""Out-of-place ops whose in-place twin a backward formula takes on plain tensors."""
ZEROS = ("zeros", "new_zeros", "zeros_like")


def filled_in_place(func: Any, args: tuple, tags: Any) -> Any:
    """The in-place twin of ``func`` where ATen's gradient formula fills a tensor of zeros it
    just made: ``gather``'s, ``index_select``'s and the value-selecting reductions' (``topk``,
    ``max(dim)``, ``sort``) scatter or add into it in place, except when a tensor is a subclass
    (``areAnyTensorSubclassLike``), as fakes are: out of place, the zeros and the result had
    both been live (a step with ``topk`` read 24-31% over). Only in the backward, for a first
    argument no other tensor shares."""
    import torch

    name = f"{func.__name__}" if isinstance(func, torch._ops.OpOverload) else ""
    twin = FILLED.get(name)
    if twin is None or tags.phase != "backward" or not isinstance(args[0], torch.Tensor):
        return func
    storage = args[0].untyped_storage()._cdata
    owner = tags.owner.get(storage)
    if tags.holders.get(storage) != 1 or owner is None or not _made_by(owner[0], tags.last):
        return func
    packet, overload = twin.split(".")
    return getattr(getattr(torch.ops.aten, packet), overload)


CHAINED = {"BinaryCrossEntropyWithLogitsBackward0": {"sub.Tensor": "sub_", "mul.Tensor": "mul_"}}
"""Backward formulas that chain in place on plain tensors, on a tensor they made, and out of
place on a subclass (``areAnyTensorSubclassLike``), as fakes are: ``FunctionsManual.cpp``'s
``binary_cross_entropy_with_logits_backward``, ``t.add(1).sub_(target).mul_(input.sigmoid())
.sub_(t)`` then ``mul_(grad)`` and ``mul_(*weight)``. Out of place, the chain's temporaries
all live to the end of its C++ statement (a pos_weight loss's step read 34-59% over)."""


def chained_in_place(func: Any, args: tuple, tags: Any, sums: Accumulation) -> Any:
    """The in-place twin (``CHAINED``) of an op of the running formula whose first argument
    the formula made, no other tensor shares (an in-place twin's result is that tensor again,
    which ``tags.holders`` counts once), and whose result has its shape and dtype."""
    import torch

    name = func.__name__ if isinstance(func, torch._ops.OpOverload) else ""
    twin = CHAINED[sums.formula.name()].get(name)
    first = args[0] if args else None
    if twin is None or not isinstance(first, torch.Tensor) or torch.is_grad_enabled():
        return func  # a backward that builds a graph (create_graph) chains out of place
    storage = first.untyped_storage()._cdata
    owner = tags.owner.get(storage)
    if tags.holders.get(storage) != 1 or owner is None or owner[0] not in sums.made_here:
        return func
    other = args[1]
    shape = torch.broadcast_shapes(first.shape, getattr(other, "shape", ()))
    if shape != first.shape or torch.result_type(first, other) != first.dtype:
        return func
    return getattr(torch.ops.aten, twin).Tensor


def _made_by(name: str, last: Any, lookback: int = 16) -> bool:
    """Whether graph node ``name``, among the last ``lookback`` nodes up to ``last``, made zeros."""
    node = last
    for _ in range(lookback):
        if node is None or node.op in ("root", "placeholder"):
            return False
        if node.name == name:
            return getattr(node.target, "__name__", "").split(".")[0] in ZEROS
        node = node.prev
    return False
