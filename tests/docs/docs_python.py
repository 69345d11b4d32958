"""A Python block's results: ``print(x)  # VALUE`` says what the line prints, and is checked.

A line of a Python block that calls ``print`` and ends with a comment shows its result in that
comment (``print(prof.macs)  # 131072``). While the block runs, ``print`` in the document's
module records what each such line printed; the comment must match it as a console block's
shown line matches (``docs_output``: timings and paths masked, ``...`` leaves part out), and
``make docs`` rewrites a comment that no longer does. Comments on other lines are prose.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import re
import sys
import tokenize

from docs_output import lines_of, same

PRINT = re.compile(r"^\s*print\(")


def result_comments(code: str) -> dict[int, tuple[int, str]]:
    """The trailing comment of each ``print(...)`` line of ``code``: its column and text, by
    1-based line."""
    lines = code.splitlines()
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type != tokenize.COMMENT:
            continue
        row, column = token.start
        before = lines[row - 1][:column]
        if before.strip() and PRINT.match(before):
            found[row] = (column, token.string[1:].strip())
    return found


@contextlib.contextmanager
def recording(namespace: dict, filename: str):
    """Install a ``print`` in ``namespace`` that also records, by line, what each call made
    from ``filename`` printed; yields the record (line to the text of its last call)."""
    record: dict[int, str] = {}

    def print_(*args, sep=" ", end="\n", file=None, flush=False):
        frame = sys._getframe(1)
        if file is None and frame.f_code.co_filename == filename:
            text = io.StringIO()
            builtins.print(*args, sep=sep, end=end, file=text)
            record[frame.f_lineno] = text.getvalue()
        builtins.print(*args, sep=sep, end=end, file=file, flush=flush)

    saved = namespace.get("print", None)
    namespace["print"] = print_
    try:
        yield record
    finally:
        if saved is None:
            namespace.pop("print", None)
        else:
            namespace["print"] = saved


def with_results(code: str, first_line: int, record: dict[int, str]) -> tuple[str, list[str]]:
    """``code`` with each result comment as the line printed it (kept where it still matches),
    and what cannot be shown in a comment. ``first_line``: the line of the document that
    ``code``'s line 1 was compiled as."""
    lines = code.splitlines(keepends=True)
    problems = []
    for row, (column, comment) in result_comments(code).items():
        where = row + first_line
        printed = record.get(where)
        if printed is None:
            problems.append(f"line {where}: {lines[row - 1].strip()}\nprinted nothing")
            continue
        printed = printed.rstrip("\n")
        if "\n" in printed:
            problems.append(
                f"line {where}: prints {printed.count(chr(10)) + 1} lines, more than a comment "
                f"shows: show them in a console block\n{printed}"
            )
            continue
        shown, actual = lines_of([comment])[0], lines_of([printed])[0]
        if not same(shown, actual):
            text = lines[row - 1]
            lines[row - 1] = text[:column] + "# " + printed + ("\n" if text.endswith("\n") else "")
    return "".join(lines), problems
