"""``graph-budget compare A B``: two models or two saved JSON profiles side by side, totals
and per-module differences (B - A); ``--max-growth`` makes it a check (exit 1)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_graphbudget.cli import loading, options
from pytest_graphbudget.cli.console import (
    EXIT_FAILED,
    EXIT_OK,
    PROG,
    Console,
    check_writable,
    format_of,
    refuse_reading_into,
)
from pytest_graphbudget.cli.saved import COMPARED, GROWTH_CHECKED, read_profile_json
from pytest_graphbudget.cli.views import inputs_text
from pytest_graphbudget.engine.profile import layer_label
from pytest_graphbudget.gate import figures
from pytest_graphbudget.gate.figures import grew_beyond
from pytest_graphbudget.reports.compare_rows import delta, total_rows
from pytest_graphbudget.reports.tables import csv_text, json_text, markdown_table, text_table


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "compare",
        parents=[options.quiet(), options.model()],
        formatter_class=options.Formatter,
        help="two models or two saved JSON profiles side by side",
        description="Compare A and B, each a model or a JSON profile saved by "
        f"`{PROG} profile MODEL --format json -o FILE.json`: totals and per-module "
        "differences (B - A).",
    )
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    options.output_options(p)
    shown = p.add_mutually_exclusive_group()  # --top 5 --all had shown all, without a word
    shown.add_argument(
        "--top", type=options.positive_int, default=20, metavar="N", help="modules shown (20)"
    )
    shown.add_argument("--all", action="store_true", help="show every module that differs")
    p.add_argument(
        "--max-growth",
        type=options.share("--max-growth"),
        metavar="RATIO",
        help="exit 1 when B's FLOPs, MACs, params or peak memory exceed A's by more (2%%)",
    )
    options.html_option(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, console: Console) -> int:
    fmt = format_of(args)
    check_writable(args.output)
    check_writable(args.html, "--html")
    refuse_reading_into({"--output": args.output, "--html": args.html}, [args.a, args.b])
    if args.hardware is not None or any(
        Path(s).suffix.lower() != ".json" for s in (args.a, args.b)
    ):
        loading.hardware(args)  # an unknown --hardware fails before any model is built
    a = _load_side(args.a, args, console)
    b = _load_side(args.b, args, console)
    result = compare(_as_dict(a), _as_dict(b), top=None if args.all else args.top)
    if result["a"]["mode"] != result["b"]["mode"]:
        console.note(
            f"A is {result['a']['mode']} mode, B is {result['b']['mode']} mode: the change is "
            "mostly the backward and optimizer, not the model (profile both with one --mode)"
        )
    if _priced_on(result["a"]) != _priced_on(result["b"]):
        console.note(
            f"A's estimated latency is priced on {_priced_on(result['a'])}; B's on "
            f"{_priced_on(result['b'])}: they are not comparable as a regression (profile both "
            "with one --hardware and one --execution)"
        )
    elif changed := _changed_figures(_as_dict(a)["hardware"], _as_dict(b)["hardware"]):
        console.note(
            f"A and B are priced on {result['a']['hardware']}, but its figures differ between "
            f"them ({changed}): the profile changed, so their estimated latencies are not "
            "comparable as a regression"
        )
    failures = _over_growth(result, args.max_growth)
    unpriced = _unpriced(_as_dict(a), _as_dict(b))
    if args.max_growth is not None:  # the files say the verdict the exit status gives
        failures += _uncounted(_as_dict(a), _as_dict(b))
        result = {**result, "max_growth": args.max_growth, "failures": failures}
        result["warnings"] = unpriced
    if args.html:  # after the verdict: the page had none, a failed check looked clean
        from pytest_graphbudget.reports import html

        console.emit(html.compare_page(a, b, result), args.html)
    console.emit(render_compare(result, fmt), args.output)
    for failure in failures:
        console.failure(failure)
    return EXIT_FAILED if failures else EXIT_OK


def _over_growth(result: Mapping[str, Any], limit: float | None) -> list[str]:
    """Each figure that grew more than ``--max-growth`` from A to B, said in one line."""
    found = []
    for figure in GROWTH_CHECKED if limit is not None else ():
        old, new = result["totals"][figure.key]["a"], result["totals"][figure.key]["b"]
        # From 0 any growth is beyond every ratio: the baseline gate's "regressed from 0".
        if grew_beyond(old, new, limit):
            growth = f"{new / old - 1:+.1%}" if old else "from 0"
            found.append(
                f"{figure.label} grew {growth} ({figure.format(old)} -> {figure.format(new)}), "
                f"more than --max-growth {limit:.1%}"
            )
    return found


def _uncounted(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """A side with no FLOPs and no parameter counted: ``--max-growth`` has nothing to check
    there, so it fails rather than pass two empty sides (the gate fails such a model too)."""
    return [
        f"{label} ({side['model']}) counted no FLOPs and no parameter: nothing for "
        "--max-growth to check (ops without a cost formula?)"
        for label, side in (("A", a), ("B", b))
        if not side["totals"]["flops"] and not side["totals"]["params"]
    ]


def _unpriced(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Each side's ops without a cost formula: their growth is not counted (the gate's
    "with unpriced ops" warning), said in the written comparison, not only on stderr."""
    found = []
    for label, side in (("A", a), ("B", b)):
        if ops := (side.get("coverage") or {}).get("unsupported_ops"):
            named = ", ".join(f"{op} x{n}" for op, n in sorted(ops.items()))
            found.append(
                f"{label} ({side['model']}) has ops without a cost formula ({named}): their "
                "FLOPs, and any growth in them, are not counted"
            )
    return found


