"""Hugging Face transformers, built from configuration, never from weights.

Where a name's configuration comes from, first found wins:

1. the Hugging Face cache (``AutoConfig.from_pretrained(name, local_files_only=True)``);
2. the configurations shipped with this package (``configs/<org>--<name>.json``: the public
   ``config.json`` of each model named in ``NAMES``);
3. the hub, only for other ``org/name`` ids, only when ``HF_HUB_OFFLINE`` is not set and the
   hub answers within two seconds.

A folder with a ``config.json`` is handled by ``local.py``, which calls ``build_case`` here.

The model is the base class of the architecture (``AutoModel``: ``BertModel`` with its pooler,
``GPT2Model`` without the LM head, ``T5Model``), except where the published model is a task
model (DETR: ``DetrForObjectDetection``), or ``AutoModel`` has no class for the configuration
(a part of a larger model, such as CLAP's audio tower; an architecture published only as a
task model, such as UperNet: ``_model_class.py``). It is built in float32 whatever dtype the
weights are published in, with the configuration as published (``use_cache`` included), and
``trust_remote_code`` is never enabled.

Example inputs come from the signature of the model's ``forward``; see ``example_inputs``.
"""

from __future__ import annotations

import inspect
import json
import os
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.zoo import _images
from pytest_graphbudget.zoo._audio import audio_inputs, hears_beside_text
from pytest_graphbudget.zoo._model_class import model_class
from pytest_graphbudget.zoo._positions import (
    DEFAULT_SEQ_LEN,
    default_seq_len,
    position_limit,
    text_config,
)
from pytest_graphbudget.zoo._series import series_inputs
from pytest_graphbudget.zoo.base import LoadOptions, ModelLoader, NotFound, written_shape

if TYPE_CHECKING:
    from pytest_graphbudget.case import ModelCase

CONFIG_DIR = Path(__file__).with_name("configs")

# The names the zoo ships configurations for, and the ids the hub now lists them under.
NAMES: dict[str, tuple[str, ...]] = {
    "bert-base-uncased": ("google-bert/bert-base-uncased",),
    "bert-base-cased": ("google-bert/bert-base-cased",),
    "bert-large-uncased": ("google-bert/bert-large-uncased",),
    "distilbert-base-uncased": ("distilbert/distilbert-base-uncased",),
    "roberta-base": ("FacebookAI/roberta-base",),
    "roberta-large": ("FacebookAI/roberta-large",),
    "albert-base-v2": ("albert/albert-base-v2",),
    "xlm-roberta-base": ("FacebookAI/xlm-roberta-base",),
    "gpt2": ("openai-community/gpt2",),
    "gpt2-medium": ("openai-community/gpt2-medium",),
    "gpt2-large": ("openai-community/gpt2-large",),
    "distilgpt2": ("distilbert/distilgpt2",),
    "EleutherAI/gpt-neo-125m": ("EleutherAI/gpt-neo-125M",),
    "EleutherAI/gpt-neo-1.3B": (),
    "facebook/opt-125m": (),
    "facebook/opt-350m": (),
    "google/electra-small-discriminator": (),
    "google/electra-base-discriminator": (),
    "microsoft/deberta-v3-small": (),
    "microsoft/deberta-v3-base": (),
    "t5-small": ("google-t5/t5-small",),
    "facebook/bart-base": (),
    "facebook/detr-resnet-50": (),
}

# Model types whose published checkpoints are task models rather than the base architecture.
TASK_CLASSES = {
    "detr": "DetrForObjectDetection",
    "conditional_detr": "ConditionalDetrForObjectDetection",
    "table-transformer": "TableTransformerForObjectDetection",
}

_TIMM_RESNETS = {
    "resnet18": ("basic", [2, 2, 2, 2], [64, 128, 256, 512]),
    "resnet34": ("basic", [3, 4, 6, 3], [64, 128, 256, 512]),
    "resnet50": ("bottleneck", [3, 4, 6, 3], [256, 512, 1024, 2048]),
    "resnet101": ("bottleneck", [3, 4, 23, 3], [256, 512, 1024, 2048]),
    "resnet152": ("bottleneck", [3, 8, 36, 3], [256, 512, 1024, 2048]),
}


