"""Hugging Face's attention masks on fakes as on the real inputs they stand for.

transformers 5 decides from the values of a causal LM's inputs whether its attention needs an
explicit mask (``masking_utils``): an ``attention_mask`` with no padding, or position ids of one
unpacked sequence a row, let SDPA run ``is_causal`` with grouped-query attention's keys and
values as they are. It reads those values only off real tensors: on fakes, which it takes for
a trace, it builds the mask, and with it each layer repeats its keys and values for every head
and autograd saves the copies. A training step traced on fakes (and a forward taped on them)
then held what eager torch never allocates: +14% on a 4-layer Llama's step at seq 512 (two
key-value heads for eight) with an unpadded attention mask passed, as training loops pass one.

``real_input_masks`` answers the two questions from the real inputs while the block runs: every
attention mask given (``attention_mask``, ``decoder_attention_mask``, ...: by name, or in its
place in the forward's signature) masks no token, and the ``position_ids`` given count up by
one along each row. Only those answers are taken, and only for inputs the model was called
with: a mask the forward builds itself, an input with padding, or position ids the forward
makes (a vision-language model's skip over its image tokens, which transformers reads as
packed sequences) still get transformers' own path, an explicit mask, over rather than under.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from typing import Any

from pytest_graphbudget import compat


def given_inputs(model: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The forward's inputs by name: the keywords, and positional ones bound to its signature."""
    try:
        signature = inspect.signature(getattr(model, "forward", model))
        bound = signature.bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):  # no signature, or not these arguments: the keywords
        return dict(kwargs)
    named = {k: v for k, v in bound.items() if signature.parameters[k].kind != _KEYWORDS}
    for key, value in bound.items():  # a forward's **kwargs
        named.update(value if signature.parameters[key].kind == _KEYWORDS else {})
    return named


_KEYWORDS = inspect.Parameter.VAR_KEYWORD


def _unpadded(mask: Any) -> bool:
    """A 2-D real ``attention_mask`` that masks no token."""
    import torch

    real = isinstance(mask, torch.Tensor) and mask.dim() == 2 and not compat.is_fake(mask)
    return real and not mask.is_meta and bool(mask.all())


def _unpacked(positions: Any) -> bool:
    """Real position ids given, of one sequence a row."""
    import torch

    if not isinstance(positions, torch.Tensor) or compat.is_fake(positions) or positions.is_meta:
        return False
    return positions.dim() == 2 and bool((positions.diff(dim=-1) == 1).all())


@contextlib.contextmanager
def real_input_masks(model: Any, args: tuple, kwargs: dict) -> Iterator[None]:
    """transformers' mask decisions, in the block, answered for fakes from the real inputs
    the model was called with (``args``, ``kwargs``), read on entry: outside any trace, where
    reading a value is no data-dependent op."""
    masking = sys.modules.get("transformers.masking_utils")
    ignore = getattr(masking, "_ignore_causal_mask_sdpa", None)
    find = getattr(masking, "find_packed_sequence_indices", None)
    if ignore is None or find is None:
        yield
        return
    inputs = given_inputs(model, args, kwargs)
    masks = [v for k, v in inputs.items() if k.endswith("attention_mask") and v is not None]
    unpadded = bool(masks) and all(map(_unpadded, masks))
    unpacked = _unpacked(inputs.get("position_ids"))

    def ignore_causal_mask(padding_mask: Any, *rest: Any, **options: Any) -> bool:
        if unpadded and padding_mask is not None and compat.is_fake(padding_mask):
            padding_mask = None  # what an unpadded mask decides: no token is masked
        return ignore(padding_mask, *rest, **options)

    def packed_sequences(position_ids: Any) -> Any:
        if unpacked and compat.is_fake(position_ids):
            return None  # what transformers returns for one sequence a row
        return find(position_ids)

    masking._ignore_causal_mask_sdpa = ignore_causal_mask
    masking.find_packed_sequence_indices = packed_sequences
    try:
        yield
    finally:
        masking._ignore_causal_mask_sdpa = ignore
        masking.find_packed_sequence_indices = find
