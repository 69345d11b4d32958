"""Readable names for graph nodes and modules: Dynamo's mangled names back to module paths.

Dynamo and ``torch.export`` name what they capture after the Python expression that reached
it, with every character that is not a letter or a digit turned into ``_``:
``L['self'].model[0].conv`` becomes ``L__self___model_0_conv``, a parameter placeholder of an
exported program becomes ``p_model_encoder_layer_0_attention_self_query_weight``. Reports show
module paths instead (``model.0.conv``), following the rules users of ``profile_graph.py``
know:

1. strip the prefixes (``getattr_``, ``L__<root>___``, ``g__<root>___``, ``L_self_``);
2. a number between underscores is a path segment: ``_23_`` -> ``.23.``;
3. a repeated root collapses: ``model.model.X`` -> ``model.X``;
4. a number behind three or more underscores is an index: ``_____0___`` -> ``[0]``;
5. a name longer than the column keeps its start and its end: ``start...end``.

Mangling loses information (``word_embeddings`` and ``word.embeddings`` mangle alike), so when
the model's module paths are known (``Profile.modules``), a name that mangles to one of them is
given that path exactly; the rules above are the fallback. A name that carries no Dynamo prefix
is left as it is: ``layer1.0.conv1`` and a user's ``conv_1`` stay unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Dynamo's roots, longest first: `getattr_` wraps any of them, any number of times.
_GETATTR = re.compile(r"^(?:getattr_)+")
# L_self_modules_layer1_modules_0_modules_conv1_parameters_weight_ (Dynamo since torch 2.5)
_NEW_STYLE = re.compile(r"^[Ll]_(?:self|model)_(?:modules|parameters|buffers)_")
_OLD_STYLE = re.compile(r"^[LlGg]__(?P<root>[A-Za-z0-9]+?(?:_[A-Za-z0-9]+?)*)___(?=[A-Za-z0-9])")
_PLACEHOLDER = re.compile(r"^(?:p|b|c)_")  # export's parameter, buffer and constant inputs
_NEW_STYLE_PARTS = re.compile(r"_(?:modules|parameters|buffers)_")
_TOKEN = re.compile(r"(_*)([A-Za-z0-9]+)")
_WORDS_OF_WRAPPER = ("model", "self", "module")


def mangle(path: str) -> str:
    """The form Dynamo gives a path: every character but letters and digits becomes ``_``."""
    return re.sub(r"[^0-9A-Za-z]", "_", path)


class Abbreviator:
    """Abbreviates names against a model's known module paths (see the module docstring)."""

    def __init__(self, known: Iterable[str] = ()):
        self.known = {p for p in known if p}
        self._by_mangled: dict[str, str] = {}
        for path in sorted(self.known, key=lambda p: (p.count("."), p)):
            self._by_mangled.setdefault(mangle(path), path)
        # Longest first, for parameter names: `<module>_<param name>`.
        self._prefixes = sorted(self._by_mangled, key=len, reverse=True)

    def __call__(self, name: str, width: int | None = None) -> str:
        return truncate(self.abbreviate(name), width) if width else self.abbreviate(name)

    def abbreviate(self, name: str) -> str:
        """A module path for a Dynamo name; any other name unchanged."""
        if not name or name in self.known:
            return name
        rest, new_style = _strip_prefix(name)
        if rest is None:
            return name
        if new_style:
            rest = _NEW_STYLE_PARTS.sub(".", rest).rstrip("_")
            found = self._lookup(mangle(rest))
            return found or _collapse_root(rest)
        return self._lookup(rest) or rules(rest)

    def placeholder(self, name: str) -> str:
        """An exported program's input placeholder (``p_model_conv1_weight``) as the path of the
        parameter, buffer or constant it stands for (``conv1.weight``); else ``name``."""
        if not _PLACEHOLDER.match(name):
            return self.abbreviate(name)
        rest = name[2:]
        return self._lookup(rest, parameters=True) or name

    def _lookup(self, mangled: str, *, parameters: bool = False) -> str | None:
        """The known path whose mangled form is ``mangled``, with or without a wrapper's root
        (``model_``, ``self_``) in front; with ``parameters``, a known module followed by the
        parameter's own name."""
        candidates = [mangled]
        for word in _WORDS_OF_WRAPPER:
            if mangled.startswith(word + "_"):
                candidates.append(mangled[len(word) + 1 :])
        for candidate in candidates:
            if candidate in self._by_mangled:
                return self._by_mangled[candidate]
        if parameters:
            for candidate in candidates:
                for prefix in self._prefixes:
                    if candidate.startswith(prefix + "_"):
                        return f"{self._by_mangled[prefix]}.{candidate[len(prefix) + 1 :]}"
            for candidate in candidates:  # a parameter of the root module: `p_model_weight`
                if candidate and "_" not in candidate.strip("_") and self.known:
                    return candidate
        return None


def abbreviate(name: str, known: Iterable[str] = (), width: int | None = None) -> str:
    """``g__model___model_0_conv`` -> ``model.0.conv``; see the module docstring."""
    return Abbreviator(known)(name, width)


def _strip_prefix(name: str) -> tuple[str | None, bool]:
    """The name without Dynamo's prefixes, and whether it is the new (``L_self_``) style;
    ``None`` when the name has no Dynamo prefix at all."""
    rest = _GETATTR.sub("", name)
    stripped = rest != name
    match = _NEW_STYLE.match(rest)
    if match:
        return rest[match.end() :], True
    match = _OLD_STYLE.match(rest)
    if match:
        return rest[match.end() :], False
    return (rest, False) if stripped else (None, False)


def rules(mangled: str) -> str:
    """The seed's abbreviation rules on a name whose prefixes are gone:
    ``model_23_cv3_0___0_____0___conv`` -> ``model.23.cv3.0[0][0].conv``."""
    tokens = _TOKEN.findall(mangled)
    while len(tokens) > 1 and tokens[0][1] == tokens[1][1] and not tokens[0][1].isdigit():
        tokens = tokens[1:]  # model_model_0 -> model_0 (rule 3)
    parts: list[str] = []
    previous_numeric = False
    for underscores, token in tokens:
        numeric = token.isdigit()
        run = len(underscores)
        if not parts:
            parts.append(token if not (numeric and run >= 3) else f"[{token}]")
        elif numeric and run >= 3:
            parts.append(f"[{token}]")
        elif numeric or previous_numeric or run >= 2:
            parts.append(f".{token}")
        else:  # a single underscore between two words may be the name's own: keep it
            parts.append(f"_{token}")
        previous_numeric = numeric
    return _collapse_root("".join(parts)) if parts else mangled


def _collapse_root(path: str) -> str:
    """``model.model.0.conv`` -> ``model.0.conv`` (and the same for any repeated first part)."""
    head, sep, tail = path.partition(".")
    while sep and (tail == head or tail.startswith((head + ".", head + "["))):
        path = tail
        head, sep, tail = path.partition(".")
    return path


def truncate(name: str, width: int | None) -> str:
    """Shorten ``name`` to ``width`` characters as ``start...end`` (the end says most)."""
    if width is None or len(name) <= width:
        return name
    if width <= 5:
        return name[:width]
    head = max((width - 3) // 3, 1)
    tail = width - 3 - head
    return f"{name[:head]}...{name[-tail:]}"
