"""``graph-budget profile MODEL --decode --context N``: one generated token of a causal LM
beside the prefill of its N-token context, the step's roofline on every hardware profile, then
the decode step's own profile (per-layer table, top layers, operation types, bottleneck mix).

``--format json`` is ``DecodeProfile.to_dict()`` (schema ``graphbudget.decode/1``); ``csv`` is
the side-by-side table in plain numbers."""

from __future__ import annotations

import argparse
from typing import Any

from pytest_graphbudget.cli import loading, options
from pytest_graphbudget.cli.console import EXIT_OK, Console, format_of, stdout_to_stderr
from pytest_graphbudget.cli.views import intensity, percent, short_bound
from pytest_graphbudget.errors import GraphBudgetError, one_line
from pytest_graphbudget.reports.tables import csv_text, json_text, markdown_table, text_table
from pytest_graphbudget.units import format_bytes, format_count, format_seconds

HARDWARE_HEADERS = ("hardware", "ridge point", "bound", "time per step", "tokens/s")


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--decode",
        action="store_true",
        help="profile one generated token of a causal LM (KV cache of --context positions) "
        "beside the prefill of that context",
    )
    p.add_argument(
        "--context",
        type=options.positive_int,
        metavar="N",
        help="positions in the KV cache for --decode",
    )


def wanted(args: argparse.Namespace) -> bool:
    """Whether ``args`` ask for a decode profile; contradicting options are a usage error."""
    if not args.decode:
        if args.context is not None:
            raise GraphBudgetError("--context needs --decode")
        return False
    if args.context is None:
        raise GraphBudgetError("--decode needs --context N (the positions in the KV cache)")
    for flag, value in (("--seq-len", args.seq_len), ("--input-shape", args.input_shape)):
        if value is not None:
            raise GraphBudgetError(f"{flag} does not apply with --decode: --context sets it")
    given = [f"--{key}" for key in loading.variant(args)]
    if given:
        raise GraphBudgetError(
            f"{' and '.join(given)} not available with --decode (one generated token in eval "
            "mode, in the model's own dtype)"
        )
    return True


def decode_model(args: argparse.Namespace) -> Any:
    """What ``profile_decode`` builds on: a zoo name or model folder as given, or what
    ``package.module:callable`` returns (a causal LM, or a ``ModelCase`` holding one)."""
    from pytest_graphbudget.gate.factories import call_factory

    spec = args.model
    if not loading.is_factory(spec):
        return spec
    if args.meta:
        raise GraphBudgetError(f"--meta applies to zoo models and files; {spec} builds its own")
    try:
        with stdout_to_stderr(), loading.project_code():
            return call_factory(spec, spec)
    except GraphBudgetError:
        raise
    except Exception as exc:  # the user's function failed: bad input, in one line
        raise GraphBudgetError(
            f"{spec}: could not load the model ({one_line(exc, typed=True)})"
        ) from exc


def run(args: argparse.Namespace, console: Console) -> int:
    from pytest_graphbudget.modes.decode import profile_decode

    fmt = format_of(args)
    extra = loading.user_hardware(getattr(args, "hardware_file", None))
    target = loading.hardware(args)
    model = decode_model(args)
    console.progress(f"profiling {args.model}: prefill and decode at context {args.context} ...")
    with stdout_to_stderr():
        result = profile_decode(
            model,
            context=args.context,
            batch=args.batch,
            hardware=target,
            meta=True if args.meta else None,
            hardware_profiles=extra,
        )
    if args.visualize:
        from pytest_graphbudget.reports import visualize

        visualize.write(result.decode, args.visualize)
        console.progress(f"wrote {args.visualize} (the decode step's graph)")
    if args.html:  # the prefill and the decode step, each drawn
        from pytest_graphbudget.reports import html

        title = f"{result.model}: decode at context {result.context}"
        named = [("prefill", result.prefill), ("decode step", result.decode)]
        console.emit(html.profiles_page(title, named), args.html)
    view = {"show_shapes": args.showshape, "depth": args.depth, "top": args.top}
    console.emit(render(result, fmt, **view), args.output)
    return EXIT_OK


