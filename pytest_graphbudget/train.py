"""One training step as one joint graph: forward, loss, backward and the optimizer's update."""

from __future__ import annotations

from collections.abc import Callable

from pytest_graphbudget.errors import GraphBudgetError

MODES = ("eval", "train")
OPTIMIZERS = ("adam", "sgd")


def check_mode(mode: str, loss: Callable | None, optimizer: str | None) -> None:
    """Refuse, in one line, a mode or optimizer we do not know and train-only options in eval."""
    if mode not in MODES:
        raise GraphBudgetError(f"mode must be 'eval' or 'train', not {mode!r}")
    if optimizer is not None and optimizer not in OPTIMIZERS:
        raise GraphBudgetError(f"optimizer must be 'adam', 'sgd' or None, not {optimizer!r}")
    if mode == "eval" and (loss is not None or optimizer is not None):
        given = "loss" if loss is not None else "optimizer"
        raise GraphBudgetError(f"{given} applies to mode='train' only: pass mode='train' too")
    if loss is not None and not callable(loss):
        raise GraphBudgetError(f"loss must be a callable of the outputs, not {type(loss).__name__}")
