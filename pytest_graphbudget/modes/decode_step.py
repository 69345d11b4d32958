"""The torch side of a decode profile: the causal LM, the KV cache's shapes, and the module that
runs one generated token through the model's real ``past_key_values`` path.

The cache is a ``transformers`` ``DynamicCache`` (built from the model's configuration, so its
layer kinds are the model's own) filled from tensors that ``DecodeStep`` takes as inputs. Two
things follow: the cache tensors are graph inputs, so the graph holds their reads (the
concatenation with the new key/value and the attention over N + 1 positions); and every forward
starts from N positions, so the warm-up forward cannot grow the cache that the trace then sees.

Imported only when a decode profile is asked for (``decode.py``): it imports torch.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
from torch import nn

from pytest_graphbudget.errors import GraphBudgetError

WRAPPER = "lm"
"""``DecodeStep``'s attribute for the model: the prefix its module paths lose in the profile."""


class DecodeStep(nn.Module):
    """A causal LM called for one new token per sequence, after ``context`` cached positions."""

    def __init__(self, lm: nn.Module, context: int):
        super().__init__()
        self.lm = lm
        self.context = context

    def forward(
        self,
        input_ids: torch.Tensor,
        past_key_values: tuple[tuple[torch.Tensor, torch.Tensor], ...],
        attention_mask: torch.Tensor | None = None,
    ) -> Any:
        cache = filled_cache(self.lm.config, past_key_values, self.context)
        extra = {} if attention_mask is None else {"attention_mask": attention_mask}
        extra[cache_keyword(self.lm)] = cache
        return self.lm(input_ids=input_ids, **extra, **generation_options(self.lm))


def cache_keyword(lm: nn.Module) -> str:
    """The name the model's ``forward`` takes its cache by: ``cache`` from transformers 5.24 on
    (``past_key_values`` still works there but warns, and goes in 5.40), before it
    ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"


def generation_options(lm: nn.Module) -> dict[str, Any]:
    """What ``generate`` passes on every step: ``use_cache``, and ``logits_to_keep=1`` (logits
    of the last position only) where the model takes it."""
    options: dict[str, Any] = {"use_cache": True}
    if "logits_to_keep" in inspect.signature(lm.forward).parameters:
        options["logits_to_keep"] = 1
    return options


def cache_shapes(config: Any, context: int, batch: int) -> list[tuple[int, int, int, int]]:
    """The shape of each layer's cached keys (and values) after ``context`` positions:
    ``(batch, key/value heads, positions, head dim)``; a sliding-window layer keeps at most its
    window minus one position, as ``DynamicSlidingWindowLayer`` does."""
    from transformers import DynamicCache

    text = config.get_text_config(decoder=True)
    heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    shapes = []
    for layer in DynamicCache(config=config).layers:
        window = getattr(layer, "sliding_window", None)
        positions = context if window is None else min(context, window - 1)
        shapes.append((batch, heads, positions, head_dim))
    return shapes


KV_LAYERS = ("DynamicLayer", "DynamicSlidingWindowLayer")
"""The ``DynamicCache`` layers whose shapes ``cache_shapes`` knows: keys and values per head."""


def cache_refusal(config: Any) -> str | None:
    """Why ``cache_shapes`` cannot lay out this model's cache, or None. Its layout is keys and
    values of one head dim in every layer; anything else would fail in the model's forward,
    which would then be blamed for a cache of our making. Read from the configuration alone,
    so it is said before anything is profiled (or a named model built)."""
    from transformers import DynamicCache

    text = config.get_text_config(decoder=True)
    try:  # transformers before 4.56 lays out no cache from a configuration
        kinds = [type(layer).__name__ for layer in DynamicCache(config=config).layers]
    except (TypeError, AttributeError):
        kinds = []
    other = [i for i, kind in enumerate(kinds) if kind not in KV_LAYERS]
    if other and len(other) == len(kinds):
        return "a state-space or recurrent state: no layer keeps keys and values"
    if other:
        what = {kinds[i] for i in other}
        state = any("LinearAttention" in kind for kind in what)
        named = f"transformers' {', '.join(sorted(what))}"
        held = "a linear-attention or state-space state" if state else named
        listed = ", ".join(map(str, other))
        return f"hybrid layers: layers {listed} of {len(kinds)} keep {held}, not a KV cache"
    if getattr(text, "num_attention_heads", None) is None:
        return "a state-space or recurrent state: its configuration names no attention heads"
    rank = getattr(text, "kv_lora_rank", None)
    keys, values = _key_dim(text), getattr(text, "v_head_dim", None)
    if rank:
        return (
            f"multi-head latent attention, kv_lora_rank {rank}: key and value head dims "
            f"differ, {keys} and {values}"
        )
    if values and keys and values != keys:
        return f"key and value head dims differ, {keys} and {values}"
    return None


def _key_dim(text: Any) -> int | None:
    """The keys' head dim of a configuration that names it apart from the values'."""
    if getattr(text, "qk_head_dim", None):
        return text.qk_head_dim
    parts = [getattr(text, name, None) for name in ("qk_nope_head_dim", "qk_rope_head_dim")]
    return sum(parts) if all(parts) else getattr(text, "head_dim", None)


def kv_cache_bytes(shapes: list[tuple[int, ...]], itemsize: int) -> int:
    """Bytes of the cache: keys and values of every layer."""
    return 2 * sum(math.prod(shape) for shape in shapes) * itemsize


def filled_cache(config: Any, tensors: Any, context: int) -> Any:
    """A ``DynamicCache`` for ``config`` holding ``tensors`` (one ``(keys, values)`` pair per
    layer) as if ``context`` positions had been generated. The layers take the tensors as they
    are: ``update`` would first copy them into an empty cache, a copy no real decode makes."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    if len(cache.layers) != len(tensors):
        raise GraphBudgetError(
            f"the model's cache has {len(cache.layers)} layers, {len(tensors)} were given"
        )
    for layer, (keys, values) in zip(cache.layers, tensors, strict=True):
        # transformers 5 takes (keys, values); 4.57, the last release for torch<2.6, keys only.
        if len(inspect.signature(layer.lazy_initialization).parameters) > 1:
            layer.lazy_initialization(keys, values)
        else:
            layer.lazy_initialization(keys)
        layer.keys, layer.values = keys, values
        if hasattr(layer, "cumulative_length"):  # sliding-window layers count every position
            layer.cumulative_length = context
    return cache


