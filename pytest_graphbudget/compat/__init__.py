"""Which torch (and pytest) releases take which path: every version test in one place.

The package supports torch from ``TORCH_FLOOR`` to the newest release (``make compat`` runs
each minor release; ``benchmarks/COMPAT_RESULTS.md`` is the table, docs/compat.md the story).
What differs between releases is decided here and nowhere else:

- ``check_torch``: a torch below the floor gets one line (``TorchTooOld``), read from the
  installed metadata without importing torch.
- ``NEWER_OPS`` and ``op_available``: ATen ops that some supported torch lacks, with the release
  that added them; the registry leaves an op's entry out on a torch without it.
- ``dynamo_breaks_unavailable``: tier ``dynamo-breaks`` needs 2.9 (``DYNAMO_UNDER_MODES``).
- ``dim_auto``: ``torch.export.Dim.AUTO``, which a symbolic sweep exports with (2.4 lacks it).
- ``export_values_match_fresh``: an exported graph's recorded values are reused from 2.14
  (``EXPORT_VALUES_AS_FRESH``); before, the graph is priced on fresh fakes.
- ``compat.kernels``: CPU kernels that allocate differently by release (torch's own and
  the oneDNN it bundles): the peaks' workspaces follow them.
- ``before_device_context``: Dynamo imported before a meta device context, up to 2.8.
- ``proxy_mode``: ``get_proxy_mode`` from 2.5, ``get_innermost_proxy_mode`` in 2.4.
- ``make_fx_keywords``: ``make_fx``'s private ``_error_on_data_dependent_ops`` only where the
  signature has it.
- ``compat.fakes``: ``FakeTensorMode`` as the engine uses it (``fake_mode``, ``fake_index``,
  ``meta_kernel``, ``fake_empty``, ``fake_results``, ``fake_view``).
- ``reparametrize``, ``is_fake``, ``lazy_graph_modules``, ``make_graph_module``: torch's private
  ``_reparametrize_module``, ``FakeTensorMode`` (its ``dispatch``, the ``FakeTensor``
  constructor, ``in_kernel_invocation_manager``), ``_use_lazy_graph_module``,
  ``_make_graph_module``, the same on every supported release, behind one function each so
  that a release that moves them changes one place.
- ``unsafe_globals``: what a full pickle needs, from ``get_unsafe_globals_in_checkpoint`` (2.5
  on) or the 2.4 unpickler's message.
- ``pytest_inifile``: ``_pytest.config.findpaths.determine_setup`` with only the keywords the
  installed pytest's signature takes (they changed within pytest 8).

Nothing here imports torch at module level: importing the package must stay free of torch.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import sys
from functools import cache
from typing import Any

from pytest_graphbudget.compat.fakes import (  # noqa: F401  (the fake-tensor helpers)
    INDEX_LIMIT,
    fake_empty,
    fake_index,
    fake_mode,
    fake_results,
    fake_tensor_type,
    fake_view,
    meta_kernel,
)
from pytest_graphbudget.errors import GraphBudgetError

TORCH_FLOOR = (2, 4)
"""The oldest torch the package runs on; pyproject.toml's ``torch>=`` says the same (a test
checks), and ``make compat`` runs every minor release from it up."""

NEWER_OPS: dict[str, tuple[int, int]] = {
    "_safe_softmax": (2, 5),
    "_scaled_dot_product_attention_math_for_mps": (2, 5),
    "_scaled_dot_product_fused_attention_overrideable": (2, 5),
    "_weight_int4pack_mm_for_cpu": (2, 6),
    "_fused_rms_norm": (2, 8),
    "_grouped_mm": (2, 8),
    "_flash_attention_forward_no_dropout_inplace": (2, 12),
}
"""ATen op -> the first torch release that has it (checked against every release of the
matrix by ``tests/test_compat.py``, which ``make compat`` runs in each)."""


class TorchTooOld(GraphBudgetError, ImportError):
    """The installed torch is below ``TORCH_FLOOR`` (an ImportError too: raised when the
    engine is imported, ``from pytest_graphbudget import profile_model``)."""


def parse(version: str) -> tuple[int, int]:
    """``"2.4.1+cu121"`` -> ``(2, 4)``."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if not found:
        raise ValueError(f"not a version: {version!r}")
    return int(found[1]), int(found[2])


@cache
def torch_version() -> tuple[int, int]:
    """The installed torch's (major, minor)."""
    import torch

    return parse(torch.__version__)


def torch_at_least(major: int, minor: int) -> bool:
    return torch_version() >= (major, minor)


def floor_message(version: str) -> str | None:
    """The one line for a torch below the floor, or None when ``version`` is supported."""
    if parse(version) >= TORCH_FLOOR:
        return None
    floor = ".".join(map(str, TORCH_FLOOR))
    return f"pytest-graphbudget needs torch>={floor}; this is {version}"