def _load_side(source: str, args: argparse.Namespace, console: Console) -> Any:
    """A saved profile (a ``.json`` file, as its dictionary) or a model profiled now (a
    ``Profile``, whose graph the HTML report draws)."""
    path = Path(source)
    how = loading.variant(args)
    if _is_saved(path):
        saved = read_profile_json(source)
        if given := given_flags(args):  # a saved profile takes none of them: say so
            verb = "applies" if len(given) == 1 else "apply"
            console.note(
                f"{source} is a saved profile ({saved.get('mode', 'eval')}, "
                f"{saved.get('dtype', 'its own dtype')}): {', '.join(given)} {verb} to models "
                "profiled now"
            )
        if ops := (saved.get("coverage") or {}).get("unsupported_ops"):  # as profiled now
            named = ", ".join(f"{op} x{n}" for op, n in sorted(ops.items()))
            console.note(f"{source}: no cost formula for {named}; their FLOPs are not counted")
        return saved
    case = loading.load_case(source, args, console)
    return loading.profile_case(case, loading.hardware(args), console, how)


PROFILING_FLAGS = (
    "hardware",
    "hardware_file",
    "execution",
    "mode",
    "optimizer",
    "dtype",
    "parallel",
)
"""The options of how a model is profiled, which a saved profile cannot take."""
INPUT_FLAGS = ("seq_len", "batch", "input_shape", "meta")
"""The options of how a model is built: a saved profile cannot take them either, but a model
compared with it may need them (``--input-shape`` for a ``.pt`` file)."""


def given_flags(args: argparse.Namespace) -> list[str]:
    """``--hardware a100``, ...: the options given on the command line that a saved profile
    cannot take, as typed there (the project's defaults were never asked of it); the input
    options only when no side is a model that takes them."""
    keys = PROFILING_FLAGS
    if all(_is_saved(Path(side)) for side in (args.a, args.b)):
        keys += INPUT_FLAGS
    flags = []
    for key in keys:
        value = getattr(args, key, None)
        if value is None or value is False or (key == "mode" and value == "eval"):
            continue
        flag = "--" + key.replace("_", "-")
        shown = ",".join(map(str, value)) if isinstance(value, list | tuple) else value
        flags.append(flag if value is True else f"{flag} {shown}")
    return flags


def _as_dict(side: Any) -> Mapping[str, Any]:
    return side if isinstance(side, Mapping) else side.to_dict()


def _is_saved(path: Path) -> bool:
    """Whether a side names a saved JSON profile rather than a model to profile now."""
    return path.suffix.lower() == ".json" or (path.is_file() and not _is_model_file(path))


