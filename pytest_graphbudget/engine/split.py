"""One FX node's ATen ops, each recorded as a node of its own, as the eager tape records them.

The cost pass charges every ATen op an FX node dispatches to that node. A node that launches
several kernels (a leaf ``nn.GRU``, a function FX does not trace into, a convolution's
padding copy) is run again through ``Split``, so that its ops are grouped into kernels as
the tape groups them, and what they allocate and free inside it counts.
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import Any

import torch
from torch import fx

from pytest_graphbudget.engine import tree
from pytest_graphbudget.engine.nodes import (
    QUERIES,
    NodeCost,
    _op_name,
    _out_arguments,
    _storage,
    record_output,
    record_reads,
    source_stack,
    widened,
)


class Split:
    """The ATen ops of one FX node, each a node of its own, as the eager tape records them: a
    node that launches several kernels (a leaf ``nn.GRU``, a wrapped function, SDPA's mask
    conversion before its kernel) is grouped into kernels as those ops are, and what its ops
    allocate counts, freed when the node's own code lets go of it (``freed``, as the tape's
    ``sweep``). Dataflow by tensor identity (``made_by``, a weak reference for its own)."""

    def __init__(self, recorder: Any, n: fx.Node, module: str, made_by: dict, at: int):
        self.recorder, self.prefix, self.module, self.at = recorder, n.name, module, at
        self.stack = source_stack(n.meta)
        self.rnn = n.op == "call_module" and isinstance(_submodule(n), torch.nn.RNNBase)
        self.made_by: dict[int, tuple[str, Any]] = made_by  # id -> (maker, weak ref or None)
        self.nodes: list[NodeCost] = []
        self.live: dict[Any, None] = {}  # storages its ops wrote, not yet freed
        self.freed: dict[Any, int] = {}  # storage -> the last node it was live in
        self.taken: Counter = Counter()

    def maker(self, t: Any) -> str | None:
        name, ref = self.made_by.get(id(t), (None, None))
        return name if ref is None or ref() is t else None

    def sweep(self) -> None:
        expired = torch.UntypedStorage._expired
        for key in [key for key in self.live if expired(key)]:
            del self.live[key]
            self.freed[key] = self.at + len(self.nodes) - 1

    def op(self, func: Any, args: tuple, kwargs: dict) -> Any:
        name = _op_name(func)
        if name in QUERIES:  # asks about a tensor, computes nothing: not a node (as on the tape)
            return func(*args, **kwargs)
        self.sweep()
        self.taken[name] += 1
        count = self.taken[name]
        target = name if "." in name else f"aten.{name}"
        node = NodeCost(
            name=f"{self.prefix}.{name}" + (f"_{count - 1}" if count > 1 else ""),
            op="call_function",
            target=target,
            module=self.module,
            index=self.at + len(self.nodes),
            stack=self.stack,
        )
        outs = _out_arguments(func)
        inputs = {k: v for k, v in kwargs.items() if k not in outs} if outs else kwargs
        every = tree.tensor_list((args, kwargs))
        node.inputs = list(dict.fromkeys(m for t in every if (m := self.maker(t))))
        record_reads(node, tree.tensor_list((args, inputs)))
        node.overwrites = {_storage(t) for t in every} - node.reads
        recorder = self.recorder
        func = linear_bias_in_place(func, args, kwargs, self.nodes) if self.rnn else func
        recorder.node, recorder.split = node, None
        try:
            out = widened(func, recorder.call(func, args, kwargs), args, kwargs)
            recorder.record(name, args, inputs, out)
        finally:
            recorder.node, recorder.split = None, self
        tensors = tree.tensor_list(out)
        record_output(node, out, tensors)
        node.kind = node.kind or target.rpartition(".")[2]
        self.made_by.update((id(t), (node.name, weakref.ref(t))) for t in tensors)
        self.live.update(dict.fromkeys(node.writes))
        self.nodes.append(node)
        return out


def _submodule(n: fx.Node) -> Any:
    root = n.graph.owning_module
    return root.get_submodule(n.target) if root is not None else None


def linear_bias_in_place(func: Any, args: tuple, kwargs: dict, nodes: list[NodeCost]) -> Any:
    """``aten.add_`` for the ``aten.add`` of a bias to the product just made (``nodes``: the
    ops recorded so far), as ATen's C++ ``linear`` adds it on plain tensors (``add_``), where
    on fakes it adds out of place (``isTensorSubclassLike(bias)``): an RNN's input projection
    and its sum had both lived (a GRU's forward read up to 18% over, an LSTM with projections
    68%). For the ops of an RNN's C++ code only (a Python ``x @ w + b`` adds out of place)."""
    if func is not torch.ops.aten.add.Tensor or kwargs or len(args) != 2:
        return func
    product, bias = args
    if not isinstance(product, torch.Tensor) or not isinstance(bias, torch.Tensor):
        return func
    if bias.dim() != 1 or product.dim() < 2 or bias.shape[0] != product.shape[-1]:
        return func
    last = next((node for node in reversed(nodes) if node.writes), None)
    made = last is not None and last.target.rpartition(".")[2] in ("mm", "bmm")
    if not made or _storage(product) not in last.writes or bias.dtype != product.dtype:
        return func
    return torch.ops.aten.add_.Tensor