def _aliases() -> dict[str, str]:
    """Every accepted spelling (case-folded) -> the shipped name."""
    table = {}
    for name, hub_ids in NAMES.items():
        for spelling in (name, *hub_ids):
            table[spelling.casefold()] = name
    return table


def canonical(name: str) -> str | None:
    """The shipped name ``name`` stands for (any case, legacy or current hub id), or None."""
    return _aliases().get(name.casefold())


def config_path(name: str) -> Path:
    """Where the shipped configuration of ``name`` lives."""
    return CONFIG_DIR / (name.replace("/", "--") + ".json")


class HuggingFaceLoader(ModelLoader):
    family = "huggingface"

    def names(self) -> list[str]:
        return list(NAMES)

    def can_load(self, name: str) -> bool:
        if canonical(name) is not None:
            return True
        if _looks_like_path(name) or name.casefold().startswith("timm/"):
            return False  # timm's hub organisation: timm.py builds those
        if _in_hf_cache(name):
            return True
        # Another hub id: tried in ``load`` when the hub may be used.
        return _is_repo_id(name) and not _hub_disabled()

    def load(self, name: str, options: LoadOptions) -> ModelCase:
        config, source = load_config(name)
        shipped = canonical(name)
        return build_case(config, shipped or name, options, source=source)


def load_config(name: str) -> tuple[Any, str]:
    """The configuration of ``name`` and where it came from ("cache", "shipped" or "hub")."""
    transformers = _import_transformers()
    shipped = canonical(name)
    candidates = [name]
    if shipped is not None:
        candidates += [shipped, *NAMES[shipped]]
    for repo_id in dict.fromkeys(candidates):
        if _in_hf_cache(repo_id):
            return _from_pretrained(transformers, repo_id, local_files_only=True), "cache"
    if shipped is not None:
        return config_from_dict(json.loads(config_path(shipped).read_text())), "shipped"
    if not _hub_disabled() and _hub_reachable():
        try:
            return _from_pretrained(transformers, name, local_files_only=False), "hub"
        except OSError:
            pass  # not a repository on the hub: reported below as an unknown name
    raise NotFound(name)


def config_from_dict(data: dict) -> Any:
    """A transformers configuration from the contents of a ``config.json``."""
    transformers = _import_transformers()
    data = dict(data)
    if data.get("auto_map"):
        raise GraphBudgetError(
            "this configuration needs remote code (auto_map), and graph-budget never enables "
            "trust_remote_code; build the model yourself and profile it from a fixture"
        )
    model_type = data.pop("model_type", None)
    if model_type is None:
        raise GraphBudgetError("config.json has no model_type, so its architecture is unknown")
    try:
        return transformers.AutoConfig.for_model(model_type, **data)
    except ValueError as exc:
        raise GraphBudgetError(
            f"transformers {transformers.__version__} does not know model_type {model_type!r}"
        ) from exc


def config_from_folder(folder: str | os.PathLike[str]) -> Any:
    """The configuration in ``folder/config.json`` (no remote code)."""
    transformers = _import_transformers()
    return _from_pretrained(transformers, os.fspath(folder), local_files_only=True)


