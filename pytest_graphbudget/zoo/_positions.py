"""How many tokens a Hugging Face text model takes (``huggingface.py``'s inputs, ``decode``'s
context): its learned positions, and the default ``seq_len`` where no option gives one."""

from __future__ import annotations

from typing import Any

DEFAULT_SEQ_LEN = 128

# Learned absolute positions offset by ``pad_token_id + 1`` (RoBERTa's convention).
_OFFSET_POSITIONS = {"roberta", "xlm-roberta", "camembert", "data2vec-text", "xlm-roberta-xl"}
# Relative positions: no limit on the sequence length from the configuration.
_RELATIVE_POSITIONS = {"t5", "mt5", "deberta", "deberta-v2", "longt5"}


def text_config(config: Any) -> Any:
    get_text_config = getattr(config, "get_text_config", None)
    return get_text_config() if callable(get_text_config) else config


def position_limit(config: Any) -> int | None:
    model_type = getattr(config, "model_type", "")
    if model_type in _RELATIVE_POSITIONS:
        return None
    limit = getattr(text_config(config), "max_position_embeddings", None)
    if not isinstance(limit, int):
        return None
    if model_type in _OFFSET_POSITIONS:
        limit -= (getattr(config, "pad_token_id", 0) or 0) + 1
    return limit


def default_seq_len(limit: int | None) -> int:
    """128 tokens, or the model's positions where they are fewer (CLIP's text tower has 77):
    the user asked for no length, so none is refused as longer than the model supports."""
    return DEFAULT_SEQ_LEN if limit is None else min(limit, DEFAULT_SEQ_LEN)
