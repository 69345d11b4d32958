"""Profile one training step: forward, loss, backward and the optimizer's update.

The step is captured as one joint graph (``engine/joint.py``), priced by the same cost pass and
registry as a forward (backward ops in ``costs/backward.py``), partitioned and assembled as an
eval graph is, with no kernel crossing from one phase to the next. Liveness spans the whole
step: the activation peak holds the activations saved for backward, the gradients (which live
to the end of the step, as ``.grad`` does) and the update's temporaries. The weights, the
optimizer's state and the inputs exist before the step and are counted beside it:
``peak_memory_bytes`` = weights + optimizer state + inputs + activation peak.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.errors import GraphBudgetError, ModelRunError, one_line

if TYPE_CHECKING:
    from pytest_graphbudget.modes.request import Request

PHASES = ("forward", "backward", "optimizer")


def profile_step(request: Request, traced: list | None = None) -> Any:
    """The ``Profile`` of one training step of a resolved ``request`` (``dispatch.profile``):
    its module at its inputs (a tuple) and keyword inputs, with its loss and optimizer.
    ``traced`` gets the step's ``Measured`` nodes (``parallel.py`` reads their phases)."""
    import torch

    from pytest_graphbudget import hardware as hw
    from pytest_graphbudget.engine.assemble import assemble
    from pytest_graphbudget.engine.joint import capture
    from pytest_graphbudget.engine.measure import measure
    from pytest_graphbudget.engine.measure_export import measure_exported
    from pytest_graphbudget.engine.trace import Example, has_lazy_modules, warm_up
    from pytest_graphbudget.quiet import held

    model, args, kwargs, name = request.model, request.inputs, request.kwargs, request.name
    loss, optimizer, hardware = request.loss, request.variant.optimizer, request.hardware
    _refuse_untrainable(model)
    mixed = _mixed(request.variant.dtype)
    target = hw.get(hardware)
    example = Example(args, kwargs)
    start = time.perf_counter()
    if has_lazy_modules(model):  # their weights exist once one forward has run
        warm_up(model, example)
    modes = {module: module.training for module in model.modules()}
    model.train()
    failures: dict[str, str] = {}
    try:
        with held(f"tracing the training step of {name}"), torch.inference_mode(False):
            try:
                joint = capture(model, example, loss, optimizer, **mixed)
                # Priced on the fake values the trace left on its nodes; the ordinary fake
                # pass when they cannot be used (the counts are the same).
                measured = measure_exported(
                    joint.holder, joint.traced, _joint_interpreter(), owner=model
                )
                if measured is None:
                    measured = measure(joint.holder, joint.traced, example.tensors, owner=model)
            except GraphBudgetError:
                raise
            except Exception as exc:  # data fake tensors lack: the path a real step takes
                failures["joint"] = one_line(exc, typed=True)
                _refuse_reentrant(exc)
                _refuse_meta(model, exc)
                joint, measured = _real_step(model, example, loss, optimizer, mixed)
    except GraphBudgetError:
        raise
    except Exception as exc:  # the model, the loss or a backward raised while traced
        raise ModelRunError(_failed(exc)) from exc
    finally:
        for module, training in modes.items():
            module.training = training
    _segment(measured.nodes, joint.tags.node_phase)
    _loss_inputs(measured, joint.traced.graph_module, loss, model, example.tensors)
    measured.frees = joint.tags.frees(measured.nodes)  # when the step itself let go
    if traced is not None:
        traced.append(measured)
    seconds = time.perf_counter() - start
    with mixed.get("autocast", contextlib.nullcontext)():  # the products' dtype, as eval's
        prof = assemble(
            model,
            args,
            kwargs,
            name,
            target,
            joint.traced,
            measured,
            failures,
            seconds,
            request.execution,
        )
    prof.mode = "train"
    prof.optimizer_state_bytes = joint.state_bytes
    prof.notes += _host_memory(target)
    prof.phases = _phases(prof, measured.nodes, joint.tags.node_phase)
    _module_phases(prof, measured.nodes, joint.tags.node_phase)
    return prof


GRAD_SCALE = 2.0**16
"""``torch.amp.GradScaler``'s initial scale; the step's cost does not depend on it."""


