"""Example inputs for Hugging Face time-series models (``huggingface.example_inputs``): the
history a forecaster reads, ``past_values``, its length the configuration's
``context_length``, chosen from the configuration, never from the name.

- ``batch x context_length x num_input_channels`` where the configuration has channels
  (PatchTST, PatchTSMixer);
- ``batch x context_length`` otherwise (TimesFM), with TimesFM's ``past_values_padding``
  (zeros: nothing padded) and ``freq`` (0, high frequency) where its forward requires them.

``input_shape`` replaces ``past_values``' shape, ``batch`` its first dimension. Forecasters
that also need time features and an observed mask (Informer, Autoformer, the Time Series
Transformer) are left to the caller's error, which names them.
"""

from __future__ import annotations

from typing import Any

from pytest_graphbudget.zoo.base import LoadOptions


def series_inputs(params: Any, config: Any, options: LoadOptions) -> dict[str, Any]:
    """``past_values`` (and TimesFM's padding and frequency) for ``forward``, or nothing."""
    import torch

    from pytest_graphbudget.zoo._build import image

    length = getattr(config, "context_length", None)
    if "past_values" not in params or not isinstance(length, int):
        return {}
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
