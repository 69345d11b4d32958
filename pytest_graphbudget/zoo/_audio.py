"""Example audio inputs for Hugging Face speech models (``huggingface.example_inputs``), chosen
from the configuration as their feature extractors shape them, never from the name.

- a raw waveform, ``input_values``: Moonshine (an encoder-decoder whose forward takes
  ``decoder_input_ids``) and the wav2vec 2.0 family (wav2vec2, HuBERT, WavLM,
  data2vec-audio, SEW, UniSpeech; an encoder whose configuration has ``conv_stride``, its
  convolutional feature encoder; SpeechT5's base model, an encoder-decoder, takes hidden
  states there) takes ``batch x samples``, one second at 16 kHz, the rate their feature
  extractors resample to; a codec whose configuration names ``audio_channels`` and
  ``sampling_rate`` (EnCodec, Mimi) takes ``batch x channels x samples``, one second at its
  rate, and a mono codec (``sampling_rate`` and ``hop_length``: DAC) one channel of it;
- a spectrogram as ``input_values``: the Audio Spectrogram Transformer (``num_mel_bins`` and
  ``max_length``) takes ``batch x max_length x num_mel_bins``, the frames its feature extractor
  pads every clip to (1,024, about 10 s);
- a log-mel spectrogram, ``input_features``: a Whisper encoder (``num_mel_bins`` and
  ``max_source_positions``: Whisper, Qwen2-Audio's and Voxtral's encoders) takes
  ``batch x num_mel_bins x frames``, the 30 s window its feature extractor pads every clip to
  (two frames per position: 3,000), which the encoder checks; a Speech2Text encoder
  (``input_feat_per_channel`` and ``input_channels``) takes ``batch x frames x features``,
  one second of its filterbank's 10 ms frames (100); Wav2Vec2-BERT
  (``feature_projection_input_dim``, 160) takes ``batch x 49 x 160``, one second of its
  extractor's 80 mel bins stacked in pairs; a Conformer whose subsampler reads
  frames first (``num_mel_bins`` and ``subsampling_factor`` or ``subsampling_conv_channels``:
  Parakeet, LASR) takes ``batch x frames x num_mel_bins``, a second of 10 ms frames, also
  where a head's configuration holds the encoder's (``encoder_config``: Parakeet's CTC, TDT
  and RNN-T models); CLAP's audio tower (``num_mel_bins`` and ``spec_size``) takes
  ``batch x 1 x 1001 x num_mel_bins``, the 10 s its feature extractor pads or cuts every clip
  to (``x 4``: the whole clip and three crops, where ``enable_fusion``, with ``is_longer``
  true: a clip longer than 10 s, whose crops the tower fuses), also beside text (the CLAP
  model, whose ``audio_config`` it reads);
- a vocoder's mel frames: a HiFi-GAN's ``spectrogram`` (``model_in_dim``: SpeechT5's,
  FastSpeech2's) or UnivNet's ``input_features`` (``model_in_channels``), ``batch x frames x
  mel bins``, a second of its frames where the configuration gives ``sampling_rate`` and
  ``upsample_rates`` (SpeechT5's 16 kHz in steps of 256: 63), else 100;
- and, for an encoder-decoder (Whisper, Moonshine, Speech2Text, a transducer: Parakeet's TDT
  and RNN-T models, whose joint network pairs every frame with every token), ``decoder_input_ids``:
  ``batch x seq_len`` tokens, as for T5 or BART, within its ``max_target_positions``
  (``max_position_embeddings``).

``input_shape`` replaces the audio tensor's shape, ``batch`` its first dimension. Any other
audio model is left to the caller's error, which names what its ``forward`` requires.
"""

from __future__ import annotations

import math
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.zoo._positions import default_seq_len
from pytest_graphbudget.zoo.base import LoadOptions

SPEECH_RATE = 16_000  # samples a second: what wav2vec2's and Whisper's extractors resample to
WHISPER_FRAMES_PER_POSITION = 2  # Whisper's second convolution has stride 2: 3,000 -> 1,500
FBANK_FRAMES = 100  # a second of Speech2Text's filterbank: 25 ms windows every 10 ms
VOCODER_FRAMES = 100  # a vocoder's mel frames where its configuration gives no rate
STACKED_FRAMES = 49  # a second of SeamlessM4T's extractor: 98 frames of 10 ms, in pairs
CLAP_FRAMES = 1001  # CLAP's extractor: 10 s at 48 kHz, a frame every 480 samples, one more
# A Conformer's convolutional subsampler reads log-mel frames first (Parakeet, LASR, Nemotron)
SUBSAMPLERS = ("subsampling_factor", "subsampling_conv_channels")


