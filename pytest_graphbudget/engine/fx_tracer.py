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

from typing import Any

import torch
from torch import fx, nn

from pytest_graphbudget.compat import lazy_graph_modules, make_graph_module


def symbolic_trace(model: nn.Module, concrete_args: dict[str, Any] | None) -> fx.GraphModule:
    """``fx.symbolic_trace(model, concrete_args)``, through ``PathTracer``. Lazy: the graph's
    Python code is generated only if something calls it (the cost pass interprets the graph
    node by node, and code generation is a third of the trace)."""
    with lazy_graph_modules():
        tracer = PathTracer()
        graph = tracer.trace(model, concrete_args=concrete_args)
        return make_graph_module(tracer.root, graph, type(model).__name__)


class PathTracer(fx.Tracer):
    """``fx.Tracer``, finding parameters' and buffers' names in a table made once per trace."""

    def trace(self, root: Any, concrete_args: dict[str, Any] | None = None) -> fx.Graph:
        self._names: dict[int, str] = {}
        if isinstance(root, nn.Module):
            for table in (root.named_buffers(), root.named_parameters()):
                self._names.update({id(t): name for name, t in reversed(list(table))})
        return super().trace(root, concrete_args)

    def _owned(self, value: Any) -> str | None:
        """The name the table gives ``value`` while the model still holds it there."""
        name = self._names.get(id(value))
        if name is None:
            return None
        owner, _, leaf = name.rpartition(".")
        module = self.root.get_submodule(owner)
        table = module._parameters if isinstance(value, nn.Parameter) else module._buffers
        return name if table.get(leaf) is value else None

    def create_arg(self, a: Any) -> Any:
        # A tensor passed as it is (``F.batch_norm(x, self.running_mean, ...)``): FX's own
        # search walks every buffer for each one.
        if isinstance(a, torch.Tensor) and (name := self._owned(a)) is not None:
            return self.create_node("get_attr", name, (), {})
        return super().create_arg(a)

    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict[str, Any]) -> Any:
        name = self._names.get(id(attr_val))
        is_parameter = isinstance(attr_val, nn.Parameter)
        if name is None or not isinstance(attr_val, torch.Tensor):
            return super().getattr(attr, attr_val, parameter_proxy_cache)
        if not is_parameter and not self.proxy_buffer_attributes:
            return attr_val
        if self._owned(attr_val) is None:  # moved since the table was made: FX's own search
            return super().getattr(attr, attr_val, parameter_proxy_cache)
        if name not in parameter_proxy_cache:
            parameter_proxy_cache[name] = self.create_proxy("get_attr", name, (), {})
        return parameter_proxy_cache[name]
