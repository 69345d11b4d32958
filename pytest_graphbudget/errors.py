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


def one_line(exc: BaseException, limit: int = 300, *, typed: bool = False) -> str:
    """An exception as one short line, for messages that must stay one line: the first line
    of its message, cut to ``limit`` characters, or its type's name when it has none.
    ``typed`` puts the type's name first (``ValueError: bad shape``), for exceptions that are
    not ours, whose type says as much as their text."""
    lines = str(exc).strip().splitlines()
    line = lines[0].strip() if lines else ""
    if len(line) > limit:
        line = line[: limit - 3] + "..."
    name = type(exc).__name__
    if typed:
        return f"{name}: {line}" if line else name
    return line or name


def toml_position(exc: Exception) -> tuple[str, int, int] | None:
    """A TOML syntax error's message without its position, and the line and column it names;
    None when tomllib's text names no position."""
    text = str(exc)
    found = re.search(r"\(at line (\d+), column (\d+)\)", text)
    if not found:
        return None
    return text[: found.start()].strip(), int(found.group(1)), int(found.group(2))


def toml_error(path: Path | str, exc: Exception) -> str:
    """``file:line:column: message`` for a TOML syntax error (tomllib's own text otherwise)."""
    position = toml_position(exc)
    if position:
        message, line, column = position
        return f"{path}:{line}:{column}: {message}"
    return f"{path}: {exc}"


def closest(key: str, valid: list[str] | tuple[str, ...]) -> str:
    """' (did you mean X?)' for a misspelt key, or ''. Case and ``-``/``_`` are folded first:
    ``FLOPS_MAX`` and ``flops-max`` name ``flops_max``, which the raw spelling is too far from."""
    import difflib

    folded = {_fold(v): v for v in valid}
    match = difflib.get_close_matches(_fold(key), list(folded), n=1, cutoff=0.5)
    return f" (did you mean {folded[match[0]]!r}?)" if match else ""


def _fold(key: str) -> str:
    return key.lower().replace("-", "_")
