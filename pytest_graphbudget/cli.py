"""``graph-budget``: the command line over the engine, the zoo and the JSON the plugin uses.

    graph-budget profile MODEL      summary, per-layer table, top layers, op types, bottlenecks
    graph-budget explore MODEL      every graph node with its subgraph, kind, FLOPs, bottleneck
    graph-budget compare A B        two models or two saved JSON profiles side by side
    graph-budget list               the model zoo by family (--check traces each one)
    graph-budget init MODEL...      a starting budget TOML: today's figures plus headroom
    graph-budget hardware           the hardware profiles and their ridge points

Exit codes: 0 fine, 1 a budget or check failed, 2 a usage or input error. User errors are one
line on stderr, never a traceback. Progress goes to stderr, so stdout carries only the result
(``--format json`` output stays parseable). Importing this module does not import torch: a
command imports the engine when it needs it.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.errors import GraphBudgetError, TraceError

if TYPE_CHECKING:
    from pytest_graphbudget.case import ModelCase
    from pytest_graphbudget.profile import Profile

PROG = "graph-budget"
FORMATS = ("table", "json", "csv", "markdown")
SUFFIX_FORMATS = {".json": "json", ".csv": "csv", ".md": "markdown", ".markdown": "markdown"}
DEFAULT_BUDGET_FILE = "budgets/models.toml"
PROFILE_SCHEMA = "graphbudget.profile/1"

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


# ---------------------------------------------------------------------------------------------
# Output helpers


class Console:
    """Where messages go: progress and notes to stderr (unless quiet), results to stdout."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet

    def progress(self, message: str) -> None:
        if not self.quiet:
            print(f"{PROG}: {message}", file=sys.stderr, flush=True)

    def note(self, message: str) -> None:
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
def _stdout_to_stderr() -> Iterator[None]:
    """Model libraries print while building models; keep stdout for the result."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def _check_writable(output: str | None, option: str = "--output") -> None:
    """Fail before any profiling when an output file cannot be created."""
    if not output or output == "-":
        return
    parent = Path(output).expanduser().resolve().parent
    if not parent.is_dir():
        raise GraphBudgetError(f"{option} {output}: directory {parent} does not exist")
    if Path(output).is_dir():
        raise GraphBudgetError(f"{option} {output} is a directory")


def _format_of(args: argparse.Namespace) -> str:
    """``--format``, else the output file's suffix, else ``table``."""
    if args.format:
        return args.format
    output = getattr(args, "output", None)
    if output and output != "-":
        return SUFFIX_FORMATS.get(Path(output).suffix.lower(), "table")
    return "table"


# ---------------------------------------------------------------------------------------------
# Argument types


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _shape_part(text: str) -> list[int]:
    """One piece of ``--input-shape``: ``1,3,224,224``, ``1x3x224x224`` or a single ``224``."""
    pieces = [p for p in text.replace("x", ",").replace("X", ",").split(",") if p.strip()]
    try:
        dims = [int(p) for p in pieces]
    except ValueError:
        dims = []
    if not dims or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(
            f"invalid shape {text!r}: expected positive integers such as 1,3,224,224"
        )
    return dims


def seed_spellings(argv: Sequence[str]) -> list[str]:
    """``profile_graph.py --list``, as its users type it: ``graph-budget --list`` and
    ``graph-budget profile --list`` mean ``graph-budget list``."""
    argv = list(argv)
    if argv[:1] == ["--list"]:
        return ["list", *argv[1:]]
    if argv[:1] == ["profile"] and "--list" in argv:
        return ["list", *(a for a in argv[1:] if a != "--list")]
    return argv


def _model_option(args: argparse.Namespace) -> None:
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


def _ratio(text: str) -> float:
    from pytest_graphbudget.units import UnitError, parse

    try:
        return parse(text, "ratio")
    except UnitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ---------------------------------------------------------------------------------------------
# Loading and profiling models


