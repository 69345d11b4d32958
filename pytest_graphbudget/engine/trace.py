"""The hybrid tracer: warm-up, then ``torch.fx.symbolic_trace``, then Dynamo (``torch.export``).

Each tier is one function that returns a ``Traced`` graph or raises; ``tiers()`` lists them in
the order they are tried. The caller (``tiers.py``) moves to the next tier when one fails and
records every failure's one-line reason.

Models built on the ``meta`` device never get real weights: their parameters are swapped for
fake tensors (``FakeTensorMode``) for the warm-up and the export, so nothing is allocated.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import io
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import fx, nn
from torch.utils import _pytree as pytree

from pytest_graphbudget.compat import fake_empty, fake_index, reparametrize
from pytest_graphbudget.compat.export import export_keywords
from pytest_graphbudget.engine import helper_frames, walk
from pytest_graphbudget.engine.fakes import fake_mode
from pytest_graphbudget.engine.fx_tracer import MADE, symbolic_trace
from pytest_graphbudget.errors import ModelRunError, one_line

if TYPE_CHECKING:
    from torch._subclasses.fake_tensor import FakeTensorMode


@dataclass
class Binding:
    """Where a graph placeholder's value comes from: a user input or a model state tensor."""

    kind: str  # "input" (index into the flat user tensors), "state" (FQN), "constant" (a value;
    # "nested": a container, a dict or a tuple, holding user input tensors)
    ref: Any


@dataclass
class Traced:
    """A captured graph and how to feed it.

    ``placeholders`` binds every placeholder of ``graph_module``, in order. ``state_in_module``
    says whether the graph reads parameters through its own attributes (FX) rather than through
    placeholders (export).
    """

    graph_module: fx.GraphModule
    method: str
    placeholders: list[Binding]
    state_in_module: bool
    module_prefix: str = ""
    seconds: float = 0.0


@dataclass
class Example:
    """The model's example inputs, flattened: tensors are graph inputs, the rest is constant."""

    args: tuple
    kwargs: dict[str, Any]

    @property
    def leaves(self) -> list[Any]:
        return pytree.tree_leaves((self.args, self.kwargs))

    @property
    def tensors(self) -> list[torch.Tensor]:
        return [leaf for leaf in self.leaves if isinstance(leaf, torch.Tensor)]


def is_meta(model: nn.Module) -> bool:
    """True when the model's weights live on the meta device (built without storage).
    Asked several times a profile: each module's own tensors, with no names built."""
    return any(
        t is not None and t.is_meta
        for module in walk.modules(model)
        for table in (module._parameters, module._buffers)
        for t in table.values()
    )


def model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer by name, tied ones under each of their names."""
    named = walk.named_tensors(model, "_parameters")
    return dict(named + walk.named_tensors(model, "_buffers"))


def _device(tensor: torch.Tensor, mode: FakeTensorMode | None) -> Any:
    """Where a twin lives: the meta device without a mode, else the tensor's (meta: CPU)."""
    if mode is None:
        return "meta"
    return "cpu" if tensor.is_meta else tensor.device


def fake_state(model: nn.Module, mode: FakeTensorMode | None) -> dict[str, torch.Tensor]:
    """A fake twin of every parameter and buffer (tied tensors stay tied): shapes, no storage.
    Without a ``mode`` the twins are tensors on the meta device."""
    twins: dict[int, torch.Tensor] = {}
    state = {}
    for name, tensor in model_state(model).items():
        if id(tensor) not in twins:
            parameter = isinstance(tensor, nn.Parameter)
            if parameter and mode is not None:
                twin = _twin(tensor, mode, tensor.requires_grad)
            else:
                twin = _twin(tensor, mode)
                if parameter:
                    twin = nn.Parameter(twin, requires_grad=tensor.requires_grad)
            twins[id(tensor)] = twin
        state[name] = twins[id(tensor)]
    return state


def fake_like(value: Any, mode: FakeTensorMode | None) -> Any:
    """Fake twins of the tensors in ``value`` (meta tensors become CPU fakes); without a
    ``mode``, twins on the meta device. Under a mode, a small integer tensor keeps its values
    (``compat.fake_index``): a forward may read an image grid's, a mask's."""

    def twin(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        kept = None if mode is None else fake_index(mode, t)
        return _twin(t, mode) if kept is None else kept

    return pytree.tree_map(twin, value)


def _twin(tensor: torch.Tensor, mode: FakeTensorMode | None, parameter: Any = None) -> Any:
    """An empty tensor of ``tensor``'s metadata: fake under ``mode`` (an ``nn.Parameter``
    requiring ``parameter`` when that is given), else on the meta device."""
    if mode is None:
        return torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="meta")
    shape, stride, device = tensor.shape, tensor.stride(), _device(tensor, mode)
    return fake_empty(mode, shape, stride, tensor.dtype, device, parameter)


