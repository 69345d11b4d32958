"""The fusion partitioner: group graph nodes into the kernels a compiler would run.

Walking the nodes in topological order:

- a compute anchor (convolution, matmul, attention, recurrent layer) starts a kernel;
- a pointwise op (activation, eval-mode batch norm, residual add, data movement) joins the
  kernel of its latest producer, as an epilogue or as part of a pointwise chain; but a cast to
  a wider dtype after a compute anchor (autocast's float32 before a norm) starts a pointwise
  chain, which the norm then absorbs: the product writes its own dtype;
- a reduction (softmax, norms, pooling) starts a kernel unless its latest producer's kernel is
  a pure pointwise chain, which it absorbs as a prologue;
- views and shape ops cost nothing and ride along with their producer (or, for views of graph
  inputs and weights, with their first consumer that reads their data, not their shape):
  they never form a kernel of their own,
  but for a write (in place, ``WRITES_IN_PLACE``, or a factory's) in a graph with no other;
  neither do free ops that read nothing computed (``arange``, ``zeros``): they join their
  first consumer, as a compiler would generate them inside it; but a cast of a graph input or
  weight down to a 16-bit float (autocast's float16 copy of a float32 weight) that a compute
  anchor reads is a kernel of its own: cuBLAS, cuDNN and attention kernels take no prologue.

Joining the *latest* producer's kernel keeps the kernel graph acyclic: every other input of the
node comes from an earlier kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_graphbudget.engine.extents import Extent
from pytest_graphbudget.engine.kinds import WRITES_IN_PLACE
from pytest_graphbudget.engine.nodes import Measured, NodeCost


@dataclass
class Group:
    """One fused kernel before its roofline figures are computed."""

    id: int
    reason: str
    members: list[NodeCost] = field(default_factory=list)
    riders: set[str] = field(default_factory=set)  # free nodes placed here, not named in kind

    @property
    def segment(self) -> int:
        """The captured graph (or eager op) the kernel belongs to: kernels never cross one."""
        return self.members[0].segment

    @property
    def categories(self) -> set[str]:
        return {m.category for m in self.members}

    @property
    def kind(self) -> str:
        kinds: list[str] = []
        for member in self.members:
            named = member.category != "view" and member.name not in self.riders
            if named and (not kinds or kinds[-1] != member.kind):
                kinds.append(member.kind)
        return "+".join(kinds) or "view"

    @property
    def anchor(self) -> NodeCost:
        """The member that names the kernel: its anchor or reduction, else its first op."""
        for category in ("anchor", "reduction", "elementwise", "movement", "view"):
            for member in self.members:
                if member.category == category:
                    return member
        return self.members[0]


def partition(measured: Measured) -> list[Group]:
    """Assign every op node to exactly one group (see the module docstring for the rules)."""
    groups: list[Group] = []
    group_of: dict[str, int] = {}
    deferred: list[NodeCost] = []

    def start(node: NodeCost, reason: str) -> None:
        groups.append(Group(len(groups), reason, [node]))
        group_of[node.name] = len(groups) - 1

    def join(gid: int, node: NodeCost) -> None:
        groups[gid].members.append(node)
        group_of[node.name] = gid

    # A node that returns no tensor (``x.shape``, an assert) hands on no data: what reads it
    # follows the tensors it takes, as on the tape, where such a node is no op at all
    tensorless = {n.name for n in measured.nodes if not n.shapes}
    by_name = {n.name: n for n in measured.nodes}
    for node in measured.nodes:
        producers = [group_of[p] for p in node.inputs if p in group_of and p not in tensorless]
        latest = max(producers) if producers else None
        category = node.category
        crosses = latest is not None and groups[latest].segment != node.segment
        if crosses and category not in ("view", "anchor"):
            # A graph break (or an op run in eager between graphs) ends the kernel before it.
            start(node, f"{node.kind}: a graph break ends the kernel before it")
            continue
        if category == "view":
            if latest is None:
                deferred.append(node)
            else:
                join(latest, node)
        elif category == "anchor":
            start(node, f"{node.kind}: a compute anchor starts a kernel")
        elif category == "movement" and latest is None and not node.flops:
            deferred.append(node)
        elif category in ("elementwise", "movement"):
            if latest is None:
                start(node, f"{node.kind}: reads only graph inputs and weights")
            elif _widens(node, by_name) and "anchor" in groups[latest].categories:
                start(node, f"{node.kind}: a cast to a wider dtype after {groups[latest].kind}")
            else:
                join(latest, node)
        else:  # reduction
            if latest is not None and groups[latest].categories <= {
                "elementwise",
                "movement",
                "view",
            }:
                join(latest, node)
            else:
                host = "" if latest is None else f" after {groups[latest].kind}"
                start(
                    node, f"{node.kind}: a reduction needs its whole input, starts a kernel{host}"
                )

    consumers = _consumers(measured.nodes)
    left: list[NodeCost] = []
    for node in reversed(deferred):
        readers = [c for c in consumers.get(node.name, []) if c in group_of]
        readers = [c for c in readers if c not in tensorless] or readers  # not a ``.shape``
        target = group_of[readers[0]] if readers else None
        library = _narrows(node) and _library_reader(node, consumers, by_name)
        if library:
            start(node, f"{node.kind}: a cast for {library.kind}, a library call: no prologue")
            continue
        if target is None and node.category == "movement" and node.inputs:
            # Data movement that feeds no kernel (an embedding whose rows are the output).
            start(node, f"{node.kind}: moves graph inputs or weights to the output")
            continue
        if target is None:  # consumed by nothing computed: the nearest kernel in node order
            target = _nearest(node, measured.nodes, group_of)
        if target is None:
            left.append(node)
            continue
        join(target, node)
        if not node.inputs:  # a factory (arange, zeros): generated in place, not a step
            groups[target].riders.add(node.name)
    _place_left(left[::-1], measured.nodes, groups, group_of)
    return _in_node_order(groups)


def _place_left(
    left: list[NodeCost], nodes: list[NodeCost], groups: list[Group], group_of: dict[str, int]
) -> None:
    """Nodes that found no kernel (before a copy_ into a clone; a cache's update alone)."""
    writes = (n for n in left if n.kind in WRITES_IN_PLACE or n.category != "view")
    if not groups and (write := next(writes, None)):  # a cache's update, a factory (randn)
        groups.append(Group(0, f"{write.kind}: writes memory, and no other kernel runs", [write]))
        group_of[write.name] = 0
    for node in left:
        if node.name not in group_of and (target := _nearest(node, nodes, group_of)) is not None:
            groups[target].members.append(node)
            group_of[node.name] = target


def _in_node_order(groups: list[Group]) -> list[Group]:
    """``groups`` renumbered in the order their first members run, and each one's members in
    node order: a kernel started for a deferred node goes where that node runs, not last."""
    groups.sort(key=lambda g: g.members[0].index)
    for gid, group in enumerate(groups):
        group.id = gid
        order = {n.name: n.index for n in group.members}
        group.members.sort(key=lambda n: order[n.name])
    return groups


def _widens(node: NodeCost, by_name: dict[str, NodeCost]) -> bool:
    """Whether ``node`` casts one computed tensor to a wider dtype (autocast's float32 before
    a norm, ``logits.float()``): the same elements in more bytes. A compiler does not write a
    product's output wide to read it once: the product writes its own dtype and the cast runs
    inside the consumer, so the cast starts a pointwise chain that a following norm absorbs."""
    if node.kind != "copy" or len(node.inputs) != 1 or node.inputs[0] not in by_name:
        return False
    source = by_name[node.inputs[0]]
    if not node.shapes or not source.shapes or node.shapes[0] != source.shapes[0]:
        return False
    return sum(node.views.values()) > sum(source.views.values())


HALVES = frozenset({"float16", "bfloat16"})
"""The dtypes autocast casts a product's inputs to."""


def _narrows(node: NodeCost) -> bool:
    """Whether ``node`` casts a graph input or weight down to a 16-bit float (autocast's
    float16 copy of a float32 weight): before cuBLAS, cuDNN or an attention kernel, which take
    no prologue, a compiler runs it as a kernel of its own. A widening one (an int8 weight
    dequantized for its matmul) is what Inductor fuses into the matmul it feeds. Other copies
    keep joining their reader, as before this rule."""
    read = sum(extent.bytes for extent in node.read_extents.values())
    return node.kind == "copy" and node.dtype in HALVES and 0 < sum(node.views.values()) < read


def _library_reader(
    node: NodeCost, consumers: dict[str, list[str]], by_name: dict[str, NodeCost]
) -> NodeCost | None:
    """The compute anchor that reads ``node`` (through views of it), if one does: what a
    compiler hands to a library call it cannot fuse into."""
    seen, todo = set(), [node.name]
    while todo:
        for name in consumers.get(todo.pop(), []):
            reader = by_name.get(name)
            if reader is None or name in seen:
                continue
            seen.add(name)
            if reader.category == "anchor":
                return reader
            if reader.category == "view":
                todo.append(name)
    return None


def _nearest(node: NodeCost, nodes: list[NodeCost], group_of: dict[str, int]) -> int | None:
    """The group of the closest node after ``node`` that has one, else before it."""
    after = (group_of[n.name] for n in nodes[node.index + 1 :] if n.name in group_of)
    before = (group_of[n.name] for n in reversed(nodes[: node.index]) if n.name in group_of)
    return next(after, next(before, None))


def _consumers(nodes: list[NodeCost]) -> dict[str, list[str]]:
    consumers: dict[str, list[str]] = {}
    for node in nodes:
        for producer in node.inputs:
            consumers.setdefault(producer, []).append(node.name)
    return consumers


@dataclass
class Traffic:
    """Bytes a kernel moves: inputs made outside it, weights it reads, outputs used outside."""

    bytes_in: int
    bytes_weights: int
    bytes_out: int

    @property
    def total(self) -> int:
        return self.bytes_in + self.bytes_weights + self.bytes_out


def traffic(groups: list[Group], measured: Measured) -> list[Traffic]:
    """Every group's traffic, a storage's views counted as their union (``extents``), once per
    kernel however many views it has. In: of each storage made outside the kernel (an
    activation or a graph input, not a weight) and read before a member writes it, the views
    its members take. Out: of each storage a member writes (a new one, or in place) and hands
    on, the views other kernels take of it, and those the graph returns.

    So three parts of one split, each read by another kernel, are a part each, however the
    tier records the split (one node, or one per part); a kernel reading q, k and v of one qkv
    storage reads all three. A view member (``category`` "view") reads and writes nothing
    itself: the members that take its view do."""
    by_name = {n.name: n for n in measured.nodes}
    group_of = {m.name: g.id for g in groups for m in g.members}
    consumers = _consumers(measured.nodes)
    taken = _taken(groups)  # storage -> kernel -> the views it takes
    returned = _returned(measured)
    made = set().union(*(n.writes for n in measured.nodes), *measured.inputs.values())
    result = []
    for group in groups:
        inside: set = set()  # what its members wrote so far
        handed: set = set()  # the storages of members used outside
        read: dict[Any, Extent] = {}
        weights: dict[str, int] = {}
        # a weight's storage counts where a node outside hands it on (its ``t()``)
        aliased = _aliased(group, by_name, group_of)
        for member in group.members:
            weights.update(member.weights)
            if member.category != "view":
                for key, extent in member.read_extents.items():
                    if (key in made or key in aliased) and key not in inside:
                        _union(read, key, extent)
                inside.update(member.writes, member.view_extents)
            if member.name in measured.graph_outputs or any(
                group_of.get(c) != group.id for c in consumers.get(member.name, [])
            ):
                handed.update(member.view_extents)
        written: dict[Any, Extent] = {}
        for key in handed & inside:
            for gid, extent in taken.get(key, {}).items():
                if gid != group.id:
                    _union(written, key, extent)
            if key in returned:
                shown = returned[key] or _shown(group, key)
                _union(written, key, shown)
        bytes_in = sum(e.bytes for e in read.values())
        bytes_out = sum(e.bytes for e in written.values())
        result.append(Traffic(bytes_in, sum(weights.values()), bytes_out))
    return result


def _aliased(group: Group, by_name: dict, group_of: dict) -> set:
    """The storages of the views its members take from nodes outside ``group``."""
    found: set = set()
    for member in group.members:
        for producer in member.inputs:
            if producer in by_name and group_of.get(producer) != group.id:
                found.update(by_name[producer].view_extents)
    return found


def _shown(group: Group, key: Any) -> Extent:
    """The views of storage ``key`` its members return."""
    found: dict[Any, Extent] = {}
    for member in group.members:
        if key in member.view_extents:
            _union(found, key, member.view_extents[key])
    return found[key]


def _union(found: dict[Any, Extent], key: Any, extent: Extent) -> None:
    found.setdefault(key, Extent(extent.nbytes, set())).merge(extent)  # a copy, then unions


def _taken(groups: list[Group]) -> dict[Any, dict[int, Extent]]:
    """Each storage -> the kernels that read it -> the union of the views their members take
    (view members read nothing themselves)."""
    taken: dict[Any, dict[int, Extent]] = {}
    for group in groups:
        for member in group.members:
            if member.category != "view":
                for key, extent in member.read_extents.items():
                    _union(taken.setdefault(key, {}), group.id, extent)
    return taken


def _returned(measured: Measured) -> dict[Any, Extent | None]:
    """The storages the graph returns -> the views of them it returns (None where only the
    storage is known: its maker's views count)."""
    extents = measured.returned_extents or {}
    return {key: extents.get(key) for key in measured.outputs()}