def _is_model_file(path: Path) -> bool:
    return path.suffix.lower() in (".pt", ".pth", ".pt2", ".yaml", ".yml")


# ---------------------------------------------------------------------------------------------
# The comparison and its views


def _change(x: float, y: float) -> dict[str, Any]:
    return {"a": x, "b": y, "delta": y - x, "ratio": (y / x) if x else None}


def compare(a: Mapping[str, Any], b: Mapping[str, Any], top: int | None = 20) -> dict[str, Any]:
    """The comparison of two profiles (``to_dict()`` form) as a dictionary: totals with their
    change, the bottleneck mix, and the modules whose figures differ, largest FLOPs change
    first (``top`` of them, ``None`` for all)."""
    totals = {
        f.key: _change(a["totals"][f.key], b["totals"][f.key])
        for f in COMPARED
        if f.key in a["totals"] and f.key in b["totals"]  # measured figures: when both are
    }
    for label in ("compute_bound", "memory_bound"):
        x = a["bottleneck"][label]["share"]
        y = b["bottleneck"][label]["share"]
        totals[f"{label}_share"] = _change(x, y)
    modules = []
    zero = {"flops": 0, "macs": 0, "params": 0}
    for path in sorted(set(a["modules"]) | set(b["modules"])):
        x, y = a["modules"].get(path), b["modules"].get(path)
        if _figures(x) == _figures(y):  # the same module, its class recorded or not
            continue
        xs, ys = x or zero, y or zero
        delta = {key: ys[key] - xs[key] for key in ("flops", "macs", "params")}
        status = "added" if x is None else "removed" if y is None else "changed"
        modules.append({"module": path, "status": status, "a": x, "b": y, "delta": delta})
    modules.sort(key=lambda m: (-abs(m["delta"]["flops"]), -abs(m["delta"]["params"]), m["module"]))
    return {
        "schema": "graphbudget.compare/1",
        "a": _side(a),
        "b": _side(b),
        "totals": totals,
        "modules_changed": len(modules),
        "modules": modules if top is None else modules[:top],
    }


