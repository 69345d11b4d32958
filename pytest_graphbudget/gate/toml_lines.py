"""Where each key of a TOML text is: its line, so that a problem with a value can name it.

tomllib gives values, not positions; ``key_lines`` reads the text line by line instead.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line of every table header and key of a TOML text, by key path.

    Each line is read alone (a header, or ``key = value``), so that dotted and quoted keys
    are understood as TOML understands them; lines that do not stand alone are skipped.
    """
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            parsed = tomllib.loads(stripped)
        except tomllib.TOMLDecodeError:
            continue
        found = list(paths(parsed))
        if stripped.startswith("["):
            table = max(found, key=len, default=())
            for path in found:
                lines.setdefault(path, number)
        else:
            for path in found:
                lines.setdefault(table + path, number)
    return lines


def paths(data: Mapping[str, Any]) -> Iterator[tuple[str, ...]]:
    """Every key path of nested tables: ``{"a": {"b": 1}}`` -> ``("a",)``, ``("a", "b")``."""
    for key, value in data.items():
        yield (key,)
        if isinstance(value, Mapping):
            for path in paths(value):
                yield (key, *path)
