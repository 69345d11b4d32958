"""LLM decode: what one generated token costs after a context of N positions.

``profile_decode(model, context=N)`` profiles two forwards of a causal language model, built
with its LM head (``AutoModelForCausalLM``; the zoo's ordinary profile is the base model):

- the **prefill**: the N context tokens in one forward that fills the KV cache
  (``use_cache=True``) and, as ``generate`` does, computes the logits of the last position only;
- the **decode step**: one new token per sequence through the model's real ``past_key_values``
  path, with a ``DynamicCache`` of N positions that the graph reads (``decode_step.py``).

Beside the two profiles: the KV cache's bytes, the bytes one step must read (every weight and
the whole cache), and the step's roofline on every known hardware profile. Budgets of a
``decode = true`` table check the decode step's profile (``step_profile``).

Importing this module does not import torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.case import ModelCase
from pytest_graphbudget.errors import GraphBudgetError, UnknownModelError, closest
from pytest_graphbudget.units import format_bytes, format_count, format_seconds

if TYPE_CHECKING:
    from pytest_graphbudget.engine.profile import Profile
    from pytest_graphbudget.modes.request import Request

SCHEMA = "graphbudget.decode/1"
EXAMPLES = "gpt2, EleutherAI/gpt-neo-125m or facebook/opt-125m"
TABLE_KEYS = ("decode", "context")
"""The model keys of a budget table that ask for the decode step (``budgets.MODEL_KEYS``)."""
KEYWORDS = ("context", "batch", "hardware", "name", "meta", "hardware_profiles")
"""``profile_decode``'s keywords, which a misspelt one is told the closest of."""


@dataclass(frozen=True)
class StepRoofline:
    """One decode step on one hardware profile: every weight and the whole cache read once."""

    hardware: str
    ridge_point: float
    bottleneck: str
    est_latency_s: float
    tokens_per_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "ridge_point": self.ridge_point,
            "bottleneck": self.bottleneck,
            "est_latency_s": self.est_latency_s,
            "tokens_per_s": self.tokens_per_s,
        }


@dataclass
class DecodeProfile:
    """The prefill of ``context`` tokens and the decode step after them, side by side."""

    model: str
    context: int
    batch: int
    prefill: Profile
    decode: Profile
    kv_cache_bytes: int
    hardware_profiles: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def bytes_read(self) -> int:
        """What one decode step must read from memory: the weights its kernels read (a lookup
        its rows: an untied input embedding had been charged whole, 1.85x of a 32k-vocabulary
        Llama's step) and the whole cache."""
        read = sum(sub.bytes_weights for sub in self.decode.subgraphs)
        return (read if self.decode.subgraphs else self.decode.weights_bytes) + self.kv_cache_bytes

    @property
    def arithmetic_intensity(self) -> float:
        """The step's FLOPs per byte read (about 1 at batch 1 in float32: memory-bound)."""
        return self.decode.flops / self.bytes_read if self.bytes_read else 0.0

    def roofline(self, hardware: Any) -> StepRoofline:
        """The step on ``hardware``: compute- or memory-bound, its time and tokens per second."""
        dtype = self.decode.dtype
        ridge = hardware.ridge_point(dtype)
        seconds = hardware.time(self.decode.flops, self.bytes_read, dtype)
        bound = "compute_bound" if self.arithmetic_intensity >= ridge else "memory_bound"
        rate = self.batch / seconds if seconds else 0.0
        return StepRoofline(hardware.name, ridge, bound, seconds, rate)

    def by_hardware(self) -> list[StepRoofline]:
        """The step on every known hardware profile (built-in, then the user's)."""
        from pytest_graphbudget import hardware as hw

        return [self.roofline(h) for h in hw.profiles(dict(self.hardware_profiles)).values()]

    def __repr__(self) -> str:
        """One line: the context and one step's figures (the dataclass's own held both whole
        profiles)."""
        step, dec = self.roofline(self.decode.hardware), self.decode
        return (
            f"<DecodeProfile {self.model!r} on {step.hardware}, {dec.dtype}: context "
            f"{self.context}, batch {self.batch}; per step {format_count(dec.flops)} FLOPs, "
            f"{format_count(dec.macs)} MACs, {format_count(dec.params)} params, reads "
            f"{format_bytes(self.bytes_read)} (KV cache {format_bytes(self.kv_cache_bytes)}), "
            f"est. {format_seconds(step.est_latency_s)}, {step.tokens_per_s:,.0f} tokens/s, "
            f"{step.bottleneck.replace('_', '-')}>"
        )

    def _repr_html_(self) -> str:
        """Jupyter's rich display, from ``reports`` through the package root, as
        ``Profile._repr_html_``'s (the modes may not import ``reports``)."""
        import sys

        return sys.modules["pytest_graphbudget"]._decode_html(self)

    def to_dict(self) -> dict[str, Any]:
        step = self.roofline(self.decode.hardware)
        return {
            "schema": SCHEMA,
            "model": self.model,
            "context": self.context,
            "batch": self.batch,
            "kv_cache_bytes": self.kv_cache_bytes,
            "step": {
                "tokens": self.batch,
                "flops": self.decode.flops,
                "macs": self.decode.macs,
                "weights_bytes": self.decode.weights_bytes,
                "kv_cache_bytes": self.kv_cache_bytes,
                "bytes_read": self.bytes_read,
                "arithmetic_intensity": self.arithmetic_intensity,
                **step.to_dict(),
            },
            "hardware": {"name": step.hardware, "ridge_point": step.ridge_point},
            "by_hardware": {r.hardware: r.to_dict() for r in self.by_hardware()},
            "prefill": self.prefill.to_dict(),
            "decode": self.decode.to_dict(),
        }


