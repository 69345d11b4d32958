"""``graph-budget check [PATH...]``: the TOML budget files' check without pytest, with the
plugin's verdicts and reports, and the command line's exit codes (0 passed, 1 failed, 2 usage).

This module is the command's place in the CLI (its parser fragment and handler); the check
itself, shared with the plugin, is ``pytest_graphbudget.cli.check_files``.
"""

from __future__ import annotations

import argparse
from typing import Any

from pytest_graphbudget.cli import check_files as check_cli
from pytest_graphbudget.cli import options
from pytest_graphbudget.cli.console import Console


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = check_cli.add_parser(subparsers, options.Formatter, [options.quiet()])
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, console: Console) -> int:
    return check_cli.command(args, console)