def render(result: Any, fmt: str, **view: Any) -> str:
    if fmt == "json":
        return json_text(result.to_dict())
    if fmt == "csv":
        rows = [(key, *values) for key, _label, *values in numbers(result)]
        return csv_text(("figure", "prefill", "decode"), rows)
    from pytest_graphbudget.cli.profile_view import profile_markdown, profile_text

    headers = ("", *columns(result))
    if fmt == "markdown":
        lines = [f"## {result.model}: decode at context {result.context}", ""]
        lines += markdown_table(headers, side_by_side(result), "lrr")
        lines += ["", "### The decode step on every hardware profile", ""]
        lines += markdown_table(HARDWARE_HEADERS, hardware_rows(result), "lrlrr")
        return "\n".join(lines) + "\n\n" + profile_markdown(shown(result.decode), **view)
    lines = [headline(result), ""]
    lines += ["  " + line for line in text_table(headers, side_by_side(result), "lrr")]
    lines += ["", "The decode step on every hardware profile (weights and cache read once)", ""]
    lines += ["  " + line for line in text_table(HARDWARE_HEADERS, hardware_rows(result), "lrlrr")]
    lines += ["", "Decode step", ""]
    return "\n".join(lines) + "\n" + profile_text(shown(result.decode), **view)


def shown(prof: Any) -> Any:
    """The decode step's profile with its cache inputs on one line, ``past_key_values[0..23]
    1x12x1023x64 float32``, when they all have one shape (the JSON keeps one per tensor)."""
    import dataclasses

    cache = [i for i in prof.inputs if i.name.startswith("past_key_values[")]
    if len({(tuple(i.shape), i.dtype) for i in cache}) != 1:
        return prof
    first = cache[0]
    label = dataclasses.replace(first, name=f"past_key_values[0..{len(cache) - 1}]")
    others = [i for i in prof.inputs if i not in cache]
    return dataclasses.replace(prof, inputs=[others[0], label, *others[1:]])


def headline(result: Any) -> str:
    step = result.roofline(result.decode.hardware)
    return (
        f"{result.model}: one generated token after {result.context} positions "
        f"(batch {result.batch}), {short_bound(step.bottleneck)}-bound on {step.hardware} "
        f"(ridge point {step.ridge_point:.1f} FLOPs/byte)"
    )


def columns(result: Any) -> tuple[str, str]:
    batch = f"{result.batch} x " if result.batch > 1 else ""
    return f"prefill ({batch}{result.context} tokens)", f"decode ({batch}1 token)"


def numbers(result: Any) -> list[tuple[str, str, Any, Any]]:
    """``(key, label, prefill, decode)`` for every figure of the side-by-side table."""
    pre, dec = result.prefill, result.decode
    step = result.roofline(dec.hardware)
    return [
        ("flops", "FLOPs", pre.flops, dec.flops),
        ("macs", "MACs", pre.macs, dec.macs),
        ("params", "params", pre.params, dec.params),
        ("weights_bytes", "weights", pre.weights_bytes, dec.weights_bytes),
        ("kv_cache_bytes", "KV cache", result.kv_cache_bytes, result.kv_cache_bytes),
        ("bytes_read", "bytes read (weights + KV cache)", "", result.bytes_read),
        ("traffic_bytes", "traffic (fused kernels)", pre.traffic_bytes, dec.traffic_bytes),
        ("peak_memory_bytes", "peak memory", pre.peak_memory_bytes, dec.peak_memory_bytes),
        (
            "arithmetic_intensity",
            "FLOPs/byte moved",
            pre.arithmetic_intensity,
            dec.arithmetic_intensity,
        ),
        ("step_intensity", "FLOPs/byte read", "", result.arithmetic_intensity),
        ("est_latency_s", f"est. latency ({pre.execution})", pre.est_latency_s, dec.est_latency_s),
        ("step_latency_s", "est. time (bytes read)", "", step.est_latency_s),
        ("memory_bound_time_share", "memory-bound time", *map(_memory_time, (pre, dec))),
    ]


def _memory_time(prof: Any) -> float:
    return prof.bottleneck["memory_bound"]["time_share"]


def side_by_side(result: Any) -> list[tuple[str, str, str]]:
    """The figures of both forwards as text cells."""
    kinds = {
        "flops": format_count,
        "macs": format_count,
        "params": format_count,
        "arithmetic_intensity": intensity,
        "step_intensity": intensity,
        "est_latency_s": format_seconds,
        "step_latency_s": format_seconds,
        "memory_bound_time_share": percent,
    }
    rows = []
    for key, label, *values in numbers(result):
        show = kinds.get(key, format_bytes)
        cells = [show(v) if v != "" else "" for v in values]
        rows.append((label, *cells))
    return rows


def hardware_rows(result: Any) -> list[tuple[str, str, str, str, str]]:
    return [
        (
            r.hardware,
            f"{r.ridge_point:.1f}",
            short_bound(r.bottleneck),
            format_seconds(r.est_latency_s),
            f"{r.tokens_per_s:,.0f}",
        )
        for r in result.by_hardware()
    ]
