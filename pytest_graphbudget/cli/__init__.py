"""``graph-budget``: the command line over the engine, the zoo and the JSON the plugin uses.

    graph-budget profile MODEL      summary, per-layer table, top layers, op types, bottlenecks
    graph-budget explore MODEL      every graph node with its subgraph, kind, FLOPs, bottleneck
    graph-budget compare A B        two models or two saved JSON profiles side by side
    graph-budget list               the model zoo by family (--check traces each one)
    graph-budget init MODEL...      a starting budget TOML: today's figures plus headroom
    graph-budget hardware           the hardware profiles and their ridge points
    graph-budget check [PATH...]    the TOML budgets' check, as pytest --graph-budget runs it

Exit codes: 0 fine, 1 a budget or check failed, 2 a usage or input error (every command,
``check`` too). User errors are one line on stderr, never a traceback. Progress goes to
stderr, so stdout carries only the result (``--format json`` output stays parseable).
Importing this package does not import torch: a command imports the engine when it needs it.

One module per command (``cli/<command>.py``), each with ``add_parser(subparsers)`` (its
parser fragment), ``run(args, console) -> int`` (its handler) and its views. Adding a command
is one module and one line in ``COMMANDS``. Shared pieces: ``console`` (output, exit codes),
``options`` (option groups and argument types shared by commands), ``loading`` (building and
profiling a model), ``views`` (small formatters); table writers are in
``pytest_graphbudget.tables``, shared with ``reports/``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence

from pytest_graphbudget.cli import (
    check,
    compare,
    explore,
    hardware,
    history,
    init,
    merge,
    options,
    profile,
)

# cli/list.py is the `list` command. Once imported, the name `list` in this module is that
# submodule, not the builtin: nothing here calls `list(...)`.
from pytest_graphbudget.cli import list as list_
from pytest_graphbudget.cli.console import EXIT_FAILED, EXIT_OK, EXIT_USAGE, PROG, Console
from pytest_graphbudget.cli.init import budget_table, budget_value, readable_ceiling
from pytest_graphbudget.cli.loading import load_case, module_types, profile_case
from pytest_graphbudget.cli.options import join_shape_tokens, seed_spellings
from pytest_graphbudget.cli.saved import GROWTH_CHECKED, read_profile_json
from pytest_graphbudget.errors import GraphBudgetError, TraceError

# The commands, in the order ``--help`` lists them. A new command is a module with
# ``add_parser(subparsers)`` and ``run(args, console) -> int``, added here.
COMMANDS = (profile, explore, compare, list_, init, hardware, check, merge, history)

__all__ = [
    "COMMANDS",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "GROWTH_CHECKED",
    "PROG",
    "Console",
    "budget_table",
    "budget_value",
    "build_parser",
    "join_shape_tokens",
    "load_case",
    "main",
    "module_types",
    "profile_case",
    "read_profile_json",
    "readable_ceiling",
    "seed_spellings",
]


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: ``--version`` and one sub-parser per command in ``COMMANDS``."""
    parser = options.Parser(
        prog=PROG,
        description="Profile PyTorch models (FLOPs, MACs, bytes, roofline) and write budgets.",
        epilog="Exit codes: 0 fine, 1 a budget or check failed, 2 usage or input error.",
        formatter_class=options.Formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def _verbose(on: bool) -> contextlib.AbstractContextManager[None]:
    """With ``-v``, what torch said while loading and tracing goes to stderr."""
    if not on:
        return contextlib.nullcontext()
    from pytest_graphbudget.quiet import verbose_to

    return verbose_to(sys.stderr)


def _version() -> str:
    from pytest_graphbudget import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (0 fine, 1 failed check, 2 usage error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(
            join_shape_tokens(seed_spellings(sys.argv[1:] if argv is None else argv))
        )
    except SystemExit as exc:  # --help, --version, usage errors (argparse exits 2)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    console = Console(quiet=getattr(args, "quiet", False))
    command: Callable[[argparse.Namespace, Console], int] = args.func
    verbose = getattr(args, "verbose", False)
    try:
        options.model_option(args)
        with _verbose(verbose):
            return command(args, console)
    except GraphBudgetError as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        if isinstance(exc, TraceError) and not verbose:
            message += " (-v shows torch's output)"
        console.error(message)
        return EXIT_USAGE
    except KeyboardInterrupt:
        console.error("interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (`graph-budget profile bert | head`): not an error.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
