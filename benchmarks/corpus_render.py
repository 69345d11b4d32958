"""``docs/corpus.md`` from the corpus's JSON-lines file: what was run, each family's summary,
every model's row, the MACs that differ from FlopCounterMode and the failures.

The file holds one ``{"kind": "run"}`` line per run (versions, machine, load, options) and one
``{"kind": "model"}`` line per model measured (``corpus_measure.py``); a model measured again
(``--retry-failed``) is read from its last line.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path
from typing import Any

from corpus_measure import KNOWN_GAPS  # benchmarks/
from corpus_models import FAMILIES, TITLES

TITLE = "# The corpus against FlopCounterMode (issue 35)"
FAILED = ("failed", "timeout", "crashed")
AGREE = {"equal": "=", "known gap": "gap", "differs": "differs", "no reference": "no ref"}


def read_lines(path: Path) -> list[dict]:
    """Every JSON line of ``path``; a line cut short by a killed run is dropped."""
    found = []
    for line in path.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return found


def read_rows(path: Path) -> dict[tuple[str, str], dict]:
    """``(family, name)`` -> its last row, with the meta-device ``threshold`` of its run."""
    rows, threshold = {}, None
    for r in read_lines(path):
        if r.get("kind") == "run":
            threshold = r.get("options", {}).get("threshold")
        elif r.get("kind", "model") == "model":
            rows[(r["family"], r["name"])] = {"threshold": threshold, **r}
    return rows


def summary(rows: list[dict]) -> dict[str, Any]:
    """One family's figures: counts by status, params and MAC agreement, warm time ratios."""
    count = _counter(rows)
    ok = [r for r in rows if r["status"] == "ok"]
    referenced = [r for r in ok if "macs_ref" in r]
    timed = sorted((r for r in ok if r.get("ratio") is not None), key=lambda r: r["ratio"])
    ratios = [r["ratio"] for r in timed]
    return {
        "tried": len(rows),
        "skipped": count(lambda r: r["status"] == "skipped"),
        "profiled": len(ok),
        "failed": count(lambda r: r["status"] in FAILED),
        "meta": count(lambda r: r.get("meta")),
        "params_exact": sum(r["params"] == r["params_ref"] for r in ok),
        "referenced": len(referenced),
        "equal": sum(r["agreement"] == "equal" for r in referenced),
        "known_gap": sum(r["agreement"] == "known gap" for r in referenced),
        "differs": sum(r["agreement"] == "differs" for r in referenced),
        "ratio_median": statistics.median(ratios) if ratios else None,
        "ratio_p90": ratios[math.ceil(0.9 * len(ratios)) - 1] if ratios else None,
        "worst": (timed[-1]["name"], timed[-1]["ratio"]) if timed else None,
        "seconds": sum(r.get("seconds", 0.0) for r in rows),
        "thresholds": sorted({r["threshold"] for r in rows if r.get("threshold")}),
    }


def _counter(rows: list[dict]) -> Any:
    return lambda test: sum(1 for r in rows if test(r))


def render(path: Path, previous: str = "") -> str:
    """The page of ``path``'s rows. A family the file has no row of keeps what ``previous``
    (the page it replaces) says of it: its summary row, its section and the runs its rows came
    from, so that a run of one family (``--family hf``) leaves the others' figures on the page
    (they had to be put back by hand)."""
    lines = read_lines(path) if path.exists() else []
    runs = [r for r in lines if r.get("kind") == "run"]
    rows = read_rows(path) if path.exists() else {}
    by_family = {f: [r for (fam, _), r in sorted(rows.items()) if fam == f] for f in FAMILIES}
    by_family = {f: found for f, found in by_family.items() if found}
    sums = {f: summary(found) for f, found in by_family.items()}
    kept = _kept(previous, [f for f in FAMILIES if f not in by_family])
    lines = _summary_table(sums)
    by_row = dict(zip(sums, lines[2:], strict=True)) | {f: k["row"] for f, k in kept.items()}
    table = [*lines[:2], *(by_row[f] for f in FAMILIES if f in by_row)]
    header = _header(runs, sums)
    if kept:
        header = _with_kept_runs(header, sums, kept)
    out = [TITLE, "", *header, "", "## Summary", "", *table]
    for family in FAMILIES:
        if family in by_family:
            found = by_family[family]
            out += ["", f"## {TITLES[family]}", "", *_family(family, sums[family], runs, found)]
        elif family in kept:
            out += ["", *kept[family]["section"]]
    return "\n".join(out) + "\n"


