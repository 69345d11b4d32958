"""The helper functions whose lines an export records.

``torch.export`` keeps only the ``forward`` frames in each node's stack trace, so the ops of
a helper a forward calls (torchvision's ``shifted_window_attention``, a model's
``_process_input`` or ``eager_attention_forward``) all show as the one line that called it,
and the values its code binds to names read as one expression's temporaries
(``engine/liveness.py``): under what eager holds. torch keeps the frames of functions
registered as anchors too (``torch.fx.proxy._STACK_TRACE_ANCHORS``, where this torch has
it): while this project exports a model, the functions and methods of the files that define
its modules are registered, and removed after, leaving the registry as it was found. An
``ExportedProgram`` a user exported has only its forwards' lines.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator

from torch import nn


@contextlib.contextmanager
def recorded(model: nn.Module) -> Iterator[None]:
    """Record the lines of ``model``'s helper functions in the graphs exported meanwhile."""
    import torch.fx.proxy

    registry = getattr(torch.fx.proxy, "_STACK_TRACE_ANCHORS", None)
    added = set() if not isinstance(registry, set) else helpers(model) - registry
    if added:
        registry.update(added)
    try:
        yield
    finally:
        if added:
            registry.difference_update(added)


def helpers(model: nn.Module) -> set[tuple[str, str]]:
    """``(file, name)`` of each function and method of the Python modules that define the
    classes of ``model``'s modules, less torch's own (its frames are not the model's code)."""
    found: set[tuple[str, str]] = set()
    names = {type(m).__module__ for m in model.modules()}
    for name in sorted(n for n in names if n.split(".")[0] != "torch"):
        module = sys.modules.get(name)
        for value in list(vars(module).values()) if module is not None else ():
            candidates = [value]
            if inspect.isclass(value) and value.__module__ == name:
                candidates = [getattr(a, "__func__", a) for a in vars(value).values()]
            for function in candidates:
                code = getattr(_unwrapped(function), "__code__", None)
                if code is not None:
                    found.add((code.co_filename, code.co_name))
    return found


def _unwrapped(value: object) -> object:
    """The function under a plain function's decorators; None for anything else, or a chain
    of wrappers that loops."""
    try:
        return inspect.unwrap(value) if inspect.isfunction(value) else None
    except ValueError:
        return None
