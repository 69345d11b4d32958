"""A model whose id changed: a renamed test, fixture, parametrize id, TOML table or file.

Its figures are recorded under the old id, so the model reads ``new`` and its regression
check is skipped, while the old entry matches nothing. A rename must not switch the check off
without a word:

- when exactly one entry whose model is gone has the same module names as the new model
  (and the same variant, ``@train`` ...), the model is compared with that entry, and says
  which one it used (``rematch``);
- several such entries: which one it was cannot be told, so none is used, and it says so;
- otherwise, a model without a baseline in a run where entries matched nothing says so
  (``note_unmatched``), and every report's title counts both ("renamed?").

The module names are those the entry itself records: the modules with FLOPs of their own
(``modules``) and those with parameters (``by_module.params``, when the entry has it), so
that a baseline written before ``by_module`` is still matched. Nothing here imports pytest
or torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.gate.budgets import Finding
from pytest_graphbudget.modes.request import untagged

if TYPE_CHECKING:
    from pytest_graphbudget.gate.baseline import Entry

RENAMED = "baseline.renamed"
"""The key of the notice of a model compared with the entry of another id."""
UNMATCHED = "baseline.unmatched"
"""The key of the notice of a model without a baseline while entries matched nothing."""
KEYS = frozenset({RENAMED, UNMATCHED})
SHOWN = 3  # entries a message names before "and N more"


def module_names(entry: Entry, params: bool = True) -> frozenset[str]:
    """The modules an entry records: with FLOPs of their own, and (``params``) weights."""
    names = set(entry.modules)
    if params:
        names |= set(entry.by_module.get("params", {}))
    return frozenset(names)


ROOTS = frozenset({"", "<root>"})
"""How an entry names the model itself: a model of no submodule (a bare Linear or Conv2d)
names only that, which tells one such model from another by nothing."""


def same_modules(current: Entry, base: Entry) -> bool:
    """Whether two entries name the same modules, as far as ``base`` records them. Models of
    no submodule also need the same parameter count: a Conv2d's new test was matched with a
    Linear's old entry by their one name, and judged against it ("params dropped -94.6%")."""
    params = "params" in base.by_module
    names = module_names(current, params)
    if names != module_names(base, params):
        return False
    return bool(names - ROOTS) or current.figures.get("params") == base.figures.get("params")


def variant(key: str) -> str:
    """An id's variant suffix (``@train+adam``), ``""`` for eval mode in the model's dtype."""
    return key[len(untagged(key)) :]


def orphans_of_test(keys: Iterable[str], nodeid: str, ids: Iterable[str]) -> set[str]:
    """The entries under a test (``<nodeid>::<fixture or label>``) or a budget table (its node
    id, tagged ``@bfloat16`` for a variant) that none of the models it checked this run has: a
    renamed fixture leaves its old entry there, and a table given a ``dtype`` its untagged
    one."""
    prefix, ids = f"{nodeid}::", set(ids)
    return {
        k
        for k in keys
        if (untagged(k) == nodeid or untagged(k).startswith(prefix)) and k not in ids
    }


def quoted(keys: list[str]) -> str:
    """``'a', 'b' and 2 more``."""
    shown = ", ".join(repr(k) for k in keys[:SHOWN])
    return shown + (f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else "")


def records(update: str, what: str) -> str:
    """How the baseline comes to hold ``what``: ``update`` rewrites the file; against a base
    (``update`` is ``""``) there is no file, and the base has it once this branch is merged."""
    if update:
        return f"{update} records {what}"
    return f"against a base there is no file to rewrite: once merged, the base records {what}"


def notice(key: str, message: str) -> dict[str, Any]:
    return asdict(Finding("notice", key, message))


def rematch(result: Any, orphans: Mapping[str, Entry], checker: Any) -> None:
    """Compare a model that has no entry of its own with the one orphan entry that has its
    module names and variant, into ``result`` (a judged ``ModelResult``): its baseline, the
    findings of the comparison and a notice naming the entry. With several such entries it
    only says so: a guess could pass a regression, or fail a model on another's figures."""
    if result.profile is None or result.error is not None or result.baseline is not None:
        return
    from pytest_graphbudget.gate.baseline import compare, entry_from

    current = entry_from(result.profile)
    found = sorted(
        key
        for key, base in orphans.items()
        if variant(key) == variant(result.id) and same_modules(current, base)
    )
    update = checker.fix_command
    if len(found) > 1:
        result.findings.append(
            notice(
                UNMATCHED,
                f"no baseline entry of its own, and {len(found)} entries whose model is gone "
                f"have its modules ({quoted(found)}): renamed? Compared with none of them, as "
                f"which one it was cannot be told; {records(update, 'it under its new id')}",
            )
        )
    if len(found) != 1:
        return
    key = found[0]
    base = orphans[key]
    result.baseline_entry = key
    result.baseline = dict(base.figures)
    result.baseline_modules = dict(base.modules)
    result.baseline_by_module = {k: dict(v) for k, v in base.by_module.items()}
    result.findings.append(
        notice(
            RENAMED,
            f"compared with baseline entry {key!r} (renamed?): it has no entry of its own, and "
            f"that entry's model is gone and had the same modules; "
            f"{records(update, 'it under its new id')}",
        )
    )
    tolerance = result.budget.get("tolerance", 0.0)
    found_now = compare(current, base, tolerance, checker.baseline_name, update, entry=key)
    result.findings += [asdict(f) for f in found_now]