def profile_decode(
    model: Any,
    *,
    context: int,
    batch: int | None = None,
    hardware: Any = "generic",
    name: str | None = None,
    meta: bool | None = None,
    hardware_profiles: Mapping[str, Any] | None = None,
    **unknown: Any,
) -> DecodeProfile:
    """Profile the prefill of ``context`` tokens and one decode step after them.

    ``model`` is a zoo name or a folder with a ``config.json`` of a decoder-only model (GPT-2,
    GPT-Neo, OPT, ...; built with its LM head), or a ``transformers`` causal LM module (or a
    ``ModelCase`` holding one). ``batch`` sequences decode together (default 1); ``meta`` is
    the zoo's option. Anything else is a ``GraphBudgetError`` that says why: a misspelt
    keyword (``hardwre=``) too, with the one meant, as ``profile_model``'s.
    """
    from pytest_graphbudget import hardware as hw
    from pytest_graphbudget.engine.pipeline import profile_graph
    from pytest_graphbudget.modes import decode_step
    from pytest_graphbudget.zoo.base import LoadOptions
    from pytest_graphbudget.zoo.huggingface import example_inputs

    if unknown:
        key = next(iter(unknown))
        raise GraphBudgetError(f"unknown keyword {key!r}{closest(key, KEYWORDS)}")
    check_count("context", context)
    batch = 1 if batch is None else check_count("batch", batch)
    lm, config, label = _causal_lm(model, name, meta, context)
    target = hw.get(hardware, hardware_profiles)

    prompt = example_inputs(lm, config, LoadOptions(seq_len=context, batch=batch), name=label)
    prompt.update(decode_step.generation_options(lm))
    prefill = profile_graph(lm, (), dict(prompt), target, label)
    step, kv_bytes = _decode_step(lm, config, label, context, batch, target)
    return DecodeProfile(
        label, context, batch, prefill, step, kv_bytes, dict(hardware_profiles or {})
    )


def _decode_step(
    lm: Any,
    config: Any,
    label: str,
    context: int,
    batch: int,
    target: Any,
    execution: str = "eager",
) -> tuple[Profile, int]:
    """The decode step's profile (under the model's own module paths) and the cache's bytes."""
    from pytest_graphbudget.engine.pipeline import profile_graph
    from pytest_graphbudget.modes import decode_step

    vocab = config.get_text_config(decoder=True).vocab_size
    inputs = decode_step.decode_inputs(lm, config, context, batch, vocab)
    step = profile_graph(
        decode_step.DecodeStep(lm, context), (), dict(inputs), target, label, None, execution
    )
    cache = inputs["past_key_values"]
    kv_bytes = decode_step.kv_cache_bytes(
        [keys.shape for keys, _ in cache], cache[0][0].element_size()
    )
    return _unwrapped(step, decode_step.WRAPPER), kv_bytes


def profile_step(
    model: Any,
    *,
    context: int,
    batch: int | None = None,
    hardware: Any = "generic",
    name: str | None = None,
    meta: bool | None = None,
    execution: str = "eager",
) -> Profile:
    """The decode step alone (what ``decode = true`` budgets check): ``profile_decode``
    without the prefill; its time as ``execution`` runs it."""
    from pytest_graphbudget import hardware as hw

    check_count("context", context)
    batch = 1 if batch is None else check_count("batch", batch)
    lm, config, label = _causal_lm(model, name, meta, context)
    return _decode_step(lm, config, label, context, batch, hw.get(hardware), execution)[0]