def _mixed(dtype: str | None) -> dict[str, Any]:
    """``capture``'s keywords for a step under CUDA's autocast (``dtype="amp_float16"`` or
    ``"amp_bfloat16"``, ``amp.py``): the context the forward and the loss run in, and for
    float16 a ``GradScaler``'s scale, as torch's AMP recipe trains (bfloat16 needs none)."""
    from pytest_graphbudget.modes.amp import AMP, cuda_autocast

    if dtype not in AMP:
        return {}
    scale = GRAD_SCALE if AMP[dtype] == "float16" else None
    return {"autocast": lambda: cuda_autocast(dtype), "scale": scale}


def _host_memory(target: Any) -> list[str]:
    """A step priced for a CUDA GPU says that its peak is the host's: the caching allocator's
    replay (``engine.allocator``) was checked against a GPU on forwards only."""
    from pytest_graphbudget.engine.allocator import HOST_PEAK

    if not target.compute_capability:
        return []
    return [
        f"{HOST_PEAK}, not as {target.name}'s CUDA caching allocator "
        "would hold it: its rules and workspaces are applied to forwards only"
    ]


def _loss_inputs(measured: Any, gm: Any, loss: Any, model: Any, tensors: list) -> None:
    """Count as inputs the tensors the loss holds that the step read (constants of its graph:
    a target in the loss's closure), as eager holds them through the step; not the model's
    own nor the example's, counted already."""
    from pytest_graphbudget.engine.trace import model_state
    from pytest_graphbudget.engine.watch import captured_tensors

    read = {id(getattr(gm, n.target, None)) for n in gm.graph.nodes if n.op == "get_attr"}
    known = {t.untyped_storage().data_ptr() for t in [*model_state(model).values(), *tensors]}
    for i, tensor in enumerate(captured_tensors(loss) if loss is not None else ()):
        storage = tensor.untyped_storage()
        if id(tensor) in read and storage.data_ptr() not in known and tensor.device.type != "meta":
            # its bytes, by a key of its own: the ops' reads of it are priced as a constant's
            # on every tier (the fresh pass reads this storage, export's pass a fake of it)
            measured.inputs[f"loss.{i}"] = {("loss", storage.data_ptr()): storage.nbytes()}


def _segment(nodes: list, phase: dict[str, str]) -> None:
    """Each node's segment, its phase: no kernel crosses from one phase to the next. A node run
    op by op (``split.Split``: ``mish_backward.softplus``) takes its node's phase."""
    for node in nodes:
        phase.setdefault(node.name, phase.get(node.name.partition(".")[0], "forward"))
        node.segment = PHASES.index(phase[node.name])
        node.in_call = node.segment == 0  # autograd and the update run outside module calls


def _refuse_reentrant(exc: Exception) -> None:
    """Reentrant checkpointing refuses ``torch.autograd.grad``, which the step's trace takes
    gradients with (eager ``loss.backward()`` works): torch's advice reads as a fault of the
    model, so the limitation is said as the tool's own."""
    text = str(exc)
    if "use_reentrant=True" in text and "incompatible with .grad()" in text:
        raise GraphBudgetError(
            "mode='train': the training step is traced with torch.autograd.grad, which "
            "torch.utils.checkpoint(..., use_reentrant=True) does not support: profile it "
            "with use_reentrant=False (its backward stops recomputing once the tensors it saved "
            "are rebuilt, where reentrant checkpointing reruns the whole checkpointed function)"
        ) from exc


SPARSE_FIX = (
    "profile the step with sparse=False, whose dense gradient is the sparse one's upper "
    "bound, or mode='eval'"
)
SPARSE_HINT = f"a sparse gradient (an embedding's, sparse=True) is not priced: {SPARSE_FIX}"


def _refuse_untrainable(model: Any) -> None:
    """What no step can be traced of: an exported program (no parameters to take gradients
    of), and an embedding with ``sparse=True``, whose sparse gradient no tier can price (its
    bytes are its indices' and values', not a storage's), named before the trace fails on it."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise GraphBudgetError(
            f"mode='train' needs a torch.nn.Module, got {type(model).__name__}: "
            "profile the module itself, not an exported program"
        )
    for path, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if (
            isinstance(module, torch.nn.Embedding | torch.nn.EmbeddingBag)
            and module.sparse
            and isinstance(weight, torch.Tensor)
            and weight.requires_grad
        ):
            raise GraphBudgetError(
                f"mode='train': {path or '<root>'} ({type(module).__name__}) has sparse=True, "
                f"and its sparse gradient is not priced: {SPARSE_FIX}"
            )


def _failed(exc: Exception) -> str:
    """The line a step that raised says: torch's error, and what to change where it is known."""
    text = f"mode='train': tracing the training step failed: {one_line(exc, typed=True)}"
    if "SparseTensorImpl" in str(exc):
        text += f"; {SPARSE_HINT}"
    if "Expected more than 1 value per channel when training" in str(exc):
        text += (
            "; a BatchNorm in training normalizes each channel over the batch: profile the "
            "step at a batch of 2 or more (batch=2, --batch 2)"
        )
    return text


