"""The options several commands share, their argument types, and the argv spellings of the
``profile_graph.py`` scripts that the command line accepts.

A command module builds its parser with ``parents=[quiet(), model()]`` and adds its own
options; ``model_argument`` and ``output_options`` add the positional MODEL and
``--format``/``--output`` the same way everywhere.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from pytest_graphbudget.cli.console import FORMATS, PROG
from pytest_graphbudget.errors import GraphBudgetError

# ---------------------------------------------------------------------------------------------
# Argument types


def _int_at_least(text: str, least: int, wanted: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0, "an integer >= 0")


def positive_ints(text: str) -> list[int]:
    """``128,256,512``: the values a sweep takes (``profile --seq-len``), each once."""
    values = [positive_int(part.strip()) for part in text.split(",")]
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"each value once, got {text!r}")
    return values


def shape_part(text: str) -> list[int]:
    """One piece of ``--input-shape``: ``1,3,224,224``, ``1x3x224x224`` or a single ``224``."""
    pieces = text.replace("x", ",").replace("X", ",").split(",")
    try:  # every piece: "1,,3" is a typo, not the shape 1,3
        dims = [int(p) for p in pieces]
    except ValueError:
        dims = []
    if not dims or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(
            f"invalid shape {text!r}: expected positive integers such as 1,3,224,224"
        )
    return dims


def percent(text: str) -> float:
    """A number of percent, ``10`` or ``10%`` (``--max-spread``: the docs write ±10%)."""
    try:
        return float(text.strip().removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a percentage such as 10%, got {text!r}"
        ) from None


def share(flag: str) -> Callable[[str], float]:
    """The argument type of an option that takes a share (``--max-growth``, ``--headroom``):
    ``2%`` or ``0.02``; a bare ``2`` is refused with both fixes (``units.share``)."""
    from pytest_graphbudget.units import share as parse_share

    def parse(text: str) -> float:
        try:
            return parse_share(text, flag, option=True)
        except GraphBudgetError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


# ---------------------------------------------------------------------------------------------
# The profile_graph.py scripts' spellings


def seed_spellings(argv: Sequence[str]) -> list[str]:
    """``profile_graph.py --list``, as its users type it: ``graph-budget --list`` and
    ``graph-budget profile --list`` mean ``graph-budget list``."""
    argv = list(argv)
    if argv[:1] == ["--list"]:
        return ["list", *argv[1:]]
    if argv[:1] == ["profile"] and "--list" in argv:
        return ["list", *(a for a in argv[1:] if a != "--list")]
    return argv


def join_shape_tokens(argv: Sequence[str]) -> list[str]:
    """Accept ``profile_graph.py``'s ``--input-shape 1 3 640 640``: the integers that follow
    ``--input-shape`` become one ``1,3,640,640`` value (a model name after them stays one)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        out.append(argv[i])
        if argv[i] == "--input-shape":
            dims = []
            while i + 1 < len(argv) and argv[i + 1].strip().isdigit():
                dims.append(argv[i + 1].strip())
                i += 1
            if dims:
                out.append(",".join(dims))
        i += 1
    return out


def model_option(args: argparse.Namespace) -> None:
    """MODEL given as ``--model NAME`` (the seed scripts' spelling) or as ``MODEL``, once."""
    if not hasattr(args, "model_option"):
        return
    given = [m for m in (args.model, args.model_option) if m]
    if not given:
        raise GraphBudgetError(
            f"{args.command}: the following arguments are required: MODEL "
            f"(`{PROG} {args.command} resnet18`, a .pt/.pt2 file, or --model NAME)"
        )
    if len(set(given)) > 1:
        raise GraphBudgetError(
            f"two models given ({given[0]} and --model {given[1]}); {args.command} takes one"
        )
    args.model = given[0]


# ---------------------------------------------------------------------------------------------
# Shared option groups


class Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the usage block is in ``--help``), like every
    other bad input of the command line, and an option is never read from a prefix of its
    name (``hardware --hardware h100`` had read as ``--hardware-file h100``). Sub-parsers
    inherit the class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        # ``--max-growth -5%`` (or ``--input-shape -1,3``) is a value, refused in its option's
        # words; argparse knows only ``-5`` and ``-0.5``, and said "expected one argument"
        self._negative_number_matcher = re.compile(r"^-\.?\d[\d.,]*(e[+-]?\d+)?\s*[%A-Za-z/]*$")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """An unknown option is the command's error, pointing at its own ``--help`` (the top
        parser's had said ``see graph-budget --help``, which lists no command's options)."""
        found, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._commands().get(getattr(found, "command", None) or "", self)
            command.error(f"unrecognized arguments: {' '.join(extras)}")
        return found

    def _commands(self) -> dict[str, argparse.ArgumentParser]:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}


