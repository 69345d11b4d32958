"""What to profile, as one value: ``Request`` (the model, its inputs, hardware, timed runs,
zoo or decode options and its ``Variant``), built once by ``dispatch.request`` and handed down.

The variant is the step profiled and its dtype: ``mode``, ``optimizer``, ``dtype``. The three
options reach ``profile_model`` the same way from every place a model is profiled:
TOML budget keys, the ``graph_budget`` marker and the CLI's ``--mode``, ``--optimizer`` and
``--dtype``. They are part of the profile cache's key, and of the model's id in the baseline:
the same model in eval and in train mode (or in two dtypes) has two entries, the second's id
ending ``@train+adam+bfloat16``. An id without that suffix is eval mode in the model's own
dtype, as every baseline written before these options.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError

QUANTIZING = ("int8", "float8_e4m3fn")
"""Dtypes that quantize the model's Linear layers (``quantize.py``) rather than cast it."""
AUTOCAST = ("amp_float16", "amp_bfloat16")
"""Dtypes that leave the model as it is and profile it under CUDA's autocast (``amp.py``)."""
DTYPES = ("float32", "bfloat16", "float16", *QUANTIZING, *AUTOCAST)
"""The dtypes ``dtype=`` accepts (``None``: the model's own); the ``amp_`` ones leave the
model in its dtype and profile it under CUDA's autocast (``amp.py``)."""

MODES = ("eval", "train")
OPTIMIZERS = ("adam", "sgd")

KEYS = ("mode", "optimizer", "dtype", "parallel")
CHOICES = {"mode": MODES, "optimizer": OPTIMIZERS, "dtype": DTYPES}
_RANKS = r"(?:dp|fsdp|zero|tp)=\d+(?:,(?:dp|fsdp|zero|tp)=\d+)*"
SUFFIX = re.compile(rf"@(?:(?:{'|'.join(('train', *OPTIMIZERS, *DTYPES, _RANKS))})\+?)+$")


@dataclass(frozen=True)
class Variant:
    """``profile_model``'s mode, optimizer and dtype; the defaults are eval mode in the
    model's own dtype."""

    mode: str = "eval"
    optimizer: str | None = None
    dtype: str | None = None
    parallel: str | None = None
    """Training sharded over ranks, as ``--parallel`` spells it: "fsdp=8,tp=2" (``parallel.py``)."""

    def options(self) -> dict[str, Any]:
        """The keywords of ``profile_model`` that differ from its defaults."""
        found = {"mode": self.mode} if self.mode != "eval" else {}
        pairs = (("optimizer", self.optimizer), ("dtype", self.dtype), ("parallel", self.parallel))
        found.update({k: v for k, v in pairs if v})
        return found

    def tag(self, ident: str) -> str:
        """``ident`` with this variant's suffix: ``m@train+adam+bfloat16``; ``m`` itself for
        eval mode in the model's own dtype."""
        values = list(self.options().values())
        return f"{ident}@{'+'.join(values)}" if values else ident


@dataclass(frozen=True)
class Request:
    """What to profile, resolved once (``dispatch.request``) from keywords, a budget table, a
    test's markers or the CLI's flags, then handed down to exactly one mode (``dispatch.profile``).

    ``model`` is an ``nn.Module``, an exported program, a ``ModelCase`` or a zoo name, built by
    ``options`` (its zoo options, or the decode step's ``context``, ``batch`` and ``meta``).
    Frozen: a mode reads it and never changes it."""

    model: Any
    inputs: Any = None
    kwargs: dict[str, Any] | None = None
    hardware: Any = "generic"
    name: str | None = None
    variant: Variant = Variant()
    loss: Callable | None = None
    runs: int = 0
    """Timed runs of an eval forward on this machine (0: not measured)."""
    options: tuple[tuple[str, Any], ...] = ()
    """The zoo's options by name (sorted), or the decode step's."""
    decode: bool = False
    """One generated token after ``context`` cached positions (``decode.py``)."""
    device: str | None = None
    """Where the timed runs run ("cpu", "cuda", "cuda:N"; None: where the model is)."""
    tier: str | None = None
    """A capture tier asked for by name ("dynamo", "dynamo-breaks"; None: fx, then the tape)."""
    execution: str = "eager"
    """How the model runs, which its estimated latency prices: "eager" (a kernel per op) or
    "compiled" (a kernel per fused group), ``engine/latency.py``."""

    def __hash__(self) -> int:
        # Over what names the request: a ModelCase, a dict of tensors or a TOML list has no
        # hash of its own, and equal requests hold models of one type and equal options.
        model = self.model if isinstance(self.model, str) else type(self.model).__name__
        return hash(
            (
                model,
                self.name,
                self.variant,
                self.runs,
                repr(self.options),
                self.decode,
                self.device,
                self.execution,
            )
        )