def _refuse_meta(model: Any, exc: Exception) -> None:
    """A model on the meta device has no values for a real step to take its path on: a step
    that branched on one says so; any other error is the model's own, said as it is (a
    detector without targets had been told to build real weights)."""
    from pytest_graphbudget.engine.trace import is_meta

    if not is_meta(model):
        return
    text = _failed(exc)
    if any(word in text for word in ("DataDependent", "DynamicOutputShape", "meta")):
        text += (
            "; a model on the meta device has no values to branch on: build it with real "
            "weights (meta=False) to profile its training step"
        )
    raise ModelRunError(text) from exc


def _real_step(
    model: Any,
    example: Any,
    loss: Callable | None,
    optimizer: str | None,
    mixed: dict | None = None,
) -> Any:
    """One step traced on real copies of the weights, the optimizer's state and the inputs, then
    priced on fresh copies: the path and the figures of one real step (``loss.backward()`` and
    the update), from the caller's random state both times, which is left as it was."""
    import torch

    from pytest_graphbudget.compat import reparametrize
    from pytest_graphbudget.engine.joint import capture, real_like, real_state
    from pytest_graphbudget.engine.measure import measure
    from pytest_graphbudget.engine.trace import model_state

    devices = sorted({t.device.index or 0 for t in model_state(model).values() if t.is_cuda})
    with torch.random.fork_rng(devices=devices):
        joint = capture(model, example, loss, optimizer, real=True, **(mixed or {}))
    for slot in joint.holder.optimizer.buffers():  # the update wrote them: as before the step
        slot.zero_()
    with torch.random.fork_rng(devices=devices), reparametrize(model, real_state(model)):
        tensors = real_like(example.tensors)
        measured = measure(joint.holder, joint.traced, tensors, fake=False, owner=model)
    return joint, measured


def _joint_interpreter() -> type:
    """The exported-graph interpreter, which prices a node with a formula from the values the
    trace recorded (a joint graph is already ATen ops), except that an in-place op's value is
    its input itself, as when it runs: the optimizer's state stays recognisable as state."""
    from pytest_graphbudget.engine.measure_export import _ExportedInterpreter

    class _JointInterpreter(_ExportedInterpreter):
        def result(self, n: Any, value: Any) -> Any:
            if _in_place(n.target) and n.args and n.args[0] in self.env:
                return self.env[n.args[0]]
            return super().result(n, value)

    return _JointInterpreter


def _in_place(target: Any) -> bool:
    """Whether an op writes its first argument and returns it (``mul_``, ``addcmul_``)."""
    schema = getattr(target, "_schema", None)
    alias = schema.arguments[0].alias_info if schema is not None and schema.arguments else None
    return alias is not None and alias.is_write and len(schema.returns) == 1


def _phases(prof: Any, nodes: list, phase_of: dict[str, str]) -> dict[str, dict[str, Any]]:
    """FLOPs, MACs, traffic and estimated time of each phase (subgraphs never cross one)."""
    phases: dict[str, dict[str, Any]] = {
        p: {"flops": 0, "macs": 0, "traffic_bytes": 0, "est_latency_s": 0.0} for p in PHASES
    }
    for node in nodes:
        entry = phases[phase_of.get(node.name, "forward")]
        entry["flops"] += node.flops
        entry["macs"] += node.macs
    for sub in prof.subgraphs:
        entry = phases[phase_of.get(sub.nodes[0], "forward")]
        entry["traffic_bytes"] += sub.traffic_bytes
        entry["est_latency_s"] += sub.est_latency_s
    return phases


def _module_phases(prof: Any, nodes: list, phase_of: dict[str, str]) -> None:
    """Each module's FLOPs by phase, every level (a parent includes its children)."""
    for cost in prof.modules.values():
        for phase in PHASES:
            setattr(cost, f"{phase}_flops", 0)
    for node in nodes:
        if not node.flops:
            continue
        parts = node.module.split(".") if node.module else []
        for depth in range(len(parts) + 1):
            cost = prof.modules.get(".".join(parts[:depth]))
            if cost is not None:
                field = f"{phase_of.get(node.name, 'forward')}_flops"
                setattr(cost, field, getattr(cost, field) + node.flops)