def _figures(module: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A module's figures, without its class (``type``), which older profiles lack."""
    return None if module is None else {k: v for k, v in module.items() if k != "type"}


def _side(prof: Mapping[str, Any]) -> dict[str, Any]:
    """Who a side is: a training step's figures are ~3x its forward's, so its mode too; and
    the hardware and execution its estimated latency was priced for (``execution`` is None in
    a profile saved before it was recorded)."""
    keys = ("model", "inputs")
    return {
        **{k: prof[k] for k in keys},
        "mode": prof.get("mode", "eval"),
        "hardware": prof["hardware"]["name"],
        "execution": prof.get("execution"),
        "dtype": prof.get("dtype"),
    }


def _priced_on(side: Mapping[str, Any]) -> str:
    """``h100, compiled``: what a side's estimated latency was priced for."""
    return f"{side['hardware']}, {side.get('execution') or 'execution not recorded'}"


def _changed_figures(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """``bandwidth 50 -> 5 GB/s``: the roofline figures two profiles of one hardware name
    were priced with, where they differ (a project profile edited between them); else
    whether anything else they were priced from differs (``pricing``, a digest of it)."""
    found = []
    for key, label, unit, scale in (
        ("peak_flops_per_s", "peak", "TFLOP/s", 1e12),
        ("bandwidth_bytes_per_s", "bandwidth", "GB/s", 1e9),
    ):
        x, y = a.get(key), b.get(key)
        if x is not None and y is not None and x != y:
            found.append(f"{label} {x / scale:g} -> {y / scale:g} {unit}")
    x, y = a.get("pricing"), b.get("pricing")  # absent in profiles saved before it was written
    if not found and x and y and x != y:
        found.append("its family, fitted shares, launch cost or calibrated rates")
    return ", ".join(found)


def _label(side: Mapping[str, Any], other: Mapping[str, Any] | None = None) -> str:
    """Who a side is; its model's dtype too where the ``other`` side's differs (a float32 and
    an int8 profile of one model had read alike)."""
    step = ", training step" if side.get("mode") == "train" else ""
    if other is not None and side.get("dtype") != other.get("dtype"):
        step += f", model {side.get('dtype') or 'dtype not recorded'}"
    return f"{side['model']} on {_priced_on(side)} ({inputs_text(side['inputs'])}{step})"


def _total_rows(result: Mapping[str, Any]) -> list[list[str]]:
    return [row for _, row in total_rows(result)]  # as the HTML page's (``compare_rows``)


FLOPS, PARAMS = figures.get("flops"), figures.get("params")


def _module_rows(result: Mapping[str, Any], code: bool = False) -> list[list[str]]:
    rows = []
    for m in result["modules"]:
        x, y = m["a"] or {}, m["b"] or {}
        name = layer_label(m["module"], (y or x).get("type")) if m["module"] else "(model)"
        rows.append(
            [
                f"`{name}`" if code else name,
                m["status"],
                FLOPS.format(x["flops"]) if x else "-",
                FLOPS.format(y["flops"]) if y else "-",
                delta(x.get("flops", 0), y.get("flops", 0), FLOPS),
                PARAMS.format(x["params"]) if x else "-",
                PARAMS.format(y["params"]) if y else "-",
                delta(x.get("params", 0), y.get("params", 0), PARAMS),
            ]
        )
    return rows


TOTAL_HEADERS = ["metric", "A", "B", "change (B - A)"]
MODULE_HEADERS = [
    "module",
    "status",
    "A FLOPs",
    "B FLOPs",
    "change",
    "A params",
    "B params",
    "change",
]


def compare_text(result: Mapping[str, Any]) -> str:
    a, b = result["a"], result["b"]
    lines = [f"A: {_label(a, b)}", f"B: {_label(b, a)}", ""]
    lines += text_table(TOTAL_HEADERS, _total_rows(result), "lrrr")
    lines += [""]
    shown, changed = len(result["modules"]), result["modules_changed"]
    if not changed:
        lines.append("Per-module figures are identical.")
    else:
        more = f" (the {shown} largest FLOPs changes)" if shown < changed else ""
        lines += [f"Modules that differ: {changed}{more}", ""]
        lines += text_table(MODULE_HEADERS, _module_rows(result), "llrrrrrr")
    return "\n".join(lines) + "\n"


def compare_markdown(result: Mapping[str, Any]) -> str:
    lines = [
        f"## {result['a']['model']} vs {result['b']['model']}",
        "",
        f"- A: {_label(result['a'], result['b'])}",
        f"- B: {_label(result['b'], result['a'])}",
        "",
    ]
    lines += markdown_table(TOTAL_HEADERS, _total_rows(result))
    if "failures" in result:  # --max-growth: its verdict, in the file a PR comment posts
        said = [f"- ❌ {f}" for f in result["failures"]] or ["- ✅ within --max-growth"]
        said += [f"- ⚠️ {w}" for w in result.get("warnings", ())]
        lines += ["", *said]
    lines += ["", f"### Modules that differ: {result['modules_changed']}", ""]
    if result["modules"]:
        lines += markdown_table(MODULE_HEADERS, _module_rows(result, code=True), "llrrrrrr")
    return "\n".join(lines) + "\n"


def compare_csv(result: Mapping[str, Any]) -> str:
    """One row per total and per differing module: ``section,name,a,b,delta``."""
    rows = []
    for key, t in result["totals"].items():
        rows.append(["total", key, t["a"], t["b"], t["delta"]])
    for m in result["modules"]:
        x, y = m["a"] or {}, m["b"] or {}
        for key in ("flops", "macs", "params"):
            rows.append(
                [f"module.{key}", m["module"], x.get(key, ""), y.get(key, ""), m["delta"][key]]
            )
    return csv_text(["section", "name", "a", "b", "delta"], rows)


def render_compare(result: Mapping[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json_text(result)
    if fmt == "csv":
        return compare_csv(result)
    if fmt == "markdown":
        return compare_markdown(result)
    return compare_text(result)
