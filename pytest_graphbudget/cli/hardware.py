"""``graph-budget hardware``: the known hardware profiles, their peaks, bandwidth and ridge
points (the arithmetic intensity above which a subgraph is compute-bound)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_graphbudget.cli import loading, options
from pytest_graphbudget.cli.console import EXIT_OK, Console, check_writable, format_of
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.reports.tables import csv_text, json_text, markdown_table, text_table


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "hardware",
        parents=[options.quiet()],
        formatter_class=options.Formatter,
        help="the hardware profiles and their ridge points",
        description="The known hardware profiles: peak FLOP/s, memory bandwidth and ridge "
        "point (the arithmetic intensity above which a subgraph is compute-bound).",
    )
    p.add_argument("--hardware-file", metavar="FILE", help=options.HARDWARE_FILE_HELP)
    options.output_options(p)
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="measure this machine (matmul, memory copy and each kind of kernel in float32 "
        "and bfloat16, in interleaved rounds: under a minute) and write its profile as "
        "[hardware.NAME] TOML for --hardware-file (to --output, else stdout)",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="torch intra-op threads while --calibrate measures (default: torch's); time "
        "the models the profile prices with as many",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="--calibrate on small sizes only (seconds; a smoke check, not a calibration)",
    )
    p.add_argument("--name", help="the calibrated profile's name (default: calibrated)")
    p.add_argument(
        "--device",
        help="what --calibrate measures: cpu (default), cuda or cuda:N (every kernel kind, "
        "launch overhead included, and the matmul peak in float32, bfloat16 and float16)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        help="--calibrate times everything in this many interleaved rounds and keeps each "
        "one's median (default 7; --quick 3)",
    )
    p.add_argument(
        "--max-spread",
        type=options.percent,
        metavar="PERCENT",
        help="refuse a calibration (exit 2, nothing written) whose timings of one kind varied "
        "more than ±PERCENT between rounds (half their interquartile range over their median; "
        "default 10; --quick checks only when this is given)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="write the calibration even when the machine was too noisy (its spread is in "
        "the profile's comments)",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, console: Console) -> int:
    check_writable(args.output)
    asked = (args.name, args.device, args.quick, args.force)
    numbers = (args.threads, args.rounds, args.max_spread)
    if args.calibrate or any(asked) or any(value is not None for value in numbers):
        return calibrate(args, console)
    profiles = reachable(loading.user_hardware(args.hardware_file))
    console.emit(render_hardware(profiles, format_of(args)), args.output)
    return EXIT_OK


def reachable(user: Mapping[str, Any]) -> list[Any]:
    """Every profile a name reaches, with the aliases that reach it (``hardware.get``'s
    rules): a shipped card's alias that a user's profile took is not listed under the card,
    and a shipped card a user's profile shadowed by name is listed under an alias still
    reaching it."""
    from pytest_graphbudget import hardware as hw

    table = hw.profiles(user)
    listed = []
    for card in (*hw.BUILTIN, *user.values()):
        reach = [a for a in card.aliases if hw.get(a, user) in (card, _under(card, a))]
        if table.get(card.name) is card:
            listed.append(replace(card, aliases=tuple(reach)))
        elif reach:  # shadowed by name, still reached by an alias
            listed.append(replace(card, name=reach[0], aliases=tuple(reach[1:])))
    return listed


def _under(card: Any, alias: str) -> Any:
    """A shadowed shipped card as ``hardware.get`` returns it when asked by ``alias``."""
    return replace(card, name=alias, aliases=())


def calibrate(args: argparse.Namespace, console: Console) -> int:
    """``--calibrate``: measure, then write the profile (kept beside the output file's other
    profiles) so that ``--hardware NAME --hardware-file FILE`` prices models with it."""
    from pytest_graphbudget.hardware import from_table
    from pytest_graphbudget.modes.calibrate import calibrate as measure
    from pytest_graphbudget.modes.rounds import MAX_SPREAD

    name, device, rounds = checked(args)
    console.progress(f"calibrating {device} (matmul, copy, kernel kinds) ...")
    result = measure(name, device, rounds=rounds, threads=args.threads, quick=args.quick)
    from_table(name, result.table())  # a profile it cannot read back would fail later, silently
    checks = args.max_spread is not None or not args.quick  # a smoke check is never refused
    limit = MAX_SPREAD if args.max_spread is None else args.max_spread / 100
    noisy = result.too_noisy(limit) if checks else None
    if noisy and not args.force:
        raise GraphBudgetError(f"{noisy}, or pass --force to write it anyway")
    if noisy:
        console.note(f"{noisy}; written anyway (--force)")
    if not checks and (noisy := result.too_noisy(MAX_SPREAD)):  # said, never refused
        console.note(
            f"--quick: {noisy}; a smoke check's profile (give --max-spread to check it, or "
            "calibrate without --quick for budgets)"
        )
    if rounds < 2 and checks:  # the default check (--max-spread needs 2 rounds): unchecked
        console.note(
            "one round measures no spread: the machine's noise went unchecked (--rounds 2 "
            "or more check it)"
        )
    console.progress(
        f"{name}: {result.flops / 1e9:.4g} GFLOP/s float32, {result.bandwidth / 1e9:.4g} GB/s"
    )
    console.emit(result.toml(existing_toml(args.output, name)), args.output)
    return EXIT_OK


def checked(args: argparse.Namespace) -> tuple[str, str, int]:
    """The profile's name, the device and the rounds of ``--calibrate``, every setting and
    the output file checked before anything is measured (a calibration takes a minute)."""
    from pytest_graphbudget.modes.calibrate import settings

    if not args.calibrate:
        raise GraphBudgetError(
            "--name, --device, --threads, --quick, --rounds, --max-spread and --force go with "
            "--calibrate"
        )
    if args.max_spread is not None and not 0 <= args.max_spread < 1000:
        raise GraphBudgetError(f"--max-spread is a percentage from 0, got {args.max_spread:g}")
    if args.format or args.hardware_file:
        raise GraphBudgetError(
            "--calibrate writes TOML to --output FILE (or stdout); drop --format and "
            "--hardware-file, then pass the file to --hardware-file where it is used"
        )
    if args.name is not None and not args.name.strip():
        raise GraphBudgetError(f"--name: give the profile a name, got {args.name!r}")
    if args.output and args.output != "-" and Path(args.output).suffix.lower() != ".toml":
        raise GraphBudgetError(
            f"--output {args.output}: --calibrate writes a TOML profile; give a .toml file "
            "(or - for stdout)"
        )
    name = "calibrated" if args.name is None else args.name
    if args.output and Path(args.output).name.lower() == "pyproject.toml":
        raise GraphBudgetError(
            f"--output {args.output}: nothing reads a top-level [hardware.{name}] in "
            "pyproject.toml; write the profile to a file of its own (-o hardware.toml) for "
            "--hardware-file (the documented way), or copy its keys under "
            f"[tool.graph_budget.hardware_profiles.{name}]"
        )
    device = "cpu" if args.device is None else args.device
    _, rounds = settings(device, args.rounds, args.threads, args.quick)
    if args.max_spread is not None and rounds < 2:
        raise GraphBudgetError(
            f"--max-spread needs a spread between rounds, and {rounds} round measures none: "
            "give --rounds 2 or more, or drop --max-spread"
        )
    existing_toml(args.output, name)
    return name, device, rounds


def existing_toml(output: str | None, name: str) -> str:
    """The text of ``--output`` when it exists, checked to take ``[hardware.<name>]`` beside
    its other tables (``""`` for stdout or a new file); a one-line error naming it if not."""
    from pytest_graphbudget.modes.calibrate import merged

    if not output or output == "-":
        return ""
    if not Path(output).exists():
        if not os.access(Path(output).resolve().parent, os.W_OK):
            raise GraphBudgetError(f"cannot write {output}: permission denied")
        return ""
    try:
        text = Path(output).read_text(encoding="utf-8")
    except OSError as exc:
        raise GraphBudgetError(f"cannot read {output}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise GraphBudgetError(f"--output {output}: not a TOML file (not UTF-8 text)") from None
    if not os.access(output, os.W_OK):
        raise GraphBudgetError(f"cannot write {output}: permission denied")
    stand_in = {"bandwidth_gbs": 1.0, "kernels": {"matmul": {"flops_per_s": 1.0}}}
    try:
        merged(text, name, stand_in)
    except GraphBudgetError as exc:
        raise GraphBudgetError(f"--output {output}: {exc}") from None
    loading.refuse_stray_keys(f"--output {output}", loading.read_toml(output))  # then refused
    return text


def hardware_rows(profiles: Iterable[Any]) -> list[dict[str, Any]]:
    from pytest_graphbudget.hardware import FAMILIES

    rows = []
    for hw in profiles:
        half = hw.peak_flops.get("bfloat16") or hw.peak_flops.get("float16")
        rows.append(
            {
                "name": hw.name,
                "aliases": list(hw.aliases),
                "description": hw.description,
                "peak_flops": dict(hw.peak_flops),
                "bandwidth": hw.bandwidth,
                "ridge_point": hw.ridge_point("float32"),
                "ridge_point_16bit": (half / hw.bandwidth) if half else None,
                "family": hw.family,
                "launch_us": round(hw.launch_s * 1e6, 6),  # launch_s held in seconds
                "compute_scale": hw.compute_scale,
                "float32_share": hw.float32_share,
                "channels_last": dict(hw.channels_last),
                # a CUDA GPU's: its peak memory is counted as its caching allocator holds it
                "compute_capability": ".".join(map(str, hw.compute_capability or ())) or None,
                "source": hw.source,
                # where the family's shares come from, and what they were found to be worth
                "family_source": FAMILIES[hw.family].source if hw.family else None,
            }
        )
    return rows


HEADERS = [
    "name",
    "fp32 TFLOP/s",
    "16-bit TFLOP/s",
    "bandwidth GB/s",
    "ridge fp32",
    "ridge 16-bit",
    "family",
    "description",
]
CSV_HEADERS = [
    "name",
    "peak_flops_fp32",
    "peak_flops_16bit",
    "bandwidth_bytes_s",
    "ridge_point",
    "ridge_point_16bit",
    "family",
    "description",
]
RIDGE_NOTE = (
    "ridge point = peak FLOP/s / bandwidth, in FLOPs per byte: a subgraph whose "
    "arithmetic intensity reaches it is compute-bound."
)


def _half(peaks: dict[str, float]) -> float | None:
    return peaks.get("bfloat16") or peaks.get("float16")


def _table_row(r: dict[str, Any]) -> list[str]:
    return [
        r["name"] + (f" ({', '.join(r['aliases'])})" if r["aliases"] else ""),
        _tera(r["peak_flops"]["float32"]),
        _tera(_half(r["peak_flops"])),
        f"{r['bandwidth'] / 1e9:g}",
        f"{r['ridge_point']:.1f}",
        f"{r['ridge_point_16bit']:.1f}" if r["ridge_point_16bit"] else "-",
        r["family"] or "-",
        r["description"],
    ]


def _csv_row(r: dict[str, Any]) -> list[Any]:
    return [
        r["name"],
        r["peak_flops"]["float32"],
        _half(r["peak_flops"]) or "",
        r["bandwidth"],
        r["ridge_point"],
        r["ridge_point_16bit"] or "",
        r["family"],
        r["description"],
    ]


def render_hardware(profiles: Iterable[Any], fmt: str) -> str:
    rows = hardware_rows(profiles)
    if fmt == "json":
        return json_text(rows)
    if fmt == "csv":
        return csv_text(CSV_HEADERS, [_csv_row(r) for r in rows])
    table = [_table_row(r) for r in rows]
    if fmt == "markdown":
        return "\n".join(markdown_table(HEADERS, table, "lrrrrrll")) + "\n"
    lines = [*text_table(HEADERS, table, "lrrrrrll"), "", RIDGE_NOTE]
    return "\n".join(lines) + "\n"


def _tera(value: float | None) -> str:
    return f"{value / 1e12:.4g}" if value else "-"
