"""Excerpts of the tool's files as the docs show them: ``python docs_excerpt.py history FILE ID``.

The docs show a history line folded over a few lines, with the long tables cut to their first
entries (``"...": 0`` where entries are left out). This prints a real line that way, so that
the block is generated from what ``--graph-budget-history`` wrote.
"""

from __future__ import annotations

import json
import sys

ENVIRONMENT = ("python", "torch", "pytest-graphbudget")


def cut(table: dict, keep: int) -> dict:
    """The first ``keep`` entries of ``table``, and ``"...": 0`` when some are left out."""
    out = dict(list(table.items())[:keep])
    if len(table) > keep:
        out["..."] = 0
    return out


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def history(path: str, model: str) -> str:
    lines = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    line = next(entry for entry in lines if entry["model"] == model)
    environment = {key: line["environment"][key] for key in ENVIRONMENT}
    layers = {"flops": cut(line["layers"]["flops"], 2), "params": cut(line["layers"]["params"], 0)}
    return "\n".join(
        [
            f'{{"schema": {dumps(line["schema"])}, "commit": "{line["commit"][:7]}...", '
            f'"time": {dumps(line["time"])},',
            f' "environment": {dumps(environment)},',
            f' "model": {dumps(line["model"])}, "tolerance": {dumps(line["tolerance"])},',
            f' "figures": {dumps(cut(line["figures"], 3))},',
            f' "layers": {dumps(layers)}}}',
        ]
    )


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    print({"history": history}[kind](*args))
