"""Partition the measured graph and put every figure of the ``Profile`` in its place."""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

from pytest_graphbudget.engine.liveness import live_at_peak
from pytest_graphbudget.engine.profile import (
    Coverage,
    InputInfo,
    ModuleCost,
    NodeInfo,
    Profile,
    Subgraph,
    TraceInfo,
)


def assemble(
    model: Any,
    args: tuple,
    kwargs: dict[str, Any],
    name: str,
    target: Any,
    traced: Any,
    measured: Any,
    failures: dict[str, str],
    seconds: float,
    execution: str = "eager",
) -> Profile:
    """Partition the measured graph and put every figure in its place; the estimated time
    as ``execution`` runs it (``latency.EXECUTIONS``)."""
    import torch

    from pytest_graphbudget.engine import walk
    from pytest_graphbudget.engine.partition import partition, traffic
    from pytest_graphbudget.engine.quantized import packed

    groups = partition(measured)
    flows = traffic(groups, measured)
    at_peak = live_at_peak(measured)
    # The model's parameters and packed weights, walked once for every figure that needs them.
    named = walk.named_tensors(model, "_parameters", unique=True)
    buffers = walk.named_tensors(model, "_buffers", unique=True)
    packs = list(packed(model))
    dtype = _dtype([p for _, p in named], packs, (args, kwargs))
    loose = _unregistered_tensors(model, measured.nodes)  # in memory and read, no parameter
    held = _weights_by_module(named + loose, buffers, packs)
    subgraphs = _subgraphs(groups, flows, at_peak, target, dtype)
    # Each subgraph holds the plain roofline of its fused kernel (``_subgraphs``): compiled
    # execution on a profile with no calibrated kernels, GPU family or launch cost. Otherwise each
    # kernel (each op when eager, each group when compiled) is priced by its kind.
    if execution == "eager" or target.kernels or target.efficiency or target.launch_s:
        from pytest_graphbudget.engine import latency

        sizes = latency.tensor_sizes(measured)
        shapes = {name: tuple(t.shape) for name, t in named + buffers + loose}
        shapes = latency.weight_casts(shapes, measured)
        channels, masks = latency.tensor_channels(measured), latency.tensor_masks(measured)
        for group, flow, subgraph in zip(groups, flows, subgraphs, strict=True):
            if execution == "eager":
                subgraph.est_latency_s = latency.group_seconds(
                    group.members, target, dtype, sizes, shapes, channels, masks
                )
            else:
                subgraph.est_latency_s = latency.fused_seconds(
                    group, flow.total, target, dtype, sizes, shapes, channels, masks
                )
    return Profile(
        model=name,
        inputs=_input_info(model, args, kwargs),
        trace=TraceInfo(
            traced.method,
            failures,
            len(measured.nodes),
            seconds,
            measured.mode,
            graphs=getattr(traced, "graphs", 1),
            breaks=[str(b) for b in getattr(traced, "breaks", [])],
            data_dependent=traced.method in ("dynamo-breaks", "eager") and measured.reads_values,
        ),
        hardware=target,
        dtype=dtype,
        autocast=torch.is_autocast_enabled("cpu"),
        execution=execution,
        flops=sum(n.flops for n in measured.nodes),
        macs=sum(n.macs for n in measured.nodes),
        params=_params(named, packs),
        weights_bytes=sum(held.values()),
        traffic_bytes=sum(f.total for f in flows),
        activation_peak_bytes=sum(at_peak.values()),
        input_bytes=measured.input_bytes,
        est_latency_s=sum(s.est_latency_s for s in subgraphs),
        coverage=_coverage(measured.nodes, unregistered(model)),
        subgraphs=subgraphs,
        modules=_modules(named, packs, measured.nodes, held, walk.classes(model)),
        node_info=_node_info(measured.nodes, subgraphs),
    )