@contextlib.contextmanager
def analysis(model: nn.Module, example: Example) -> Iterator[Example]:
    """Run the enclosed block on this model as it should be analysed.

    A real model is used as is. A meta model gets fake parameters and fake inputs for the
    duration of the block, under one ``FakeTensorMode``.
    """
    if not is_meta(model):
        yield example
        return
    mode = fake_mode()
    state = fake_state(model, mode)
    fake_example = Example(*fake_like((example.args, example.kwargs), mode))
    with reparametrize(model, state), mode:
        yield fake_example


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection in the block (a taped or replayed forward): its
    thousands of small records triggered young collections worth 3% of a detector's profile,
    and when the forward frees each storage is learned from reference counts, which a
    collection in the middle of it would only make depend on the collector's timing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def evaluating(model: nn.Module) -> None:
    """``model.eval()``, only where a module is training: ``eval`` sets every module's flag
    through a Python call each, and a profile asks for it in each tier it tries. A module
    ``torch.export`` unlifted (``ExportedProgram.module()``) refuses ``eval()``: its graph
    keeps the mode it was exported in, so it is left as it is."""
    if any(module.training for module in walk.modules(model)):
        try:
            model.eval()
        except NotImplementedError:
            if not isinstance(model, torch.fx.GraphModule):
                raise


def warm_up(model: nn.Module, example: Example) -> float:
    """One forward pass in eval mode without gradients, so lazy state (YOLO's anchors and
    strides) is initialised before tracing. Returns its seconds: a model this quick to run is
    also quicker to measure on real tensors than on fake ones."""
    evaluating(model)
    start = time.perf_counter()
    try:
        with torch.no_grad():
            model(*example.args, **example.kwargs)
    except Exception as exc:  # the user's model raised: report it, don't trace it
        raise ModelRunError(f"the model's forward raised {one_line(exc, typed=True)}") from exc
    finally:
        walk.forget(model)  # lazy state built now may hold modules of its own
    return time.perf_counter() - start


def has_lazy_modules(model: nn.Module) -> bool:
    """True when a lazy module (``nn.LazyLinear``...) still waits for its first forward."""
    from torch.nn.modules.lazy import LazyModuleMixin

    return any(
        isinstance(m, LazyModuleMixin) and m.has_uninitialized_params() for m in walk.modules(model)
    )


