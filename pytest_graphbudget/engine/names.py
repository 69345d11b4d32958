"""The taped forward's nodes named as FX names a graph's: after the module call that ran them.

FX makes one node of a call to a leaf module (``torch.nn``'s own, but ``Sequential``) and names
it after the module's path, ``layer1.0.conv1`` as ``layer1_0_conv1``; the tape sees the ATen
ops that call ran (``t`` and ``addmm`` for a ``Linear``) and names each after its op. Here the
ops of one leaf call take its name: the one that computes most (the strongest category,
``nodes.RANK``, the first of equals) the module's, the others the module's and their op's
(``fc_t``). Ops outside leaf calls keep their ATen names, which are mostly FX's (``add``,
``relu``, ``cat``). Names are only labels: no figure depends on them, and the reports, the
explorer and the graphs read the same names whichever tier priced a model.
"""

from __future__ import annotations

import re

from torch import fx, nn

from pytest_graphbudget.engine import walk
from pytest_graphbudget.engine.nodes import RANK, Measured, NodeCost


def name_as_fx(measured: Measured, model: nn.Module) -> None:
    """Rename ``measured``'s nodes in place (their inputs and the graph's outputs with them)."""
    leaves = _leaves(model)
    wanted = [node.name for node in measured.nodes]
    for run in _leaf_runs(measured.nodes, leaves):
        base = _identifier(measured.nodes[run[0]].module)
        main = max(run, key=lambda i: (RANK.get(measured.nodes[i].category, 0), -i))
        for i in run:
            op = measured.nodes[i].target.rpartition(".")[2]
            wanted[i] = base if i == main else f"{base}_{op}"
    taken = set(measured.inputs)
    renamed: dict[str, str] = {}
    for node, name in zip(measured.nodes, wanted, strict=True):
        unique, count = name, 0
        while unique in taken:
            count += 1
            unique = f"{name}_{count}"
        taken.add(unique)
        renamed[node.name] = unique
    for node in measured.nodes:
        node.name = renamed[node.name]
        node.inputs = [renamed.get(name, name) for name in node.inputs]
    measured.graph_outputs = {renamed.get(name, name) for name in measured.graph_outputs}


def _leaves(model: nn.Module) -> set[str]:
    """The paths of the model's modules FX would not trace into (``Tracer.is_leaf_module``)."""
    tracer = fx.Tracer()
    return {
        path
        for path, module in walk.named_modules(model)
        if path and tracer.is_leaf_module(module, path)
    }


def _leaf_runs(nodes: list[NodeCost], leaves: set[str]) -> list[list[int]]:
    """The indices of the nodes of each leaf module's call: consecutive nodes of one path."""
    runs: list[list[int]] = []
    for i, node in enumerate(nodes):
        if node.module not in leaves:
            continue
        if runs and runs[-1][-1] == i - 1 and nodes[i - 1].module == node.module:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _identifier(path: str) -> str:
    """``layer1.0.conv1`` -> ``layer1_0_conv1``, as FX names a module's call."""
    name = re.sub(r"\W", "_", path)
    return f"_{name}" if name[:1].isdigit() else name
