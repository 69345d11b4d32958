"""Where the command line's text goes: progress and notes to stderr, the result to stdout or a
file, so that stdout carries only the result (``--format json`` output stays parseable)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from pytest_graphbudget.errors import GraphBudgetError

PROG = "graph-budget"
FORMATS = ("table", "json", "csv", "markdown")
SUFFIX_FORMATS = {".json": "json", ".csv": "csv", ".md": "markdown", ".markdown": "markdown"}

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class Console:
    """Where messages go: progress and notes to stderr (unless quiet), results to stdout."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.noted: set[str] = set()  # a sweep's points repeat their notes: each is said once

    def progress(self, message: str) -> None:
        if not self.quiet:
            print(f"{PROG}: {message}", file=sys.stderr, flush=True)

    def note(self, message: str) -> None:
        if message not in self.noted:
            self.noted.add(message)
            print(f"{PROG}: note: {message}", file=sys.stderr, flush=True)

    def failure(self, message: str) -> None:
        print(f"{PROG}: FAILED: {message}", file=sys.stderr, flush=True)

    def error(self, message: str) -> None:
        print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)

    def emit(self, text: str, output: str | None) -> None:
        """Write the result to ``output`` (a file, ``-`` for stdout) or to stdout."""
        if output and output != "-":
            path = Path(output)
            try:
                path.write_text(text, encoding="utf-8")
            except OSError as exc:
                raise GraphBudgetError(f"cannot write {output}: {exc.strerror or exc}") from None
            self.progress(f"wrote {output}")
        else:
            sys.stdout.write(text)
            sys.stdout.flush()


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Model libraries print while building models; keep stdout for the result."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def check_writable(output: str | None, option: str = "--output") -> None:
    """Fail before any profiling when an output file cannot be created."""
    if output is None or output == "-":
        return
    if not output.strip():  # -o "": an unset variable in a script, not stdout
        raise GraphBudgetError(f"{option}: the path is empty; give a file name, or - for stdout")
    from pytest_graphbudget.reports import names_a_folder

    if names_a_folder(output):
        raise GraphBudgetError(f"{option} {output} names a folder: give a file name in it")
    parent = Path(output).expanduser().resolve().parent
    if not parent.is_dir():
        raise GraphBudgetError(f"{option} {output}: directory {parent} does not exist")
    if Path(output).is_dir():
        raise GraphBudgetError(f"{option} {output} is a directory")


def refuse_reading_into(
    outputs: Mapping[str, str | None], inputs: Iterable[str | Path], here: Path | None = None
) -> None:
    """Fail before anything runs when an output is one of the files the command reads (a
    budget file, a shard's report, the history): ``check --json budgets/a.toml`` had replaced
    the budget with its own report, ``history h.jsonl --html h.jsonl`` the history."""
    base = here or Path.cwd()
    read = {(base / p).resolve() for p in inputs if p and (base / p).is_file()}
    for option, path in outputs.items():
        if path and path != "-" and (base / path).resolve() in read:
            raise GraphBudgetError(
                f"{option} {path} is a file this command reads: writing it would replace "
                "it; give the report another name"
            )


def format_of(args: argparse.Namespace) -> str:
    """``--format``, else the output file's suffix, else ``table``. A ``--format`` the suffix
    contradicts (``--format csv -o out.json``) is refused: the file would read as the other
    format, and a later ``compare`` of it fails far from the mistake."""
    output = getattr(args, "output", None)
    if args.format:
        implied = SUFFIX_FORMATS.get(Path(output).suffix.lower()) if output else None
        if implied and implied != args.format:
            raise GraphBudgetError(
                f"--format {args.format} with -o {output}, whose name says {implied}: give "
                f"the file a name for {args.format}, or leave --format out"
            )
        return args.format
    if output and output != "-":
        return SUFFIX_FORMATS.get(Path(output).suffix.lower(), "table")
    return "table"
