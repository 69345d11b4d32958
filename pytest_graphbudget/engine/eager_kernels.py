"""Where an eager kernel does what the cost pass's fake or meta kernel does not.

The cost pass runs each op's fake (or meta) kernel and prices what it returns; a few eager
kernels allocate or refuse differently, and the figures must be the eager ones: the dtype
checks meta kernels skip (``check_dtypes``), ``max_pool1d``, which makes indices on fakes and
none on the CPU (``eager_cpu_max_pool1d``), the copies the CPU's elementwise ops and
reductions make of inputs of another dtype (``cast_copies``), a roll's one pass a dim
(``roll_passes``), and the workspace oneDNN's LSTM layer saves for its backward
(``lstm_workspace``, and ``saved_workspaces`` in a traced step); in the FX cost pass, on
the tape and in the training step's graph alike.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterator
from typing import Any

import torch
from torch import fx, nn

from pytest_graphbudget.compat import kernels as releases
from pytest_graphbudget.costs.channels_last import channels_last
from pytest_graphbudget.costs.registry import workspace_bytes
from pytest_graphbudget.costs.rnn_workspace import rnn_training_workspace
from pytest_graphbudget.engine import tree
from pytest_graphbudget.engine.nodes import NodeCost, _nbytes, _op_name

ONE_DTYPE = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "convolution"})
"""Ops whose CPU and CUDA kernels refuse tensors of two dtypes, and whose meta kernels do not
check: a float32 Linear fed int64 or float64 inputs raises when run, and priced on meta or
fake tensors it would give figures of a model that cannot run."""


def check_dtypes(func: Any, args: tuple) -> None:
    """Raise, as the model's kernel would, when an op of ``ONE_DTYPE`` mixes dtypes."""
    name = func.__name__.partition(".")[0]
    if name not in ONE_DTYPE or func._overloadname != "default":
        return
    dtypes = [a.dtype for a in args if isinstance(a, torch.Tensor)]
    if len(set(dtypes)) > 1:
        shown = " and ".join(str(d).removeprefix("torch.") for d in dict.fromkeys(dtypes))
        raise RuntimeError(f"{name} got tensors of two dtypes ({shown}), which its kernel refuses")