def _kept(previous: str, families: list[str]) -> dict[str, dict]:
    """What ``previous`` says of each of ``families`` that has a section there."""
    lines = previous.split("\n")
    runs = _run_paragraphs(previous)
    tried = next((line for line in lines if line.startswith("Tried: ")), "Tried: .")
    kept = {}
    for family in families:
        title = TITLES[family]
        row = next((line for line in lines if line.startswith(f"| {title} | ")), None)
        if f"## {title}" not in lines or row is None:
            continue
        start = lines.index(f"## {title}")
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith(("## ", "Notes ("))),
            len(lines),
        )
        section = lines[start:end]
        while section and not section[-1].strip():
            section.pop()
        clauses = tried.removeprefix("Tried: ").rstrip(".").split("; ")
        kept[family] = {
            "row": row,
            "section": section,
            "tried": next((c for c in clauses if c.startswith(f"{title} ")), title),
            "runs": [text for names, text in runs if title in names],
        }
    return kept


def _run_paragraphs(page: str) -> list[tuple[list[str], str]]:
    """The paragraphs of a page's header that say which runs its rows came from: the families
    they speak for (every family with a section, for one that names none) and what follows
    ``run with``."""
    header = page.split("\n## ", 1)[0]
    sections = [t for t in TITLES.values() if f"\n## {t}\n" in page]
    found = []
    for paragraph in header.split("\n\n"):
        if paragraph.startswith("Run with "):
            found.append((sections, paragraph.removeprefix("Run with ")))
        elif " rows: run with " in paragraph:
            whose, text = paragraph.split(" rows: run with ", 1)
            names = [t for t in TITLES.values() if f"{t}'" in whose]
            found.append((names, text))
    return found


def _with_kept_runs(header: list[str], sums: dict[str, dict], kept: dict[str, dict]) -> list[str]:
    """``header`` with its runs said to be the rendered families' and the kept families' runs
    after them, and ``Tried:`` naming every family in order."""
    at = next(i for i, line in enumerate(header) if line.startswith("Run with "))
    said = [f"{_whose([TITLES[f] for f in sums])} rows: r{header[at][1:]}"] if sums else []
    by_text: dict[str, list[str]] = {}
    for family, found in kept.items():
        for text in found["runs"]:
            by_text.setdefault(text, []).append(TITLES[family])
    said += [f"{_whose(names)} rows: run with {text}" for text, names in by_text.items()]
    tried = [line for line in header if line.startswith("Tried: ")][0]
    said_tried = tried.removeprefix("Tried: ").rstrip(".").split("; ") if sums else []
    clauses = dict(zip(sums, said_tried, strict=True))
    clauses |= {f: k["tried"] for f, k in kept.items()}
    merged = "Tried: " + "; ".join(clauses[f] for f in FAMILIES if f in clauses) + "."
    out = [*header[:at], *"\n\n".join(said).split("\n"), *header[at + 1 :]]
    return [merged if line.startswith("Tried: ") else line for line in out]


def _whose(titles: list[str]) -> str:
    """``timm's``, ``transformers' and diffusers'``: whose rows a paragraph speaks of."""
    owned = [t + ("'" if t.endswith("s") else "'s") for t in titles]
    return owned[0] if len(owned) == 1 else ", ".join(owned[:-1]) + " and " + owned[-1]