def _hardware(args: argparse.Namespace) -> Any:
    """The ``--hardware`` profile (built-in, or from ``--hardware-file``); checked early."""
    from pytest_graphbudget import hardware as hw

    return hw.get(args.hardware, _user_hardware(getattr(args, "hardware_file", None)))


def _user_hardware(path: str | None) -> dict[str, Any]:
    """The project's profiles (``[tool.graph_budget.hardware_profiles]`` of ./pyproject.toml)
    and the ``[hardware.<name>]`` tables of ``--hardware-file``, which win."""
    from pytest_graphbudget import hardware as hw
    from pytest_graphbudget import settings

    profiles = settings.load(Path.cwd()).hardware_profiles
    if not path:
        return profiles
    data = _read_toml(path)
    tables = data.get("hardware")
    if not isinstance(tables, dict) or not tables:
        raise GraphBudgetError(f"{path}: no [hardware.<name>] tables")
    return {**profiles, **hw.from_tables(tables)}


def _read_toml(path: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise GraphBudgetError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise GraphBudgetError(f"{path}: not valid TOML ({exc})") from None


def _zoo_options(args: argparse.Namespace) -> dict[str, Any]:
    shape = tuple(args.input_shape) if getattr(args, "input_shape", None) else None
    return {
        "seq_len": getattr(args, "seq_len", None),
        "batch": getattr(args, "batch", None),
        "input_shape": shape,
        "meta": True if getattr(args, "meta", False) else None,
        "trust_pickle": getattr(args, "trust_pickle", False),
    }


def load_case(name: str, args: argparse.Namespace, console: Console) -> ModelCase:
    from pytest_graphbudget import zoo

    console.progress(f"loading {name} ...")
    try:
        with _stdout_to_stderr():
            case = zoo.resolve(name, **_zoo_options(args))
    except GraphBudgetError:
        raise
    except Exception as exc:  # a file or configuration the loaders choke on is bad input
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise GraphBudgetError(
            f"{name}: could not load the model ({type(exc).__name__}: {reason})"
        ) from exc
    if case.note:
        console.note(case.note)
    return case


def profile_case(case: ModelCase, hardware: Any, console: Console) -> Profile:
    from pytest_graphbudget.profile import profile_model

    console.progress(f"profiling {case.name} ...")
    start = time.perf_counter()
    with _stdout_to_stderr():
        prof = profile_model(case, hardware=hardware)
    console.progress(
        f"profiled {prof.model} in {time.perf_counter() - start:.1f}s "
        f"({prof.trace.method} trace, {prof.trace.nodes} nodes, {len(prof.subgraphs)} subgraphs)"
    )
    unsupported = prof.coverage.unsupported_ops
    if unsupported:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(unsupported.items()))
        console.note(f"{prof.model}: no cost formula for {ops}; their FLOPs are not counted")
    return prof


def module_types(case: ModelCase) -> dict[str, str]:
    """Class name of every module path, for the per-layer table's type column."""
    graph_module = getattr(case.model, "graph_module", None)
    if graph_module is not None and hasattr(case.model, "graph_signature"):
        return _program_module_types(graph_module)
    try:
        return {path: type(module).__name__ for path, module in case.model.named_modules()}
    except Exception:  # a model whose named_modules() fails still profiles: no type column
        return {}


def _program_module_types(graph_module: Any) -> dict[str, str]:
    """An exported program keeps its modules' classes only in its nodes' module stacks."""
    types: dict[str, str] = {}
    for node in graph_module.graph.nodes:
        for path, cls in (node.meta.get("nn_module_stack") or {}).values():
            name = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
            types.setdefault(path, name.rpartition(".")[2])
    return types


# ---------------------------------------------------------------------------------------------
# Commands


