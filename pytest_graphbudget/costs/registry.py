"""The op registry: one entry per op, with its formula, its fusion role and its kind label.

An op is keyed by its base name: ``addmm`` for ``aten.addmm.default`` and ``aten.addmm_.Tensor``
(in-place and out variants share an entry), ``namespace.name`` for an op outside ATen
(``torchvision.nms``). Fusion roles (how ``engine/measure.py`` classifies the FX node the op
runs in, for ``engine/partition.py`` to fuse):

- ``anchor``: a contraction; it starts a kernel (conv, matmul, attention).
- ``reduction``: needs its whole input (softmax, norms, pooling, sum); it starts a kernel
  unless it can end the one before it.
- ``pointwise``: one output element from one input element; fuses into its producer.
- ``gather``: a lookup (embedding, index); zero FLOPs unless it also reduces what it looks up
  (EmbeddingBag), and it reads only the weight rows it looks up.
- ``view``: moves, copies, creates or describes data; zero FLOPs (its bytes still count)
  unless it also combines what it writes with what is there (``scatter``'s ``reduce``,
  ``index_put``'s ``accumulate``).
- ``free``: bookkeeping (``sym_size``, ``device``); zero FLOPs and it never names a node.

The kind label names the op in reports (``conv``, ``bn``, ``max_pool``); it defaults to the name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from math import prod
from typing import Any

import torch
from torch.utils import _pytree as pytree

from pytest_graphbudget.compat import op_available
from pytest_graphbudget.errors import GraphBudgetError

ROLES = ("anchor", "pointwise", "reduction", "gather", "view", "free")
ZERO_ROLES = ("gather", "view", "free")
"""Roles whose ops compute nothing: an entry with one of them may have no formula."""


class Shape(tuple):
    """A tensor argument as formulas see it: its shape, a tuple of ints."""


@dataclass(frozen=True)
class OpCost:
    """The work of one op: multiply-accumulates of contractions and every other FLOP."""

    macs: int = 0
    other: int = 0

    @property
    def flops(self) -> int:
        return 2 * self.macs + self.other

    def __add__(self, rhs: OpCost) -> OpCost:
        return OpCost(self.macs + rhs.macs, self.other + rhs.other)


Formula = Callable[..., OpCost]
Workspace = Callable[..., int]
"""Bytes an op's kernel holds besides its inputs and outputs while it runs, from the same shapes
as its formula, ``itemsize=`` (the bytes of one element of its output) and ``dtype_name=``
(its dtype's name, ``"float32"``)."""


@dataclass(frozen=True)
class Entry:
    """What the cost pass knows of one op."""

    name: str
    role: str
    kind: str
    formula: Formula | None = None  # None: zero FLOPs (roles gather, view, free)
    workspace: Workspace | None = None  # bytes the kernel allocates and frees while it runs
    contiguous: tuple[int, ...] = ()  # arguments the kernel copies when they are not dense
    storage: Workspace | None = None  # elements of an output storage larger than the output


class RegistryError(GraphBudgetError):
    """A registry entry that cannot be added (unknown op, duplicate, bad role)."""


class FormulaError(GraphBudgetError):
    """A registered formula raised, or returned something that is not a cost.

    Its text stays the one line it was made with: ``fx.Interpreter`` appends the node it was
    running, its traceback and a tlparse hint to the arguments of any exception that passes
    through it, which a user's mistake in their own formula does not need."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple:
        return type(self), (self.message,)


REGISTRY: dict[str, Entry] = {}
"""Op base name (``"convolution"``, ``"torchvision.nms"``) -> its entry."""


def add(name: str, role: str, formula: Formula | None = None, kind: str | None = None) -> Entry:
    """Add the entry of one op; an unknown ATen name, a second entry or a bad role raises."""
    if role not in ROLES:
        raise RegistryError(f"{name}: unknown role {role!r}; use one of {', '.join(ROLES)}")
    if formula is None and role not in ZERO_ROLES:
        raise RegistryError(f"{name}: an op with role {role!r} needs a formula")
    if name in REGISTRY:
        raise RegistryError(
            f"{name} already has a registry entry (role {REGISTRY[name].role}); "
            "an op has one entry: change that one instead of adding another"
        )
    if "." not in name:
        if not op_available(name):  # compat.NEWER_OPS: this torch predates the op
            return Entry(name, role, kind or name, formula)
        check_key(name)
    entry = Entry(name, role, kind or name, formula)
    REGISTRY[name] = entry
    return entry


def register(*names: str, role: str = "pointwise", kind: str | None = None):
    """Decorate a built-in formula: one entry per name in ``names``, all with ``role``."""

    def wrap(formula: Formula) -> Formula:
        for name in names:
            add(name, role, formula, kind)
        return formula

    return wrap


def zero_cost(names: str, role: str = "view", kinds: Mapping[str, str] | None = None) -> None:
    """Add entries for the space-separated ``names`` that compute nothing."""
    for name in names.split():
        add(name, role, None, (kinds or {}).get(name))


def workspace(*names: str, contiguous: tuple[int, ...] = ()):
    """Decorate the workspace function of ops that already have an entry (see ``Workspace``):
    registered in ``costs/workspace.py`` (convolutions) or ``costs/scratch.py``. ``contiguous``:
    the positions of the arguments the kernel copies into a contiguous tensor when they come
    with other strides (an expanded gradient); the cost pass adds those copies to the
    workspace, as it alone sees the strides."""

    def wrap(fn: Workspace) -> Workspace:
        for name in names:
            if "." not in name and not op_available(name):  # compat.NEWER_OPS: no entry here
                continue
            if name not in REGISTRY:
                raise RegistryError(f"{name}: a workspace needs the op's entry first")
            REGISTRY[name] = replace(REGISTRY[name], workspace=fn, contiguous=contiguous)
        return fn

    return wrap


def check_key(name: str) -> None:
    """Raise unless ``name`` (a base name, or ``namespace.name``) is an op torch knows.

    A namespace outside ATen is known once the library that defines it is imported
    (``torchvision``): a test walks every key after importing them.
    """
    import torch

    namespace, _, op = name.rpartition(".")
    spaces = [getattr(torch.ops, namespace)] if namespace else [torch.ops.aten, torch.ops.prim]
    if not any(hasattr(space, key) for space in spaces for key in (op, op + "_")):
        where = f"torch.ops.{namespace}" if namespace else "torch.ops.aten"
        raise RegistryError(f"{name}: no such op in {where}; check the spelling of the key")


def lookup(name: str) -> Entry | None:
    """The entry of ``name``, or None; the first call loads installed plugins' formulas."""
    if _plugins["state"] in ("new", "failed"):
        load_plugins()
    return REGISTRY.get(name)


def kind_of(name: str) -> str:
    """The kind label of an op (its name when it has no entry or no label of its own)."""
    entry = REGISTRY.get(name)
    return entry.kind if entry is not None else name


def base_name(qualified: str) -> str:
    """``aten::relu_`` / ``aten.relu_.default`` -> ``relu``: in-place variants share a formula."""
    parts = qualified.replace("::", ".").split(".")
    name = parts[1] if len(parts) > 1 else parts[0]
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name


def price(name: str, args: tuple, kwargs: dict[str, Any], out: Any) -> OpCost | None:
    """The cost of one call, or ``None`` when no entry knows the op."""
    entry = lookup(name)
    if entry is None:
        return None
    if entry.formula is None:
        return OpCost()
    return entry.formula(*args, out=out, **kwargs)


def output_storage(*names: str):
    """Decorate the function giving the elements of an op's (first) output's storage where its
    CPU kernel leaves it larger than the output, from the formula's shapes: a reduced MSE is a
    view of the per-element losses it was reduced from, which live as long as it does."""

    def wrap(fn: Workspace) -> Workspace:
        for name in names:
            if name not in REGISTRY:
                raise RegistryError(f"{name}: an output storage needs the op's entry first")
            REGISTRY[name] = replace(REGISTRY[name], storage=fn)
        return fn

    return wrap


def storage_elements(name: str, args: tuple, kwargs: dict[str, Any], out: Any) -> int:
    """The elements ``output_storage`` gives one call, 0 for an op without it."""
    entry = REGISTRY.get(name)
    if entry is None or entry.storage is None or not _concrete(args):
        return 0
    return int(entry.storage(*args, out=out, **kwargs))


def _concrete(args: tuple) -> bool:
    """Whether every shape among ``args`` has plain sizes: a workspace compares sizes, and a
    comparison of symbolic ones (an export with a dynamic dimension) would be a guard that
    specializes it (BERT's sequence length, made static by the flash kernel's block rule)."""
    shapes = [a for a in args if isinstance(a, Shape)]
    strides = [d for a in shapes for d in getattr(a, "strides", None) or ()]
    dims = [*(d for a in shapes for d in a), *strides]
    return all(type(d) is int for d in dims)


def workspace_bytes(
    name: str,
    args: tuple,
    kwargs: dict[str, Any],
    out: Any,
    itemsize: int,
    dtype_name: str = "",
) -> int:
    """The workspace of one call (``Workspace``), 0 for an op without one. ``dtype_name``
    (``"bfloat16"``) tells apart kernels of one itemsize: bfloat16 and float16 convolutions
    take different CPU paths."""
    entry = REGISTRY.get(name)
    if entry is None or entry.workspace is None or not _concrete(args):
        return 0
    found = entry.workspace(*args, out=out, itemsize=itemsize, dtype_name=dtype_name, **kwargs)
    return max(0, int(found))


def numel(shape: Any) -> int:
    """Elements of a shape; 0 for anything that is not a shape (None, scalars)."""
    return prod(shape) if isinstance(shape, Shape) else 0


def out_numel(out: Any) -> int:
    """Elements of an op's (first) output."""
    if isinstance(out, (list, tuple)) and not isinstance(out, Shape):
        return numel(out[0]) if out else 0
    return numel(out)


# Installed plugins' formulas ---------------------------------------------------------------

_plugins: dict[str, Any] = {"state": "new", "error": None}


def load_plugins(pm: Any = None) -> None:
    """Call every ``graphbudget_register_formulas`` hook once, with ``register_formula``.

    ``pm`` defaults to the process-wide plugin manager (installed packages' entry points). A
    plugin that fails fails every later lookup too, never only the first model priced.
    """
    if _plugins["state"] == "failed":
        raise _plugins["error"]

    _plugins["state"] = "loading"  # formulas registered by a hook may be looked up meanwhile
    try:
        if pm is None:
            from pytest_graphbudget.hookspecs import plugin_manager

            pm = plugin_manager()
        pm.hook.graphbudget_register_formulas(register=register_formula)
    except Exception as exc:
        error = exc if isinstance(exc, GraphBudgetError) else RegistryError(_plugin_failed(exc))
        _plugins.update(state="failed", error=error)
        raise error from exc
    _plugins["state"] = "loaded"


def _plugin_failed(exc: Exception) -> str:
    from pytest_graphbudget.errors import one_line

    return f"a graphbudget_register_formulas hook failed: {one_line(exc, typed=True)}"


def op_key(op: Any) -> str:
    """The registry key of an ``OpOverload`` or ``OpOverloadPacket``: ``mm``, ``mylib.fused``."""
    import torch

    if isinstance(op, torch._ops.OpOverload):
        qualified = op.name()
    elif isinstance(op, torch._ops.OpOverloadPacket):
        qualified = op._qualified_op_name
    else:
        raise RegistryError(
            f"register_formula takes an op such as torch.ops.mylib.myop.default, got {op!r}"
        )
    namespace = qualified.partition("::")[0]
    name = base_name(qualified)
    return name if namespace in ("aten", "prim") else f"{namespace}.{name}"


def register_formula(
    op: Any, role: str = "anchor", *, kind: str | None = None
) -> Callable[[Callable[..., Mapping[str, int]]], Callable[..., Mapping[str, int]]]:
    """Register ``fn`` as the formula of ``op`` (all its overloads), with a fusion role.

    ``role`` is one of ``anchor``, ``pointwise``, ``reduction``, ``gather``, ``view``, ``free``
    (see ``costs.registry``); ``kind`` names the op in reports (default: its key, such as
    ``mylib.fused_mm``). An op that already has an entry raises ``RegistryError``.
    """
    key = op_key(op)
    if role not in ROLES:
        raise RegistryError(f"{key}: unknown role {role!r}; use one of {', '.join(ROLES)}")

    def wrap(fn: Callable[..., Mapping[str, int]]) -> Callable[..., Mapping[str, int]]:
        def formula(*args: Any, out: Any = None, **kwargs: Any) -> OpCost:
            try:
                result = fn(*args, out=out, **kwargs)
            except Exception as exc:  # the user's mistake: say so, never "unsupported"
                raise FormulaError(raised(key, exc)) from exc
            return to_cost(key, result)

        add(key, role, formula, kind)
        return fn

    return wrap


def raised(key: str, exc: Exception) -> str:
    """The one line that says a registered formula raised, and how formulas are called."""
    from pytest_graphbudget.errors import one_line

    return (
        f"the formula registered for {key} raised {one_line(exc, typed=True)} (it is called "
        "as fn(*args, out=..., **kwargs), each tensor given as its Shape: a tuple of ints)"
    )


def to_cost(key: str, result: Any) -> OpCost:
    """Check a custom formula's mapping and turn it into an ``OpCost``."""
    if not isinstance(result, Mapping) or not {"flops", "macs"} <= result.keys():
        raise FormulaError(
            f"{key}: a formula returns a mapping with 'flops' and 'macs', got {result!r}"
        )
    flops, macs = result["flops"], result["macs"]
    for label, value in (("flops", flops), ("macs", macs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise FormulaError(f"{key}: {label} must be a whole number >= 0, got {value!r}")
    if flops < 2 * macs:
        raise FormulaError(
            f"{key}: flops={flops} is less than 2 * macs={2 * macs}; flops counts 2 per "
            "multiply-accumulate plus every other FLOP"
        )
    return OpCost(macs=macs, other=flops - 2 * macs)


CONTRACTION_WORDS = tuple(
    "mm matmul conv einsum attention attn linear dot gemm bilinear lstm gru rnn".split()
)
"""Words in an op's name that say it contracts (``mylib.fused_matmul``, ``aten.addr``)."""


def may_contract(qualified: str, args: tuple, kwargs: dict) -> bool:
    """Could this call without a formula be a contraction, and so hide most of the FLOPs?

    Yes when its name says so (``CONTRACTION_WORDS``), or when any input is a floating-point or
    complex tensor of rank 2 or more: the operands every matrix product and convolution has.
    Integer, boolean and 1-D work (indexing, bookkeeping) is not.
    """
    name = qualified.rpartition(".")[2].lower()
    if any(word in name for word in CONTRACTION_WORDS):
        return True
    return any(
        isinstance(leaf, torch.Tensor)
        and leaf.dim() >= 2
        and (leaf.is_floating_point() or leaf.is_complex())
        for leaf in pytree.tree_leaves((args, kwargs))
    )