def installed_torch() -> str:
    """The installed torch's version: the imported module's, else read from the installed
    metadata without importing torch (pytest's start-up; a cold lookup costs ~25 ms)."""
    if "torch" in sys.modules:
        return str(sys.modules["torch"].__version__)
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:  # a source build without metadata
        import torch

        return str(torch.__version__)


@cache
def torch_build() -> tuple[str, str] | None:
    """``(torch.__version__, torch.version.git_version)`` of the installed torch, read from its
    ``torch/version.py`` without importing it (``2.14.1+cu130`` where the wheel's metadata says
    ``2.14.1``): a warm run that the profile cache answers imports no torch, and says the same
    version and keys the same profiles as one that did. ``None`` when torch is not installed."""
    from importlib import metadata
    from pathlib import Path

    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return None
    try:
        text = Path(str(dist.locate_file("torch/version.py"))).read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""
    found = {
        name: match.group(1)
        for name in ("__version__", "git_version")
        if (match := re.search(rf"^{name}\s*=\s*['\"]([^'\"]*)['\"]", text, re.M))
    }
    return found.get("__version__", dist.version), found.get("git_version", "")


def check_torch() -> None:
    """Raise ``TorchTooOld`` with one line when the installed torch is below the floor."""
    message = floor_message(installed_torch())
    if message:
        raise TorchTooOld(message)


def op_available(name: str) -> bool:
    """False for an op of ``NEWER_OPS`` on a torch older than the release that added it."""
    needed = NEWER_OPS.get(name)
    return needed is None or torch_version() >= needed


# --- torch's private APIs -----------------------------------------------------------------


def reparametrize(module: Any, state: dict[str, Any]) -> contextlib.AbstractContextManager:
    """Swap ``module``'s parameters and buffers for ``state`` while the context is open."""
    from torch.nn.utils.stateless import _reparametrize_module

    return _reparametrize_module(module, state)


@cache
def grouped_mm_op() -> Any:
    """``aten._grouped_mm`` where this torch has it (a mixture of experts' products in
    transformers 5), else None."""
    import torch

    try:
        return torch.ops.aten._grouped_mm.default
    except (AttributeError, RuntimeError):
        return None


def grouped_mm(func: Any, args: tuple, kwargs: dict) -> Any:
    """``_grouped_mm`` on meta or fake float32 operands: its meta kernel accepts only bfloat16
    and float16, where the CPU kernel runs float32 (a Mixtral built on the meta device could
    not be profiled). Run in bfloat16 on the fakes, and give the float32 result's layout."""
    import torch

    first = args[0]
    if first.dtype != torch.float32 or not (first.is_meta or is_fake(first)):
        return func(*args, **kwargs)
    low = [
        a.to(torch.bfloat16) if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a
        for a in args
    ]
    return func(*low, **kwargs).to(torch.float32)


def make_fx_decomposes_kernels() -> bool:
    """Whether ``make_fx`` decomposes an op with a CompositeImplicitAutograd kernel even where
    eager runs a kernel of its own (before 2.10; from it, only what autograd would)."""
    return not torch_at_least(2, 10)


def override_kernel(library: Any, op: Any, fn: Any, dispatch_key: str) -> None:
    """``library.impl``, over a kernel torch registered from Python: torch 2.8 and 2.9 do so
    for ``_grouped_mm``'s meta kernel and refuse a second without ``allow_override`` (2.8 on;
    before it, Python registrations were not checked)."""
    if "allow_override" in inspect.signature(library.impl).parameters:
        library.impl(op, fn, dispatch_key, allow_override=True)
    else:
        library.impl(op, fn, dispatch_key)


def is_fake(tensor: Any) -> bool:
    from torch._subclasses.fake_tensor import is_fake as _is_fake

    return _is_fake(tensor)


def unrecorded() -> contextlib.AbstractContextManager:
    """No dispatch mode sees the ops of the block (the tape's recorder among them): a value
    eager reads to decide a branch, read off a real tensor without entering the books."""
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()


def lazy_graph_modules() -> contextlib.AbstractContextManager:
    """FX graph modules that compile their code when first called, not when built (2.2 on)."""
    from torch.fx._lazy_graph_module import _use_lazy_graph_module

    return _use_lazy_graph_module(True)


def make_graph_module(root: Any, graph: Any, name: str) -> Any:
    """What ``fx.symbolic_trace`` returns for a graph traced by another tracer: a lazy graph
    module under ``lazy_graph_modules`` (``_make_graph_module``, private, 2.2 on)."""
    from torch.fx._lazy_graph_module import _make_graph_module

    return _make_graph_module(root, graph, name)


