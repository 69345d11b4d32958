"""``ModelCase``: a model together with the example inputs it is profiled at."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ModelCase:
    """What to profile: a module, its positional inputs and keyword inputs.

    ``inputs``: a tuple of positional inputs (a list is made one; anything else is the one
    input); ``None`` means none, as ``kwargs=None`` means no keyword inputs, so
    ``ModelCase(model, None, {"x": x})`` calls ``model(x=x)``.
    ``name`` labels the model in reports; ``note`` carries a remark from whoever built the
    case (for example a zoo loader that fell back from a missing ``.pt`` file to its YAML).
    ``zoo.resolve`` records how long loading took and the memory after it, for ``measure``.
    ``train_inputs``: the positional inputs of a training step (``mode="train"``) where the
    model takes others to train than to infer, as a torchvision detector takes its images and
    their targets; None: ``inputs``.
    """

    model: Any
    inputs: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    note: str | None = None
    load_seconds: float | None = None  # the zoo's build/load time (None: given, not loaded)
    load_rss_bytes: int | None = None  # the process's resident memory right after loading
    train_inputs: tuple | None = None

    def __post_init__(self) -> None:
        self.inputs = () if self.inputs is None else _as_tuple(self.inputs)
        if self.train_inputs is not None:
            self.train_inputs = _as_tuple(self.train_inputs)
        self.kwargs = dict(self.kwargs or {})

    def inputs_for(self, mode: str) -> tuple:
        """The positional inputs of a profile in ``mode`` ("eval" or "train")."""
        if mode == "train" and self.train_inputs is not None:
            return self.train_inputs
        return self.inputs


def _as_tuple(inputs: Any) -> tuple:
    """A tuple of positional inputs: a list is made one; anything else is the one input."""
    if isinstance(inputs, tuple):
        return inputs
    return tuple(inputs) if isinstance(inputs, list) else (inputs,)


def as_case(value: Any, name: str | None) -> ModelCase | None:
    """A fixture value as a ModelCase, when it is one or a ``(module, inputs)`` pair (named
    ``name``: None leaves the label to ``graph_budget(name=...)``, then the fixture's name)."""
    if isinstance(value, ModelCase):
        return value
    if isinstance(value, tuple) and len(value) == 2 and is_module(value[0]):
        return ModelCase(value[0], value[1], name=name)
    return None


def is_module(value: Any) -> bool:
    """``value`` is a ``torch.nn.Module`` (never imports torch: no torch, no module)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


@dataclass
class Found:
    """The models among a test's fixture values, each under a label such as ``model`` or
    ``models[1]``: the cases to profile, and the bare modules that cannot be profiled because
    nothing says what inputs they take."""

    cases: list[tuple[str, ModelCase]] = field(default_factory=list)
    bare: list[tuple[str, str]] = field(default_factory=list)  # (label, class name)
    stray: list[tuple[str, str]] = field(default_factory=list)
    """Bare modules inside a list of ModelCases: clearly meant as models, always an error."""


def find_models(values: dict[str, Any]) -> Found:
    """Every ModelCase, ``(module, inputs)`` pair and bare module a test received, including
    those inside a list, tuple or dict that a fixture returned."""
    found = Found()
    for argname, value in values.items():
        case = as_case(value, None)  # a pair has no name of its own: the marker's, else argname
        if case is not None:
            found.cases.append((argname, case))
        elif is_module(value):
            found.bare.append((argname, type(value).__name__))
        else:
            _find_in_container(argname, value, found)
    return found


def _find_in_container(argname: str, value: Any, found: Found) -> None:
    if isinstance(value, dict):
        keys = list(value)
    elif isinstance(value, (list, tuple)):
        # A case's name keeps its baseline entry when the list is reordered; else its index.
        names = [getattr(v, "name", None) if isinstance(v, ModelCase) else None for v in value]
        unique = None not in names and len(set(names)) == len(names)
        keys = names if unique else list(range(len(value)))
        value = dict(zip(keys, value, strict=True))
    else:
        return
    cases = [(f"{argname}[{key}]", as_case(value[key], f"{argname}[{key}]")) for key in keys]
    modules = [(f"{argname}[{key}]", type(v).__name__) for key, v in value.items() if is_module(v)]
    if any(case is not None for _, case in cases):
        found.cases += [(label, case) for label, case in cases if case is not None]
        found.stray += modules
    else:
        found.bare += modules


def rss_bytes() -> int | None:
    """The process's resident set size now, from ``/proc/self/statm``; None where there is no
    ``/proc`` (a peak from ``getrusage`` would be a different figure under the same name)."""
    import os

    try:
        resident = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return resident * os.sysconf("SC_PAGE_SIZE")