def audio_shape(params: Any, config: Any, batch: int) -> tuple[str, tuple[int, ...]] | None:
    """The audio input ``forward`` takes and its default shape, or None: not one we know."""
    if "input_values" in params:
        seq2seq = getattr(config, "is_encoder_decoder", False)
        if hasattr(config, "conv_stride") and not seq2seq:
            return "input_values", (batch, SPEECH_RATE)
        if seq2seq and "decoder_input_ids" in params:  # Moonshine: a waveform in, tokens out
            return "input_values", (batch, SPEECH_RATE)
        mels, frames = getattr(config, "num_mel_bins", None), getattr(config, "max_length", None)
        if isinstance(mels, int) and isinstance(frames, int):
            return "input_values", (batch, frames, mels)
        channels = getattr(config, "audio_channels", None)
        rate = getattr(config, "sampling_rate", None)
        if isinstance(channels, int) and isinstance(rate, int):
            return "input_values", (batch, channels, rate)
        if isinstance(rate, int) and isinstance(getattr(config, "hop_length", None), int):
            return "input_values", (batch, 1, rate)  # a mono codec (DAC)
    vocoded = _vocoder_input(params, config, batch)
    if vocoded is not None:
        return vocoded
    if "input_features" in params:
        mels = getattr(config, "num_mel_bins", None)
        if isinstance(mels, int) and isinstance(getattr(config, "spec_size", None), int):
            fused = 4 if getattr(config, "enable_fusion", False) else 1  # CLAP's audio tower
            return "input_features", (batch, fused, CLAP_FRAMES, mels)
        positions = getattr(config, "max_source_positions", None)
        if isinstance(mels, int) and isinstance(positions, int):
            return "input_features", (batch, mels, WHISPER_FRAMES_PER_POSITION * positions)
        stacked = getattr(config, "feature_projection_input_dim", None)  # Wav2Vec2-BERT
        if isinstance(stacked, int):
            return "input_features", (batch, STACKED_FRAMES, stacked)
        features = getattr(config, "input_feat_per_channel", None)
        channels = getattr(config, "input_channels", None)
        if isinstance(features, int) and isinstance(channels, int):
            return "input_features", (batch, FBANK_FRAMES, features * channels)
        if isinstance(mels, int) and any(hasattr(config, key) for key in SUBSAMPLERS):
            return "input_features", (batch, FBANK_FRAMES, mels)  # frames first (Parakeet)
    encoder = getattr(config, "encoder_config", None)  # a head on an encoder (Parakeet's CTC)
    if encoder is not None and encoder is not config:
        return audio_shape(params, encoder, batch)
    return None


def _vocoder_input(params: Any, config: Any, batch: int) -> tuple[str, tuple[int, ...]] | None:
    """A vocoder's mel frames: a HiFi-GAN's ``spectrogram`` (``model_in_dim``: SpeechT5's,
    FastSpeech2's) or UnivNet's ``input_features`` (``model_in_channels``), ``batch x frames x
    mel bins``, a second of frames where the configuration gives its rate and its upsampling
    (16 kHz / 256: 63), else 100."""
    if "spectrogram" in params and isinstance(getattr(config, "model_in_dim", None), int):
        key, mels = "spectrogram", config.model_in_dim
    elif "input_features" in params and isinstance(getattr(config, "model_in_channels", None), int):
        key, mels = "input_features", config.num_mel_bins
    else:
        return None
    rate, rates = getattr(config, "sampling_rate", None), getattr(config, "upsample_rates", None)
    frames = VOCODER_FRAMES
    if isinstance(rate, int) and rates:
        frames = -(-rate // math.prod(rates))
    return key, (batch, frames, mels)


def hears_beside_text(params: Any, config: Any) -> bool:
    """Whether a model of text also takes audio it reads apart (CLAP)."""
    audio = getattr(config, "audio_config", None)
    return "input_ids" in params and audio is not None and "input_features" in params


def audio_inputs(params: Any, config: Any, options: LoadOptions, *, name: str) -> dict[str, Any]:
    """The audio tensor (and an encoder-decoder's decoder tokens) for ``forward``, or nothing."""
    import torch

    from pytest_graphbudget.zoo._build import image, token_ids

    if hears_beside_text(params, config):
        config = config.audio_config
    found = audio_shape(params, config, options.batch or 1)
    if found is None:
        return {}
    key, default = found
    kwargs: dict[str, Any] = {key: image(options.image_shape(default))}
    batch = kwargs[key].shape[0]
    if "is_longer" in params and getattr(config, "enable_fusion", False):
        kwargs["is_longer"] = torch.ones(batch, 1, dtype=torch.bool)  # its crops fused
    if "decoder_input_ids" in params and getattr(config, "is_encoder_decoder", False):
        limit = getattr(config, "max_target_positions", None)
        limit = getattr(config, "max_position_embeddings", None) if limit is None else limit
        limit = limit if isinstance(limit, int) else None
        seq_len = options.seq_len or default_seq_len(limit)
        if limit is not None and seq_len > limit:
            raise GraphBudgetError(
                f"seq_len {seq_len} is longer than {name}'s decoder supports ({limit} positions)"
            )
        kwargs["decoder_input_ids"] = token_ids(batch, seq_len, config.vocab_size, low=3)
    return kwargs