def checked(key: str, value: Any, where: str) -> Any:
    """A budget's ``mode``, ``optimizer`` or ``dtype`` value, or a one-line error with the
    closest valid value. ``optimizer`` and ``dtype`` may be ``None`` in a marker."""
    from pytest_graphbudget.errors import closest

    if value is None and key != "mode":
        return None
    if key == "parallel":
        from pytest_graphbudget.modes.shards import parse

        return parse(value, f"parallel in {where}").text()
    choices = CHOICES[key]
    if isinstance(value, str) and value in choices:
        return value
    hint = closest(value, choices) if isinstance(value, str) else ""
    known = ", ".join(map(repr, choices))
    raise GraphBudgetError(f"{key} in {where}: one of {known}, got {value!r}{hint}")


def with_value(variant: Variant, key: str, value: Any, where: str) -> Variant:
    """``variant`` with one key set from a budget (checked first)."""
    return replace(variant, **{key: checked(key, value, where)})


def overridden(budget: Any, how: dict[str, Any], where: str) -> Any:
    """``budget`` (a ``budgets.Budget``) with the variant keys in ``how`` set (checked), and
    its ``execution`` when ``how`` names one."""
    variant, changes = budget.variant, {}
    for key, value in how.items():
        if key == "execution":
            changes[key] = check_execution(value, where)
        else:
            variant = with_value(variant, key, value, where)
    return replace(budget, variant=variant, **changes) if how else budget


def untagged(ident: str) -> str:
    """A baseline id without its variant's suffix: the id its test or table has."""
    return SUFFIX.sub("", ident)


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


def check_execution(execution: Any, where: str = "") -> str:
    """``execution``, or a one-line error with the closest valid value."""
    from pytest_graphbudget.engine.latency import EXECUTIONS
    from pytest_graphbudget.errors import closest

    if isinstance(execution, str) and execution in EXECUTIONS:
        return execution
    hint = closest(execution, EXECUTIONS) if isinstance(execution, str) else ""
    place = f" in {where}" if where else ""
    raise GraphBudgetError(
        f"execution{place} must be 'eager' or 'compiled', got {execution!r}{hint}"
    )


def check_dtype(dtype: str | None, mode: str = "eval", parallel: Any = None) -> None:
    """Refuse, in one line, a dtype that ``profile_model`` cannot profile in (a quantized one
    in a training step: its packed or float8 weights take no gradient)."""
    if dtype in QUANTIZING and mode != "eval":
        raise GraphBudgetError(
            f"dtype={dtype!r} quantizes the model for inference: use it with mode='eval'"
        )
    if dtype in AUTOCAST and parallel:
        raise GraphBudgetError(
            f"dtype={dtype!r} with parallel: a sharded step under autocast is not priced yet; "
            "profile one unsharded step under autocast, or the sharded one with dtype='bfloat16'"
        )
    if dtype is not None and dtype not in DTYPES:
        from pytest_graphbudget.errors import closest

        known = ", ".join(map(repr, DTYPES))
        raise GraphBudgetError(
            f"dtype must be one of {known} or None (the model's own), not {dtype!r}"
            f"{closest(str(dtype), DTYPES)}"
        )