def trace_fx(model: nn.Module, example: Example) -> Traced:
    """Tier 1: ``torch.fx.symbolic_trace``. Fast, and keeps module names as node targets.
    A model with hooks of its own is refused: FX traces its ``forward``, which its hooks wrap
    (a submodule's run, as the graph calls it), so their ops would be left out."""
    hooks = [h for h in ("_forward_pre_hooks", "_forward_hooks") if getattr(model, h, None)]
    if hooks:
        raise TypeError(
            f"the model has {' and '.join(h.strip('_').replace('_', ' ') for h in hooks)} of its "
            "own, which FX's trace of its forward leaves out"
        )
    signature = inspect.signature(model.forward)
    bound = signature.bind(*example.args, **example.kwargs)
    concrete = {
        name: p.default
        for name, p in signature.parameters.items()
        if name not in bound.arguments
        and p.default is not inspect.Parameter.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    gm = symbolic_trace(model, concrete or None)
    tensors = example.tensors
    index = {id(t): i for i, t in enumerate(tensors)}
    placeholders = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        name = str(node.target).lstrip("*")
        if name in bound.arguments or name in concrete:
            value = bound.arguments.get(name, concrete.get(name))
        else:  # a concrete argument's leaf, ``is_causal_1``: FX keeps its value as the default
            value = node.args[0] if node.args else None
        if id(value) in index:
            placeholders.append(Binding("input", index[id(value)]))
        else:  # a dict or tuple of inputs: its tensors are inputs too (their bytes, the peak)
            nested = any(id(t) in index for t in pytree.tree_leaves(value))
            placeholders.append(Binding("nested" if nested else "constant", value))
    return Traced(gm, "fx", placeholders, state_in_module=True)


class _FlatCall(nn.Module):
    """Calls the model from flat tensor inputs and returns a flat tuple of tensors.

    Export needs pytree-friendly inputs and outputs; models return caches, ``ModelOutput``s and
    other containers. Flattening both ends here keeps every model exportable the same way.
    """

    def __init__(self, model: nn.Module, example: Example):
        super().__init__()
        self.model = model
        leaves, self._spec = pytree.tree_flatten((example.args, example.kwargs))
        self._constants = [None if isinstance(v, torch.Tensor) else v for v in leaves]

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        feed = iter(tensors)
        leaves = [next(feed) if c is None else c for c in self._constants]
        args, kwargs = pytree.tree_unflatten(leaves, self._spec)
        return tuple(tensor_leaves(self.model(*args, **kwargs)))


def tensor_leaves(value: Any, _depth: int = 0) -> Iterator[torch.Tensor]:
    """Every tensor inside a model's output: containers, dataclasses, caches and objects."""
    if isinstance(value, torch.Tensor):
        yield value
    elif _depth > 8 or value is None or isinstance(value, (str, int, float, bool)):
        return
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensor_leaves(item, _depth + 1)
    elif isinstance(value, (list, tuple, set)):
        for item in value:
            yield from tensor_leaves(item, _depth + 1)
    elif hasattr(value, "__dict__"):
        for item in vars(value).values():
            yield from tensor_leaves(item, _depth + 1)


def trace_dynamo(
    model: nn.Module, example: Example, dynamic: Any = None, composites: dict | None = None
) -> Traced:
    """Tier 2: ``torch.export.export`` (non-strict): control flow, keyword inputs, model outputs.
    ``dynamic``: each input tensor's ``{dim: Dim}`` (or None), for a symbolic graph;
    ``composites``: decompositions to run the program through
    (``compat.export.composite_decompositions``)."""
    wrapper = _FlatCall(model, example)
    shapes = None if dynamic is None else (tuple(dynamic),)
    # Decomposing runs the program again, and with it torch 2.9's guard function, which names
    # the wrapper's inputs as its frame's (``L['tensors']``) and fails: asserts in the graph
    # instead of a guard function, where this torch has the choice.
    options = (
        export_keywords(prefer_deferred_runtime_asserts_over_guards=True)
        if composites is not None
        else {}
    )
    # On failure export prints the partial graph to stderr: the one-line reason is enough.
    quiet = contextlib.redirect_stderr(io.StringIO())
    with torch.no_grad(), quiet, _dense_encoders(model), helper_frames.recorded(model):
        program = torch.export.export(
            wrapper, tuple(example.tensors), dynamic_shapes=shapes, strict=False, **options
        )
        if composites is not None:
            program = program.run_decompositions(composites)
    placeholders, user = [], 0
    for spec in program.graph_signature.input_specs:
        kind = spec.kind.name
        if kind == "USER_INPUT":
            placeholders.append(Binding("input", user))
            user += 1
        elif kind in ("PARAMETER", "BUFFER"):
            placeholders.append(Binding("state", spec.target.removeprefix("model.")))
        elif kind in ("CONSTANT_TENSOR", "CUSTOM_OBJ"):
            placeholders.append(Binding("constant", program.constants[spec.target]))
        else:
            raise RuntimeError(f"unsupported export input kind {kind}")
    return Traced(
        program.graph_module, "dynamo", placeholders, state_in_module=False, module_prefix="model."
    )


@contextlib.contextmanager
def _dense_encoders(model: nn.Module) -> Iterator[None]:
    """``nn.TransformerEncoder`` given a padding mask makes its input a nested tensor, which
    export cannot follow. Newer torch keeps it dense under export by itself; torch 2.4 took
    the nested path there too, and no tier could trace the model. Its nested path is switched
    off for the export: the figures are the dense ones, on every release."""
    nested = [
        module
        for module in model.modules()
        if isinstance(module, nn.TransformerEncoder) and getattr(module, "use_nested_tensor", 0)
    ]
    for module in nested:
        module.use_nested_tensor = False
    try:
        yield
    finally:
        for module in nested:
            module.use_nested_tensor = True


def trace_exported(
    program: torch.export.ExportedProgram, example: Example, module: nn.Module | None = None
) -> Traced:
    """The ``export`` tier, for a program saved with ``torch.export.save``: its graph is already
    captured, so it is used as it is. The program's module is never called, put in eval mode or
    traced again (an exported program's module refuses ``.eval()``). A buffer the graph takes
    that ``module`` (``program.module()``) lacks is read from the program's state: torch 2.4's
    module drops those the graph never reads (BatchNorm's ``num_batches_tracked`` in eval)."""
    held = model_state(module) if module is not None else None
    leaves = example.leaves
    users = [s for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    if len(users) != len(leaves):
        raise RuntimeError(
            f"the program takes {len(users)} inputs and was given {len(leaves)}; "
            "profile it at the example inputs it was exported with"
        )
    index = {id(t): i for i, t in enumerate(example.tensors)}
    feed = iter(leaves)
    placeholders = []
    for spec in program.graph_signature.input_specs:
        kind = spec.kind.name
        if kind == "USER_INPUT":
            value = next(feed)
            tensor = isinstance(value, torch.Tensor)
            placeholders.append(
                Binding("input", index[id(value)]) if tensor else Binding("constant", value)
            )
        elif kind in ("PARAMETER", "BUFFER") and (held is None or spec.target in held):
            placeholders.append(Binding("state", spec.target))
        elif kind in ("PARAMETER", "BUFFER"):  # a non-persistent buffer is a constant there
            kept = program.state_dict if spec.target in program.state_dict else program.constants
            placeholders.append(Binding("constant", kept[spec.target]))
        elif kind in ("CONSTANT_TENSOR", "CUSTOM_OBJ"):
            placeholders.append(Binding("constant", program.constants[spec.target]))
        else:
            raise RuntimeError(f"unsupported exported-program input kind {kind}")
    return Traced(program.graph_module, "export", placeholders, state_in_module=False)


Tier = Callable[[nn.Module, Example], Traced]


def tiers() -> list[tuple[str, Tier]]:
    """The tracing tiers that capture one whole graph, fastest first. When both fail,
    ``breaks.TIERS`` take over: the path one real forward takes (``dynamo-breaks``, ``eager``)."""
    return [("fx", trace_fx), ("dynamo", trace_dynamo)]


def timed(tier: Tier, model: nn.Module, example: Example) -> Traced:
    start = time.perf_counter()
    traced = tier(model, example)
    traced.seconds = time.perf_counter() - start
    return traced


def graph_constants(
    gm: Any, weights: dict[int, Any], size: Callable[[Any], int], model: Any = None
) -> dict[int, Any]:
    """The tensors a graph reads through ``get_attr`` that are no parameter or buffer of the
    model: tensors it kept as plain attributes (a rotary table), which the trace made
    constants. They are weights, held by the model; a training step had counted a 2 MB
    table as activations, and the forward had not counted it at all. ``size``: a tensor's
    stored bytes (``quantized.stored_bytes``); each is named by its path in ``model`` where
    it is one of its plain attributes (``walk.plain_tensors``)."""
    from pytest_graphbudget.engine import walk

    held = {id(t): path for path, t in walk.plain_tensors(model)} if model is not None else {}
    found = {}
    for node in gm.graph.nodes:
        if node.op != "get_attr" or node.meta.get(MADE):  # a tensor made by the forward
            continue
        value = _attribute_path(gm, node.target)
        if isinstance(value, torch.Tensor) and id(value) not in weights:
            found[id(value)] = (held.get(id(value), node.target), size(value))
    return found


def _attribute_path(root: Any, path: str) -> Any:
    for part in path.split("."):
        root = getattr(root, part, None)
    return root


def held_constants(
    traced: Traced, values: list, owner: Any, size: Callable[[Any], int]
) -> dict[int, Any]:
    """The export tier's lifted constants that are tensors the model keeps as plain attributes
    (``walk.plain_tensors``: YOLO's anchors), by the id of the value the pass feeds for each:
    weights, as the taped forward reads them. A constant the forward makes is not one."""
    from pytest_graphbudget.engine import walk

    held = {id(t): path for path, t in walk.plain_tensors(owner)}
    found = {}
    for binding, value in zip(traced.placeholders, values, strict=True):
        if binding.kind == "constant" and id(binding.ref) in held:
            if isinstance(value, torch.Tensor):
                found[id(value)] = (held[id(binding.ref)], size(value))
    return found