def decode_inputs(
    lm: nn.Module, config: Any, context: int, batch: int, vocab_size: int
) -> dict[str, Any]:
    """``DecodeStep``'s inputs: one new token per sequence, the cache of ``context`` positions
    (zeros: values do not change the cost) and, where the model takes one, the attention mask
    over the ``context + 1`` positions, as ``generate`` passes it."""
    from pytest_graphbudget.zoo._build import token_ids

    dtype = next(iter(lm.parameters())).dtype
    shapes = cache_shapes(config, context, batch)
    kwargs: dict[str, Any] = {
        "input_ids": token_ids(batch, 1, vocab_size, low=3),
        "past_key_values": tuple(
            (torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)) for shape in shapes
        ),
    }
    if "attention_mask" in inspect.signature(lm.forward).parameters:
        kwargs["attention_mask"] = torch.ones(batch, context + 1, dtype=torch.long)
    return kwargs


def build_lm(config: Any, meta: bool | None) -> nn.Module:
    """The causal LM of ``config`` (``AutoModelForCausalLM``: the model with its LM head), in
    float32, never with weights; on the meta device as the zoo decides (``meta``)."""
    import transformers

    from pytest_graphbudget.quiet import held
    from pytest_graphbudget.zoo._build import build_module

    major = int(transformers.__version__.split(".", 1)[0])
    dtype = {"dtype" if major >= 5 else "torch_dtype": torch.float32}

    def factory() -> nn.Module:
        with held("building the causal LM"):  # the model's code may import torchao, which logs
            return transformers.AutoModelForCausalLM.from_config(
                config, trust_remote_code=False, **dtype
            )

    return build_module(factory, meta)


def refusal(config: Any, model: nn.Module | None = None) -> str | None:
    """Why ``config`` (or ``model``, built by the user) is not a decoder-only causal LM, or
    None. A name's configuration must be published as a causal LM (``architectures``), or, when
    it names none, be of a type that has a causal LM and no masked-LM head (BERT and RoBERTa
    have both: transformers can run them as decoders, but no checkpoint of theirs is one)."""
    from transformers.models.auto import modeling_auto

    causal_types = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    classes = {c for v in causal_types.values() for c in ([v] if isinstance(v, str) else v)}
    model_type = getattr(config, "model_type", "") or "unknown"
    if getattr(config, "is_encoder_decoder", False):
        return f"{model_type}, an encoder-decoder"
    if model is not None:
        name = type(model).__name__
        return None if name in classes else "no LM head: build it with AutoModelForCausalLM"
    architectures = list(getattr(config, "architectures", None) or [])
    if architectures:
        return None if set(architectures) & classes else f"published as {', '.join(architectures)}"
    if (
        model_type in causal_types
        and model_type not in modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    ):
        return None
    return f"of type {model_type}, which has no decoder-only causal LM"
