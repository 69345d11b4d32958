"""Quantized weights at the bytes they are stored in, whatever dtype they show.

Two ways of shipping quantized weights hide their real size from ``numel() * element_size()``:
a tensor subclass (torchao's ``Int8Tensor``, ``Float8Tensor``, ``Int4Tensor``) reports the
logical shape and the activation dtype, while its bytes are those of its inner tensors (int8 or
float8 data, packed int4 in uint8, scales, zero points); and a ``torch.ao`` packed weight
(``quantize_dynamic``'s ``_packed_params``) is no tensor at all, so it is neither a parameter
nor a buffer. Here both are counted as stored: the inner tensors of a subclass, the quantized
weight of a packed one (1 byte an element for qint8, its scales and zero points: a scale and a
zero point of 8 bytes each per tensor, or the per-channel tensors) and its float bias. A
float16 packed weight (``quantize_dynamic(..., dtype=torch.float16)``) unpacks to float32 but
is stored in float16 (FBGEMM packs it so): 2 bytes an element. A quantized ``Embedding`` or
``EmbeddingBag`` keeps its table packed too (``EmbeddingPackedParams._packed_weight``): quint8
rows at 1 byte an element, quint4x2 at half a byte, and a float32 scale and zero point a row.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import ceil, prod
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from pytest_graphbudget.engine import walk

QUANTIZED_DTYPES = {
    torch.qint8: "int8",
    torch.quint8: "uint8",
    torch.qint32: "int32",
    torch.quint4x2: "int4",
    torch.quint2x4: "int2",
}
"""``torch.ao``'s quantized dtypes by the name of the dtype their data is stored in."""

PER_BYTE = {torch.quint4x2: 2, torch.quint2x4: 4}
"""Sub-byte quantized dtypes: how many elements one byte holds. Their ``element_size()`` says
1; each row (the last dimension) is packed into whole bytes."""


