"""Fake tensors strided as eager torch strides them: views and elementwise results.

``FakeTensorMode`` lays some results out by rules of its own, in Python: a ``view`` by
``torch._refs``, an elementwise op by its fast path or a reference. They keep a size-1
dimension's stride where ATen derives it from the dimensions around it. No read of memory
depends on that stride, but ATen's ``suggest_memory_format`` does: a ``(1, 1024, 64)`` tensor
transposed and viewed as ``(1, 64, 32, 32)`` (an attention's tokens back into an image, at
batch 1) is strided ``(64, 1, 2048, 64)`` eagerly, which ATen reads as contiguous, but
``(65536, 1, 2048, 64)``, channels-last, on fakes; a residual added to it stays so eagerly and
turned channels-last on fakes. A convolution, an upsample pick their kernel, their copies and
their result's layout by it: such tokens convolved read 0.84 of the measured training peak at
batch 1 (exact at batch 2, where the strides agree), a diffusers VAE decoder 1.05.

``restride`` lays such results out again: a view by ATen's own meta kernel
(``computeStride``), called on the same fakes as the mode calls one where it has no rule of
its own; an elementwise result by ``TensorIterator``'s rules (``engine/strides.py``; ATen's
meta kernels, handed a Python scalar, differ too). A few binary ops (``copysign``, ``xlogy``,
``logaddexp``) the mode lays out otherwise even without a size-1 dimension. Both are held to
eager torch in ``tests/engine/test_fakes.py``, as is ``empty_like`` (and ``zeros_like``,
``full_like``), which keeps a dense source's strides. Not covered: normalizations and resizes
of inputs strided so, whose own rules the mode follows.

``linear`` is ``F.linear`` as eager torch runs it on plain tensors: ATen adds the bias of an
input neither 2-D nor contiguous in place, except on a tensor subclass, fakes and meta tensors
included, or under any dispatch mode, which every capture runs under (``eager_linear``).

``traced_as_eager``: a training step's ``make_fx`` trace of the ops eager torch runs, as it runs
them: ``_grouped_mm`` on float32 fakes, and, before torch 2.10, ``silu_backward``,
``upsample_nearest2d`` and the other ops with a kernel of their own and a composite besides
kept whole.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from math import prod
from typing import Any

from pytest_graphbudget import compat
from pytest_graphbudget.engine.strides import iterator_strides, row_major


def fake_mode() -> Any:
    """A ``FakeTensorMode`` that also accepts real tensors (the model's constants) and strides
    its views and elementwise results as eager torch does (``restride``)."""
    return compat.fake_mode(after=restride)


def fake_constant(value: Any, weights: dict[int, Any]) -> Any:
    """A constant a graph reads (a tensor kept as a plain attribute, a rotary table) as the fake
    the current fake mode makes of it, a weight under that id too, so that its views share the
    storage it reads. Read as the real tensor, each view of it under the mode had a storage of
    its own: a fresh write of the whole table (a training step's activations on torch before
    2.14, which prices the joint graph on fresh fakes)."""
    import torch

    mode = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
    if mode is None or not isinstance(value, torch.Tensor) or compat.is_fake(value):
        return value
    fake = mode.from_tensor(value)
    if id(value) in weights:
        weights[id(fake)] = weights[id(value)]
    return fake


def restride(mode: Any, func: Any, args: tuple, kwargs: Any, out: Any) -> Any:
    """``out``, the mode's result of ``func``, strided as eager torch strides it where the two
    can differ: a ``view`` with a size-1 dimension (ATen's meta kernel: ``computeStride``), an
    elementwise result (``strides.iterator_strides``), a tensor made like another."""
    import torch

    if func.__name__ in FRESH:
        source = (args or [(kwargs or {}).get("input")])[0]
        try:
            laid = _fresh(mode, out[0] if isinstance(out, tuple) else out, source, func)
        except Exception:  # symbolic sizes, an odd call: the mode's layout stands
            return out
        return (laid, *out[1:]) if isinstance(out, tuple) else laid
    if not isinstance(out, compat.fake_tensor_type()):
        return out
    if getattr(out, "constant", None) is not None:
        return out  # a small tensor the mode computed on for real
    try:
        if func is torch.ops.aten.view.default and 1 in out.shape:
            stride = compat.meta_kernel(mode, func, args, kwargs).stride()
        elif elementwise(func):
            stride = iterator_strides(tuple(out.shape), _operands(func, args, kwargs))
        elif func in _like():
            stride = _alike(args[0], (kwargs or {}).get("memory_format"))
        else:
            return out
    except Exception:  # symbolic sizes, or a view ATen refuses: the mode's layout stands
        return out
    if stride is None or tuple(stride) == tuple(out.stride()):
        return out
    if func.is_view:
        return compat.fake_view(mode, out, out.shape, stride, out.storage_offset(), False)
    return compat.fake_empty(mode, out.shape, stride, out.dtype, out.device)


NOT_ITERATOR = frozenset({"hardtanh.default", "native_dropout_backward.default", "pow.Scalar"})
"""Elementwise ops with kernels of their own that lay their result out otherwise:
``hardtanh`` as ``empty_like`` of its input, ``native_dropout_backward`` as the product of the
gradient and a scaled copy of the mask, ``pow`` of a number row-major."""


FRESH = {
    "native_layer_norm.default": False,
    "_log_softmax.default": False,
    "native_batch_norm.default": True,
    "_native_batch_norm_legit.default": True,
    "_native_batch_norm_legit_no_training.default": True,
}
"""Ops whose CPU kernels allocate their result afresh, not like their input: row-major
(``layer_norm``'s ``empty_like(X, Contiguous)``, ``log_softmax``'s structured output), or, where
True, in the input's suggested memory format (batch norm's ``empty_like(input,
input.suggest_memory_format())``). The fake mode keeps the input's strides, which differ where
a dimension has size 1 (LayerNorm2d's permuted batch-1 map): ATen's channels-last test, and so
the next convolution's kernel, read that stride."""


def _fresh(mode: Any, out: Any, source: Any, func: Any) -> Any:
    """``out`` laid out as ``FRESH`` says for ``func``: row-major, or channels-last where its
    input ``source`` suggests it (``_suggests``)."""
    import torch

    if not isinstance(out, compat.fake_tensor_type()) or not all(type(n) is int for n in out.shape):
        return out
    shape = tuple(out.shape)
    stride = row_major(shape)
    last = {4: torch.channels_last, 5: torch.channels_last_3d}.get(len(shape))
    if FRESH[func.__name__] and last is not None and _suggests(source, last):
        spatial = row_major((*shape[2:], shape[1]))[:-1]  # channels innermost
        stride = (prod(shape[1:]), 1, *spatial)
    if stride == tuple(out.stride()):
        return out
    return compat.fake_empty(mode, out.shape, stride, out.dtype, out.device)


def _suggests(source: Any, last: Any) -> bool:
    """ATen's ``suggest_memory_format`` is channels-last: the strides are channels-last and
    not row-major too (a size-1 dimension's stride aside, as ``is_contiguous`` reads them:
    eager's batch norm of a (1, C, H, W) map strided (C, 1, W * C, C) is channels-last, of a
    (1, C, 1, 1) one row-major), or look it (``is_channels_last_strides``)."""
    import torch

    if source.is_contiguous(memory_format=last) and not source.is_contiguous():
        return True
    return torch._prims_common.suggest_memory_format(source) == last


ITERATOR_ORDER = {
    "threshold_backward.default": ("self", "grad_output"),
    "leaky_relu_backward.default": ("self", "grad_output"),
}
"""Ops whose ``TensorIterator`` takes their tensors in another order than their schema's: the
first decides a layout the others leave open (ReLU's gradient is laid out as its input)."""


@functools.cache
def elementwise(func: Any) -> bool:
    """Whether eager torch computes ``func`` with a ``TensorIterator`` that allocates its one
    result: tagged pointwise, functional, with CPU and meta kernels of its own (a composite's
    result is its parts')."""
    import torch

    schema = func._schema
    if torch.Tag.pointwise not in func.tags or schema.is_mutable or len(schema.returns) != 1:
        return False
    if schema.returns[0].alias_info is not None or func.__name__ in NOT_ITERATOR:
        return False
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return has(func.name(), "CPU") and has(func.name(), "Meta")


def _operands(func: Any, args: tuple, kwargs: Any) -> list:
    """``func``'s tensor arguments as ``TensorIterator`` sees them, in the schema's order, with
    a number passed as ``self`` or ``other`` (``x + 1``), which ATen wraps into a tensor."""
    import torch

    values = dict(zip((a.name for a in func._schema.arguments), args, strict=False))
    values.update(kwargs or {})
    names = ITERATOR_ORDER.get(func.__name__) or [a.name for a in func._schema.arguments]
    operands = []
    for name in names:
        value = values.get(name)
        if isinstance(value, torch.Tensor):
            operands.append((tuple(value.shape), tuple(value.stride())))
        elif name in ("self", "other") and isinstance(value, int | float | bool):
            operands.append(((), ()))
    return operands


@functools.cache
def _like() -> frozenset:
    """The ops eager torch makes by ``empty_like`` (and fills)."""
    import torch

    names = ("empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like")
    return frozenset(getattr(torch.ops.aten, name).default for name in names)


def _alike(source: Any, memory_format: Any) -> tuple | None:
    """``empty_like``'s strides where eager torch keeps its source's: a source dense and not
    overlapping, its format preserved (``zeros_like``, ``ones_like``, ``full_like``)."""
    import torch

    if memory_format not in (None, torch.preserve_format):
        return None
    shape, stride = tuple(source.shape), tuple(source.stride())
    inner = sorted((s, n) for n, s in zip(shape, stride, strict=True) if n != 1)
    expected = 1
    for s, n in inner:
        if s != expected:
            return None
        expected *= n
    return stride


FLATTEN_3D = os.environ.get("TORCH_LINEAR_FLATTEN_3D") == "1"
"""ATen's ``parseLinearFlatten3d``: a 3-D input to ``linear`` is copied contiguous and flattened
instead of going through ``matmul`` (read once, as ATen reads it)."""


@contextlib.contextmanager
def eager_linear() -> Iterator[None]:
    """``torch.nn.functional.linear`` is ``linear`` in the block: what ``nn.Linear`` and the
    functional attention call, for a forward run on fakes as eager torch runs it."""
    import torch.nn.functional as F

    original = F.linear
    F.linear = linear
    try:
        yield
    finally:
        F.linear = original


def linear(input: Any, weight: Any, bias: Any = None) -> Any:
    """``F.linear`` as eager torch runs it on plain tensors. An input neither 2-D nor
    contiguous (tokens transposed into a token-mixing MLP, a permuted image into a channels-last
    one) goes through ``matmul``, and its bias is added after: in place on plain tensors,
    out of place on any tensor subclass (``isTensorSubclassLike``), fakes and meta tensors
    included. Out of place, the product and its sum were both live at a peak eager torch never
    reaches: +21% on a permuted 64 -> 32 linear's step at batch 1."""
    import torch

    if _bias_in_place(input, weight, bias):
        return torch.matmul(input, weight.t()).add_(bias)
    return torch._C._nn.linear(input, weight, bias)


def _bias_in_place(input: Any, weight: Any, bias: Any) -> bool:
    """Whether eager ATen's ``linear`` adds ``bias`` in place on these arguments: the path of
    every release from 2.4 on, where they agree (a 1-D contiguous bias, no flattening asked)."""
    import torch

    tensors = (input, weight, bias)
    if bias is None or torch.compiler.is_compiling() or not all(map(_plain, tensors)):
        return False
    if any(t.layout != torch.strided for t in tensors) or weight.dim() != 2:
        return False
    if input.dim() == 2 or input.is_contiguous() or (FLATTEN_3D and input.dim() == 3):
        return False
    return bias.dim() == 1 and bias.is_contiguous()


def _plain(tensor: Any) -> bool:
    """A tensor eager torch would hold as a plain one: a tensor, a parameter or a fake of
    either, not a subclass with rules of its own (a quantized or distributed tensor)."""
    import torch

    return type(tensor) in (torch.Tensor, torch.nn.Parameter, compat.fake_tensor_type())


@contextlib.contextmanager
def traced_as_eager(fake: bool) -> Iterator[None]:
    """``make_fx`` tracing ops as eager torch runs them: ``_grouped_mm`` on float32 fakes, and
    the kernels eager runs whole kept whole (``kernels_kept_whole``)."""
    with float32_grouped_mm() if fake else contextlib.nullcontext(), kernels_kept_whole():
        yield


@contextlib.contextmanager
def float32_grouped_mm() -> Iterator[None]:
    """``_grouped_mm`` on float32 fakes in the block, as its CPU kernel runs it: its meta
    kernel accepts only bfloat16 and float16, so a float32 mixture of experts (Mixtral,
    Qwen3-MoE) built on the meta device could not have its training step traced. The eval
    passes run the op apart (``compat.grouped_mm``); ``make_fx`` records every op it is
    given, so here the meta kernel itself takes float32, each operand shaped and laid out as
    a bfloat16 one, for the block only (``Library._destroy`` restores torch's)."""
    import warnings

    import torch
    from torch._decomp import meta_table

    op = compat.grouped_mm_op()
    torchs = meta_table.get(op) if op is not None else None
    if torchs is None:
        yield
        return

    def meta(a: Any, b: Any, offs: Any = None, bias: Any = None, out_dtype: Any = None) -> Any:
        if a.dtype != torch.float32 or b.dtype != torch.float32:
            return torchs(a, b, offs, bias, out_dtype)
        low = [t if t is None else t.to(torch.bfloat16) for t in (a, b, bias)]
        return torchs(low[0], low[1], offs, low[2]).to(out_dtype or torch.float32)

    library = torch.library.Library("aten", "IMPL")  # destroyed below
    try:
        with warnings.catch_warnings():  # "Overriding a previously registered kernel"
            warnings.simplefilter("ignore")
            compat.override_kernel(library, op, meta, "Meta")
        yield
    finally:
        library._destroy()


@contextlib.contextmanager
def kernels_kept_whole() -> Iterator[None]:
    """``make_fx`` before torch 2.10 decomposed every op with a CompositeImplicitAutograd
    kernel, even one eager torch runs as a kernel of its own (``silu_backward``,
    ``mish_backward``, ``native_channel_shuffle``): traced as the several ops of the
    composite, each with its temporaries (a Mixtral's step read 2.5% over its measured peak on
    torch 2.8 and 2.9). From 2.10 it decomposes only what autograd would; before, such an op's
    ``decompose`` says NotImplemented in the block, and the trace keeps it as one node (a
    nearest upsample's step, traced as ``_unsafe_index``, had read 48% under on torch 2.9)."""
    ops = _composite_with_kernels() if compat.make_fx_decomposes_kernels() else []
    for op in ops:
        op.decompose = _not_decomposed
    try:
        yield
    finally:
        for op in ops:
            del op.decompose


def _not_decomposed(*args: Any, **kwargs: Any) -> Any:
    return NotImplemented


@functools.cache
def _composite_with_kernels() -> list[Any]:
    """The ATen overloads that have a CPU kernel and a CompositeImplicitAutograd one, in C++
    or in Python (``py_impl``: ``upsample_nearest2d`` as an ``_unsafe_index``)."""
    import torch

    has = torch._C._dispatch_has_kernel_for_dispatch_key
    composite = torch._C.DispatchKey.CompositeImplicitAutograd
    found = []
    for name in torch._C._dispatch_get_all_op_names():
        namespace, _, qualified = name.partition("::")
        if namespace != "aten" or not has(name, "CPU"):
            continue
        op, _, overload = qualified.partition(".")
        try:
            overload_op = getattr(getattr(torch.ops.aten, op), overload or "default")
        except (AttributeError, RuntimeError):
            continue
        if has(name, "CompositeImplicitAutograd") or composite in overload_op.py_kernels:
            found.append(overload_op)
    return found
