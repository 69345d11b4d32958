"""The shape of a sharded run, checked: ``Parallel`` from ``{"fsdp": 8}``, ``{"zero": 2,
"dp": 4}``, ``{"tp": 2, "fsdp": 4}`` or their text ``"fsdp=8,tp=2"``. Below ``request``, which
keeps the text in the ``Variant``; ``parallel.py`` derives each rank's share from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError

KEYS = ("dp", "fsdp", "zero", "tp")


@dataclass(frozen=True)
class Parallel:
    """How the step is spread over ranks: ``world`` = dp * fsdp * tp ranks."""

    dp: int = 1
    fsdp: int = 1
    zero: int = 0
    tp: int = 1

    @property
    def shards(self) -> int:
        """Ranks the model state is sharded across (1: replicated)."""
        return self.fsdp if self.fsdp > 1 else (self.dp if self.zero else 1)

    @property
    def stage(self) -> int:
        """The ZeRO stage: FSDP shards what ZeRO-3 shards."""
        return 3 if self.fsdp > 1 else self.zero

    @property
    def world(self) -> int:
        return self.dp * self.fsdp * self.tp

    def text(self) -> str:
        """``fsdp=8,tp=2``: the value ``--parallel`` and the baseline id spell."""
        return ",".join(
            f"{k}={getattr(self, k)}" for k in KEYS if getattr(self, k) != (k != "zero")
        )


def parse(value: Any, where: str = "parallel") -> Parallel:
    """A dict (``{"fsdp": 8}``) or its text (``"fsdp=8,tp=2"``) as a checked ``Parallel``, or a
    one-line error."""
    from pytest_graphbudget.errors import closest

    if isinstance(value, Parallel):
        return value
    if isinstance(value, str):
        pairs = [part.partition("=") for part in value.split(",") if part.strip()]
        if any(not sep for _, sep, _ in pairs):
            raise GraphBudgetError(
                f"{where}: write KEY=N pairs such as 'fsdp=8,tp=2', got {value!r}"
            )
        keys = [k.strip() for k, _, _ in pairs]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:  # "fsdp=8,fsdp=4" had kept the last
            raise GraphBudgetError(f"{where}: {twice[0]} is given twice in {value!r}: give it once")
        value = {k.strip(): _int(v.strip()) for k, _, v in pairs}
    if not isinstance(value, dict) or not value:
        raise GraphBudgetError(
            f"{where}: a table of {', '.join(KEYS)} such as {{fsdp = 8}}, got {value!r}"
        )
    for key, n in value.items():
        if key not in KEYS:
            raise GraphBudgetError(
                f"{where}: unknown key {key!r}{closest(str(key), KEYS)} (one of {', '.join(KEYS)})"
            )
        if isinstance(n, bool) or not isinstance(n, int) or n < (0 if key == "zero" else 1):
            raise GraphBudgetError(
                f"{where}: {key} must be a whole number of ranks >= 1, got {n!r}"
            )
    found = Parallel(**value)
    if found.zero not in (0, 1, 2, 3):
        raise GraphBudgetError(f"{where}: zero is a ZeRO stage, 1, 2 or 3, got {found.zero}")
    if found.fsdp > 1 and (found.zero or found.dp > 1):  # before zero's own: its advice,
        # give dp, then met this one (a user trial)
        raise GraphBudgetError(f"{where}: fsdp shards like zero=3 over its own ranks: drop zero/dp")
    if found.zero and found.dp < 2:
        raise GraphBudgetError(f"{where}: zero={found.zero} shards over the dp ranks: give dp >= 2")
    if found.world == 1:  # it had been dropped, and the budget run as one unsharded rank
        raise GraphBudgetError(
            f"{where}: {value!r} is one rank, which shards nothing: give 2 or more ranks, or "
            "drop parallel (memory_max bounds one unsharded rank)"
        )
    return found


def _int(text: str) -> Any:
    return int(text) if text.isdigit() else text