def cmd_profile(args: argparse.Namespace, console: Console) -> int:
    from pytest_graphbudget import render

    fmt = _format_of(args)
    _check_writable(args.output)
    if args.visualize:
        from pytest_graphbudget import visualize

        visualize.check_target(args.visualize)
        _check_writable(args.visualize, "--visualize")
    hardware = _hardware(args)
    case = load_case(args.model, args, console)
    prof = profile_case(case, hardware, console)
    options = {
        "types": module_types(case),
        "show_shapes": args.showshape,
        "depth": args.depth,
        "top": args.top,
    }
    if fmt == "csv":
        options = {"types": options["types"], "depth": args.depth}
    text = render.render_profile(prof, fmt, **options)
    if args.visualize:
        from pytest_graphbudget import visualize

        console.progress(f"drawing {args.visualize} ...")
        visualize.write(prof, args.visualize)
        console.progress(f"wrote {args.visualize}")
    console.emit(text, args.output)
    return EXIT_OK


def cmd_explore(args: argparse.Namespace, console: Console) -> int:
    from pytest_graphbudget import render

    if args.around is not None and (args.start is not None or args.end is not None):
        raise GraphBudgetError("--around cannot be combined with --start/--end")
    if args.start is not None and args.end is not None and args.end < args.start:
        raise GraphBudgetError(f"--end {args.end} is before --start {args.start}")
    _check_writable(args.output)
    hardware = _hardware(args)
    case = load_case(args.model, args, console)
    prof = profile_case(case, hardware, console)
    total = len(prof.node_info)
    first = args.around if args.around is not None else args.start
    if first is not None and first >= total:
        option = "--around" if args.around is not None else "--start"
        raise GraphBudgetError(
            f"{option} {first} is past the last node: {prof.model} has nodes 0 to {total - 1}"
        )
    shown = render.node_range(
        total, args.start, args.end, args.around, args.context, args.max_nodes
    )
    console.emit(render.explore_text(prof, shown), args.output)
    return EXIT_OK


