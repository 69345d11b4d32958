"""The end of a budget run, for the plugin and ``graph-budget check`` alike: stale baseline
entries, the baseline rewritten (with ``--update``), the report files written."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_graphbudget.gate.check import Checker, ModelResult
    from pytest_graphbudget.reports import Written
    from pytest_graphbudget.reports.json_report import Collection


@dataclass
class Outputs:
    """Where the report files go: paths as the user gave them, relative to ``here``;
    ``root`` is the project's root, that the markdown report's links start from."""

    here: Path
    root: Path
    junit: str | None = None
    json: str | None = None
    markdown: str | None = None
    html: str | None = None
    history: str | None = None  # the history file a line per model is appended to
    settings: dict[str, Any] | None = None
    """The run's flags that change its figures or verdicts (``run_settings``), for the JSON:
    ``merge`` refuses shards run with different ones."""


def checked_tests(results: list[ModelResult]) -> dict[str, set[str]]:
    """The ids of each test's or budget table's models (node id -> ids), for those that
    checked every model they have: none of them failed before its profile (an error without
    one; strict's "no entry" error has one, and its old entry is the stale one)."""
    found: dict[str, set[str]] = {}
    failed = {r.nodeid for r in results if r.error is not None and r.profile is None}
    for result in results:
        if result.source in ("marker", "toml") and result.nodeid not in failed:
            found.setdefault(result.nodeid, set()).add(result.id)
    return found


def stale_errors(stale: set[str], checker: Checker) -> list[ModelResult]:
    """Under ``strict`` (a closed gate), each stale baseline entry is an error of its own at
    its line of the baseline: a renamed test, table or parametrize id must not leave its
    model unchecked against the figures it had. None when the run rewrites the baseline."""
    from pytest_graphbudget.gate.budgets import Budget
    from pytest_graphbudget.gate.check import ModelResult, budget_dict
    from pytest_graphbudget.gate.toml_lines import key_lines

    if not checker.strict or checker.update or not stale:
        return []
    try:
        lines = key_lines(checker.baseline_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        lines = {}
    message = (
        "stale baseline entry: no model of this run has this id (renamed or removed?; "
        "strict: a stale entry is an error); rename the entry to the model's new id, or "
        f"remove it with {checker.update_command}"
    )
    if checker.compared_with:  # the entry is the base's: nothing here to rename or remove
        message = (
            f"{checker.baseline_name} has a model that no model of this run has (renamed or "
            "removed on this branch?; strict: a model of the base left unchecked is an "
            "error); if intended, say so in review"
        )
    return [
        ModelResult(
            key,
            key.rsplit("::", 1)[-1],
            key,
            checker.baseline_name,
            lines.get(("models", key), 1),
            budget_dict(Budget()),
            error=message,
            source="toml",
        )
        for key in sorted(stale)
    ]


def not_run(model_id: str, why: str) -> ModelResult:
    """A budgeted model its run never reported (a lost shard, a crashed worker): an error, so
    a model never checked is never green."""
    from pytest_graphbudget.gate.check import ModelResult

    path, name = model_id.split("::", 1)[0], model_id.rpartition("::")[2]
    source = "toml" if path.endswith(".toml") else "marker"
    budget: dict[str, Any] = {"limits": {}}
    return ModelResult(
        model_id, name, model_id, path, 0, budget, error=f"not run: {why}", source=source
    )


def finish(
    results: list[ModelResult],
    stale: set[str],
    checker: Checker,
    outputs: Outputs,
    collection: Collection | None = None,
) -> tuple[Written, bool]:
    """Rewrite the baseline if the run updates it, then write the reports; what was written
    (with a one-line problem for each file that could not be) and whether the baseline was
    left unwritten. ``collection``: a pytest run's budgeted items, for the JSON report."""
    from pytest_graphbudget import reports
    from pytest_graphbudget.gate import baseline as baseline_file
    from pytest_graphbudget.gate.environment import current
    from pytest_graphbudget.gate.renames import note_unmatched, orphans_record

    if not checker.update:
        note_unmatched(results, stale, checker.fix_command)
    problems = []
    unwritten = False
    if checker.update:
        entries = {
            r.id: baseline_file.entry_from(r.profile) for r in results if r.profile is not None
        }
        try:
            environment = current(checker.root or outputs.root)
            baseline_file.update(checker.baseline_path, entries, stale, environment)
        except OSError as exc:
            problems.append(reports.cannot_write(checker.baseline_name, exc))
            unwritten = True
    written = reports.write_files(
        results,
        stale,
        here=outputs.here,
        root=outputs.root,
        junit=outputs.junit,
        json=outputs.json,
        markdown=outputs.markdown,
        html=outputs.html,
        collection=collection,
        orphans=None if checker.update else orphans_record(checker, stale),
        settings=outputs.settings,
    )
    written.problems[:0] = problems
    if outputs.history:
        _append_history(results, checker, outputs, written)
    return written, unwritten


def _append_history(results: list[ModelResult], checker: Checker, outputs: Outputs, done: Any):
    """One line per profiled model to ``--graph-budget-history``, once per run (the
    controller's); a file that cannot be written is one of the run's problems."""
    from pytest_graphbudget import reports
    from pytest_graphbudget.gate.environment import current
    from pytest_graphbudget.reports import history

    assert outputs.history is not None
    root = checker.root or outputs.root
    try:
        history.append(outputs.here / outputs.history, results, root, current(root))
    except OSError as exc:
        done.problems.append(reports.cannot_write(outputs.history, exc))
    else:
        done.files.append(("history", outputs.history))


def run_settings(config: Any, strict: bool) -> dict[str, Any]:
    """The flags one shard may be given and another not, that change what a model is judged
    on: a closed gate (``strict``, from the flag or the settings), the hardware every model is
    priced on, Dynamo's tier, the base compared with instead of the baseline."""
    return {
        "strict": bool(strict),
        "hardware": config.getoption("graph_budget_hardware"),
        "breaks": bool(config.getoption("graph_budget_breaks")),
        "base": config.getoption("graph_budget_base"),
    }


def outputs_of(config: Any, strict: bool = False) -> Outputs:
    """The report paths of pytest's ``--graph-budget-junit/json/markdown/html``, and the
    run's settings (``strict``: whether its gate is closed)."""
    return Outputs(
        Path(config.invocation_params.dir),
        Path(config.rootpath),
        config.getoption("graph_budget_junit"),
        config.getoption("graph_budget_json"),
        config.getoption("graph_budget_markdown"),
        config.getoption("graph_budget_html"),
        config.getoption("graph_budget_history"),
        run_settings(config, strict),
    )