PROMOTING = frozenset(
    {
        *("add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "remainder"),
        *("fmod", "pow", "atan2", "hypot", "copysign", "xlogy", "maximum", "minimum"),
        *("fmax", "fmin", "addcmul", "addcdiv", "bitwise_and", "bitwise_or", "bitwise_xor"),
        *("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"),
        "where",  # its condition aside
    }
)
"""Elementwise ops whose ``TensorIterator`` promotes its inputs to one common dtype."""
TO_BOOL = frozenset(
    {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"}
)
"""Of those, the ops whose result is bool whatever the common dtype."""


WIDENING = frozenset({"sum", "mean", "prod", "nansum", "count_nonzero"})
"""Reductions ``make_reduction`` runs in their result's dtype: on the CPU an input of another
dtype is copied to it first (a bool mask's sum, as int64); ``mean`` of 16-bit floats sums in
float32 into a float32 result, converted after; ``count_nonzero`` over some dimensions is
``(x != 0).sum(dims)`` (a bool ``x`` summed as it is from torch 2.5), the mask copied as
int64."""
CASTING = PROMOTING | WIDENING
"""The ops whose CPU kernels copy an input of another dtype (``cast_copies``)."""


def eager_extras(node: NodeCost, name: str, args: tuple, tensors: list, out: Any) -> None:
    """Add to ``node`` what one call's eager kernel holds or runs beyond its fake kernel: the
    CPU's copies of inputs of another dtype (``cast_copies``), a roll's passes
    (``roll_passes``), and whether a convolution runs channels-last (its input's or weight's
    strides suggest it, as cuDNN's and oneDNN's pick: a GPU prices it by ``channels_last``)."""
    if name in CASTING:
        node.workspace = max(node.workspace, cast_copies(name, tensors, out))
    if name == "roll":
        passes, held = roll_passes(args, out)
        node.extra_kernels += passes
        node.workspace = max(node.workspace, held)
        node.cuda_workspace = max(node.cuda_workspace, held)
    if name == "convolution" and len(args) > 1:
        node.channels_last |= channels_last(*tree.strided_shapes(args[:2]))


def roll_passes(args: tuple, out: Any) -> tuple[int, int]:
    """``(kernels, bytes)`` a roll over k dims runs and holds beyond one kernel: ATen's CPU and
    CUDA kernels roll one dim at a time into a new tensor (``roll_common``), each of the first
    k - 1 held until the call returns (a recursion). Swin's shifted windows roll over height and
    width: on one EPYC core a (1, 56, 56, 96) float32 roll over both took 2.1x a clone (3.4x at
    7 x 7 x 768), over one 1.1x; the profiler saw k - 1 copies of the output beside it."""
    dims = args[2] if len(args) > 2 else ()
    rolled = len(dims) if isinstance(dims, (list, tuple)) else 1
    if rolled < 2 or not isinstance(out, torch.Tensor):
        return 0, 0
    if not all(type(size) is int for size in out.shape):  # symbolic: the kernels still count
        return rolled - 1, 0
    return rolled - 1, (rolled - 1) * out.numel() * out.element_size()


def cast_copies(name: str, tensors: list, out: Any) -> int:
    """Bytes the CPU kernel of an op of ``CASTING`` holds while it runs, converting dtypes."""
    result = next(iter(tree.tensors(out)), None)
    if not tensors or result is None or result.device.type not in ("cpu", "meta"):
        return 0
    if name in WIDENING:
        return _widened(name, tensors[0], result)
    return promoted_copies(name, tensors, result)


def _widened(name: str, x: torch.Tensor, result: torch.Tensor) -> int:
    if name == "count_nonzero":  # over all dimensions, its kernel counts as it reads
        compared = x.dtype != torch.bool or releases.count_nonzero_compares_bool()
        return x.numel() * (8 + compared) if result.dim() else 0
    dtype, converted = result.dtype, 0
    if name == "mean" and dtype in (torch.float16, torch.bfloat16):
        dtype, converted = torch.float32, result.numel() * 4
        if releases.mean_replaces_its_output():  # the output is not held while it sums
            converted -= result.numel() * result.element_size()
    if x.dtype == dtype or x.is_complex():
        return converted
    return x.numel() * dtype.itemsize + converted


def promoted_copies(name: str, tensors: list, result: torch.Tensor) -> int:
    """Bytes of the copies ``TensorIterator`` makes on the CPU, while the op runs, of each
    input whose dtype is not the op's common dtype (``compute_types``: ``op.tensor().to(
    common_dtype)``, at the input's own size, a broadcast view's whole), and of an in-place
    op's result when its dtype is not that one. ``h * (h > 0)`` copies its mask as floats;
    a float32 gradient times a complex one (``abs``'s backward) is copied complex. CUDA's
    kernels cast as they read."""
    tensors = tensors[1:] if name == "where" else tensors
    if len(tensors) < 2:
        return 0
    in_place = result is tensors[0]
    if in_place or name in TO_BOOL:  # the result's dtype is not the common one
        if len(tensors) != 2:
            return 0
        common = torch.result_type(*tensors)
    else:
        common = result.dtype
    copied = sum(t.numel() for t in tensors if t.dtype != common)
    if in_place and result.dtype != common:
        copied += result.numel()
    return copied * common.itemsize


def eager_cpu_max_pool1d(node: NodeCost, indices: dict[Any, int], x: torch.Tensor) -> None:
    """ATen's ``max_pool1d`` makes indices only for autograd, off the CPU, or on a tensor
    subclass (``max_pool1d_with_indices``, whose indices die with the call): on fake tensors,
    or under a dispatch mode, it always does. Eager on a CPU tensor that needs no gradient it
    runs ``max_pool1d_impl``: the output and, for a strided ``x``, a contiguous copy held
    while it runs. ``indices`` (storage -> bytes) leave ``node.writes`` for ``cuda_workspace``,
    which the CUDA allocator's replay holds while the node runs (``allocator.cuda_peak``)."""
    if x.device.type not in ("cpu", "meta") or (x.requires_grad and torch.is_grad_enabled()):
        return
    for key, size in indices.items():
        node.writes.pop(key, None)
        node.views.pop(key, None)  # the tape's op returned them; eager's makes none
        node.cuda_workspace += size
    if not x.is_contiguous():
        node.workspace = max(node.workspace, _nbytes(x))


def lstm_workspace(func: Any, out: Any, args: tuple) -> Any:
    """``out`` of oneDNN's LSTM layer with the workspace its CPU kernel returns from a forward
    autograd will differentiate (``train``): every step's gates, saved for the backward. Its
    meta kernel returns it empty; a traced step's graph has it filled in
    (``saved_workspaces``), but torch before 2.14 prices that graph on fresh fakes,
    which run the meta kernel again: a 2-layer bidirectional LSTM's step read 72% under."""
    if len(args) < 16 or not args[15] or _op_name(func) != "mkldnn_rnn_layer":
        return out
    x = args[0]
    if not isinstance(x, torch.Tensor) or not isinstance(out, tuple) or out[3].numel():
        return out
    size = rnn_training_workspace(tuple(x.shape), args[10], x.element_size())
    return (*out[:3], out[3].new_empty(size)) if size else out


def is_max_pool1d(n: fx.Node, gm: fx.GraphModule) -> bool:
    """Whether an FX node is ``F.max_pool1d`` or ``torch.max_pool1d``, or an ``nn.MaxPool1d``
    (whose indices, when it returns them, are its output, not made and let go)."""
    if n.op == "call_module":
        return isinstance(gm.get_submodule(n.target), nn.MaxPool1d)
    return n.op == "call_function" and getattr(n.target, "__name__", "") == "max_pool1d"


def in_max_pool1d(frame: Any) -> bool:
    """Whether the Python code that called a taped op is ``torch.max_pool1d`` as
    ``max_pool1d_marked`` has it, or ``F.max_pool1d``'s (past torch's wrappers: Dynamo's
    ``disable`` around a mode that keeps it)."""
    while frame is not None and frame.f_code.co_filename.endswith(_WRAPPERS):
        frame = frame.f_back
    code = frame.f_code if frame is not None else None
    if code is _marked_max_pool1d.__code__:
        return True
    return code is not None and code.co_name == "_max_pool1d" and "functional" in code.co_filename


_WRAPPERS = ("eval_frame.py", "_python_dispatch.py")


@contextlib.contextmanager
def max_pool1d_marked() -> Iterator[None]:
    """``torch.max_pool1d`` is a Python function of ours in the block, so that the tape knows
    the ``max_pool2d_with_indices`` it records under it by its frame (``in_max_pool1d``): a
    forward calling ``torch.max_pool1d`` itself, not through ``F.max_pool1d``, had been
    charged the indices eager torch does not make (+49% of the layer's peak)."""
    previous, torch.max_pool1d = torch.max_pool1d, _marked_max_pool1d
    try:
        yield
    finally:
        torch.max_pool1d = previous


_TORCH_MAX_POOL1D = torch.max_pool1d


def _marked_max_pool1d(*args: Any, **kwargs: Any) -> Any:
    return _TORCH_MAX_POOL1D(*args, **kwargs)


def saved_workspaces(graph: Any) -> None:
    """Give each oneDNN LSTM layer's workspace the bytes the real kernel allocates: its meta
    kernel returns it empty, and the step's peak had left out what every layer keeps from its
    forward to its backward (a quarter of the measured peak of a 2-layer bidirectional LSTM)."""
    layer = getattr(torch.ops.aten, "mkldnn_rnn_layer", None)
    for node in graph.nodes:
        if layer is None or node.target is not layer.default:
            continue
        value = node.meta.get("val")
        args = tuple(a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in node.args)
        filled = lstm_workspace(node.target, value, args)
        if filled is value:
            continue
        node.meta["val"] = filled
        for user in node.users:
            if user.target is operator.getitem and user.args[1] == 3:
                user.meta["val"] = filled[3]


def cpu_workspace(name: str, args: tuple, out: Any, shapes: tuple) -> int:
    """The op's workspace on the CPU kernels ``costs/workspace.py`` and ``costs/scratch.py``
    describe; none on a GPU. ``shapes``: the call's arguments, keyword arguments and output as
    its formula saw them; the arguments go with their strides (a convolution's memory format
    decides its copies)."""
    first = next(iter(tree.tensors(out)), None)
    if first is None or first.device.type not in ("cpu", "meta"):
        return 0
    try:
        strided = tree.strided_shapes(args)
        dtype_name = str(first.dtype).removeprefix("torch.")
        return workspace_bytes(name, strided, *shapes[1:], first.element_size(), dtype_name)
    except Exception:  # symbolic sizes, an odd call: the tensors' own bytes still count
        return 0
