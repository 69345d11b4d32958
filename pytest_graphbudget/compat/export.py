"""What ``torch.export`` offers by release, for the symbolic sweep: the decompositions that
run torch's composite ops into the ATen ops eager runs, and the keywords ``export`` takes.

Nothing here imports torch at module level.
"""

from __future__ import annotations

import inspect
from typing import Any


def composite_decompositions() -> dict:
    """Export's decompositions of torch's composite ops (``linear``, ``matmul``, ``layer_norm``:
    those with a ``CompositeImplicitAutograd`` kernel) into the ATen ops eager runs, for
    ``ExportedProgram.run_decompositions``. Before 2.6 (no ``default_decompositions``) an
    empty table does that: lowering to ATen then ran every composite.

    A symbolic sweep prices its exported graph on symbolic sizes. On 2.5 to 2.9 at least, the
    C++ kernels of ``linear`` and ``matmul`` read their input's sizes as integers
    (``aten.size.default``), which fixes export's symbols to the example's values; the
    decompositions run under export's own tracing, which keeps them symbolic."""
    import torch

    table = getattr(torch.export, "default_decompositions", None)
    if table is None:
        return {}
    composite = torch._C.DispatchKey.CompositeImplicitAutograd
    return {op: fn for op, fn in table().items() if op.has_kernel_for_dispatch_key(composite)}


def export_keywords(**wanted: Any) -> dict[str, Any]:
    """The keywords of ``wanted`` that this torch's ``torch.export.export`` takes
    (``prefer_deferred_runtime_asserts_over_guards``: 2.9 has it, 2.8 not)."""
    import torch

    accepted = inspect.signature(torch.export.export).parameters
    return {key: value for key, value in wanted.items() if key in accepted}