def _header(runs: list[dict], sums: dict[str, dict]) -> list[str]:
    last = runs[-1] if runs else {}
    versions = last.get("versions", {})
    stack = ", ".join(f"{k} {v}" for k, v in versions.items() if v and k != "pytest-graphbudget")
    options = last.get("options", {})
    started = ", ".join(f"{r['started']} (1-min load {r['load']:.2f})" for r in runs)
    return [
        "Written by `benchmarks/corpus.py` (`make corpus`) from its JSON-lines file "
        "(`benchmarks/data/corpus.jsonl`); rerendered by `--render-only`, hand notes kept below "
        "a line that starts `Notes (`.",
        "",
        f"Run with {stack}, Python {last.get('python', '?')}, on {last.get('machine', '?')} "
        f"({last.get('processor', '?')}); {len(runs)} run{'s' * (len(runs) != 1)} into the "
        f"file, started {started or 'never'}.",
        "",
        "Each model in a worker process (a fresh one every 25 models, or after a timeout of "
        f"{options.get('timeout', 0):g} s or a crash), `pretrained=False` and built from its "
        "defaults, nothing downloaded; on the meta device above "
        f"{_thresholds(sums, options.get('threshold', 0))} (counted there first), real weights "
        "below; a model on the meta device whose forward reads a value (`.item()`, `nonzero`) "
        "is built again with real weights up to 2B parameters (its tier says `weights`). Ours: "
        "`profile_model(model, args, kwargs)`; FlopCounterMode: one forward under "
        "`torch.no_grad()` with SDPA forced to the math backend, its MACs half its FLOPs, a "
        "float32 mixture of experts' `_grouped_mm` (no formula there, no float32 kernel on "
        "the meta device) run as transformers' `batched_mm`; both seeded alike (a model may "
        "draw its shapes). Warm "
        "times: one call of each, then "
        f"{options.get('repeats', 0)} alternating pairs (1 for a model whose first call took "
        "over 2 s), medians; ratio = ours / FlopCounterMode; the build is not counted. "
        "`params` is ours, checked against `sum(p.numel() for p in model.parameters())`.",
        "",
        "Tried: " + "; ".join(_tried(f, s, runs) for f, s in sums.items()) + ".",
    ]


def _thresholds(sums: dict[str, dict], default: float) -> str:
    """The meta-device line, per family where the runs of its rows drew it differently."""
    by: dict[float, list[str]] = {}
    for family, found in sums.items():
        for t in found.get("thresholds") or [default]:
            by.setdefault(t, []).append(TITLES[family])
    if len(by) <= 1:
        return f"{next(iter(by), default) / 1e6:g}M parameters"
    said = [f"{t / 1e6:g}M for {' and '.join(names)}" for t, names in sorted(by.items())[::-1]]
    return said[0].replace("M for", "M parameters for", 1) + ", " + ", ".join(said[1:])


def _tried(family: str, found: dict, runs: list[dict]) -> str:
    listed = {f: n for run in runs for f, n in run.get("listed", {}).items()}.get(family)
    of = f" of {listed:,} listed" if listed else ""
    return f"{TITLES[family]} {found['tried']:,}{of}"


