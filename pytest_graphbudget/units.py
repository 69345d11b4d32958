"""Units: parse budget values such as ``"22G"``, ``"500MB"``, ``"3ms"``, ``"2%"``; format figures.

Counts and bytes use decimal prefixes (k, M, G, T, P); bytes accept binary ones (KiB, MiB,
GiB, TiB, PiB) when the user writes them. Parsing is strict: anything else is a ``UnitError`` whose
message lists the accepted forms, so that a typo in a budget never passes silently.
"""

from __future__ import annotations

import math
import re

from pytest_graphbudget.errors import GraphBudgetError

DECIMAL = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
# micro: the micro sign (U+00B5) and the Greek mu (U+03BC), which keyboards give alike
SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9, "min": 60.0}

FORMS = {
    "count": 'a number or a string with a decimal prefix: 2.2e10, "22G", "22 GFLOPs", "110M"',
    "bytes": 'a number of bytes or a string: 5e8, "500MB", "0.5GiB", "120 MiB"',
    "seconds": 'a number of seconds or a string: 0.003, "3ms", "250us", "1.5s"',
    "ratio": 'a fraction or a percentage: 0.02, "2%"',
}

_NUMBER = r"(?P<number>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
_COUNT = re.compile(
    rf"^{_NUMBER}\s*(?P<prefix>[kKMGTP]?)\s*(?P<unit>FLOPs?(?:/B|/byte)?|MACs?|flops?(?:/B|/byte)?|macs?|params?|ops?)?$"
)
_BYTES = re.compile(rf"^{_NUMBER}\s*(?P<prefix>[kKMGTP]i?|)\s*(?P<unit>B|bytes?)?$")
_SECONDS = re.compile(rf"^{_NUMBER}\s*(?P<unit>s|ms|us|µs|μs|ns|min)?$")
_RATIO = re.compile(rf"^{_NUMBER}\s*(?P<unit>%)?$")


class UnitError(GraphBudgetError):
    """A value that is not of the accepted forms; ``kind`` says which forms apply."""

    def __init__(self, value: object, kind: str, where: str = "", hint: bool = True):
        self.value, self.kind = value, kind
        place = f"{where}: " if where else ""
        if _negative(value):  # read, but no figure is below 0
            super().__init__(f"{place}{shown(value)} is negative: a figure or limit is >= 0")
            return
        fix = recased(value, kind) if hint else None
        hint_text = f" (did you mean {fix!r}?)" if fix else ""
        super().__init__(f"{place}cannot read {shown(value)}{hint_text}; expected {FORMS[kind]}")