def note_unmatched(results: list[Any], stale: set[str], update: str) -> None:
    """At the end of a run: each model without a baseline, while entries matched nothing,
    says so; an entry that several models were compared with says so in each of them."""
    users: dict[str, list[Any]] = {}
    for result in results:
        if getattr(result, "baseline_entry", None):
            users.setdefault(result.baseline_entry, []).append(result)
    for key, shared in users.items():
        if len(shared) > 1:
            ids = sorted(r.id for r in shared)
            for result in shared:
                result.findings.append(
                    notice(
                        RENAMED,
                        f"baseline entry {key!r} was compared with {len(ids)} models "
                        f"({quoted(ids)}): which one it was cannot be told; "
                        f"{records(update, 'each under its own id')}",
                    )
                )
    left = sorted(set(stale) - set(users))
    if not left:
        return
    entries = "entry" if len(left) == 1 else "entries"
    for result in results:
        if result.profile is None or result.baseline is not None or result.error is not None:
            continue
        if any(f["key"] == UNMATCHED for f in result.findings):
            continue
        result.findings.append(
            notice(
                UNMATCHED,
                f"no baseline entry, while {len(left)} baseline {entries} matched nothing "
                f"({quoted(left)}): renamed? It was compared with none of them; "
                f"{records(update, 'it under its new id and drops them')}",
            )
        )


def stale_entries(
    baseline_keys: set[str],
    collected: set[str],
    root: Path | None = None,
    checked: dict[str, set[str]] | None = None,
    partly: AbstractSet[str] | None = frozenset(),
) -> set[str]:
    """Baseline entries whose model is gone: of budget files or test files run now, whose
    test or table was not collected; of a file that no longer exists under ``root`` (renamed
    or deleted); and under a test whose models were all checked (``checked``: its node id ->
    its models' ids) and one of which has no entry of its own, the ones none of them has
    (a renamed fixture). Files the run selected only part of (``partly``; None: any file)
    have no entries stale for not being collected."""

    files = {nodeid.split("::", 1)[0] for nodeid in collected} if partly is not None else set()
    files -= partly or set()
    stale = set()
    for key in baseline_keys:
        file = key.split("::", 1)[0]
        if file not in files:
            if root is not None and "::" in key and not (root / file).exists():
                stale.add(key)
            continue
        ident = untagged(key)  # the test's or table's id, without ``@train+bfloat16``
        if ident not in collected and ident.rsplit("::", 1)[0] not in collected:
            stale.add(key)
    for nodeid, ids in (checked or {}).items():
        if not ids <= baseline_keys:
            stale |= orphans_of_test(baseline_keys, nodeid, ids)
    return stale


SETTLED = ("baseline.new", "baseline.not_compared", "unchecked")
"""The notices of a model compared with no entry (``check.settle``), which a match undoes."""


def orphans_record(checker: Any, stale: set[str]) -> dict[str, Any] | None:
    """The stale entries' figures, for a shard's JSON report: another shard may have run
    their model under its new id (``rematch_merged``). None when no entry is stale."""
    entries = {k: asdict(checker.baseline.entries[k]) for k in sorted(stale)}
    if not entries or checker.baseline.error:
        return None
    return {"file": checker.baseline_name, "update": checker.fix_command, "entries": entries}


def rematch_merged(
    results: list[Any], records: list[dict[str, Any]], stale: set[str]
) -> dict[str, Any] | None:
    """``graph-budget merge``: each model a shard ran with no entry of its own is compared
    with the one entry another shard found stale that has its modules (``rematch``), as one
    unsharded run compares it; then the notices of ``note_unmatched``. ``records``: the
    shards' ``stale_entries``; ``stale``: the entries no shard ran. Returns the merged run's
    ``stale_entries``, as one run writes them."""
    from types import SimpleNamespace

    from pytest_graphbudget.gate.baseline import Entry

    orphans: dict[str, Entry] = {}
    checker = SimpleNamespace(fix_command="", baseline_name="the baseline")
    for record in records:
        checker = SimpleNamespace(fix_command=record["update"], baseline_name=record["file"])
        for key, entry in record["entries"].items():
            if key in stale:
                orphans.setdefault(key, Entry(**entry))
    for result in results:
        before = list(result.findings)
        rematch(result, orphans, checker)
        if result.baseline is not None and len(result.findings) > len(before):
            # compared now: what its shard said of a model with no entry no longer holds
            kept = [f for f in before if f["key"] not in (*SETTLED, UNMATCHED)]
            result.findings = kept + result.findings[len(before) :]
    note_unmatched(results, stale, checker.fix_command)
    if not orphans:
        return None
    entries = {key: asdict(orphans[key]) for key in sorted(orphans)}
    return {"file": checker.baseline_name, "update": checker.fix_command, "entries": entries}