def step_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options of ``profile_model(model, decode=True, context=N, ...)`` that
    ``profile_step`` takes, checked: the request of a decode step (``dispatch.request``)."""
    options = dict(options)
    wanted = options.pop("decode", False)
    if wanted is not True:
        raise GraphBudgetError(f"context=N needs decode=True, got decode={wanted!r}")
    if "context" not in options:
        raise GraphBudgetError("decode=True needs context=N (the positions in the KV cache)")
    for key in ("seq_len", "input_shape"):
        if options.pop(key, None) is not None:
            raise GraphBudgetError(f"{key} does not apply to a decode profile: context sets it")
    options.pop("trust_pickle", None)
    return options


def step_profile(request: Request) -> Profile:
    """The decode step's profile of a ``decode`` request, the one a ``decode = true`` budget
    checks (``profile_decode`` has the prefill beside it)."""
    return profile_step(
        request.model,
        hardware=request.hardware,
        name=request.name,
        execution=request.execution,
        **dict(request.options),
    )


def wanted(table: Mapping[str, Any], name: str) -> bool:
    """Whether a budget table asks for the decode step (``decode = true``); a table whose
    decode keys contradict each other or its other keys is an error that says which."""
    if not any(key in table for key in TABLE_KEYS):
        return False
    value = table.get("decode", False)
    if not isinstance(value, bool):
        raise GraphBudgetError(f"decode in {name}: true or false, got {value!r}")
    if not value:
        if "context" in table:
            raise GraphBudgetError(f"context in {name} needs decode = true")
        return False
    if "context" not in table:
        raise GraphBudgetError(f"decode in {name} needs context = N (the KV-cache positions)")
    for key in ("seq_len", "input_shape"):
        if key in table:
            raise GraphBudgetError(
                f"{key} in {name} does not apply with decode = true: context sets the positions"
            )
    check_count(f"context in {name}", table["context"])
    return True


def check_count(what: str, value: Any) -> int:
    """``value`` as a positive integer, or an error naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GraphBudgetError(f"{what} must be a positive integer, got {value!r}")
    return value


def _causal_lm(
    model: Any, name: str | None, meta: bool | None, context: int
) -> tuple[Any, Any, str]:
    """The causal LM to profile, its configuration and its label; an error that says why for
    anything that is not a decoder-only causal LM with a position for token ``context + 1``
    (checked before a named model is built)."""
    from pytest_graphbudget.modes.decode_step import build_lm, cache_refusal, refusal
    from pytest_graphbudget.zoo.base import check_meta

    check_meta(meta)
    if isinstance(model, ModelCase):
        name = name or model.name
        model = model.model
    elif isinstance(model, tuple) and model and hasattr(model[0], "config"):
        model = model[0]  # a factory's (module, inputs): decode makes its own token inputs
    if isinstance(model, (str, os.PathLike)):
        config, label = _named_config(os.fspath(model))
        module = None
    else:
        config = getattr(model, "config", None)
        label, module = name or type(model).__name__, model
        if config is None:
            raise _not_causal(label, f"{type(model).__name__}, not a transformers model")
    why = refusal(config, module)
    if why is not None:
        raise _not_causal(label, why)
    unsupported = cache_refusal(config)
    if unsupported is not None:
        raise GraphBudgetError(
            f"{label}: decode prices a KV cache of attention layers (keys and values of one "
            f"head dim), and this model's cache is not supported ({unsupported})"
        )
    _check_positions(config, context, label)
    lm = build_lm(config, meta) if module is None else module  # profiled in eval, left as it was
    return lm, config, name or label


def _named_config(name: str) -> tuple[Any, str]:
    """The transformers configuration a zoo name or a model folder stands for."""
    from pytest_graphbudget import zoo
    from pytest_graphbudget.zoo import huggingface
    from pytest_graphbudget.zoo.base import NotFound

    found = zoo.find_loader(name.strip())
    if found is None:
        raise UnknownModelError(zoo._unknown_message(name))
    loader, known = found
    if loader.family == "huggingface":
        try:
            config, _source = huggingface.load_config(known)
        except NotFound as exc:
            raise UnknownModelError(zoo._unknown_message(exc.name)) from None
        return config, huggingface.canonical(known) or known
    if loader.family == "local" and os.path.isfile(os.path.join(known, "config.json")):
        return huggingface.config_from_folder(known), known
    raise _not_causal(known, f"a {loader.family} model")


def _not_causal(label: str, why: str) -> GraphBudgetError:
    return GraphBudgetError(
        f"{label} is not a causal language model ({why}); decode profiles need a decoder-only "
        f"model such as {EXAMPLES}"
    )


def _check_positions(config: Any, context: int, label: str) -> None:
    """The generated token needs a position of its own after the ``context`` cached ones."""
    from pytest_graphbudget.zoo._positions import position_limit

    limit = position_limit(config)
    if limit is not None and context >= limit:
        raise GraphBudgetError(
            f"context {context} leaves no position for the generated token: {label} has "
            f"{limit} positions, so the context is at most {limit - 1}"
        )


def _unwrapped(prof: Profile, prefix: str) -> Profile:
    """The decode step's profile under the model's own module paths (``DecodeStep`` holds the
    model as ``lm``: ``lm.transformer.h.0`` is ``transformer.h.0``, ``lm`` the whole model)."""

    def path(name: str) -> str:
        return "" if name == prefix else name.removeprefix(prefix + ".")

    prof.modules = {path(k): v for k, v in prof.modules.items() if k != prefix}
    for subgraph in prof.subgraphs:
        subgraph.module = path(subgraph.module)
    for node in prof.node_info:
        node.module = path(node.module)
    return prof