def _subgraphs(
    groups: list, flows: list, at_peak: dict[str, int], target: Any, dtype: str
) -> list[Subgraph]:
    """One ``Subgraph`` per fused group: its figures, roofline bound and estimated time."""
    subgraphs = []
    for group, flow in zip(groups, flows, strict=True):
        flops = sum(m.flops for m in group.members)
        intensity = flops / flow.total if flow.total else 0.0
        bound = "compute_bound" if intensity >= target.ridge_point(dtype) else "memory_bound"
        subgraphs.append(
            Subgraph(
                id=group.id,
                kind=group.kind,
                module=group.anchor.module,
                nodes=[m.name for m in group.members],
                flops=flops,
                macs=sum(m.macs for m in group.members),
                bytes_in=flow.bytes_in,
                bytes_out=flow.bytes_out,
                bytes_weights=flow.bytes_weights,
                arithmetic_intensity=intensity,
                bottleneck=bound,
                reason=group.reason,
                est_latency_s=target.time(flops, flow.total, dtype),
                peak_bytes=sum(at_peak.get(m.name, 0) for m in group.members),
            )
        )
    return subgraphs


def unregistered(model: Any) -> dict[str, int]:
    """Weights ``nn.Module`` does not see, by attribute path, with their elements: modules kept
    in a plain list, tuple or dict (``self.layers = [nn.Linear(...)]``: ``nn.ModuleList``
    registers them) and registered nowhere else in the model. The forward still runs them, so
    FLOPs count them, and weights, memory and traffic their bytes (``_unregistered_tensors``,
    ``tape.model_weights``); params do not."""
    from pytest_graphbudget.engine import walk

    found: dict[str, int] = {}
    for attribute, _, module in walk.unregistered(model):
        size = sum(p.numel() for p in module.parameters(recurse=False))
        if size:
            found[attribute] = found.get(attribute, 0) + size
    return found


def _coverage(nodes: list, unregistered: dict[str, int] | None = None) -> Coverage:
    unsupported: Counter = Counter()
    contractions: Counter = Counter()
    for node in nodes:
        if node.unsupported:  # most nodes have none: Counter.update is no C call
            unsupported.update(node.unsupported)
        if node.contractions:
            contractions.update(node.contractions)
    return Coverage(
        nodes=len(nodes),
        costed=sum(1 for n in nodes if not n.unsupported),
        unsupported_ops=dict(unsupported),
        unsupported_contractions=dict(contractions),
        unregistered=unregistered or {},
    )


def _node_info(nodes: list, subgraphs: list[Subgraph]) -> list[NodeInfo]:
    subgraph_of = {m: s.id for s in subgraphs for m in s.nodes}
    return [
        NodeInfo(
            n.index,
            n.name,
            n.op,
            n.target,
            n.module,
            n.kind,
            subgraph_of.get(n.name, -1),
            n.flops,
            n.macs,
            [list(s) for s in n.shapes],
            list(n.inputs),
            dict(n.unsupported),
        )
        for n in nodes
    ]


def _dtype(params: list, packs: list, inputs: Any) -> str:
    """The dtype most of the model's floating-point (or quantized) parameter elements are
    stored in (``int8`` for quantized weights); for a model without any, its floating inputs'
    (a cast to ``dtype=`` reaches those too). ``packs``: its packed weights
    (``quantized.packed``). Under autocast (``dtype="amp_float16"``), its low dtype: the
    products that a peak prices run in it, whatever the weights are stored in."""
    import torch
    from torch.utils import _pytree as pytree

    from pytest_graphbudget.engine.quantized import stored_dtype

    if torch.is_autocast_enabled("cpu"):
        return str(torch.get_autocast_dtype("cpu")).removeprefix("torch.")

    counts: Counter = Counter()
    tensors = params + [w for _, _, found in packs for w in found[:1]]
    if not any(p.is_floating_point() or p.is_quantized for p in tensors):
        tensors = [t for t in pytree.tree_leaves(inputs) if isinstance(t, torch.Tensor)]
    for p in tensors:
        if p.is_floating_point() or p.is_quantized:
            counts[stored_dtype(p)] += p.numel()
    return counts.most_common(1)[0][0] if counts else "float32"


def _params(named: list, packs: list) -> int:
    """Parameter elements (``named``: the model's named parameters), with those of
    ``torch.ao``'s packed weights (no parameters)."""
    found = sum(p.numel() for _, p in named)
    return found + sum(t.numel() for _, _, tensors in packs for t in tensors)