def inner(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors a (possibly nested) tensor subclass stores; the tensor itself if
    plain."""
    if not is_traceable_wrapper_subclass(tensor):
        return [tensor]
    names, _ = tensor.__tensor_flatten__()
    found = []
    for name in names:
        value = getattr(tensor, name)
        if isinstance(value, torch.Tensor):
            found.extend(inner(value))
    return found


def stored_bytes(tensor: torch.Tensor) -> int:
    """The bytes ``tensor`` holds: a subclass's inner tensors; a ``torch.ao`` quantized tensor's
    data (one byte an element for qint8) with its scales and zero points; else
    ``numel * element_size``."""
    if is_traceable_wrapper_subclass(tensor):
        return sum(stored_bytes(t) for t in inner(tensor))
    data = _data_bytes(tensor)
    if not tensor.is_quantized:
        return data
    if tensor.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        return data + 8 + 8  # q_scale() is a double, q_zero_point() an int64
    scales, zeros = tensor.q_per_channel_scales(), tensor.q_per_channel_zero_points()
    return data + sum(t.numel() * t.element_size() for t in (scales, zeros))


def _data_bytes(tensor: torch.Tensor) -> int:
    """The bytes of a tensor's elements: ``numel * element_size``, but a sub-byte dtype's rows
    packed into whole bytes (a quint4x2 row of 15 in 8)."""
    per_byte = PER_BYTE.get(tensor.dtype)
    if per_byte is None or tensor.dim() == 0:
        return tensor.numel() * tensor.element_size()
    return prod(tensor.shape[:-1]) * ceil(tensor.shape[-1] / per_byte)


def stored_dtype(tensor: torch.Tensor) -> str:
    """The dtype most of ``tensor``'s bytes are stored in: ``int8`` for a qint8 or an
    ``Int8Tensor`` weight, ``float8_e4m3fn`` for a ``Float8Tensor``'s, else its own."""
    biggest = max(inner(tensor), key=lambda t: t.numel())
    if biggest.is_quantized:
        return QUANTIZED_DTYPES.get(biggest.dtype, str(biggest.dtype).removeprefix("torch."))
    return str(biggest.dtype).removeprefix("torch.")


def packed(model: nn.Module) -> Iterator[tuple[str, Any, list[torch.Tensor]]]:
    """Each ``torch.ao`` packed weight: its name, the packed object the ops take, and the
    tensors it packs (the quantized weight, and the bias when there is one)."""
    for name, module in walk.unique_modules(model):
        for attr, obj, tensors in _packs(module):
            yield (f"{name}.{attr}" if name else attr), obj, tensors


def _packs(module: nn.Module) -> Iterator[tuple[str, Any, list[torch.Tensor]]]:
    """The packed weights ``module`` holds itself, by attribute: a quantized layer's
    ``_packed_params`` (a float16 one's weight at float16, as packed), an embedding table
    (``_packed_weight``), a dynamic LSTM/GRU layer's cell (``_all_weight_values[i].param``) and
    a dynamic cell's two packed products."""
    obj = _packed_params(module)
    if isinstance(obj, torch.ScriptObject) and hasattr(module, "_weight_bias"):
        weight, bias = module._weight_bias()
        if isinstance(weight, torch.Tensor) and getattr(module, "dtype", None) == torch.float16:
            weight = weight.to(torch.float16)  # unpacked to float32, packed in float16
        yield "_packed_params", obj, [t for t in (weight, bias) if isinstance(t, torch.Tensor)]
    table = _attribute(module, "_packed_weight")
    if _is_table(table):
        yield "_packed_weight", table, [torch.ops.quantized.embedding_bag_unpack(table)]
    half = vars(module).get("weight_dtype") == torch.float16  # a dynamic float16 cell
    for attr in ("param", "_packed_weight_ih", "_packed_weight_hh"):
        cell = vars(module).get(attr)
        if isinstance(cell, torch.ScriptObject):
            tensors = _cell_tensors(cell, half)
            if tensors:
                yield attr, cell, tensors


def _is_table(obj: Any) -> bool:
    """Whether ``obj`` is a quantized embedding table (``EmbeddingPackedParamsBase``)."""
    if not isinstance(obj, torch.ScriptObject):
        return False
    try:
        return obj._type().qualified_name().endswith(".EmbeddingPackedParamsBase")
    except Exception:  # a ScriptObject without a class type: no table
        return False


def owner(fqn: str) -> str:
    """The module a packed weight named ``fqn`` belongs to: the layer, not the
    ``LinearPackedParams`` holder a quantized Linear keeps it in, or the
    ``EmbeddingPackedParams`` of an Embedding (the holder's row had had the weight, and the
    layer's none of it)."""
    module, _, _ = fqn.rpartition(".")
    parent, _, last = module.rpartition(".")
    return parent if last == "_packed_params" else module


def _cell_tensors(obj: Any, half: bool = False) -> list[torch.Tensor]:
    """The tensors a ``torch.ao`` dynamic RNN's packed cell holds: its packed linear products'
    weights and biases (one product's for a dynamic cell's ``_packed_weight_ih``), or none
    for a layout this torch does not use. A float16 cell's weights (``half``, or a layer's
    ``quantized_fp16`` cell) unpack to float32 and are counted at float16, as packed."""
    try:
        state = obj.__getstate__()[0]
        layer = isinstance(state[0], str)
        products = state[4] if layer else [obj]
        pairs = [product.__getstate__()[0] for product in products]
    except Exception:  # another torch's private layout: counted as nothing, as before
        return []
    half = half or (layer and state[0] == "quantized_fp16")
    found = []
    for pair in pairs:
        weight, *bias = pair[:2]
        if half and isinstance(weight, torch.Tensor):
            weight = weight.to(torch.float16)
        found += [t for t in (weight, *bias) if isinstance(t, torch.Tensor)]
    return found


def _packed_params(module: nn.Module) -> Any:
    """A module's ``_packed_params`` attribute, or None (``_attribute``)."""
    return _attribute(module, "_packed_params")


def _attribute(module: nn.Module, name: str) -> Any:
    """A module's attribute ``name``, or None. A packed weight (a ``ScriptObject``) lives in
    the module's ``__dict__``: read there, a module without one costs no
    ``nn.Module.__getattr__`` and its ``AttributeError``, asked of every module of a model;
    a scripted module keeps its attributes in C++, and is asked through ``getattr``."""
    if isinstance(module, torch.jit.ScriptModule):
        return getattr(module, name, None)
    return vars(module).get(name)


def holds_quantized(model: Any) -> bool:
    """True for a model with packed weights or tensor-subclass state: those have no fake twins
    here, so its cost pass runs on real tensors. One walk over the modules' own tables."""
    if not isinstance(model, nn.Module):
        return False
    for module in walk.modules(model):
        for table in (module._parameters, module._buffers):
            for t in table.values():
                if t is not None and (is_traceable_wrapper_subclass(t) or t.is_quantized):
                    return True
        obj = _packed_params(module)
        if isinstance(obj, torch.ScriptObject) and hasattr(module, "_weight_bias"):
            return True
        if _is_table(_attribute(module, "_packed_weight")):
            return True
    return False


def weight_ids(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[int, tuple[str, int]]:
    """The cost pass's weights not found by their own id: each inner tensor of a subclass in
    ``state`` (the op that reads it reads its weight, charged in full) and each packed weight
    (by ``packed_key``), with its name and stored bytes."""
    found: dict[int, tuple[str, int]] = {}
    for fqn, tensor in state.items():
        if is_traceable_wrapper_subclass(tensor):
            for piece in inner(tensor):
                found.setdefault(id(piece), (fqn, stored_bytes(tensor)))
    for fqn, obj, tensors in packed(model):
        found.setdefault(packed_key(obj), (fqn, sum(map(stored_bytes, tensors))))
    return found


def packed_key(obj: Any) -> int:
    """A packed weight's key: the address of the C++ object behind it, the same for every
    Python wrapper the dispatcher hands an op (each call makes a new one, so ``id`` differs)."""
    return hash(obj)


def packed_keys(args: tuple) -> list[int]:
    """The keys of the packed weights (``torch.ao``'s ``_packed_params``) an op takes: no
    tensors, and a new Python object at every call, but the same ``hash`` (``packed_key``)."""
    return [packed_key(a) for a in args if isinstance(a, torch.ScriptObject)]


def rows_read(name: str, args: tuple, out: Any) -> int:
    """The bytes of the rows a lookup reads: those it returns, but an ``EmbeddingBag`` returns
    its bags' sums, so its rows are one per index (1,000 indices into 10 bags read 1,000 rows,
    not the 10 its output holds); and a quantized table (``quantized.embedding_byte``,
    ``embedding_bag_4bit``, ...) returns float32 rows it stores packed: per index, a row of
    the output's width at a byte an element (``_4bit`` two, ``_2bit`` four), and the row's
    float32 scale and zero point, as ``stored_bytes`` counts the table."""
    table, indices = (args[0], args[1]) if len(args) > 1 else (None, None)
    if isinstance(indices, torch.Tensor):
        if name.startswith("_embedding_bag") and isinstance(table, torch.Tensor):
            return indices.numel() * (table.numel() * table.element_size() // max(len(table), 1))
        if name.startswith("quantized.embedding") and isinstance(out, torch.Tensor):
            per_byte = 4 if name.endswith("_2bit") else 2 if name.endswith("_4bit") else 1
            return indices.numel() * (ceil(out.shape[-1] / per_byte) + 8)
    leaves = pytree.tree_leaves(out)
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))