def build_case(config: Any, name: str, options: LoadOptions, *, source: str = "") -> ModelCase:
    """Build the model ``config`` describes (never with weights) and its example inputs."""
    import torch

    from pytest_graphbudget.case import ModelCase
    from pytest_graphbudget.quiet import held
    from pytest_graphbudget.zoo._build import build_module

    transformers = _import_transformers()
    if getattr(config, "auto_map", None):
        raise GraphBudgetError(
            f"{name} defines its architecture in remote code (auto_map), and graph-budget never "
            "enables trust_remote_code; build the model yourself and profile it from a fixture"
        )
    notes = []
    config, backbone_note = _portable_backbone(config)
    if backbone_note:
        notes.append(backbone_note)

    class_name = TASK_CLASSES.get(config.model_type)
    chosen = getattr(transformers, class_name) if class_name else None
    if chosen is None:
        with held(f"importing {name}'s model code"):  # torchao's import logs, as below
            chosen, class_note = model_class(transformers, config, name=name)
        notes.extend([class_note] if class_note else [])
    dtype = {"dtype" if _major(transformers.__version__) >= 5 else "torch_dtype": torch.float32}

    def factory():
        # held: a model's code, imported on first use, may import torchao, whose import logs
        # deprecation notes of torch's that speak to neither us nor the user
        with held(f"building {name}"):
            if chosen is not None:
                # from_config is the AutoModel entry point; concrete classes build from the config.
                return chosen._from_config(config, **dtype)
            return transformers.AutoModel.from_config(config, trust_remote_code=False, **dtype)

    model = build_module(factory, options.meta)
    kwargs = example_inputs(model, config, options, name=name)
    if options.seq_len is not None and not {"input_ids", "decoder_input_ids"} & kwargs.keys():
        notes.append(f"seq_len ignored: {name} takes no token ids")
    elif options.seq_len is None and "input_ids" in kwargs:
        tokens = kwargs["input_ids"].shape[-1]
        if tokens == position_limit(config) < DEFAULT_SEQ_LEN:
            notes.append(
                f"seq_len {tokens}: {name} has {tokens} positions, under the default "
                f"{DEFAULT_SEQ_LEN}"
            )
    image_tokens = _images.reads_image_tokens(config)
    if "input_ids" in kwargs and "pixel_values" not in kwargs and image_tokens:
        notes.append(
            f"text only: {name} reads an image at image tokens in its text, which example ids "
            "do not hold: to price the image, profile its processor's inputs in a fixture"
        )
    if source == "hub":
        notes.append("configuration downloaded from the Hugging Face hub")
    return ModelCase(model, (), kwargs, name=name, note="; ".join(notes) or None)


def example_inputs(model: Any, config: Any, options: LoadOptions, *, name: str) -> dict[str, Any]:
    """Keyword inputs for ``model.forward``, chosen from its signature (never from the name;
    docs/models.md has the table): ``input_ids`` (``batch x seq_len``: 1 x 128, or the model's
    positions), an ``attention_mask`` of ones (tokenizers always return it), ``token_type_ids``
    zeros where ``type_vocab_size > 1`` (BERT; RoBERTa's tokenizer returns none), ``bbox``
    zeros for a document model (LayoutLM's default; BROS and UDOP require boxes),
    ``decoder_input_ids`` for an encoder-decoder; then an image or a clip (``_images.py``: at
    its ``image_size`` or a DETR-style detector's processor size; beside text where the model
    reads them apart, not at image tokens), audio (``_audio.py``; beside text for CLAP) or a
    time series' history (``_series.py``).

    ``input_shape`` is ``(batch, seq_len)`` for a text model, else the image's (or audio's)
    shape, beside text too. A required parameter outside these is an error that names it.
    """
    import torch

    from pytest_graphbudget.zoo._build import token_ids

    params = inspect.signature(model.forward).parameters
    kwargs: dict[str, Any] = {}
    batch = options.batch or 1
    text = "input_ids" in params
    vision = _images.takes_image(params, config) or _images.takes_video(params, config)
    hears = hears_beside_text(params, config)  # CLAP: audio it reads apart from the text

    if text:
        limit = position_limit(config)
        seq_len = options.seq_len or default_seq_len(limit)
        if options.input_shape and (vision or hears):  # the image's or audio's batch
            batch = options.input_shape[0]
        elif options.input_shape is not None:
            if len(options.input_shape) != 2:
                raise GraphBudgetError(
                    f"input shape for {name} is (batch, seq_len), such as 1,128, got "
                    f"{written_shape(options.input_shape)}"
                )
            batch, seq_len = options.input_shape
        if limit is not None and seq_len > limit:
            raise GraphBudgetError(
                f"seq_len {seq_len} is longer than {name} supports ({limit} positions)"
            )
        vocab = text_config(config).vocab_size
        kwargs["input_ids"] = token_ids(batch, seq_len, vocab, low=3)
        if "attention_mask" in params:
            kwargs["attention_mask"] = torch.ones(batch, seq_len, dtype=torch.long)
        if "token_type_ids" in params and (getattr(config, "type_vocab_size", 0) or 0) > 1:
            kwargs["token_type_ids"] = torch.zeros(batch, seq_len, dtype=torch.long)
        if "bbox" in params:  # a document model's word boxes: all at the page's corner
            kwargs["bbox"] = torch.zeros(batch, seq_len, 4, dtype=torch.long)
        if "decoder_input_ids" in params and getattr(config, "is_encoder_decoder", False):
            kwargs["decoder_input_ids"] = token_ids(batch, seq_len, vocab, low=3)

    if vision:  # an image (_images.py), beside text where the model reads them apart (CLIP)
        kwargs.update(_images.image_inputs(params, config, options))
    elif hears or not text:  # speech (_audio.py), or a time series' history (_series.py)
        kwargs.update(audio_inputs(params, config, options, name=name))
        kwargs.update(series_inputs(params, config, options))

    named = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    kinds = (*named, inspect.Parameter.KEYWORD_ONLY)
    empty = inspect.Parameter.empty
    missing = [p.name for p in params.values() if p.default is empty and p.kind in kinds]
    missing = [name for name in missing if name not in kwargs]
    if missing:
        raise GraphBudgetError(
            f"cannot make example inputs for {name}: its forward requires {', '.join(missing)}; "
            "build the ModelCase yourself in a fixture"
        )
    if not kwargs:
        raise GraphBudgetError(
            f"cannot make example inputs for {name}: its forward takes no input_ids, "
            "pixel_values or speech input the zoo shapes; build the ModelCase yourself in a "
            "fixture"
        )
    return kwargs