def _unregistered_tensors(model: Any, nodes: list) -> list[tuple[str, Any]]:
    """The parameters and buffers of modules kept in a plain list (``walk.unregistered``), and
    tensors kept as plain attributes (``walk.plain_tensors``), by path: their bytes are
    weights and memory like any other's; they are no params."""
    from pytest_graphbudget.engine import walk

    found = []
    for _, path, module in walk.unregistered(model):
        for table in (module._parameters, module._buffers):
            found += [(f"{path}.{k}", t) for k, t in table.items() if t is not None]
    read = {fqn for node in nodes for fqn in node.weights}  # not a cache the forward rebuilt
    return found + [(p, t) for p, t in walk.plain_tensors(model) if p in read]


def _weights_by_module(named: list, buffers: list, packs: list) -> dict[str, int]:
    """Parameter and buffer bytes as stored (``quantized.stored_bytes``), packed weights too,
    by the module that registers each (a tied weight once, under its first name, as params;
    a buffer that views a weight's storage adds none of it: at most the storage's bytes)."""
    from pytest_graphbudget.engine.quantized import owner, stored_bytes

    seen: dict[int, tuple[str, int]] = {}
    room: dict[int, int] = {}  # a storage's bytes not yet charged: a view of a weight is in it
    for fqn, tensor in named + buffers:
        if id(tensor) in seen:
            continue
        size = stored_bytes(tensor)
        if not tensor.is_quantized and str(tensor.layout) == "torch.strided":
            storage = tensor.untyped_storage()
            key = int(storage._weak_ref())
            left = room.setdefault(key, storage.nbytes())
            size = min(size, left)
            room[key] = left - size
            storage._free_weak_ref(key)
        seen[id(tensor)] = (fqn.rpartition(".")[0], size)
    for fqn, obj, tensors in packs:
        seen.setdefault(id(obj), (owner(fqn), sum(map(stored_bytes, tensors))))
    held: dict[str, int] = {}
    for module, size in seen.values():
        held[module] = held.get(module, 0) + size
    return held


def _ancestors(path: str) -> list[str]:
    parts = path.split(".") if path else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _modules(
    named: list, packs: list, nodes: list, held: dict[str, int], classes: dict[str, str]
) -> dict[str, ModuleCost]:
    """FLOPs and MACs per module path, every level (a parent includes its children); the
    paths in the order the nodes first reach them. ``named``: the model's named parameters;
    ``packs``: its packed weights, the parameters of a ``torch.ao`` layer; ``held``: each
    module's own weight bytes; ``classes``: each module's class (``walk.classes``)."""
    from pytest_graphbudget.engine.quantized import owner

    own: dict[str, list[int]] = {}  # each module's own nodes' figures, summed first
    for node in nodes:
        flops = node.flops
        if flops:
            figures = own.setdefault(node.module, [0, 0])
            figures[0] += flops
            figures[1] += node.macs
    table: dict[str, ModuleCost] = {}
    for module, (flops, macs) in own.items():
        for path in _ancestors(module):
            entry = table.setdefault(path, ModuleCost())
            entry.flops += flops
            entry.macs += macs
    owned: dict[str, int] = {}  # each module's own parameters, summed first
    for fqn, param in named:
        module = fqn.rpartition(".")[0]
        owned[module] = owned.get(module, 0) + param.numel()
    for fqn, _, tensors in packs:
        module = owner(fqn)
        owned[module] = owned.get(module, 0) + sum(t.numel() for t in tensors)
    for module, params in owned.items():
        for path in _ancestors(module):
            table.setdefault(path, ModuleCost()).params += params
    for module, size in held.items():
        for path in _ancestors(module):
            entry = table.setdefault(path, ModuleCost())
            entry.weights_bytes = (entry.weights_bytes or 0) + size
    for path, entry in table.items():
        entry.type = classes.get(path)
    return table


def _input_info(model: Any, args: tuple, kwargs: dict[str, Any]) -> list[InputInfo]:
    import torch
    from torch.utils import _pytree as pytree

    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs).arguments
    except TypeError:
        bound = {f"input{i}": a for i, a in enumerate(args)} | kwargs
    info = []
    for arg_name, value in bound.items():
        leaves = [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]
        for i, t in enumerate(leaves):
            label = arg_name if len(leaves) == 1 else f"{arg_name}[{i}]"
            info.append(InputInfo(label, list(t.shape), str(t.dtype).removeprefix("torch.")))
    return info
