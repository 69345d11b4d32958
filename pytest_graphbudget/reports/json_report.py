"""``--graph-budget-json``: every profile and verdict, machine-readable.

Schema ``graphbudget.report/1``: ``{"schema", "passed", "models": [...], "stale_baseline"}``;
each model has ``id``, ``label``, ``nodeid``, ``path``, ``line``, ``passed``, ``budget``,
``findings`` (severity, key, message, value, limit), ``baseline`` (figures or null),
``error`` (or null) and ``profile`` (the profile JSON, ``graphbudget.profile/1``).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

SCHEMA = "graphbudget.report/1"


def document(results: list[Any], stale: set[str]) -> dict[str, Any]:
    models = []
    for result in sorted(results, key=lambda r: r.id):
        entry = asdict(result)
        entry["passed"] = not result.failed
        models.append(entry)
    return {
        "schema": SCHEMA,
        "passed": not any(r.failed for r in results),
        "models": models,
        "stale_baseline": sorted(stale),
    }


def write(path: Path, results: list[Any], stale: set[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document(results, stale), indent=2) + "\n")
