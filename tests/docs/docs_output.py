"""Printed output as the docs show it: normalised for comparison, excerpted where they elide.

The docs show output as it was printed once, timings included. A comparison that read the
timings would fail on every run, so both sides are normalised first: what varies from run to
run or machine to machine (a wall-clock time, a temporary path, a date, a commit, the Python
version) is masked, and runs of spaces count as one, since a masked value may change a
column's width. Everything else, the figures above all, must match. Where nothing in a run of
lines was masked, its spaces count too: a table whose column widened must be shown widened.

Shown output may leave lines out: a line ``...`` stands for any number of lines (the shown
lines around it are each a contiguous run of the real output, found by likeness), and ``...``
within a line stands for the part of the printed line it leaves out. Regenerating keeps a
shown line whenever it still matches, so ``make docs`` rewrites only what changed and never
churns timings.
"""

from __future__ import annotations

import difflib
import re

ELLIPSIS = "..."

# (pattern, replacement): what varies between two runs of the same code.
MASKS = [
    # A duration measured here: "profiled resnet18 in 2.8s", "trace fx in 2.72s", pytest's
    # "3 passed in 3.81s" (est. latency, "3.70ms on generic", is computed and stays).
    (re.compile(r"\bin \d+(?:\.\d+)?(?:s|ms|us)\b"), "in <time>"),
    (re.compile(r'\btime="\d+(?:\.\d+)?"'), 'time="<time>"'),
    # pytest's banners are padded with "=" to the terminal's width around a line that a time
    # makes longer or shorter: "===== 2 failed, 3 passed in 3.81s =====".
    (re.compile(r"^=+ (.*?) =+$"), r"== \1 =="),
    # Dates and times: "2026-11-26T20:00:00Z".
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?"), "<date>"),
    # Commits: "1a2b3c4", "main@1a2b3c4", "1a2b3c4..." (hex with a digit and a letter).
    (re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"), "<commit>"),
    # A build's local tag: the pinned torch is "2.14.1" from PyPI, "2.14.1+cu130" from its index.
    (re.compile(r"(\d+\.\d+\.\d+)\+(?:cu|cpu|rocm)[\w.]*"), r"\1"),
    # The Python that ran: its version, and where it lives.
    (re.compile(r'"python": "3\.\d+\.\d+"'), '"python": "<python>"'),
    (re.compile(r"(?<![\w.])/(?:tmp|private/var|var/folders)/[^\s:'\"]*"), "<path>"),
]
SECONDS_COLUMN = "seconds"  # list --check's timing column


def normalize(line: str) -> str:
    for pattern, replacement in MASKS:
        line = pattern.sub(replacement, line)
    return " ".join(line.split())


def mask_columns(lines: list[str]) -> list[str]:
    """Blank the values under a ``seconds`` header, as the masks do inline timings."""
    out, span = [], None
    for line in lines:
        if SECONDS_COLUMN in line.split():
            start = line.index(SECONDS_COLUMN)
            span = (start, start + len(SECONDS_COLUMN))
        elif not line.strip():
            span = None
        elif span and not set(line.strip()) <= {"-", " "}:
            cell = line[: span[1]].rsplit(" ", 1)
            if len(cell) == 2 and re.fullmatch(r"\d+(?:\.\d+)?", cell[1]):
                line = cell[0] + " <time>" + line[span[1] :]
        out.append(line)
    return out


Line = tuple[str, str]  # as printed, and normalised


def lines_of(text: list[str]) -> list[Line]:
    return [(raw, normalize(masked)) for raw, masked in zip(text, mask_columns(text), strict=True)]


def masked(line: Line) -> bool:
    """Whether the masks changed the line: a value in it may change its width run to run."""
    return line[1] != " ".join(line[0].split())


def same(shown: Line, actual: Line) -> bool:
    """Whether a shown line stands for an actual one: equal once normalised, or the same with
    ``...`` standing for what the shown line leaves out (its end, or a middle part)."""
    a, b = shown[1], actual[1]
    if a == b:
        return True
    pieces = [piece.strip() for piece in a.split(ELLIPSIS)]
    if len(pieces) < 2 or not b.startswith(pieces[0]) or not b.endswith(pieces[-1]):
        return False
    at = len(pieces[0])
    for piece in pieces[1:-1]:
        at = b.find(piece, at)
        if at < 0:
            return False
        at += len(piece)
    return at <= len(b) - len(pieces[-1])


def _score(shown: Line, actual: Line) -> float:
    if same(shown, actual):
        return 2.0
    return difflib.SequenceMatcher(None, shown[1], actual[1], autojunk=False).ratio()


def _best_start(segment: list[Line], actual: list[Line], lo: int) -> int:
    """Where in ``actual[lo:]`` the segment's first lines fit best (the earliest on a tie)."""
    head = segment[:3]
    best, where = -1.0, lo
    for start in range(lo, len(actual)):
        window = actual[start : start + len(head)]
        score = sum(_score(s, a) for s, a in zip(head, window, strict=False))
        if score > best + 1e-9:
            best, where = score, start
    return where


def _best_end(segment: list[Line], actual: list[Line], start: int) -> int:
    """The last line of the segment's run: the best match of its last line near where its
    length puts it."""
    expected = start + len(segment) - 1
    if len(segment) == 1:
        return start
    hi = min(len(actual), expected + len(segment) + 10)
    return max(
        range(start + 1, hi),
        key=lambda i: (_score(segment[-1], actual[i]), -abs(i - expected)),
        default=min(expected, len(actual) - 1),
    )


def _split(shown: list[Line]) -> list[list[Line] | str]:
    """Shown lines as runs of lines, and the ``...`` lines that leave lines out between them."""
    parts: list[list[Line] | str] = []
    for line in shown:
        if line[0].strip() == ELLIPSIS:
            if not (parts and isinstance(parts[-1], str)):
                parts.append(line[0])
        elif parts and not isinstance(parts[-1], str):
            parts[-1].append(line)
        else:
            parts.append([line])
    return parts


def excerpt(shown: list[str], actual: list[str], floating: bool = False) -> list[str]:
    """``actual`` cut the way ``shown`` is cut, each shown line kept where it still matches.

    ``floating``: the shown lines are a run from the middle of the output, as if an ``...``
    stood before and after them."""
    printed = lines_of(actual)
    parts = _split(lines_of(shown))
    if floating:
        parts = ["", *parts, ""]
    out: list[str] = []
    pos = 0
    for index, part in enumerate(parts):
        if isinstance(part, str):
            if not floating or index not in (0, len(parts) - 1):
                out.append(part)
            continue
        gap_before = index > 0 and isinstance(parts[index - 1], str)
        gap_after = index + 1 < len(parts) and isinstance(parts[index + 1], str)
        start = _best_start(part, printed, pos) if gap_before else pos
        end = _best_end(part, printed, start) if gap_after else len(printed) - 1
        out.extend(_keep_shown(part, printed[start : end + 1]))
        pos = end + 1
    return out


def _keep_shown(shown: list[Line], actual: list[Line]) -> list[str]:
    """``actual``, with each line that a shown line stands for written as shown.

    Where no line of the run was masked, a shown line must match as printed, spaces included
    (a line the shown one shortens with ``...`` aside)."""
    strict = not any(masked(line) for line in (*shown, *actual))
    matcher = difflib.SequenceMatcher(
        None, [s[1] for s in shown], [a[1] for a in actual], autojunk=False
    )
    out = [a[0] for a in actual]
    for _tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for offset in range(min(i2 - i1, j2 - j1)):
            s, a = shown[i1 + offset], actual[j1 + offset]
            if strict and ELLIPSIS not in s[0] and s[0].rstrip() != a[0]:
                continue
            if same(s, a):
                out[j1 + offset] = s[0]
    return out


def regenerate(shown: str, actual: str, floating: bool = False) -> str:
    """The block as it should read: ``shown`` wherever it still matches ``actual``."""
    lines = [line.rstrip() for line in actual.rstrip("\n").splitlines()]
    kept = excerpt(shown.rstrip("\n").splitlines(), lines, floating)
    return "\n".join(kept) + "\n"


def diff(shown: str, regenerated: str, where: str) -> str:
    return "".join(
        difflib.unified_diff(
            shown.splitlines(keepends=True),
            regenerated.splitlines(keepends=True),
            f"{where} (as shown)",
            f"{where} (as printed now)",
        )
    )
