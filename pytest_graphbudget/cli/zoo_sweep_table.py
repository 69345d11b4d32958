"""The zoo sweep's Markdown (``docs/zoo.md``): a summary per family, a row per model, the failures.

Pure text from ``Result`` rows, so ``--from-json`` re-renders an earlier sweep without profiling.
"""

from __future__ import annotations

from pytest_graphbudget.cli.zoo_sweep_worker import Result, shorten

TIERS = ("fx", "dynamo", "dynamo-breaks", "eager")
"""The tracing tiers, in the order they are tried: one column each in the summary."""


def render(results: list[Result], *, total_seconds: float, environment: str) -> str:
    lines = [
        "# Model zoo sweep",
        "",
        "Every model the zoo names but timm's and diffusers' (`make corpus` profiles those), "
        "built offline and profiled at its default inputs "
        "(`python -m pytest_graphbudget.cli.zoo_sweep`, run by `make zoo`; "
        "this file is generated).",
        "",
        f"{environment}. Hardware profile `generic`; one forward pass, batch 1, float32. "
        f"Building and profiling took {total_seconds / 60:.1f} min in all.",
        "",
        "- **tier**: the tracing tier that captured the graph: `fx`, else `eager` (one taped "
        "forward: every op it runs, fused as a compiler would; on fake tensors for a model on "
        "the meta device), and `dynamo` (export) or `dynamo-breaks` (the graphs between "
        "Dynamo's graph breaks, stitched) when asked for.",
        "- **compute-bound**: share of fused subgraphs that are compute-bound on `generic`.",
        "- **peak memory**: weights + inputs + peak of live activations.",
        "- **seconds**: building the model and profiling it, on a shared 2-core machine.",
        "- **published**: the model authors' own figure (torchvision's `_ops` GMACs at the "
        "weights' input size; ultralytics' YAML comment, thop GFLOPs at 640).",
        "",
    ]
    groups = list(dict.fromkeys(r.group or r.family for r in results))
    lines += _summary(results, groups)
    for group in groups:
        lines += [
            "",
            f"## {group}",
            "",
            "| model | tier | GFLOPs | GMACs | params | peak memory | compute-bound | seconds "
            "| published | notes |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
        ]
        for r in (r for r in results if (r.group or r.family) == group):
            lines.append(_row(r))
    failures = [r for r in results if not r.ok]
    if failures:
        lines += ["", "## Failures", ""]
        lines += [f"- `{r.name}` ({r.family}): {_escape(_reason(r))}" for r in failures]
    lines += _fallbacks(results)
    return "\n".join(lines) + "\n"


def _summary(results: list[Result], groups: list[str]) -> list[str]:
    lines = [
        "## Summary",
        "",
        f"| family | models | {' | '.join(TIERS)} | failed | with unsupported ops |",
        "| --- | ---: |" + " ---: |" * len(TIERS) + " ---: | ---: |",
    ]
    for group in groups:
        rows = [r for r in results if (r.group or r.family) == group]
        lines.append(_summary_row(group, rows))
    lines.append(_summary_row("**all**", results))
    return lines


def _summary_row(group: str, rows: list[Result]) -> str:
    by_tier = [str(sum(r.ok and r.tier == tier for r in rows)) for tier in TIERS]
    return (
        f"| {group} | {len(rows)} | {' | '.join(by_tier)} | {sum(not r.ok for r in rows)} | "
        f"{sum(r.ok and bool(r.unsupported_ops) for r in rows)} |"
    )


def _row(r: Result) -> str:
    notes = []
    if r.graphs:
        notes.append(f"{r.graphs} graphs, {r.breaks} break{'' if r.breaks == 1 else 's'}")
    if r.unsupported_ops:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(r.unsupported_ops.items()))
        notes.append(f"unsupported: {ops}")
    if r.note:
        notes.append(r.note)
    if not r.ok:
        return (
            f"| `{r.name}` | failed | | | | | | {r.seconds:.1f} | {r.reference} | "
            f"{_escape(_reason(r))} |"
        )
    return (
        f"| `{r.name}` | {r.tier} | {r.flops / 1e9:.3f} | {r.macs / 1e9:.3f} | "
        f"{r.params / 1e6:.2f}M | {r.peak_memory_bytes / 1e6:.1f} MB | "
        f"{r.compute_bound_share * 100:.0f}% | {r.seconds:.1f} | {r.reference} | "
        f"{_escape('; '.join(notes))} |"
    )


def _fallbacks(results: list[Result]) -> list[str]:
    """The earlier tiers' reasons for models a later tier traced, most common first."""
    fallbacks: dict[tuple[str, str], list[str]] = {}
    for r in results:
        if r.ok:
            for tier, why in r.tier_failures.items():
                key = (tier, shorten(_first_sentence(why), 200))
                fallbacks.setdefault(key, []).append(r.name)
    if not fallbacks:
        return []
    lines = [
        "",
        "## Earlier tiers that failed, for models a later tier traced",
        "",
        "| tier | reason | models |",
        "| --- | --- | --- |",
    ]
    for (tier, why), names in sorted(fallbacks.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(f"`{n}`" for n in names)
        lines.append(f"| {tier} | {_escape(why)} | {len(names)}: {shown} |")
    return lines


def _first_sentence(text: str) -> str:
    """``"Proxy object cannot be iterated. This can be ..."`` -> its first sentence."""
    head, sep, _ = text.partition(". ")
    return head + "." if sep and len(head) >= 20 else text


def _reason(result: Result) -> str:
    """Why a model failed, one line: each tier's first sentence, or the error."""
    if result.tier_failures and not result.ok:
        return "; ".join(
            f"{tier}: {shorten(_first_sentence(why), 200)}"
            for tier, why in result.tier_failures.items()
        )
    return result.error


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def environment() -> str:
    """The model libraries' versions, for the table's header."""
    from importlib import metadata

    versions = []
    for dist in ("torch", "torchvision", "transformers", "ultralytics"):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(versions) or "no model libraries installed"
