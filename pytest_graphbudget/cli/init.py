"""``graph-budget init MODEL...``: a starting budget TOML, today's figures plus headroom,
rounded up to numbers that read well. An existing file is kept: new models are added, and
models already in it are replaced only with ``--force``."""

from __future__ import annotations

import argparse
import math
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.cli import loading, options
from pytest_graphbudget.cli.console import EXIT_OK, PROG, Console
from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.gate import figures
from pytest_graphbudget.gate.budgets import WARN_AT
from pytest_graphbudget.units import format_bytes, format_count

if TYPE_CHECKING:
    from pytest_graphbudget.engine.profile import Profile

DEFAULT_BUDGET_FILE = "budgets/models.toml"
DEFAULT_HEADROOM = 0.15
"""Today's figures at 1/1.15 = 87% of their limits (rounding up only lowers that), below the
``budgets.WARN_AT`` line of 90%: a fresh budget passes without a warning. With 10% they
were at 91%, and every new project opened with warnings."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "init",
        parents=[options.quiet(), options.model()],
        formatter_class=options.Formatter,
        help="write a starting budget TOML with today's figures plus headroom",
        description='Profile each MODEL and write its budget table ([models."<name>"]) to a '
        "TOML file for `pytest --graph-budget budgets/`. An existing file is kept: new models "
        "are added, and models already in it are replaced only with --force.",
    )
    p.add_argument("models", nargs="+", metavar="MODEL")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help=f"budget file under the budget paths (default {DEFAULT_BUDGET_FILE}, or "
        "models.toml in the first of [tool.graph_budget] budgets; - for stdout)",
    )
    p.add_argument(
        "--headroom",
        type=options.share("--headroom"),
        default=DEFAULT_HEADROOM,
        metavar="RATIO",
        help="added to today's figures: 15%% or 0.15 (default 15%%: today's figures stay "
        "below the 90%% warning line)",
    )
    p.add_argument("--force", action="store_true", help="replace models already in the file")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, console: Console) -> int:
    output = args.output if args.output == "-" else _checked_output(args.output)
    to_stdout = output == "-"
    named = _budget_names(args.models)
    document = _existing(output, list(named.values()), args.force) if not to_stdout else None
    hardware = loading.hardware(args)
    _refuse_file_hardware(hardware.name, args.hardware_file)
    how = loading.variant(args)  # a bad --optimizer fails before any model is built
    if 1 / (1 + args.headroom) > WARN_AT:
        console.note(
            f"with --headroom {args.headroom:.0%} today's figures are above {WARN_AT:.0%} of "
            f"their limits, so the new budgets warn at once (the default is "
            f"{DEFAULT_HEADROOM:.0%})"
        )
    entries = []
    for name in args.models:
        try:
            case = loading.load_case(name, args, console)
            entries.append((named[name], loading.profile_case(case, hardware, console, how)))
        except GraphBudgetError as exc:  # the others profiled are not written either: say so
            if len(args.models) == 1:
                raise
            raise GraphBudgetError(f"{exc}; nothing written: fix {name} or leave it out") from None
    text = _budget_document(document, entries, hardware, args)
    if to_stdout:
        console.emit(text, None)
        return EXIT_OK
    try:
        path = Path(output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise GraphBudgetError(f"cannot write {output}: {exc.strerror or exc}") from None
    console.progress(
        f"wrote {output} ({len(entries)} model{'s' if len(entries) != 1 else ''}, "
        f"{args.headroom:.0%} headroom)"
    )
    return EXIT_OK


def _budget_names(models: list[str]) -> dict[str, str]:
    """Each model as its budget table names it: a file or folder relative to the project's
    root, which check and pytest resolve a budget file's paths against (``zoo.at_root``),
    wherever init runs (``../cfg_gpt2`` from ``tests/`` is ``cfg_gpt2``); one outside the
    root by its absolute path; a zoo name or a factory as given."""
    from pytest_graphbudget.run import settings
    from pytest_graphbudget.zoo.local import LocalLoader

    try:
        root = settings.for_directory(Path.cwd())[0].root.resolve()
    except settings.SettingsError:  # -o - with broken settings: check refuses them anyway
        root = Path.cwd().resolve()
    named = {}
    for name in models:
        path = Path(name).expanduser()
        if loading.is_factory(name) or not LocalLoader().can_load(name):
            named[name] = name
        elif path.resolve().is_relative_to(root):
            named[name] = path.resolve().relative_to(root).as_posix()
        else:
            named[name] = str(path.resolve())
    return named


def _refuse_file_hardware(name: str, path: str | None) -> None:
    """The budget file names its hardware, which ``check`` and pytest look up among the
    built-in and the project's profiles: one only ``--hardware-file`` defines would make the
    very next check fail (or, overriding a known name, judge on another profile)."""
    if name in loading.file_hardware(path):
        raise GraphBudgetError(
            f"hardware {name!r} comes from --hardware-file {path}, which check and pytest do "
            f"not read: define it in pyproject.toml as [tool.graph_budget.hardware_profiles."
            f"{name}] instead (init, check and pytest all read that)"
        )


def _checked_output(given: str | None) -> str:
    """The budget file to write (``given``, else the default under the budget paths); one
    that no run reads is refused, as a budget never checked: the baseline (whose tables
    ``check --update`` rewrites), a file named as one, or a file outside what ``check`` and
    ``pytest --graph-budget`` collect (``[tool.graph_budget] budgets``, else ``budgets/``)."""
    from pytest_graphbudget.gate.budget_files import SKIPPED, covered
    from pytest_graphbudget.run import settings

    project, conf = settings.for_directory(Path.cwd())
    first = conf.budgets[0] if conf.budgets else ""
    default = first if first.endswith(".toml") else f"{first.rstrip('/')}/models.toml"
    default = default if first else DEFAULT_BUDGET_FILE
    elsewhere = project.root.resolve() != Path.cwd().resolve()
    if elsewhere:  # the settings' paths are the root's
        default = str(project.root / default)
    output = given or default
    path, shown = Path(output), f"-o {output}" if given else output
    if path.resolve() == (project.root / conf.baseline).resolve():
        where = f", set in {conf.baseline_from}" if conf.baseline_from else ""
        raise GraphBudgetError(
            f"{shown} is the baseline file{where}, which holds the measured figures, not "
            f"budgets: write the budgets to another file, e.g. -o {default}"
        )
    if path.suffix != ".toml" or path.name in SKIPPED:
        raise GraphBudgetError(
            f"{shown}: a budget file is a *.toml file not named {' or '.join(SKIPPED)}; "
            f"no run would check this one (e.g. -o {default})"
        )
    roots = [project.root / p for p in conf.budgets] or [project.root / "budgets"]
    if not covered(path, roots):
        paths = f"[tool.graph_budget] budgets ({', '.join(conf.budgets)})"
        collected = paths if conf.budgets else "budgets/"
        collected += f" of {project.root}" if elsewhere else ""
        raise GraphBudgetError(
            f"{shown} is outside {collected}, where check and pytest --graph-budget "
            "collect budget files, so no run would check it: write it there (e.g. -o "
            f"{default}), or add its folder to [tool.graph_budget] budgets in pyproject.toml"
            + ("" if conf.budgets else " (with 'budgets': the paths there replace budgets/)")
        )
    return output


def _existing(output: str, models: list[str], force: bool) -> Any:
    """The budget file already at ``output`` (``None`` when there is none); without
    ``force``, refuse to replace a model it budgets."""
    import tomlkit

    path = Path(output)
    if not path.exists():
        return None
    try:
        document = tomlkit.parse(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GraphBudgetError(f"cannot read {output}: {exc.strerror or exc}") from None
    except tomlkit.exceptions.ParseError as exc:
        raise GraphBudgetError(f"{output}: not valid TOML ({exc})") from None
    present = document.get("models", {})
    clash = [m for m in models if m in present]
    if clash and not force:
        raise GraphBudgetError(
            f"{output} already budgets {', '.join(clash)}; pass --force to replace "
            "those tables (the rest of the file is kept)"
        )
    return document


def _budget_document(
    document: Any, entries: list[tuple[str, Profile]], hardware: Any, args: argparse.Namespace
) -> str:
    """``document`` (or a new one) with a ``[models."<name>"]`` table per entry, as TOML."""
    import tomlkit

    if document is None:
        document = tomlkit.document()
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
        factory = loading.is_factory(name)
        if factory:  # the user's callable builds the model (and its inputs, unless a bare one)
            table["factory"] = name
        table.update(loading.variant(args))  # and profiles it the way init did (mode, dtype)
        for key, value in budget_table(prof, args.headroom).items():
            if not (factory and key in INPUT_KEYS and not args.input_shape):
                table[key] = value
        if name in models:
            del models[name]
        models[name] = table
    return tomlkit.dumps(document)


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


INPUT_KEYS = ("input_shape", "seq_len", "batch")
"""The keys ``budget_table`` writes for the model's input, which a zoo name needs."""


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
    for figure in figures.INITIAL:
        unit = "B" if figure.unit == "bytes" else ""
        entry[str(figure.budget)] = budget_value(getattr(prof, figure.key) * grow, unit)
    share = prof.bottleneck["compute_bound"]["share"]
    floor_share = math.floor(share * (1 - headroom) * 100) / 100
    if floor_share > 0:
        entry["compute_bound_min"] = floor_share
    return {key: value for key, value in entry.items() if value not in ("0", "0B")}


def _measured_comment(prof: Profile) -> str:
    share = prof.bottleneck["compute_bound"]["share"]
    return (
        f"measured: {format_count(prof.flops)} FLOPs, {format_count(prof.macs)} MACs, "
        f"{format_count(prof.params)} params, {format_bytes(prof.peak_memory_bytes)} peak memory, "
        f"{share:.0%} of subgraphs compute-bound ({prof.trace.method} trace)"
    )
