"""User-facing errors: each carries a one-line message that the CLI and the plugin print as is."""

from __future__ import annotations

import re
from pathlib import Path


class GraphBudgetError(Exception):
    """Base of every error caused by user input (exit code 2, never a traceback)."""


class UnknownModelError(GraphBudgetError):
    """A model name the zoo cannot resolve; the message lists the closest names."""


class TraceError(GraphBudgetError):
    """No tracing tier could capture the model; ``failures`` maps each tier to its reason."""

    def __init__(self, failures: dict[str, str]):
        self.failures = dict(failures)
        reasons = "; ".join(f"{tier}: {reason}" for tier, reason in self.failures.items())
        super().__init__(f"could not trace the model ({reasons})")


class ModelRunError(GraphBudgetError):
    """The model's own forward raised during the warm-up pass."""


def toml_error(path: Path | str, exc: Exception) -> str:
    """``file:line:column: message`` for a TOML syntax error (tomllib's own text otherwise)."""
    text = str(exc)
    found = re.search(r"\(at line (\d+), column (\d+)\)", text)
    if found:
        message = text[: found.start()].strip()
        return f"{path}:{found.group(1)}:{found.group(2)}: {message}"
    return f"{path}: {text}"