def _portable_backbone(config: Any) -> tuple[Any, str | None]:
    """Replace a timm ResNet backbone by the identical transformers ResNet, so that DETR needs
    neither timm nor a download (same layers, parameters and FLOPs)."""
    backbone = getattr(config, "backbone_config", None)
    if backbone is None:
        return config, None
    get = (
        backbone.get
        if isinstance(backbone, dict)
        else lambda key, default=None: getattr(backbone, key, default)
    )
    if get("model_type") != "timm_backbone":
        return config, None
    timm_name = get("backbone") or getattr(config, "backbone", None)
    if timm_name not in _TIMM_RESNETS or getattr(config, "dilation", False):
        return config, None
    transformers = _import_transformers()
    layer_type, depths, hidden_sizes = _TIMM_RESNETS[timm_name]
    config.backbone_config = transformers.ResNetConfig(
        num_channels=getattr(config, "num_channels", 3),
        embedding_size=64,
        hidden_sizes=hidden_sizes,
        depths=depths,
        layer_type=layer_type,
        out_features=["stage4"],
    )
    for key in ("use_timm_backbone", "use_pretrained_backbone"):
        if hasattr(config, key):
            setattr(config, key, False)
    return config, f"backbone: timm {timm_name} built as the identical transformers ResNet"


def _from_pretrained(transformers: Any, name: str, *, local_files_only: bool) -> Any:
    try:
        return transformers.AutoConfig.from_pretrained(
            name, local_files_only=local_files_only, trust_remote_code=False
        )
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise GraphBudgetError(
                f"{name} needs remote code, and graph-budget never enables trust_remote_code; "
                "build the model yourself and profile it from a fixture"
            ) from exc
        raise GraphBudgetError(f"{name}: invalid configuration ({exc})") from exc


def _import_transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:
        raise GraphBudgetError(
            "Hugging Face models need transformers: pip install 'pytest-graphbudget[hf]'"
        ) from exc
    return transformers


def _major(version: str) -> int:
    try:
        return int(version.split(".", 1)[0])
    except ValueError:
        return 0


_FILE_SUFFIXES = (".pt", ".pth", ".pt2", ".yaml", ".yml", ".json", ".onnx", ".bin")


def _looks_like_path(name: str) -> bool:
    return (
        name.startswith((".", "~"))
        or os.path.isabs(name)
        or name.casefold().endswith(_FILE_SUFFIXES)
        or os.path.exists(name)
    )


def _is_repo_id(name: str) -> bool:
    """``org/name``; a hub id has no colon (``timm:...`` and ``diffusers:...`` are zoo names)."""
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not any(ch.isspace() or ch == ":" for ch in name)


def _in_hf_cache(repo_id: str) -> bool:
    """Whether the Hugging Face cache holds ``repo_id``'s config.json (a file check, no network)."""
    if not _is_repo_id(repo_id) and "/" in repo_id:
        return False
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # an id huggingface_hub refuses to parse is simply not cached
        return False


def _hub_disabled() -> bool:
    truthy = {"1", "true", "yes", "on"}
    return any(
        os.environ.get(var, "").strip().lower() in truthy
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the hub's host accepts a connection within ``timeout`` seconds (DNS included)."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    parsed = urlparse(endpoint)
    host, port = parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)
    if not host:
        return False
    result: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])