HARDWARE_FILE_HELP = "TOML file with extra [hardware.<name>] profiles"


def quiet() -> argparse.ArgumentParser:
    """``-q`` and ``-v``: every command has them."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("-q", "--quiet", action="store_true", help="no progress messages on stderr")
    parent.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also show what torch logs, warns and prints while loading and tracing",
    )
    return parent


def hardware() -> argparse.ArgumentParser:
    """``--hardware`` (pytest's ``--graph-budget-hardware``) and ``--hardware-file``."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--hardware",
        metavar="NAME",
        help="hardware profile for the roofline (default: [tool.graph_budget] hardware of "
        "the project pytest would run here, else generic; see `graph-budget hardware`)",
    )
    parent.add_argument("--hardware-file", metavar="FILE", help=HARDWARE_FILE_HELP)
    parent.add_argument(
        "--execution",
        metavar="HOW",
        help="how the model runs, which the estimated latency prices: eager (one kernel per "
        "op, each with its launch) or compiled (one kernel per fused group, as torch.compile); "
        "default: [tool.graph_budget] execution, else eager",
    )
    return parent


def model(sweep: bool = False) -> argparse.ArgumentParser:
    """How a model is built: the hardware options, then its input and loading options;
    ``sweep``: ``--seq-len``/``--batch`` take lists (``128,256,512``) too."""
    parent = argparse.ArgumentParser(add_help=False, parents=[hardware()])
    size, metavar = (positive_ints, "N[,N...]") if sweep else (positive_int, "N")
    swept = " (a list sweeps it: 128,256,512)" if sweep else ""
    parent.add_argument("--seq-len", type=size, metavar=metavar, help=f"sequence length{swept}")
    parent.add_argument("--batch", type=size, metavar=metavar, help=f"batch size{swept}")
    parent.add_argument(
        "--input-shape",
        type=shape_part,
        metavar="SHAPE",
        help="shape of the main input: 1,3,224,224 (or 1x3x224x224, or 1 3 224 224)",
    )
    parent.add_argument(
        "--trust-pickle",
        action="store_true",
        help="allow loading full pickles (.pt files that run code when loaded)",
    )
    parent.add_argument(
        "--meta",
        action="store_true",
        help="build the model on the meta device (no weights allocated; same figures)",
    )
    variant(parent)
    return parent


def variant(parent: argparse.ArgumentParser) -> None:
    """``--mode``, ``--optimizer``, ``--dtype``: which step is profiled, in which dtype."""
    from pytest_graphbudget.modes.request import DTYPES, MODES, OPTIMIZERS

    parent.add_argument(
        "--mode",
        choices=MODES,
        default="eval",
        help="eval: one forward (default); train: forward, loss, backward (and --optimizer)",
    )
    parent.add_argument(
        "--optimizer", choices=OPTIMIZERS, help="with --mode train: add this optimizer's step"
    )
    parent.add_argument(
        "--dtype",
        choices=DTYPES,
        help="profile a copy of the model and its inputs cast to DTYPE (default: its own); "
        "int8 and float8_e4m3fn quantize a copy's Linear layers",
    )
    parent.add_argument(
        "--parallel",
        metavar="KEY=N,...",
        help="with --mode train: one rank of sharded training, e.g. fsdp=8,tp=2 or zero=2,dp=4",
    )


def output_options(p: argparse.ArgumentParser, formats: Sequence[str] = FORMATS) -> None:
    p.add_argument(
        "--format",
        choices=formats,
        help="output format (default: table, or from the --output suffix)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the result to FILE")


def html_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--html",
        metavar="FILE",
        help="also write an interactive, self-contained HTML report to FILE",
    )


def model_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model",
        metavar="MODEL",
        nargs="?",
        help="zoo name, .pt/.pt2/.yaml file, HF folder, or package.module:callable of your code",
    )
    p.add_argument(
        "--model",
        dest="model_option",
        metavar="MODEL",
        help="the same as MODEL (the spelling of the profile_graph.py scripts)",
    )
