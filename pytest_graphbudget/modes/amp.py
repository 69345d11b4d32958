"""``dtype="amp_float16"`` and ``"amp_bfloat16"``: the model as it runs under CUDA's
``torch.autocast``, profiled on this machine, which may have no GPU.

Automatic mixed precision leaves the weights and inputs in float32 and decides per op:
convolutions and products cast their arguments to the low dtype; ``layer_norm``,
``group_norm``, ``softmax``, ``exp``, ``rsqrt``, ``pow``, sums and the interpolations run in
float32 (and what follows them stays float32 until the next product casts it back). A
metaformer's memory-bound ops move about twice their ``dtype="float16"`` bytes, and timm's
published GPU tables ran this way (``benchmarks/GPU_RESULTS.md``).

``torch.autocast("cuda")`` switches itself off without a GPU, and its lists only apply to
CUDA tensors; CPU autocast applies to the tensors a profile runs on, but keeps norms,
softmax and sums in the low dtype. So the profile runs under CPU autocast with CUDA's
policies put on the CPU autocast key for its duration (``torch.library``, undone after):
every op torch registers for CUDA autocast and not for CPU gets CUDA's policy
(``LOWER``, ``FLOAT32``, ``FLOAT32_DTYPE``, ``PROMOTE``), and every op registered for CPU
alone is passed through, as CUDA would. ``tests/modes/test_amp.py`` holds the result to
torch's own CUDA autocast, run on fake CUDA tensors. One difference is left: CUDA's float16
``softmax`` reads float16 and writes float32 in one kernel (``half_to_float``, which CPU
kernels lack), where the profile casts first.

Autocast's cast cache is off: a profile's forward runs more than once in one context (the
trace, the cost pass), and a cached weight cast would be priced only in the first. Each
forward of a served model casts its weights again (a new ``autocast`` context each time),
and so does each forward here.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

AMP = {"amp_float16": "float16", "amp_bfloat16": "bfloat16"}
"""``dtype=`` values that profile under autocast, and the low dtype of each."""

LOWER = frozenset(
    "_convolution convolution addmv addr chain_matmul einsum linalg_multi_dot mv "
    "_thnn_fused_gru_cell _thnn_fused_lstm_cell gru_cell lstm_cell rnn_relu_cell rnn_tanh_cell "
    "_scaled_dot_product_flash_attention".split()
)
"""CUDA casts their floating arguments to the low dtype."""
FLOAT32 = frozenset(
    "acos asin cosh erfinv exp expm1 log log10 log1p log2 reciprocal rsqrt sinh tan pow "
    "softplus layer_norm native_layer_norm group_norm rms_norm frobenius_norm nuclear_norm "
    "cosine_similarity dist pdist renorm logsumexp norm linalg_matrix_norm "
    "upsample_nearest1d upsample_nearest2d upsample_nearest3d _upsample_nearest_exact1d "
    "_upsample_nearest_exact2d _upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d "
    "upsample_trilinear3d upsample_bicubic2d _upsample_bilinear2d_aa _upsample_bicubic2d_aa".split()
)
"""CUDA casts their floating arguments to float32."""
FLOAT32_DTYPE = frozenset("softmax log_softmax cumsum cumprod sum linalg_vector_norm".split())
"""CUDA runs them with ``dtype=torch.float32`` unless a dtype is given: the low-precision
input is read as it is and the result written in float32, no cast of its own."""
PROMOTE = frozenset(
    "addcdiv addcmul atan2 bilinear cross dot vdot index_put scatter_add tensordot".split()
)
"""CUDA casts their floating arguments to the widest among them."""
KEYS = ("AutocastCPU", "AutocastCUDA")
UNREACHABLE = frozenset("_cudnn_rnn cudnn_convolution cudnn_convolution_transpose".split())
"""Registered for CUDA autocast, but only ever called on CUDA tensors."""


@contextlib.contextmanager
def cuda_autocast(dtype: str) -> Iterator[None]:
    """The block under CUDA's autocast at ``dtype`` (an ``AMP`` key), on CPU and fake tensors
    through CPU autocast with CUDA's policies, and on a GPU, when there is one, natively."""
    import torch

    low = getattr(torch, AMP[dtype])
    lib = _cuda_policies(low)
    # Under CUDA's autocast nn.MultiheadAttention and TransformerEncoderLayer leave their
    # fused fast path (``torch.is_autocast_enabled()``, CUDA's, says so); under CPU autocast
    # they take it, in float32, uncast: off, as CUDA runs them.
    mha = getattr(torch.backends, "mha", None)  # torch 2.2 on
    fastpath = mha.get_fastpath_enabled() if mha else None
    if mha:
        mha.set_fastpath_enabled(False)
    try:
        with torch.autocast("cpu", dtype=low, cache_enabled=False), _native(low):
            yield
    finally:
        if mha:
            mha.set_fastpath_enabled(fastpath)
        lib._destroy()


