"""``ModelCase``: a model together with the example inputs it is profiled at."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelCase:
    """What to profile: a module, its positional inputs and keyword inputs.

    ``name`` labels the model in reports; ``note`` carries a remark from whoever built the
    case (for example a zoo loader that fell back from a missing ``.pt`` file to its YAML).
    """

    model: Any
    inputs: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    note: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.inputs, tuple):
            self.inputs = tuple(self.inputs) if isinstance(self.inputs, list) else (self.inputs,)
        self.kwargs = dict(self.kwargs or {})