def _negative(value: object) -> bool:
    """Whether ``value`` reads as a number below 0 (``-1``, ``"-5M"``)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value < 0
    found = re.match(rf"\s*{_NUMBER}", value) if isinstance(value, str) else None
    return found is not None and float(found["number"]) < 0  # "-0:" is unreadable, not below 0


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` for a message, cut short: an integer of 400 digits is legal TOML."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = (
        f"{len(text.lstrip('-'))} digits" if isinstance(value, int) else f"{len(text)} characters"
    )
    return f"{text[: limit // 2]}... ({size})"


def recased(value: object, kind: str) -> str | None:
    """The value with its unit's letters in the case that reads (``"40m"`` -> ``"40M"``,
    ``"2gib"`` -> ``"2GiB"``, ``"3MS"`` -> ``"3ms"``), or None when no re-casing reads."""
    if not isinstance(value, str) or not re.search(r"[A-Za-z]", value):
        return None
    text = value.strip()
    prefix_up = re.sub(r"(?<=[\d\s.])([a-zA-Z])", lambda m: m.group(1).upper(), text, count=1)

    def words(t: str) -> str:  # "GFLOPS", "gflops": FLOPs as written in the forms
        return re.sub(r"(?i)(flop|mac)s$", lambda m: m.group(1).upper() + "s", t)

    candidates = (
        text.upper(),
        text.upper().replace("I", "i"),
        text.lower(),
        prefix_up.replace("K", "k", 1),
        prefix_up,
        words(text),
        words(prefix_up),
    )
    for candidate in candidates:
        if candidate == text:
            continue
        try:
            parse(candidate, kind, hint=False)
        except UnitError:
            continue
        return candidate
    return None


def parse(
    value: object, kind: str, where: str = "", hint: bool = True, words: tuple[str, ...] = ()
) -> float:
    """Parse ``value`` as a ``kind`` ("count", "bytes", "seconds", "ratio") into a float;
    ``hint``: the error suggests the value with its unit re-cased, when that reads. ``words``:
    the count's unit words that fit (``FLOPs``, ``ops``), the first the one to write; another
    (``"70k FLOPs"`` for MACs: half of what it says) is refused."""
    if isinstance(value, bool):
        raise UnitError(value, kind, where)
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond any float (legal TOML): no figure is that big
            raise UnitError(value, kind, where) from None
        if not math.isfinite(number) or number < 0:  # an infinite limit would never fail
            raise UnitError(value, kind, where)
        return number
    if not isinstance(value, str):
        raise UnitError(value, kind, where)
    text = value.strip()
    if kind == "count":
        match = _COUNT.match(text)
        scale = DECIMAL[match["prefix"]] if match else 0
    elif kind == "bytes":
        match = _BYTES.match(text)
        if match:
            prefix = match["prefix"]
            scale = BINARY[prefix.upper()[0] + "i"] if prefix.endswith("i") else DECIMAL[prefix]
    elif kind == "seconds":
        match = _SECONDS.match(text)
        scale = SECONDS[match["unit"] or "s"] if match else 0
    elif kind == "ratio":
        match = _RATIO.match(text)
        scale = 0.01 if match and match["unit"] else 1
    else:
        raise ValueError(f"unknown unit kind {kind!r}")
    if not match:
        raise UnitError(value, kind, where, hint)
    if kind == "count" and words and match["unit"]:
        written = match["unit"]
        if written.lower() not in {w.lower() for w in words}:
            place = f"{where}: " if where else ""
            pair = {written.lower().rstrip("s"), words[0].lower().rstrip("s")} == {"flop", "mac"}
            raise GraphBudgetError(
                f"{place}{shown(value)} is in {written}, and this limit counts {words[0]}: "
                f"write it in {words[0]}" + (" (1 MAC is 2 FLOPs)" if pair else "")
            )
    number = float(match["number"]) * scale
    if not math.isfinite(number) or number < 0:
        raise UnitError(value, kind, where, hint)
    return number


def share(
    value: object, key: str, where: str = "", option: bool = False, growth: bool = True
) -> float:
    """A share (a tolerance, a headroom, a growth, a bottleneck share) as a fraction.

    Every share the user writes goes through here. A bare number above 1 is refused with its
    fix, as is ``"2"``: ``tolerance = 2`` reads as 200%, so a model that grew by half would
    pass. So is a bare 1 for a ``growth`` (1%, as the default tolerance, or 100%? it let +53%
    by); a bottleneck share of 1 is the whole, as its other values are fractions. ``key``
    names the setting as written (``tolerance``, ``--max-growth`` with ``option``), so that
    the message shows the user's own line and its right spellings.
    """
    number = parse(value, "ratio", f"{key} in {where}" if where and not option else where)
    percent = isinstance(value, str) and value.strip().endswith("%")
    if percent or number < 1 or (number == 1 and not growth):
        return number
    digits, fraction = f"{number:g}", f"{number / 100:g}"
    if option:
        written = f"{key} {value}"
        fixes = f"{key} {digits}% or {key} {fraction}"
        whole = f" Write {key} 100% for 100%." if number == 1 else ""
    else:
        shown = f'"{value}"' if isinstance(value, str) else f"{value}"
        written, fixes = f"{key} = {shown}", f'"{digits}%" or {fraction}'
        whole = ' Write "100%" for 100%.' if number == 1 else ""
    place = f"{key} in {where}: " if where and not option else ""
    raise GraphBudgetError(
        f"{place}{written} would be {number * 100:g}%: did you mean {fixes}?{whole}"
    )


def format_as(value: float, kind: str) -> str:
    """A value of a ``kind`` (as ``parse`` takes it) written so that ``parse`` reads it back."""
    writers = {
        "count": format_count,
        "bytes": format_bytes,
        "seconds": format_seconds,
        "ratio": format_ratio,
    }
    if kind not in writers:
        raise ValueError(f"unknown unit kind {kind!r}")
    return writers[kind](value)


def format_count(value: float, unit: str = "") -> str:
    """``3642974696`` -> ``"3.64G"``: three significant digits, decimal prefix."""
    return _format(value, 1000, ["", "k", "M", "G", "T", "P"]) + unit


def format_bytes(value: float) -> str:
    """``46796608`` -> ``"46.8MB"``."""
    return _format(value, 1000, ["", "k", "M", "G", "T", "P"]) + "B"


def format_exact(value: float, key: str) -> str:
    """Every digit of figure ``key`` (``peak_memory_bytes``, ``est_latency_s``), in its unit:
    where rounding would show a figure equal to its limit (``17,152B`` for 17.2kB; the bare
    ``1.7152e-07`` of a latency had read as no unit at all)."""
    if key.endswith("_s"):
        units = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))
        unit, scale = next(((u, s) for u, s in units if abs(value) >= s), units[-1])
        return f"{value / scale:,.6g}{unit}"
    text = f"{int(value):,}" if float(value).is_integer() else f"{value:,.6g}"
    return text + ("B" if key.endswith("_bytes") else "")


def format_share(value: float) -> str:
    """``format_ratio`` of a share below 1 that never reads 100% (99.95% had, on a pass)."""
    text = format_ratio(value)
    return f"{math.floor(value * 1e4) / 100:g}%" if value < 1 and text == "100.0%" else text


def format_seconds(value: float) -> str:
    """``0.00312`` -> ``"3.12ms"``."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if abs(value) >= scale or unit == "ns":
            return f"{_digits(value / scale)}{unit}"
    return f"{value}s"


def format_ratio(value: float) -> str:
    """``0.0412`` -> ``"4.1%"``; small ratios keep two significant digits (``"0.0061%"``), huge
    ones three (``"3.2e+07%"``), and a ratio whose percentage is beyond a float is written as
    the fraction itself (``"1e+307"``): whatever is printed reads back with ``parse``."""
    percent = value * 100
    if not math.isfinite(percent) and math.isfinite(value):
        return repr(float(value))
    if percent and abs(percent) < 0.1:
        return f"{percent:.2g}%"
    if abs(percent) >= 1e6:
        return f"{percent:.3g}%"
    return f"{percent:.1f}%"


def _format(value: float, base: int, prefixes: list[str]) -> str:
    magnitude = 0
    while abs(value) >= base and magnitude < len(prefixes) - 1:
        value /= base
        magnitude += 1
    return f"{_digits(value)}{prefixes[magnitude]}"


def _digits(value: float) -> str:
    if value == int(value) and abs(value) < 1000:
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"