def proxy_mode() -> Any:
    """The innermost proxy (``make_fx``) mode: ``get_proxy_mode`` from 2.5, before it
    ``get_innermost_proxy_mode``."""
    from torch.fx.experimental import proxy_tensor

    if torch_at_least(2, 5):
        return proxy_tensor.get_proxy_mode()
    return proxy_tensor.get_innermost_proxy_mode()


def below_autograd_undone() -> Any:
    """A guard that puts back the dispatch keys a higher-order op's autograd kernel excluded
    (``torch.cond`` runs its branch below autograd): under a dispatch mode, composite ops
    (``linear``) then decompose in the branch as they do outside it. Private API
    (``_ForceDispatchKeyGuard``); only torch 2.9 on hands a mode a higher-order op."""
    import torch

    key, keys = torch._C.DispatchKey, torch._C.DispatchKeySet
    autograd = keys(key.AutogradFunctionality) | keys(key.AutogradOther)
    autograd = autograd | keys(key.AutogradNestedTensor)
    excluded = torch._C._dispatch_tls_local_exclude_set() - autograd
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), excluded)


DYNAMO_UNDER_MODES = (2, 9)
"""The first torch whose Dynamo compiles under a dispatch mode that asks it to (a mode's
``ignore_compile_internals``): before it, Dynamo skips every frame while the tape's mode is on,
so the ``dynamo-breaks`` tier captures nothing there."""


def dynamo_breaks_unavailable() -> str | None:
    """Why tier ``dynamo-breaks`` cannot run on this torch, or None where it can."""
    if torch_version() >= DYNAMO_UNDER_MODES:
        return None
    need = ".".join(map(str, DYNAMO_UNDER_MODES))
    return f"tier dynamo-breaks needs torch>={need} (Dynamo skips frames under a dispatch mode)"


def dim_auto() -> Any:
    """``torch.export.Dim.AUTO`` (a dimension export keeps dynamic where the graph allows), or
    None on a torch without it (2.4, where ``Dim`` is a function): a symbolic sweep then says
    why it fell back to its points instead of failing on the attribute."""
    import torch

    return getattr(torch.export.Dim, "AUTO", None)


EXPORT_VALUES_AS_FRESH = (2, 14)
"""The first torch whose exported graph records the values a fresh fake pass gives: before
it, export keeps an eval-mode dropout as a copy (an allocation a fresh pass sees as a view) and
gives LSTM's hidden states a leading extra dimension. Older releases price an exported graph
on fresh fakes, the reference, at the cost of one more pass."""


def export_values_match_fresh() -> bool:
    return torch_version() >= EXPORT_VALUES_AS_FRESH


def before_device_context() -> None:
    """Import Dynamo before a ``with torch.device("meta")`` block that may import it first.

    On torch 2.8 and older, Dynamo's import runs tensor ops (``populate_builtin_to_tensor_fn_map``)
    that fail under a meta device context; a model's constructor that imports it lazily
    (transformers' modules do) then fails on the meta device. Later releases import it safely.
    """
    if not torch_at_least(2, 9):
        import torch._dynamo  # noqa: F401


def unsafe_globals(path: Any, error: BaseException) -> list[str]:
    """The globals a checkpoint needs that ``weights_only`` refuses: torch's own finder from
    2.5; in 2.4, the one global the unpickler's error names (``GLOBAL a.b.C``)."""
    import os

    import torch

    finder = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if finder is None:
        return re.findall(r"GLOBAL ([\w.]+)", str(error))[:1]
    try:
        return list(finder(os.fspath(path)))
    except Exception:
        return []


@cache
def _make_fx_parameters() -> frozenset[str]:
    from torch.fx.experimental.proxy_tensor import make_fx

    return frozenset(inspect.signature(make_fx).parameters)


def make_fx_keywords(**wanted: Any) -> dict[str, Any]:
    """The keywords of ``wanted`` that this torch's ``make_fx`` takes (private ones move)."""
    accepted = _make_fx_parameters()
    return {key: value for key, value in wanted.items() if key in accepted}


def pytest_inifile(**given: Any) -> Any:
    """pytest's own ``determine_setup`` with the keywords this pytest takes."""
    from _pytest.config.findpaths import determine_setup

    accepted = inspect.signature(determine_setup).parameters
    return determine_setup(**{key: value for key, value in given.items() if key in accepted})


def ini_keys(config: Any) -> list[str]:
    """The ini options a pytest ``config``'s file gives (and ``-o``'s, on pytest 9): pytest has
    no public list of them. pytest 9 keeps them in ``_inicfg``, pytest 8 in ``inicfg``."""
    found = getattr(config, "_inicfg", None)
    return list(getattr(config, "inicfg", {}) if found is None else found)
