"""Example inputs for Hugging Face time-series models (``huggingface.example_inputs``): the
history a forecaster reads, ``past_values``, its length the configuration's
``context_length``, chosen from the configuration, never from the name.

- ``batch x context_length x num_input_channels`` where the configuration has channels
  (PatchTST, PatchTSMixer);
- ``batch x context_length`` otherwise (TimesFM), with TimesFM's ``past_values_padding``
  (zeros: nothing padded) and ``freq`` (0, high frequency) where its forward requires them.

A forecaster that also reads time features (Informer, Autoformer, the Time Series
Transformer: ``past_time_features`` in its ``forward``) gets the history its lags reach back
over, ``batch x (context_length + max(lags_sequence))`` (``x input_size`` when multivariate),
with its time features (``num_time_features + num_dynamic_real_features`` a step), an observed
mask of ones, static features where the configuration has them (categories 0), and the
prediction window as in training, ``future_values`` and ``future_time_features`` over
``prediction_length``: the encoder reads the context and the decoder the whole window (without
them the decoder would run one step, and Autoformer's none).

``input_shape`` replaces ``past_values``' shape, ``batch`` its first dimension.
"""

from __future__ import annotations

from typing import Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.zoo.base import LoadOptions, written_shape


def series_inputs(params: Any, config: Any, options: LoadOptions) -> dict[str, Any]:
    """``past_values`` (and TimesFM's padding and frequency) for ``forward``, or nothing."""
    import torch

    from pytest_graphbudget.zoo._build import image

    length = getattr(config, "context_length", None)
    if "past_values" not in params or not isinstance(length, int):
        return {}
    if "past_time_features" in params:
        return _forecaster_inputs(config, options)
    channels = getattr(config, "num_input_channels", None)
    extra = (channels,) if isinstance(channels, int) else ()
    shape = options.image_shape((options.batch or 1, length, *extra))
    kwargs = {"past_values": image(shape)}
    required = {name for name, p in params.items() if p.default is p.empty}
    if "past_values_padding" in required:
        kwargs["past_values_padding"] = torch.zeros(shape, dtype=torch.long)
    if "freq" in required:
        kwargs["freq"] = torch.zeros(shape[0], 1, dtype=torch.long)
    return kwargs


def _forecaster_inputs(config: Any, options: LoadOptions) -> dict[str, Any]:
    """The history, its time features and mask, static features and the prediction window of
    a forecaster that reads time features (Informer, Autoformer, the Time Series
    Transformer)."""
    import torch

    from pytest_graphbudget.zoo._build import image

    lags = getattr(config, "lags_sequence", None) or [0]
    channels = config.input_size
    extra = (channels,) if channels > 1 else ()
    needed = config.context_length + max(lags)
    shape = options.image_shape((options.batch or 1, needed, *extra))
    batch, steps = shape[0], shape[1]
    if steps < needed:  # the model's own words name a history length the user never gave
        raise GraphBudgetError(
            f"input shape {written_shape(shape)}: this forecaster reads {needed} steps of "
            f"history (context_length {config.context_length} and lags up to {max(lags)}); "
            f"give at least {needed}, such as {written_shape((batch, needed, *extra))}"
        )
    features = config.num_time_features + getattr(config, "num_dynamic_real_features", 0)
    window = (batch, config.prediction_length, *shape[2:])
    kwargs = {
        "past_values": image(shape),
        "past_time_features": image((batch, steps, features)),
        "past_observed_mask": torch.ones(shape),
        "future_values": image(window),
        "future_time_features": image((batch, config.prediction_length, features)),
    }
    if config.num_static_categorical_features:
        categories = (batch, config.num_static_categorical_features)
        kwargs["static_categorical_features"] = torch.zeros(categories, dtype=torch.long)
    if config.num_static_real_features:
        kwargs["static_real_features"] = image((batch, config.num_static_real_features))
    return kwargs