def _load_side(source: str, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """A saved profile (a ``.json`` file) or a model to profile now, as ``to_dict()``."""
    path = Path(source)
    if path.suffix.lower() == ".json" or (path.is_file() and not _is_model_file(path)):
        return read_profile_json(source)
    case = load_case(source, args, console)
    return profile_case(case, _hardware(args), console).to_dict()


def _is_model_file(path: Path) -> bool:
    return path.suffix.lower() in (".pt", ".pth", ".pt2", ".yaml", ".yml")


def read_profile_json(source: str) -> dict[str, Any]:
    """A profile saved by ``graph-budget profile --format json`` (or ``Profile.to_dict()``)."""
    try:
        with open(source, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise GraphBudgetError(f"{source}: no such file") from None
    except OSError as exc:
        raise GraphBudgetError(f"cannot read {source}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise GraphBudgetError(f"{source}: not a JSON profile (not text)") from None
    except json.JSONDecodeError as exc:
        raise GraphBudgetError(
            f"{source}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(data, dict) or data.get("schema") != PROFILE_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise GraphBudgetError(
            f"{source}: not a graph-budget profile (schema {found!r}, expected "
            f"{PROFILE_SCHEMA!r}; write one with `graph-budget profile MODEL --format json`)"
        )
    missing = [k for k in ("model", "inputs", "totals", "bottleneck", "modules") if k not in data]
    if missing:
        raise GraphBudgetError(f"{source}: profile lacks {', '.join(missing)}")
    return data


GROWTH_CHECKED = (
    ("flops", "FLOPs", "count"),
    ("macs", "MACs", "count"),
    ("params", "params", "count"),
    ("peak_memory_bytes", "peak memory", "bytes"),
)


def cmd_compare(args: argparse.Namespace, console: Console) -> int:
    from pytest_graphbudget import render

    fmt = _format_of(args)
    _check_writable(args.output)
    if any(not Path(s).suffix.lower() == ".json" for s in (args.a, args.b)):
        _hardware(args)  # an unknown --hardware fails before any model is built
    a = _load_side(args.a, args, console)
    b = _load_side(args.b, args, console)
    result = render.compare(a, b, top=None if args.all else args.top)
    console.emit(render.render_compare(result, fmt), args.output)
    if args.max_growth is None:
        return EXIT_OK
    failed = False
    for key, label, kind in GROWTH_CHECKED:
        t = result["totals"][key]
        if t["a"] and t["b"] > t["a"] * (1 + args.max_growth):
            growth = t["b"] / t["a"] - 1
            before, after = render.show(t["a"], kind), render.show(t["b"], kind)
            console.failure(
                f"{label} grew {growth:+.1%} ({before} -> {after}), "
                f"more than --max-growth {args.max_growth:.1%}"
            )
            failed = True
    return EXIT_FAILED if failed else EXIT_OK


def cmd_list(args: argparse.Namespace, console: Console) -> int:
    from pytest_graphbudget import render, zoo

    fmt = args.format or "table"
    loaders = zoo.loaders()
    if args.family:
        known = sorted({loader.family for loader in loaders})
        unknown = [f for f in args.family if f not in known]
        if unknown:
            raise GraphBudgetError(
                f"unknown family {', '.join(unknown)}; families: {', '.join(known)}"
            )
        loaders = [loader for loader in loaders if loader.family in args.family]
    console.progress("collecting model names ...")
    families: dict[str, list[str]] = {}
    with _stdout_to_stderr():  # as zoo.list_models(), for the chosen families only
        for loader in loaders:
            names = loader.names()
            if names:
                families.setdefault(loader.family, []).extend(names)
    families = {f: sorted(set(n), key=str.casefold) for f, n in families.items()}
    if args.patterns:
        every = {n.casefold() for names in families.values() for n in names}
        # A pattern that is a model's exact name means that model; otherwise a substring/glob.
        exact = {p.casefold() for p in args.patterns if p.casefold() in every}
        loose = [p for p in args.patterns if p.casefold() not in every]
        families = {
            family: [n for n in names if n.casefold() in exact or _matches(n, loose)]
            for family, names in families.items()
        }
        families = {f: names for f, names in families.items() if names}
        if not families:
            raise GraphBudgetError(
                f"no model matches {' '.join(args.patterns)} (`{PROG} list` shows every name)"
            )
    if not args.check:
        if fmt == "json":
            console.emit(render.json_text(families), args.output)
        else:
            console.emit(_list_text(families, fmt), args.output)
        return EXIT_OK

    hardware = _hardware(args)
    results = []
    everything = [(family, name) for family, names in families.items() for name in names]
    for i, (family, name) in enumerate(everything, 1):
        console.progress(f"[{i}/{len(everything)}] checking {name} ...")
        results.append(_check_one(family, name, args, hardware))
    failed = [r for r in results if r["status"] != "ok"]
    if fmt == "json":
        console.emit(render.json_text(results), args.output)
    else:
        console.emit(_check_text(results, fmt), args.output)
    if failed:
        console.failure(f"{len(failed)} of {len(results)} models failed to profile")
        return EXIT_FAILED
    return EXIT_OK


def _matches(name: str, patterns: Sequence[str]) -> bool:
    folded = name.casefold()
    for pattern in patterns:
        p = pattern.casefold()
        if any(c in p for c in "*?[") and fnmatch.fnmatchcase(folded, p):
            return True
        if p in folded:
            return True
    return False


def _check_one(family: str, name: str, args: argparse.Namespace, hardware: Any) -> dict:
    from pytest_graphbudget import zoo
    from pytest_graphbudget.profile import profile_model

    start = time.perf_counter()
    record: dict[str, Any] = {"model": name, "family": family}
    try:
        with _stdout_to_stderr():
            case = zoo.resolve(name, **_zoo_options(args))
            prof = profile_model(case, hardware=hardware)
    except Exception as exc:  # one model's failure is reported; the sweep goes on
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not isinstance(exc, GraphBudgetError):
            reason = f"{type(exc).__name__}: {reason}"
        record.update(status="failed", reason=reason)
    else:
        record.update(
            status="ok",
            tier=prof.trace.method,
            failed_tiers=dict(prof.trace.failures),
            flops=prof.flops,
            params=prof.params,
            unsupported_ops=dict(prof.coverage.unsupported_ops),
        )
    record["seconds"] = round(time.perf_counter() - start, 2)
    return record


def _columns(names: Sequence[str], width: int = 100) -> list[str]:
    """Names in as many columns as fit in ``width``, filled down the columns like ``ls``."""
    cell = max(len(n) for n in names) + 2
    ncols = max(1, width // cell)
    nrows = math.ceil(len(names) / ncols)
    rows = []
    for r in range(nrows):
        row = [names[c * nrows + r] for c in range(ncols) if c * nrows + r < len(names)]
        rows.append("  " + "".join(n.ljust(cell) for n in row).rstrip())
    return rows


def _list_text(families: dict[str, list[str]], fmt: str) -> str:
    from pytest_graphbudget import render

    if fmt == "csv":
        rows = [[family, name] for family, names in families.items() for name in names]
        return render.csv_text(["family", "model"], rows)
    lines: list[str] = []
    for family, names in families.items():
        if fmt == "markdown":
            lines += [f"### {family} ({len(names)})", "", ", ".join(f"`{n}`" for n in names), ""]
        else:
            lines += [f"{family} ({len(names)})", *_columns(names), ""]
    total = sum(len(n) for n in families.values())
    lines.append(
        f"{total} models. Also: a .pt/.pth/.pt2 file, a YOLO .yaml, or a folder with config.json."
    )
    return "\n".join(lines) + "\n"


def _clip(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _check_text(results: list[dict[str, Any]], fmt: str) -> str:
    from pytest_graphbudget import render

    headers = ["model", "family", "status", "tier", "FLOPs", "params", "seconds", "note"]
    rows = []
    for r in results:
        if r["status"] == "ok":
            notes = [f"{t} failed: {_clip(why)}" for t, why in r["failed_tiers"].items()]
            if r["unsupported_ops"]:
                notes.append("no formula: " + ", ".join(sorted(r["unsupported_ops"])))
            rows.append(
                [
                    r["model"],
                    r["family"],
                    "ok",
                    r["tier"],
                    render.count(r["flops"]),
                    render.count(r["params"]),
                    f"{r['seconds']:.1f}",
                    "; ".join(notes),
                ]
            )
        else:
            rows.append(
                [
                    r["model"],
                    r["family"],
                    "FAILED",
                    "-",
                    "-",
                    "-",
                    f"{r['seconds']:.1f}",
                    r["reason"],
                ]
            )
    if fmt == "csv":
        return render.csv_text(headers, rows)
    if fmt == "markdown":
        return "\n".join(render.markdown_table(headers, rows, "llllrrrl")) + "\n"
    ok = sum(1 for r in results if r["status"] == "ok")
    lines = render.text_table(headers, rows, "llllrrrl")
    lines += ["", f"{ok} of {len(results)} models profiled"]
    return "\n".join(lines) + "\n"


def cmd_hardware(args: argparse.Namespace, console: Console) -> int:
    from pytest_graphbudget import hardware as hw
    from pytest_graphbudget import render

    _check_writable(args.output)
    profiles = hw.profiles(_user_hardware(args.hardware_file)).values()
    console.emit(render.render_hardware(profiles, _format_of(args)), args.output)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# init: a starting budget file


def readable_ceiling(value: float) -> Decimal:
    """``value`` rounded up to a number that reads well: two significant digits (three when
    the first is 1), so the rounding adds at most 5%: 4.007e9 -> 4.1e9, 1.288e8 -> 1.29e8."""
    if value <= 0:
        return Decimal(0)
    exponent = math.floor(math.log10(value))
    digits = 3 if str(Decimal(repr(value)) / Decimal(10) ** exponent)[0] == "1" else 2
    step = Decimal(10) ** (exponent - digits + 1)
    return (Decimal(repr(value)) / step).to_integral_value(rounding=ROUND_CEILING) * step


def budget_value(value: float, unit: str = "") -> str:
    """``4.1e9`` -> ``"4.1G"``; with ``unit="B"``: ``1.29e8`` -> ``"129MB"``."""
    rounded = readable_ceiling(value)
    prefixes = ["", "k", "M", "G", "T", "P"]
    power = 0
    while rounded >= 1000 and power < len(prefixes) - 1:
        rounded /= 1000
        power += 1
    text = format(rounded.normalize(), "f")
    return f"{text}{prefixes[power]}{unit}"


def budget_table(prof: Profile, headroom: float) -> dict[str, Any]:
    """The budget keys of one model: its input and today's figures plus ``headroom``."""
    entry: dict[str, Any] = {}
    first = prof.inputs[0] if prof.inputs else None
    if first is not None:
        if first.dtype.startswith(("int", "uint")) and len(first.shape) == 2:  # token ids
            entry["seq_len"] = first.shape[1]
            if first.shape[0] != 1:
                entry["batch"] = first.shape[0]
        else:
            entry["input_shape"] = list(first.shape)
    grow = 1 + headroom
    entry["flops_max"] = budget_value(prof.flops * grow)
    entry["macs_max"] = budget_value(prof.macs * grow)
    entry["params_max"] = budget_value(prof.params * grow)
    entry["memory_max"] = budget_value(prof.peak_memory_bytes * grow, "B")
    share = prof.bottleneck["compute_bound"]["share"]
    floor_share = math.floor(share * (1 - headroom) * 100) / 100
    if floor_share > 0:
        entry["compute_bound_min"] = floor_share
    return {key: value for key, value in entry.items() if value not in ("0", "0B")}


def _measured_comment(prof: Profile) -> str:
    from pytest_graphbudget import render

    share = prof.bottleneck["compute_bound"]["share"]
    return (
        f"measured: {render.count(prof.flops)} FLOPs, {render.count(prof.macs)} MACs, "
        f"{render.count(prof.params)} params, {render.nbytes(prof.peak_memory_bytes)} peak memory, "
        f"{share:.0%} of subgraphs compute-bound ({prof.trace.method} trace)"
    )


def cmd_init(args: argparse.Namespace, console: Console) -> int:
    import tomlkit

    output = args.output
    to_stdout = output == "-"
    path = Path(output)
    document = tomlkit.document()
    if not to_stdout and path.exists():
        try:
            document = tomlkit.parse(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise GraphBudgetError(f"cannot read {output}: {exc.strerror or exc}") from None
        except tomlkit.exceptions.ParseError as exc:
            raise GraphBudgetError(f"{output}: not valid TOML ({exc})") from None
        present = document.get("models", {})
        clash = [m for m in args.models if m in present]
        if clash and not args.force:
            raise GraphBudgetError(
                f"{output} already budgets {', '.join(clash)}; pass --force to replace "
                "those tables (the rest of the file is kept)"
            )
    hardware = _hardware(args)

    entries = []
    for name in args.models:
        case = load_case(name, args, console)
        prof = profile_case(case, hardware, console)
        entries.append((name, prof))

    if "defaults" not in document:
        document.add(
            tomlkit.comment(
                f"Budgets written by `{PROG} init`: today's figures plus {args.headroom:.0%} "
                "headroom."
            )
        )
        document.add(tomlkit.comment("Check them with `pytest --graph-budget budgets/`."))
        defaults = tomlkit.table()
        defaults["hardware"] = hardware.name
        document.add("defaults", defaults)
    default_hw = str(document["defaults"].get("hardware", "generic"))
    if "models" not in document:
        document.add("models", tomlkit.table(is_super_table=True))
    models = document["models"]
    for name, prof in entries:
        table = tomlkit.table()
        table.add(tomlkit.comment(_measured_comment(prof)))
        if hardware.name != default_hw:
            table["hardware"] = hardware.name
        if args.trust_pickle and Path(name).suffix.lower() in (".pt", ".pth"):
            table["trust_pickle"] = True  # the budget loads the file the way init did
        for key, value in budget_table(prof, args.headroom).items():
            table[key] = value
        if name in models:
            del models[name]
        models[name] = table

    text = tomlkit.dumps(document)
    if to_stdout:
        console.emit(text, None)
        return EXIT_OK
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise GraphBudgetError(f"cannot write {output}: {exc.strerror or exc}") from None
    console.progress(
        f"wrote {output} ({len(entries)} model{'s' if len(entries) != 1 else ''}, "
        f"{args.headroom:.0%} headroom)"
    )
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# The parser


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Profile PyTorch models (FLOPs, MACs, bytes, roofline) and write budgets.",
        epilog="Exit codes: 0 fine, 1 a budget or check failed, 2 usage or input error.",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")

    quiet = argparse.ArgumentParser(add_help=False)
    quiet.add_argument("-q", "--quiet", action="store_true", help="no progress messages on stderr")
    quiet.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also show what torch logs, warns and prints while loading and tracing",
    )

    hardware = argparse.ArgumentParser(add_help=False)
    hardware.add_argument(
        "--hardware",
        default="generic",
        metavar="NAME",
        help="hardware profile for the roofline (default: generic; see `graph-budget hardware`)",
    )
    hardware.add_argument(
        "--hardware-file",
        metavar="FILE",
        help="TOML file with extra [hardware.<name>] profiles",
    )

    model = argparse.ArgumentParser(add_help=False, parents=[hardware])
    model.add_argument("--seq-len", type=_positive_int, metavar="N", help="sequence length")
    model.add_argument("--batch", type=_positive_int, metavar="N", help="batch size")
    model.add_argument(
        "--input-shape",
        type=_shape_part,
        metavar="SHAPE",
        help="shape of the main input: 1,3,224,224 (or 1x3x224x224, or 1 3 224 224)",
    )
    model.add_argument(
        "--trust-pickle",
        action="store_true",
        help="allow loading full pickles (.pt files that run code when loaded)",
    )
    model.add_argument(
        "--meta",
        action="store_true",
        help="build the model on the meta device (no weights allocated; same figures)",
    )

    def output_options(p: argparse.ArgumentParser, formats: Sequence[str] = FORMATS) -> None:
        p.add_argument(
            "--format",
            choices=formats,
            help="output format (default: table, or from the --output suffix)",
        )
        p.add_argument("-o", "--output", metavar="FILE", help="write the result to FILE")

    def model_argument(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "model", metavar="MODEL", nargs="?", help="zoo name, .pt/.pt2/.yaml file or HF folder"
        )
        p.add_argument(
            "--model",
            dest="model_option",
            metavar="MODEL",
            help="the same as MODEL (the spelling of the profile_graph.py scripts)",
        )

    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "profile",
        parents=[quiet, model],
        formatter_class=_Formatter,
        help="profile a model: summary, per-layer table, top layers, bottleneck mix",
        description="Profile one forward pass of MODEL: summary, hierarchical per-layer table, "
        "top layers by FLOPs, operation types and bottleneck mix.",
    )
    model_argument(p)
    output_options(p)
    p.add_argument("--showshape", action="store_true", help="add output shapes to the table")
    p.add_argument("--depth", type=_non_negative_int, metavar="N", help="module levels shown")
    p.add_argument(
        "--top", type=_positive_int, default=10, metavar="N", help="top layers shown (10)"
    )
    p.add_argument(
        "--visualize",
        metavar="FILE",
        help="draw the partitioned graph: FILE.dot, .svg, .png or .pdf (images need `dot`)",
    )
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser(
        "explore",
        parents=[quiet, model],
        formatter_class=_Formatter,
        help="every graph node with its subgraph, kind, FLOPs and bottleneck",
        description="The node-by-node view: each graph node with its subgraph, kind, FLOPs, "
        "the subgraph's arithmetic intensity and bottleneck. Nodes are numbered from 0.",
    )
    model_argument(p)
    p.add_argument("--start", type=_non_negative_int, metavar="N", help="first node shown")
    p.add_argument("--end", type=_non_negative_int, metavar="N", help="last node shown")
    p.add_argument("--around", type=_non_negative_int, metavar="N", help="centre on node N")
    p.add_argument(
        "--context",
        type=_non_negative_int,
        default=10,
        metavar="K",
        help="nodes on each side of --around (10)",
    )
    p.add_argument("--max-nodes", type=_positive_int, metavar="M", help="show at most M nodes")
    p.add_argument("-o", "--output", metavar="FILE", help="write the view to FILE")
    p.set_defaults(func=cmd_explore)

    p = sub.add_parser(
        "compare",
        parents=[quiet, model],
        formatter_class=_Formatter,
        help="two models or two saved JSON profiles side by side",
        description="Compare A and B, each a model or a JSON profile saved by "
        "`graph-budget profile MODEL --format json -o FILE.json`: totals and per-module "
        "differences (B - A).",
    )
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    output_options(p)
    p.add_argument("--top", type=_positive_int, default=20, metavar="N", help="modules shown (20)")
    p.add_argument("--all", action="store_true", help="show every module that differs")
    p.add_argument(
        "--max-growth",
        type=_ratio,
        metavar="RATIO",
        help="exit 1 when B's FLOPs, MACs, params or peak memory exceed A's by more (2%%)",
    )
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "list",
        parents=[quiet, model],
        formatter_class=_Formatter,
        help="the model zoo by family (--check profiles each one)",
        description="The models the zoo knows, by family. PATTERN filters names (a substring "
        "or a glob such as 'resnet*'). --check profiles each and says which tier traced it.",
    )
    p.add_argument("patterns", nargs="*", metavar="PATTERN")
    p.add_argument("--family", action="append", metavar="NAME", help="only this family")
    p.add_argument("--check", action="store_true", help="profile each model; exit 1 on failures")
    output_options(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser(
        "init",
        parents=[quiet, model],
        formatter_class=_Formatter,
        help="write a starting budget TOML with today's figures plus headroom",
        description='Profile each MODEL and write its budget table ([models."<name>"]) to a '
        "TOML file for `pytest --graph-budget budgets/`. An existing file is kept: new models "
        "are added, and models already in it are replaced only with --force.",
    )
    p.add_argument("models", nargs="+", metavar="MODEL")
    p.add_argument(
        "-o",
        "--output",
        default=DEFAULT_BUDGET_FILE,
        metavar="FILE",
        help=f"budget file (default {DEFAULT_BUDGET_FILE}; - for stdout)",
    )
    p.add_argument(
        "--headroom",
        type=_ratio,
        default=0.10,
        metavar="RATIO",
        help="added to today's figures: 10%% or 0.1 (default 10%%)",
    )
    p.add_argument("--force", action="store_true", help="replace models already in the file")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser(
        "hardware",
        parents=[quiet],
        formatter_class=_Formatter,
        help="the hardware profiles and their ridge points",
        description="The known hardware profiles: peak FLOP/s, memory bandwidth and ridge "
        "point (the arithmetic intensity above which a subgraph is compute-bound).",
    )
    p.add_argument(
        "--hardware-file", metavar="FILE", help="TOML file with extra [hardware.<name>] profiles"
    )
    output_options(p)
    p.set_defaults(func=cmd_hardware)

    from pytest_graphbudget import check_cli

    check_cli.add_parser(sub, _Formatter)
    return parser


def _verbose(on: bool) -> contextlib.AbstractContextManager[None]:
    """With ``-v``, what torch said while loading and tracing goes to stderr."""
    if not on:
        return contextlib.nullcontext()
    from pytest_graphbudget.quiet import verbose_to

    return verbose_to(sys.stderr)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("pytest-graphbudget")
    except Exception:
        return "0+unknown"


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
        _model_option(args)
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


if __name__ == "__main__":
    sys.exit(main())