def _native(low: Any) -> Any:
    import torch

    if torch.cuda.is_available():
        return torch.autocast("cuda", dtype=low, cache_enabled=False)
    return contextlib.nullcontext()


def _cuda_policies(low: Any) -> Any:
    """A ``torch.library`` registration giving the CPU autocast key CUDA's policies."""
    import torch

    registered = torch._C._dispatch_get_registrations_for_dispatch_key
    # torch's own ops (torchvision registers its ops for both keys alike)
    cpu, cuda = ({n for n in registered(key) if n.startswith("aten::")} for key in KEYS)
    lib = torch.library.Library("aten", "IMPL")
    for qualified in sorted(cuda - cpu):
        name = qualified.removeprefix("aten::")
        op = _overload(name)
        base = name.split(".")[0]
        if base in LOWER:
            kernel = _cast(op, lambda ts: low)
        elif base in FLOAT32_DTYPE and "dtype" in {a.name for a in op._schema.arguments}:
            kernel = _float32_result(op)
        elif base in FLOAT32 | FLOAT32_DTYPE:
            kernel = _cast(op, lambda ts: torch.float32)
        elif base in PROMOTE:
            kernel = _cast(op, _widest)
        else:  # UNREACHABLE, or a policy torch added since: left to CPU's fallthrough
            continue
        lib.impl(name, kernel, "AutocastCPU")
    with warnings.catch_warnings():  # torch 2.4 warns that CPU's own kernel is overridden
        warnings.simplefilter("ignore", UserWarning)
        for qualified in sorted(cpu - cuda):  # what CPU casts and CUDA does not: as CUDA
            name = qualified.removeprefix("aten::")
            lib.impl(name, _cast(_overload(name), lambda ts: None), "AutocastCPU")
    return lib


def _overload(name: str) -> Any:
    import torch

    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def _eligible(t: Any) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64


def _widest(tensors: list) -> Any:
    import torch

    widest = tensors[0].dtype
    for t in tensors[1:]:
        widest = torch.promote_types(widest, t.dtype)
    return widest


def _below_autocast() -> Any:
    import torch

    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
    return torch._C._ExcludeDispatchKeyGuard(keys)


def _cast(op: Any, target: Any) -> Any:
    """A kernel casting ``op``'s eligible tensors to ``target(them)`` (None: as they are)."""
    from torch.utils import _pytree as pytree

    def kernel(*args: Any, **kwargs: Any) -> Any:
        tensors = [t for t in pytree.tree_leaves((args, kwargs)) if _eligible(t)]
        dtype = target(tensors) if tensors else None
        if dtype is not None:
            args, kwargs = pytree.tree_map(
                lambda t: t.to(dtype) if _eligible(t) else t, (args, kwargs)
            )
        with _below_autocast():
            return op(*args, **kwargs)

    return kernel


def _float32_result(op: Any) -> Any:
    """A kernel calling ``op`` with ``dtype=torch.float32`` unless a dtype was given."""
    import torch

    arguments = op._schema.arguments
    where = [a.name for a in arguments].index("dtype")
    positional = not arguments[where].kwarg_only

    def kernel(*args: Any, **kwargs: Any) -> Any:
        given = args[where] if positional and len(args) > where else kwargs.get("dtype")
        if given is None and args and _eligible(args[0]):
            if positional:
                found = list(args)
                while len(found) < where:
                    found.append(arguments[len(found)].default_value)
                found[where : where + 1] = [torch.float32]
                args = tuple(found)
            else:
                kwargs = {**kwargs, "dtype": torch.float32}
        with _below_autocast():
            return op(*args, **kwargs)

    return kernel
