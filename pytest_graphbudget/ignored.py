"""A zoo option that a budget table names but the model cannot take is an error, not a note.

The CLI prints the zoo's note (``seq_len ignored: resnet18 takes images``) and goes on, since
the user sees it. A budget table is read by nobody at run time: ``seq_len = [128, 2048]`` on an
image model would check the same profile twice and pass, a budget that checks nothing of
what it says. ``refuse_ignored`` turns those notes into the table's one-line error.
"""

from __future__ import annotations

from typing import Any

from pytest_graphbudget.errors import GraphBudgetError

MARK = " ignored: "
"""How a zoo loader's note says an option had no effect (``zoo/torchvision.py``)."""


def refuse_ignored(case: Any, name: str) -> Any:
    """``case`` when the zoo used every option of table ``name``, else a one-line error."""
    ignored = [part for part in (case.note or "").split("; ") if MARK in part]
    if ignored:
        option = ignored[0].split(MARK)[0]
        raise GraphBudgetError(
            f"{ignored[0]} (budget table {name}); remove {option} from the table: "
            "it would check the same profile as without it"
        )
    return case
