"""``FakeTensorMode`` as the engine uses it, behind one function each: its private
``dispatch`` (``fake_mode``'s ``after``), constant propagation (``fake_index``), the
``FakeTensor`` constructor (``fake_empty``, ``fake_results``, ``fake_view``) and
``in_kernel_invocation_manager`` (``meta_kernel``), the same on every supported release (2.4
on), so that a release that moves them changes one place.
"""

from __future__ import annotations

from functools import cache
from typing import Any


def fake_mode(after: Any = None) -> Any:
    """A FakeTensorMode that also accepts real tensors (the model's constants). ``after``, if
    given, is handed each op's result inside the mode's dispatch, as
    ``after(mode, func, args, kwargs, result)``, and returns the result to give
    (``engine.fakes``): the mode's private ``dispatch``, the same from 2.4 on."""
    mode = _after_mode()(allow_non_fake_inputs=True)
    mode.after = after
    return mode


@cache
def _after_mode() -> type:
    from torch._subclasses.fake_tensor import FakeTensorMode

    class After(FakeTensorMode):
        after = None
        uninitialized = False  # the op running makes memory it does not write

        def dispatch(self, func, types, args=(), kwargs=None):
            made = _index_factory(self, func, args, kwargs)
            if made is not None:
                return made
            outer, self.uninitialized = self.uninitialized, func in _uninitialized()
            try:
                result = super().dispatch(func, types, args, kwargs)
            finally:
                self.uninitialized = outer
            return result if self.after is None else self.after(self, func, args, kwargs, result)

        def may_turn_const(self, t):
            # an op on constants only (``fake_index``) keeps its result a constant up to
            # INDEX_LIMIT elements, not the mode's one: a grid's rows, a mask's cumsum. Not
            # an empty one's: its memory holds whatever was there (an index's result, made
            # by ``new_empty`` from a constant, had held garbage indices)
            return super().may_turn_const(t) or (
                not self.uninitialized
                and t.numel() <= INDEX_LIMIT
                and not t.is_sparse
                and t.device.type != "meta"
                and not self.is_our_fake(t)
            )

    return After


INDEX_LIMIT = 4096
"""The most elements an integer input (token ids, a mask, an image grid) may have and still be
given to a meta model's fake forward with its values (``fake_index``)."""


def fake_index(mode: Any, tensor: Any) -> Any:
    """A fake of an integer or boolean input that keeps its values, so that what the forward
    derives from them alone (a grid's sequence lengths, ``.item()``, ``nonzero``) is computed
    for real, as on a model with weights: the mode's constant propagation (from 2.4 on), for
    up to ``INDEX_LIMIT`` elements. None for any other tensor."""
    import torch

    if (
        type(tensor) is not torch.Tensor
        or tensor.is_meta
        or tensor.is_floating_point()
        or tensor.is_complex()
        or tensor.numel() > INDEX_LIMIT
        or tensor.requires_grad
    ):
        return None
    return mode.fake_tensor_converter.from_real_tensor(mode, tensor, make_constant=True)


@cache
def _uninitialized() -> frozenset:
    """The ops that take a tensor and return memory they never write (``new_empty``)."""
    import torch

    aten = torch.ops.aten
    return frozenset(
        (aten.new_empty.default, aten.new_empty_strided.default, aten.empty_like.default)
    )


@cache
def _factories() -> frozenset:
    import torch

    aten = torch.ops.aten
    made = (aten.arange.default, aten.arange.start, aten.arange.start_step, aten.zeros.default)
    return frozenset((*made, aten.ones.default, aten.full.default))


def _index_factory(mode: Any, func: Any, args: tuple, kwargs: Any) -> Any:
    """An integer or boolean ``arange``, ``zeros``, ``ones`` or ``full`` on the CPU of up to
    ``INDEX_LIMIT`` elements, as a constant (its values kept, as ``fake_index`` keeps an
    input's): indices a forward builds from its inputs' sizes (Qwen2.5-VL's attention
    windows) and then reads. None for any other op, made by the mode as usual."""
    import torch
    from torch.utils._mode_utils import no_dispatch

    if func not in _factories():
        return None
    kwargs = dict(kwargs or {})
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return None
    with no_dispatch():
        shaped = func(*args, **{**kwargs, "device": "meta"})  # its size, before any memory
        if shaped.numel() > INDEX_LIMIT or shaped.is_floating_point() or shaped.is_complex():
            return None
        real = func(*args, **kwargs)
    return mode.fake_tensor_converter.from_real_tensor(mode, real, make_constant=True)


def meta_kernel(mode: Any, func: Any, args: tuple, kwargs: Any) -> Any:
    """``func``'s result on ``mode``'s fakes from ATen's meta kernel, as the mode calls one
    where it has no rule of its own (``in_kernel_invocation_manager``): meta tensors."""
    from torch._subclasses.fake_tensor import in_kernel_invocation_manager

    with in_kernel_invocation_manager(mode):
        return func(*args, **(kwargs or {}))


def fake_empty(
    mode: Any, shape: Any, stride: Any, dtype: Any, device: Any, parameter: Any = None
) -> Any:
    """A fake tensor of these metadata under ``mode``: what ``torch.empty_strided`` makes under
    the mode, built directly (``FakeTensor(mode, meta, device)``, the same constructor from 2.4
    on) without the mode's dispatch. ``parameter``: the ``requires_grad`` of an
    ``nn.Parameter`` made of it, marked as ``nn.Parameter`` marks a tensor subclass, without
    its ``detach`` through the mode. Each dispatch costs about 150 us: a few tenths of a second
    for the fake weights of a model of a few hundred tensors."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    meta = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    if parameter is not None:
        meta.requires_grad_(parameter)
    twin = FakeTensor(mode, meta, torch.device(device))
    if parameter is not None:
        twin._is_param = True
    return twin


def fake_tensor_type() -> type:
    from torch._subclasses.fake_tensor import FakeTensor

    return FakeTensor


def fake_results(mode: Any, specs: list) -> list:
    """Fresh fake tensors, one per (shape, stride, dtype, device, requires_grad) in ``specs``
    (None for None), made inside ``mode``'s dispatch (``engine.fake_ops``): their meta tensors
    under ``in_kernel_invocation_manager``, as the mode's cache rebuilds a result, and wrapped
    as ``fake_empty`` wraps one (the same private names from 2.4 on)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager

    metas = []
    with in_kernel_invocation_manager(mode):
        for spec in specs:
            if spec is None:
                metas.append(None)
                continue
            shape, stride, dtype, _device, grad = spec
            metas.append(
                torch.empty_strided(shape, stride, dtype=dtype, device="meta", requires_grad=grad)
            )
    return [
        None if meta is None else FakeTensor(mode, meta, spec[3])
        for meta, spec in zip(metas, specs, strict=True)
    ]


def fake_view(mode: Any, source: Any, shape: Any, stride: Any, offset: int, grad: bool) -> Any:
    """A fake view of ``source``'s storage at this layout, made inside ``mode``'s dispatch as
    the mode's cache rebuilds a view (``set_`` on the source's storage, 2.4 on)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager

    with in_kernel_invocation_manager(mode):
        meta = torch.empty_strided(shape, stride, dtype=source.dtype, device="meta")
        meta.set_(source.untyped_storage(), offset, shape, stride)
        if grad:
            meta.requires_grad_(True)
    return FakeTensor(mode, meta, source.device)