def _summary_table(sums: dict[str, dict]) -> list[str]:
    out = [
        "| family | tried | skipped | profiled | failed | params exact | MACs equal | known gap "
        "| differ | ratio median | p90 | worst |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for family, s in sums.items():
        worst = f"{s['worst'][1]:.2f}x `{s['worst'][0]}`" if s["worst"] else ""
        out.append(
            f"| {TITLES[family]} | {s['tried']} | {s['skipped']} | "
            f"{s['profiled']} ({_pct(s['profiled'], s['tried'])}) | {s['failed']} | "
            f"{_pct(s['params_exact'], s['profiled'])} | {_pct(s['equal'], s['referenced'])} | "
            f"{_pct(s['known_gap'], s['referenced'])} | {_pct(s['differs'], s['referenced'])} | "
            f"{_x(s['ratio_median'])} | {_x(s['ratio_p90'])} | {worst} |"
        )
    return out


def _family(family: str, s: dict, runs: list[dict], rows: list[dict]) -> list[str]:
    ran = s["tried"] - s["skipped"]
    worst = f", worst {s['worst'][1]:.2f}x (`{s['worst'][0]}`)" if s["worst"] else ""
    out = [
        f"- tried {_tried(family, s, runs)}, "
        f"{s['skipped']} skipped (not built or not run from their defaults, see below), "
        f"{s['meta']} on the meta device; {s['seconds'] / 60:.1f} min in all, "
        f"{s['seconds'] / max(s['tried'], 1):.1f} s a model;",
        f"- profiled: {s['profiled']} ({_pct(s['profiled'], s['tried'])} of those tried, "
        f"{_pct(s['profiled'], ran)} of the {ran} that build and run); "
        f"failed {s['failed']} (ours raised, timed out or crashed);",
        f"- params exact: {s['params_exact']} of {s['profiled']} "
        f"({_pct(s['params_exact'], s['profiled'])});",
        f"- MACs against FlopCounterMode ({s['referenced']} with its figure): equal "
        f"{s['equal']} ({_pct(s['equal'], s['referenced'])}), known gap {s['known_gap']} "
        f"({_pct(s['known_gap'], s['referenced'])}), differ {s['differs']} "
        f"({_pct(s['differs'], s['referenced'])});",
        f"- warm time ratio ours / FlopCounterMode: median {_x(s['ratio_median'])}, "
        f"p90 {_x(s['ratio_p90'])}{worst}.",
        "",
        "| model | tier | params | MACs | FlopCounterMode | agree | ours s | theirs s | ratio |",
        "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
        *(_row(r) for r in rows if r["status"] == "ok"),
    ]
    differ = [r for r in rows if r.get("agreement") in ("known gap", "differs")]
    if differ:
        out += ["", f"### {TITLES[family]}: MACs that differ", "", *map(_differs, differ)]
    failed = [r for r in rows if r["status"] != "ok" or r.get("agreement") == "no reference"]
    if failed:
        out += ["", f"### {TITLES[family]}: failures", "", *map(_failure, failed)]
    return out


def _row(r: dict) -> str:
    tier = r["tier"] + (", meta" if r.get("meta") else ", weights" if r.get("real_after") else "")
    return (
        f"| `{r['name']}` | {tier} | {_si(r['params'])} | {_si(r['macs'])} | "
        f"{_si(r.get('macs_ref'))} | {AGREE[r['agreement']]} | {_s(r.get('ours_s'))} | "
        f"{_s(r.get('theirs_s'))} | {_x(r.get('ratio'))} |"
    )


def _differs(r: dict) -> str:
    delta = (r["macs"] - r["macs_ref"]) / r["macs_ref"] if r["macs_ref"] else math.inf
    label = "known gap" if r["agreement"] == "known gap" else "to investigate"
    gaps = [f"{op}: {KNOWN_GAPS.get(op, '?')}" for op in r.get("gap_ops", ())]
    ops = f" ({', '.join(gaps)})" if gaps else ""
    unsupported = r.get("unsupported") or {}
    ours_missing = f"; ours left unpriced: {', '.join(sorted(unsupported))}" if unsupported else ""
    return (
        f"- `{r['name']}`: ours {r['macs']:,} MACs, FlopCounterMode {r['macs_ref']:,} "
        f"({delta:+.2%}); {label}{ops}{ours_missing}"
    )


def _failure(r: dict) -> str:
    status = "no FlopCounterMode figure" if r["status"] == "ok" else r["status"]
    return f"- `{r['name']}` ({status}): {_no_paths(r.get('reason', ''))}"


def _no_paths(text: str) -> str:
    """A reason without the machine's paths: a module's file as its place in site-packages."""
    text = re.sub(r"/\S*?/site-packages/", "", text)
    return re.sub(r"(?<![\w.])/(?:[\w.-]+/)+([\w.-]+)", r"\1", text)


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _x(ratio: float | None) -> str:
    return f"{ratio:.2f}x" if ratio is not None else "-"


def _s(seconds: float | None) -> str:
    return f"{seconds:.3f}" if seconds is not None else "-"


def _si(value: int | None) -> str:
    """``11.69M``, ``1.814G``: four significant figures, the unit a power of 1000."""
    if value is None:
        return "-"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.4g}{unit}"
    return str(value)
