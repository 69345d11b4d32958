"""Hold back what torch says while we load and trace a model.

A model that no tier can trace makes torch log its generated graph code (thousands of lines)
before our one-line summary of why; loading a damaged ``.pt2`` logs a traceback. That output
speaks to torch developers. ``held()`` keeps it (torch's log records, warnings, and whatever is
printed) and passes it on to the ``pytest_graphbudget.torch`` logger at DEBUG level, where it is
invisible unless asked for: ``graph-budget -v``, or pytest's ``--log-level=DEBUG``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator
from typing import Any

LOG = logging.getLogger("pytest_graphbudget.torch")


class _Keep(logging.Handler):
    """Keeps formatted records instead of writing them."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.lines.append(self.format(record))


def _torch_loggers() -> list[logging.Logger]:
    """torch's loggers that write somewhere: they do not propagate to the root logger, so
    their own handlers are the ones to divert. The loggers named ``torch`` are listed again
    only when logging made a new logger or a new handler (a placeholder that became a logger
    writes nowhere until a handler is made for it): reading a few hundred names took 0.4 ms
    a profile."""
    named = logging.root.manager.loggerDict
    key = (len(named), len(getattr(logging, "_handlerList", ())))
    if _TORCH_LOGGERS.get("key") != key:
        loggers = [
            logger
            for name, logger in list(named.items())
            if isinstance(logger, logging.Logger) and (name == "torch" or name.startswith("torch."))
        ]
        _TORCH_LOGGERS.update(key=key, loggers=loggers)
    return [logger for logger in _TORCH_LOGGERS["loggers"] if logger.handlers]


_TORCH_LOGGERS: dict[str, Any] = {}


@contextlib.contextmanager
def held(what: str) -> Iterator[None]:
    """Run the block with torch's logs, warnings and prints held back; log them at DEBUG
    (headed by ``what``) when the block ends, whether it succeeded or raised."""
    keep = _Keep()
    diverted = [(logger, logger.handlers) for logger in _torch_loggers()]
    printed = io.StringIO()
    caught: list[warnings.WarningMessage] = []
    try:
        for logger, _ in diverted:
            logger.handlers = [keep]
        with (
            warnings.catch_warnings(record=True) as caught,
            contextlib.redirect_stdout(printed),
            contextlib.redirect_stderr(printed),
        ):
            warnings.simplefilter("always")
            yield
    finally:
        for logger, handlers in diverted:
            logger.handlers = handlers
        parts = [*keep.lines, printed.getvalue().rstrip()]
        parts += [
            warnings.formatwarning(w.message, w.category, w.filename, w.lineno).rstrip()
            for w in caught
        ]
        text = "\n".join(part for part in parts if part)
        if text:
            LOG.debug("torch's output while %s:\n%s", what, text)


@contextlib.contextmanager
def verbose_to(stream: object) -> Iterator[None]:
    """Show what ``held`` kept (and our other debug messages) on ``stream`` for the block."""
    logger = logging.getLogger("pytest_graphbudget")
    handler = logging.StreamHandler(stream)  # type: ignore[arg-type]
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
