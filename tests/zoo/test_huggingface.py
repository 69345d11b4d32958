"""Hugging Face by name (``zoo/huggingface.py``): built from the configurations this package
ships, offline, with the parameter counts the model cards publish; inputs from ``forward``'s
signature and the configuration."""

from __future__ import annotations

import json

import pytest
from conftest import skip_detr_without_timm

torch = pytest.importorskip("torch")

from pytest_graphbudget.errors import GraphBudgetError, UnknownModelError  # noqa: E402
from pytest_graphbudget.zoo import list_models, resolve  # noqa: E402


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def shapes(case) -> dict[str, tuple[int, ...]]:
    return {key: tuple(value.shape) for key, value in case.kwargs.items()}


def test_the_shipped_names_are_listed():
    listed = list_models()["huggingface"]
    assert {"bert-base-uncased", "gpt2", "t5-small", "facebook/bart-base"} <= set(listed)
    assert "facebook/detr-resnet-50" in listed
    assert len(listed) == 23


# Published parameter counts of the base architectures (AutoModel: BertModel with its pooler,
# GPT2Model without the LM head, T5Model with tied embeddings, ...).
HF_PUBLISHED = {
    "bert-base-uncased": ("BertModel", 109_482_240),
    "bert-base-cased": ("BertModel", 108_310_272),
    "bert-large-uncased": ("BertModel", 335_141_888),
    "distilbert-base-uncased": ("DistilBertModel", 66_362_880),
    "roberta-base": ("RobertaModel", 124_645_632),
    "roberta-large": ("RobertaModel", 355_359_744),
    "albert-base-v2": ("AlbertModel", 11_683_584),
    "xlm-roberta-base": ("XLMRobertaModel", 278_043_648),
    "gpt2": ("GPT2Model", 124_439_808),
    "gpt2-medium": ("GPT2Model", 354_823_168),
    "gpt2-large": ("GPT2Model", 774_030_080),
    "distilgpt2": ("GPT2Model", 81_912_576),
    "EleutherAI/gpt-neo-125m": ("GPTNeoModel", 125_198_592),
    "EleutherAI/gpt-neo-1.3B": ("GPTNeoModel", 1_315_575_808),
    "facebook/opt-125m": ("OPTModel", 125_239_296),
    "facebook/opt-350m": ("OPTModel", 331_196_416),
    "google/electra-base-discriminator": ("ElectraModel", 108_891_648),
    "microsoft/deberta-v3-base": ("DebertaV2Model", 183_831_552),
    "t5-small": ("T5Model", 60_506_624),
    "facebook/bart-base": ("BartModel", 139_420_416),
}


@pytest.fixture
def hub_allowed(monkeypatch):
    """The environment of a user who has not switched the hub off (unlike `make test`)."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("name", sorted(HF_PUBLISHED))
def test_hf_parameter_counts_equal_published(name, no_network, hub_allowed):
    class_name, expected = HF_PUBLISHED[name]
    case = resolve(name, meta=True)
    assert type(case.model).__name__ == class_name
    assert n_params(case.model) == expected
    assert no_network == []  # shipped configuration: the hub is not even asked


def test_hf_models_are_float32_and_in_eval_mode(no_network):
    # facebook/opt-125m's configuration says float16 (its weights' dtype): built in float32.
    case = resolve("facebook/opt-125m", meta=True)
    assert {p.dtype for p in case.model.parameters()} == {torch.float32}
    assert not case.model.training


def test_configurations_are_shipped_for_every_hf_name():
    from pytest_graphbudget.zoo import huggingface

    for name in huggingface.NAMES:
        data = json.loads(huggingface.config_path(name).read_text())
        assert data["model_type"]
        assert "auto_map" not in data


def test_unknown_hub_id_fails_fast_and_offline(no_network, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UnknownModelError, match="unknown model 'someorg/no-such-model'"):
        resolve("someorg/no-such-model")
    assert no_network == []


def test_unknown_hub_id_with_the_hub_unreachable(no_network, hub_allowed):
    # The hub may be asked for ids the zoo does not ship; when it cannot be reached the answer
    # is the ordinary unknown-name error, quickly, with no traceback from the HTTP stack.
    with pytest.raises(UnknownModelError, match="did you mean: facebook/opt-125m"):
        resolve("facebook/opt-126m")


# Inputs are chosen from forward's signature and the configuration, never from the name.
@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "bert-base-uncased",
            {"input_ids": (1, 128), "attention_mask": (1, 128), "token_type_ids": (1, 128)},
        ),
        ("roberta-base", {"input_ids": (1, 128), "attention_mask": (1, 128)}),
        ("microsoft/deberta-v3-base", {"input_ids": (1, 128), "attention_mask": (1, 128)}),
        ("distilbert-base-uncased", {"input_ids": (1, 128), "attention_mask": (1, 128)}),
        ("gpt2", {"input_ids": (1, 128), "attention_mask": (1, 128)}),
        (
            "t5-small",
            {"input_ids": (1, 128), "attention_mask": (1, 128), "decoder_input_ids": (1, 128)},
        ),
        (
            "facebook/bart-base",
            {"input_ids": (1, 128), "attention_mask": (1, 128), "decoder_input_ids": (1, 128)},
        ),
        (
            "facebook/detr-resnet-50",
            {"pixel_values": (1, 3, 800, 800), "pixel_mask": (1, 800, 800)},
        ),
    ],
)
def test_hf_inputs_come_from_the_forward_signature(name, expected, no_network):
    skip_detr_without_timm(name)
    case = resolve(name, meta=True)
    assert case.inputs == ()
    assert shapes(case) == expected
    vocab = case.model.config.vocab_size if "input_ids" in expected else None
    if vocab is not None:
        ids = case.kwargs["input_ids"]
        assert ids.dtype == torch.long and 0 <= int(ids.min()) and int(ids.max()) < vocab


def test_hf_overrides_seq_len_batch_and_input_shape(no_network):
    case = resolve("bert-base-uncased", seq_len=64, batch=2, meta=True)
    assert set(shapes(case).values()) == {(2, 64)}
    case = resolve("t5-small", input_shape=(3, 32), meta=True)
    assert shapes(case)["decoder_input_ids"] == (3, 32)
    skip_detr_without_timm()
    case = resolve("facebook/detr-resnet-50", input_shape="1,3,640,480", meta=True)
    assert shapes(case) == {"pixel_values": (1, 3, 640, 480), "pixel_mask": (1, 640, 480)}


def tiny_clip(folder):
    """A CLIP configuration folder: towers of one layer, 32 wide; its text keeps
    transformers' 77 positions, its image is 3 x 32 x 32 in 8 x 8 patches."""
    transformers = pytest.importorskip("transformers")
    tower = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1}
    config = transformers.CLIPConfig(
        text_config={**tower, "num_attention_heads": 2, "vocab_size": 100},
        vision_config={**tower, "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
        projection_dim=16,
    )
    config.save_pretrained(folder)


def test_a_text_and_image_model_gets_both_inputs(tmp_path, no_network):
    """User trial: a CLIP configuration folder got ``input_ids`` alone, and its forward
    raised "'NoneType' object has no attribute 'shape'". Its image is its vision config's:
    3 x 32 x 32 here, 16 tokens of text."""
    tiny_clip(tmp_path)
    case = resolve(str(tmp_path), seq_len=16, meta=True)
    found = shapes(case)
    assert found["pixel_values"] == (1, 3, 32, 32) and found["input_ids"] == (1, 16)
    from pytest_graphbudget import profile_model

    towers = profile_model(case).modules
    # each tower's one layer, per token: q, k, v, o (4 x 32 x 32) and the MLP (2 x 32 x 64);
    # scores and values 2 x (L x L x 32) over its 16 text tokens, or 16 patches + 1 class token
    for tower, tokens in (("text_model", 16), ("vision_model", 17)):
        expected = tokens * (4 * 32 * 32 + 2 * 32 * 64) + 2 * tokens * tokens * 32
        assert towers[f"{tower}.encoder"].macs == expected, tower
    # input_shape is the image's, and its batch the text's too
    assert shapes(resolve(str(tmp_path), seq_len=16, input_shape=(2, 3, 32, 32), meta=True)) == {
        "input_ids": (2, 16), "attention_mask": (2, 16), "pixel_values": (2, 3, 32, 32)
    }  # fmt: skip


def test_a_model_with_fewer_positions_than_the_default_gets_them_in_a_note(tmp_path, no_network):
    """User trial: a CLIP folder (77 text positions, transformers' default) was refused with
    "seq_len 128 is longer than ... supports", a length the user never asked for."""
    tiny_clip(tmp_path)
    case = resolve(str(tmp_path), meta=True)
    assert shapes(case)["input_ids"] == (1, 77)
    assert f"seq_len 77: {tmp_path} has 77 positions, under the default 128" in case.note
    assert "seq_len" not in (resolve(str(tmp_path), seq_len=16, meta=True).note or "")
    with pytest.raises(GraphBudgetError, match=r"seq_len 128 is longer than .* \(77 positions\)"):
        resolve(str(tmp_path), seq_len=128, meta=True)


def test_hf_seq_len_beyond_the_model_is_a_clear_error():
    with pytest.raises(GraphBudgetError, match="seq_len 1024 is longer than roberta-base"):
        resolve("roberta-base", seq_len=1024, meta=True)


def test_detr_needs_neither_timm_nor_a_download(no_network, hub_allowed):
    skip_detr_without_timm()
    case = resolve("facebook/detr-resnet-50", meta=True)
    assert type(case.model).__name__ == "DetrForObjectDetection"
    assert case.model.config.num_queries == 100
    assert n_params(case.model) == 41_524_768
    assert "timm resnet50" in case.note
    assert no_network == []


def tiny_wav2vec2(folder) -> None:
    """A wav2vec2 of width 32: two feature convolutions of 8 channels (kernel 10 stride 5,
    kernel 3 stride 2), a grouped positional convolution (kernel 16, 4 groups), one layer."""
    transformers = pytest.importorskip("transformers")
    transformers.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4, vocab_size=16,
    ).save_pretrained(folder)  # fmt: skip


def test_a_speech_encoder_gets_one_second_of_16_khz_audio(tmp_path, no_network):
    """User trial: a wav2vec2 configuration folder was refused ("its forward requires
    input_values"), as were HuBERT, WavLM and every model of that family. By hand, over 16,000
    samples: the first convolution gives (16,000 - 10) // 5 + 1 = 3,199 frames of 8 (x 10 taps),
    the second (3,199 - 3) // 2 + 1 = 1,599 frames of 8 (x 8 x 3); the projection 1,599 x 8 x
    32; the positional convolution 1,600 outputs (padding 8 each side, its last dropped) of 32,
    each 8 channels of its group x 16 taps; the layer q, k, v, o 4 x 1,599 x 32 x 32, scores
    and values 2 x 1,599 x 1,599 x 32, its MLP 2 x 1,599 x 32 x 64."""
    from pytest_graphbudget import profile_model

    tiny_wav2vec2(tmp_path)
    case = resolve(str(tmp_path), meta=True)
    assert shapes(case) == {"input_values": (1, 16_000)}
    frames = (3_199 - 3) // 2 + 1
    expected = 3_199 * 8 * 10 + frames * 8 * 8 * 3 + frames * 8 * 32 + 1_600 * 32 * 8 * 16
    expected += 4 * frames * 32 * 32 + 2 * frames * frames * 32 + 2 * frames * 32 * 64
    assert profile_model(case).macs == expected
    assert shapes(resolve(str(tmp_path), batch=2, meta=True)) == {"input_values": (2, 16_000)}
    resized = resolve(str(tmp_path), input_shape=(1, 8_000), meta=True)
    assert shapes(resized) == {"input_values": (1, 8_000)}
    with pytest.raises(GraphBudgetError, match=r"input shape 1,1,8000 has 3 dimensions"):
        resolve(str(tmp_path), input_shape=(1, 1, 8_000), meta=True)


def tiny_whisper(folder) -> None:
    """A Whisper of width 32, one encoder and one decoder layer, 8 mel bins, 16 encoder and 12
    decoder positions."""
    transformers = pytest.importorskip("transformers")
    transformers.WhisperConfig(
        d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8,
        max_source_positions=16, max_target_positions=12, vocab_size=64, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
    ).save_pretrained(folder)  # fmt: skip


def test_whisper_gets_its_padded_window_and_decoder_tokens(tmp_path, no_network):
    """User trial: a Whisper configuration folder was refused as taking no input. Its feature
    extractor pads every clip to the window its encoder checks, two frames per position (32
    here; 3,000 for the published models), and the decoder gets tokens as T5's does, here all
    12 of its positions. By hand: the convolutions 32 x 32 x 8 x 3 and (stride 2) 16 x 32 x 32
    x 3; the encoder layer over 16 frames, q, k, v, o 4 x 16 x 32 x 32, scores and values
    2 x 16 x 16 x 32, MLP 2 x 16 x 32 x 64; the decoder layer over 12 tokens: its own q, k, v,
    o 4 x 12 x 32 x 32, scores and values 2 x 12 x 12 x 32; cross-attention q and o
    2 x 12 x 32 x 32, k and v over the 16 frames 2 x 16 x 32 x 32, scores and values
    2 x 12 x 16 x 32; MLP 2 x 12 x 32 x 64."""
    from pytest_graphbudget import profile_model

    tiny_whisper(tmp_path)
    case = resolve(str(tmp_path), meta=True)
    assert shapes(case) == {"input_features": (1, 8, 32), "decoder_input_ids": (1, 12)}
    encoder = 32 * 32 * 8 * 3 + 16 * 32 * 32 * 3
    encoder += 4 * 16 * 32 * 32 + 2 * 16 * 16 * 32 + 2 * 16 * 32 * 64
    decoder = 4 * 12 * 32 * 32 + 2 * 12 * 12 * 32 + 2 * 12 * 32 * 32 + 2 * 16 * 32 * 32
    decoder += 2 * 12 * 16 * 32 + 2 * 12 * 32 * 64
    assert profile_model(case).macs == encoder + decoder
    short = resolve(str(tmp_path), seq_len=5, batch=2, meta=True)
    assert shapes(short) == {"input_features": (2, 8, 32), "decoder_input_ids": (2, 5)}
    assert "seq_len" not in (short.note or "")
    with pytest.raises(GraphBudgetError, match=r"seq_len 20 is longer than .*decoder supports"):
        resolve(str(tmp_path), seq_len=20, meta=True)


def tiny_llava(folder) -> None:
    """A LLaVA: a CLIP vision tower and a Llama of width 32, one layer each."""
    transformers = pytest.importorskip("transformers")
    vision = transformers.CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        image_size=32, patch_size=16,
    )  # fmt: skip
    text = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, vocab_size=64, pad_token_id=0,
    )  # fmt: skip
    config = transformers.LlavaConfig(vision_config=vision, text_config=text)
    config.image_token_index = config.image_token_id = 63
    config.save_pretrained(folder)


def test_a_vision_language_model_gets_its_text_alone_with_a_note(tmp_path, no_network):
    """User trial: a LLaVA configuration folder, since the zoo gave CLIP both inputs, got an
    image beside token ids that do not place it, and its forward raised ("Image features and
    image tokens do not match"; on the meta device, reading values); Qwen-VL, Gemma 3 and
    80-odd others alike. It gets the
    text, as before, and a note says the image's path is not priced. By hand, 128 tokens through
    the Llama layer: q, k, v, o 4 x 128 x 32 x 32, scores and values 2 x 128 x 128 x 32, its
    gated MLP 3 x 128 x 32 x 64. transformers 4 takes the rotary frequencies as a matmul, half
    the head dim by the 128 positions."""
    from pytest_graphbudget import profile_model

    transformers = pytest.importorskip("transformers")
    tiny_llava(tmp_path)
    case = resolve(str(tmp_path), meta=True)
    assert shapes(case) == {"input_ids": (1, 128), "attention_mask": (1, 128)}
    assert "text only:" in case.note and "image tokens" in case.note
    rotary = 8 * 128 if int(transformers.__version__.split(".")[0]) < 5 else 0
    expected = 4 * 128 * 32 * 32 + 2 * 128 * 128 * 32 + 3 * 128 * 32 * 64 + rotary
    assert profile_model(case).macs == expected
    resized = resolve(str(tmp_path), input_shape=(2, 16), meta=True)
    assert shapes(resized)["input_ids"] == (2, 16)


def test_the_audio_spectrogram_transformer_gets_its_padded_frames(tmp_path, no_network):
    """Its feature extractor pads every clip to ``max_length`` frames of ``num_mel_bins``
    (1,024 x 128 published; 36 x 26 here). By hand: the spectrogram, an image of 26 x 36,
    gives (26 - 16) // 10 + 1 = 2 by (36 - 16) // 10 + 1 = 3 patches of 16 x 16 (stride 10),
    each 32 x 256; 8 tokens with the class and distillation tokens through one layer: q, k, v,
    o 4 x 8 x 32 x 32, scores and values 2 x 8 x 8 x 32, MLP 2 x 8 x 32 x 64."""
    from pytest_graphbudget import profile_model

    transformers = pytest.importorskip("transformers")
    transformers.ASTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        num_mel_bins=26, max_length=36,
    ).save_pretrained(tmp_path)  # fmt: skip
    case = resolve(str(tmp_path), meta=True)
    assert shapes(case) == {"input_values": (1, 36, 26)}
    expected = 6 * 32 * 16 * 16 + 4 * 8 * 32 * 32 + 2 * 8 * 8 * 32 + 2 * 8 * 32 * 64
    assert profile_model(case).macs == expected


def test_a_budget_on_a_vision_language_model_from_the_zoo_is_refused(
    tmp_path, monkeypatch, capsys, no_network
):
    """A budget table on that LLaVA would check its text alone and pass, its vision tower never
    priced (the note is read by nobody at run time): the table's one-line error says so."""
    from pytest_graphbudget import cli

    tiny_llava(tmp_path / "llava")
    (tmp_path / "pyproject.toml").write_text("[tool.graph_budget]\n")
    (tmp_path / "budgets").mkdir()
    (tmp_path / "budgets" / "vlm.toml").write_text(
        '[models.vlm]\nmodel = "llava"\nmeta = true\nflops_max = "1G"\n'
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["check", "--no-cache", "budgets"]) == 1
    out = capsys.readouterr().out
    assert "error: vlm: text only: llava reads an image at image tokens" in out
    assert "(budget table vlm); a budget on these inputs would check the text alone" in out
    assert "1 model could not be checked" in out


def test_a_video_model_gets_a_clip_of_its_frames(tmp_path, no_network):
    """User trial: VideoMAE, TimeSformer and ViViT were given one image, and their forward raised
    "not enough values to unpack (expected 5, got 4)". A clip of ``num_frames`` frames, as the
    video processor stacks them: 4 frames of 32 x 32 here. By hand: tubelets of 2 frames x
    16 x 16 give 2 x 2 x 2 = 8 tokens, each 32 x (3 x 2 x 16 x 16); one layer over 8 tokens:
    q, k, v, o 4 x 8 x 32 x 32, scores and values 2 x 8 x 8 x 32, MLP 2 x 8 x 32 x 64."""
    from pytest_graphbudget import profile_model

    transformers = pytest.importorskip("transformers")
    transformers.VideoMAEConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=16, num_frames=4, tubelet_size=2,
    ).save_pretrained(tmp_path)  # fmt: skip
    case = resolve(str(tmp_path), meta=True)
    assert shapes(case) == {"pixel_values": (1, 4, 3, 32, 32)}
    expected = 8 * 32 * 3 * 2 * 16 * 16 + 4 * 8 * 32 * 32 + 2 * 8 * 8 * 32 + 2 * 8 * 32 * 64
    assert profile_model(case).macs == expected
    assert shapes(resolve(str(tmp_path), batch=2, meta=True)) == {"pixel_values": (2, 4, 3, 32, 32)}


def test_siglip2_naflex_gets_its_patches_mask_and_grid(tmp_path, no_network):
    """User trial: SigLIP 2 (NaFlex) was given an image, and its forward raised ("a and b must
    have same reduction dim"): it takes its image as flattened patches, a mask over them and
    the grid they came from. 4 patches of 3 x 4 x 4 here (a 2 x 2 grid). By hand, the vision
    tower's layer over its 4 patches: q, k, v, o 4 x 4 x 32 x 32, scores and values
    2 x 4 x 4 x 32, MLP 2 x 4 x 32 x 64."""
    from pytest_graphbudget import profile_model

    transformers = pytest.importorskip("transformers")
    tower = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1}
    tower["num_attention_heads"] = 2
    transformers.Siglip2Config(
        text_config={**tower, "vocab_size": 64},
        vision_config={**tower, "num_patches": 4, "patch_size": 4},
    ).save_pretrained(tmp_path)
    case = resolve(str(tmp_path), seq_len=8, meta=False)  # it reads the grid's values
    found = shapes(case)
    assert found["pixel_values"] == (1, 4, 48) and found["pixel_attention_mask"] == (1, 4)
    assert case.kwargs["spatial_shapes"].tolist() == [[2, 2]]
    modules = profile_model(case).modules
    assert modules["vision_model.encoder"].macs == 4 * (4 * 32 * 32 + 2 * 32 * 64) + 2 * 4 * 4 * 32
    with pytest.raises(GraphBudgetError, match=r"input shape 1,6,48: a NaFlex model takes"):
        resolve(str(tmp_path), input_shape=(1, 6, 48), meta=True)


def test_moonshine_gets_one_second_of_audio_and_decoder_tokens(tmp_path, no_network):
    """User trial: Moonshine (a waveform in, tokens out) was refused as taking no input. One
    second at 16 kHz, and decoder tokens as Whisper's. By hand, its convolutional stem over
    16,000 samples: (16,000 - 127) // 64 + 1 = 249 frames of 32 (x 127 taps), then
    (249 - 7) // 3 + 1 = 81 frames of 64 (x 32 x 7), then (81 - 3) // 2 + 1 = 40 of 32
    (x 64 x 3)."""
    from pytest_graphbudget import profile_model

    transformers = pytest.importorskip("transformers")
    transformers.MoonshineConfig(
        hidden_size=32, intermediate_size=64, encoder_num_hidden_layers=1,
        decoder_num_hidden_layers=1, encoder_num_attention_heads=2,
        decoder_num_attention_heads=2, vocab_size=64, max_position_embeddings=24,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
    ).save_pretrained(tmp_path)  # fmt: skip
    case = resolve(str(tmp_path), meta=True)
    assert shapes(case) == {"input_values": (1, 16_000), "decoder_input_ids": (1, 24)}
    modules = profile_model(case).modules
    stem = {"conv1": 249 * 32 * 127, "conv2": 81 * 64 * 32 * 7, "conv3": 40 * 32 * 64 * 3}
    assert {name: modules[f"encoder.{name}"].macs for name in stem} == stem


def registered(model_type: str):
    """transformers, where its AutoConfig knows ``model_type`` (parts of larger models are
    registered from transformers 5 on)."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        pytest.skip(f"transformers {transformers.__version__} does not register {model_type}")
    return transformers


def test_a_part_of_a_larger_model_is_built_as_its_own_class(tmp_path, no_network):
    """User trial: a folder holding BLIP-2's vision tower alone (``blip_2_vision_model``) was
    refused: transformers' AutoModel has no class for it, though ``Blip2VisionModel`` builds
    it. By hand, a 32 x 32 image in 8 x 8 patches: the patch embedding 16 x 32 x (3 x 8 x 8);
    17 tokens with the class token through one layer: qkv and projection 4 x 32 x 32, MLP
    2 x 32 x 64 per token, scores and values 2 x 17 x 17 x 32."""
    from pytest_graphbudget import profile_model

    transformers = registered("blip_2_vision_model")
    transformers.Blip2VisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        image_size=32, patch_size=8,
    ).save_pretrained(tmp_path)  # fmt: skip
    case = resolve(str(tmp_path), meta=True)
    assert type(case.model).__name__ == "Blip2VisionModel" and case.note is None
    assert shapes(case) == {"pixel_values": (1, 3, 32, 32)}
    expected = 16 * 32 * 3 * 8 * 8 + 17 * (4 * 32 * 32 + 2 * 32 * 64) + 2 * 17 * 17 * 32
    assert profile_model(case).macs == expected


def test_an_architecture_published_only_as_a_task_model_is_built_as_it(tmp_path, no_network):
    """TrOCR has no base class, only ``TrOCRForCausalLM``: a folder of it was refused; now it
    is built as that, and a note says so. By hand, per token of 16: one layer's q, k, v, o
    4 x 32 x 32 and MLP 2 x 32 x 64, and the output projection onto 100 tokens."""
    from pytest_graphbudget import profile_model

    transformers = pytest.importorskip("transformers")
    transformers.TrOCRConfig(
        d_model=32, decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=64,
        vocab_size=100, max_position_embeddings=64,
    ).save_pretrained(tmp_path)  # fmt: skip
    case = resolve(str(tmp_path), seq_len=16, meta=True)
    assert type(case.model).__name__ == "TrOCRForCausalLM"
    assert "built as TrOCRForCausalLM: transformers' AutoModel has no class for TrOCRConfig" in (
        case.note
    )
    modules = profile_model(case).modules
    assert modules["model.decoder.layers.0.self_attn"].macs - 2 * 16 * 16 * 32 == 16 * 4 * 32 * 32
    assert modules["model.decoder.layers.0.fc1"].macs == 16 * 32 * 64
    assert modules["output_projection"].macs == 16 * 32 * 100


@pytest.mark.parametrize(
    ("model_type", "message"),
    [
        ("musicgen_decoder", r"several \(MusicgenForCausalLM, MusicgenModel\); build the one"),
        ("sam_prompt_encoder", "no model class for SamPromptEncoderConfig .*in a fixture"),
    ],
)
def test_a_configuration_with_no_one_class_to_build_is_a_clear_error(
    model_type, message, tmp_path, no_network
):
    transformers = registered(model_type)
    transformers.AutoConfig.for_model(model_type).save_pretrained(tmp_path)
    with pytest.raises(GraphBudgetError, match=message):
        resolve(str(tmp_path), meta=True)


def tiny_qwen3_vl_vision(folder) -> None:
    """Qwen3-VL's vision tower alone: one layer 32 wide, 16 x 16 patches over 2 frames, merged
    2 x 2, as published but for its size."""
    transformers = registered("qwen3_vl_vision")
    transformers.AutoConfig.for_model(
        "qwen3_vl_vision", depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
        out_hidden_size=16, num_position_embeddings=64, deepstack_visual_indexes=[0],
    ).save_pretrained(folder)  # fmt: skip


def test_a_qwen_vl_vision_tower_gets_its_patches_and_grid(tmp_path, no_network):
    """User trial: a Qwen-VL vision tower was refused ("its forward requires hidden_states,
    grid_thw"). Its processor gives a 224 x 224 image as 14 x 14 patches of 3 x 2 x 16 x 16
    values and ``grid_thw`` (1, 14, 14); the forward reads the grid's values, which the meta
    device keeps. FlopCounterMode counts the same MACs on the tower built with weights (its
    attention as the math backend runs it: it has no formula for the CPU's flash kernel)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from pytest_graphbudget import profile_model

    tiny_qwen3_vl_vision(tmp_path)
    case = resolve(str(tmp_path), meta=True)
    assert shapes(case) == {"hidden_states": (196, 1536), "grid_thw": (1, 3)}
    assert case.kwargs["grid_thw"].tolist() == [[1, 14, 14]]
    real = resolve(str(tmp_path), meta=False)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        real.model(**real.kwargs)
    assert profile_model(case).macs == counter.get_total_flops() // 2
    # input_shape is the tensor's, (patches, values), as `graph-budget init` writes it
    wide = resolve(str(tmp_path), input_shape=(32 * 32, 1536), meta=True)
    assert shapes(wide)["hidden_states"] == (1024, 1536)
    assert wide.kwargs["grid_thw"].tolist() == [[1, 32, 32]]
    two = resolve(str(tmp_path), batch=2, meta=True)  # two images, one after the other
    assert shapes(two)["hidden_states"] == (2 * 196, 1536)
    assert two.kwargs["grid_thw"].tolist() == [[1, 14, 14]] * 2
    for wrong in ((225, 1536), (196, 768), (1, 3, 224, 224), (14 * 14 * 3, 1536)):
        with pytest.raises(GraphBudgetError, match=r"takes \(patches, 1536\).* 196,1536 \(one"):
            resolve(str(tmp_path), input_shape=wrong, meta=True)


def test_speech2text_gets_a_second_of_filterbank_frames_and_decoder_tokens(tmp_path, no_network):
    """User trial: a Speech2Text folder was refused ("takes no input_ids, pixel_values or
    speech input the zoo shapes"). Its feature extractor gives 100 frames a second of
    ``input_feat_per_channel x input_channels`` filterbank values. By hand, 8 features, 16
    decoder tokens, 32 wide: the subsampler's convolutions (kernel 5, stride 2, each halved
    by a GLU) 50 x 16 x 8 x 5 and 25 x 64 x 8 x 5; the encoder layer over 25 frames, q, k, v, o
    4 x 32 x 32 and MLP 2 x 32 x 64 a frame, scores and values 2 x 25 x 25 x 32; the decoder
    layer's self-attention 16 x 4 x 32 x 32 + 2 x 16 x 16 x 32, its cross-attention q, o on
    16 tokens and k, v on 25 frames (32 x 32 each) + 2 x 16 x 25 x 32, MLP 16 x 2 x 32 x 64."""
    from pytest_graphbudget import profile_model

    transformers = registered("speech_to_text")
    transformers.Speech2TextConfig(
        input_feat_per_channel=8, input_channels=1, conv_channels=16, d_model=32,
        encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=100,
        max_source_positions=64, max_target_positions=64,
    ).save_pretrained(tmp_path)  # fmt: skip
    case = resolve(str(tmp_path), seq_len=16, meta=True)
    assert shapes(case) == {"input_features": (1, 100, 8), "decoder_input_ids": (1, 16)}
    convolutions = 50 * 16 * 8 * 5 + 25 * 64 * 8 * 5
    encoder = 25 * (4 * 32 * 32 + 2 * 32 * 64) + 2 * 25 * 25 * 32
    decoder = 16 * 4 * 32 * 32 + 2 * 16 * 16 * 32 + (16 + 25) * 2 * 32 * 32
    decoder += 2 * 16 * 25 * 32 + 16 * 2 * 32 * 64
    assert profile_model(case).macs == convolutions + encoder + decoder
    longer = resolve(str(tmp_path), input_shape=(1, 300, 8), seq_len=16, meta=True)
    assert shapes(longer)["input_features"] == (1, 300, 8)


def test_patchtst_gets_its_history_of_every_channel(tmp_path, no_network):
    """User trial: a PatchTST folder was refused ("its forward requires past_values"). A
    forecaster reads ``context_length`` steps of ``num_input_channels`` series. By hand, 32
    steps of 2 series in 4 patches of 8: the patch embedding 8 x 8 x 16; one layer over each
    series' 4 patches, 16 wide: q, k, v, o 4 x 16 x 16 and MLP 2 x 16 x 32 per patch, scores
    and values 2 x 4 x 4 x 16 per series."""
    from pytest_graphbudget import profile_model

    transformers = registered("patchtst")
    transformers.PatchTSTConfig(
        context_length=32, num_input_channels=2, patch_length=8, patch_stride=8, d_model=16,
        num_hidden_layers=1, num_attention_heads=2, ffn_dim=32,
    ).save_pretrained(tmp_path)  # fmt: skip
    case = resolve(str(tmp_path), meta=True)
    assert shapes(case) == {"past_values": (1, 32, 2)}
    patches = 2 * 4
    expected = patches * 8 * 16 + patches * (4 * 16 * 16 + 2 * 16 * 32) + 2 * (2 * 4 * 4 * 16)
    assert profile_model(case).macs == expected
    assert shapes(resolve(str(tmp_path), batch=3, meta=True)) == {"past_values": (3, 32, 2)}


_WINDOW = {"past_values": (1, 31), "past_time_features": (1, 31, 2),
           "past_observed_mask": (1, 31), "future_values": (1, 12),
           "future_time_features": (1, 12, 2)}  # fmt: skip


@pytest.mark.parametrize(
    ("model_type", "config", "expected"),
    [
        ("time_series_transformer", {}, _WINDOW),
        ("informer", {}, _WINDOW),
        ("autoformer", {}, _WINDOW),
        (
            # three series, a static category, two static reals, a dynamic real feature
            "time_series_transformer",
            {"input_size": 3, "num_static_categorical_features": 1, "cardinality": [5],
             "embedding_dimension": [2], "num_static_real_features": 2,
             "num_dynamic_real_features": 1},
            {"past_values": (1, 31, 3), "past_time_features": (1, 31, 3),
             "past_observed_mask": (1, 31, 3), "future_values": (1, 12, 3),
             "future_time_features": (1, 12, 3), "static_categorical_features": (1, 1),
             "static_real_features": (1, 2)},
        ),
    ],
)  # fmt: skip
def test_a_forecaster_reading_time_features_gets_its_history_and_window(
    model_type, config, expected, tmp_path, no_network
):
    """User trial: Informer, Autoformer and the Time Series Transformer were refused ("its
    forward requires past_time_features"). Each gets the history its lags reach back over
    (24 steps of context and lags up to 7), their time features, the observed mask and the
    prediction window (12 steps), and is counted as FlopCounterMode counts it built with
    weights (attention by the math backend), on the meta device too."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from pytest_graphbudget import profile_model

    transformers = registered(model_type)
    transformers.AutoConfig.for_model(
        model_type, context_length=24, prediction_length=12, num_time_features=2, d_model=16,
        encoder_layers=1, decoder_layers=1, encoder_ffn_dim=32, decoder_ffn_dim=32, **config
    ).save_pretrained(tmp_path)  # fmt: skip
    real = resolve(str(tmp_path), meta=False)
    assert shapes(real) == expected
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        real.model(**real.kwargs)
    assert counter.get_total_flops() > 0
    assert profile_model(real).macs == counter.get_total_flops() // 2
    assert profile_model(resolve(str(tmp_path), meta=True)).macs == counter.get_total_flops() // 2
    # a history shorter than the lags reach: our words, not the model's "history length 32"
    with pytest.raises(GraphBudgetError, match=r"reads 31 steps of history .* at least 31"):
        resolve(str(tmp_path), input_shape=(1, 20, *expected["past_values"][2:]), meta=True)


_CONFORMER = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
              "intermediate_size": 64, "subsampling_conv_channels": 8,
              "num_mel_bins": 16}  # fmt: skip
_CLAP_AUDIO = {"spec_size": 128, "num_mel_bins": 16, "hidden_size": 32,
               "patch_embeds_hidden_size": 16, "depths": [1, 1], "num_attention_heads": [2, 2],
               "window_size": 4, "projection_dim": 8}  # fmt: skip


@pytest.mark.parametrize(
    ("model_type", "config", "expected", "uncounted"),
    [
        (
            # log-mel frames first, into its convolutional subsampler: a second of 10 ms frames
            "parakeet_encoder",
            _CONFORMER,
            {"input_features": (1, 100, 16)},
            0,
        ),
        (
            # a CTC head on that encoder: the frames as its encoder_config gives them
            "parakeet_ctc",
            {"encoder_config": _CONFORMER, "vocab_size": 40},
            {"input_features": (1, 100, 16)},
            0,
        ),
        (
            # a transducer: the frames and the decoder's tokens, which its joint pairs
            "parakeet_tdt",
            {"encoder_config": _CONFORMER, "vocab_size": 40, "blank_token_id": 39,
             "decoder_hidden_size": 16, "num_decoder_layers": 1},
            {"input_features": (1, 100, 16), "decoder_input_ids": (1, 128)},
            # its prediction network's LSTM, which FlopCounterMode counts as 0: four gates of
            # 16 x (16 + 16) a token, 128 tokens
            4 * 16 * (16 + 16) * 128,
        ),
        (
            # Wav2Vec2-BERT: a second of its extractor's 80 mel bins stacked in pairs
            "wav2vec2-bert",
            {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
             "intermediate_size": 64, "output_hidden_size": 32},
            {"input_features": (1, 49, 160)},
            0,
        ),
        (
            # LASR's CTC model: its encoder's frames, from encoder_config
            "lasr_ctc",
            {"encoder_config": {**_CONFORMER, "conv_kernel_size": 9}, "vocab_size": 40},
            {"input_features": (1, 100, 16)},
            0,
        ),
        (
            # CLAP's audio tower: 10 s of its extractor's frames, one crop
            "clap_audio_model",
            _CLAP_AUDIO,
            {"input_features": (1, 1, 1001, 16)},
            0,
        ),
        (
            # fused: the whole clip and three crops, of a clip longer than 10 s
            "clap_audio_model",
            {**_CLAP_AUDIO, "enable_fusion": True},
            {"input_features": (1, 4, 1001, 16), "is_longer": (1, 1)},
            0,
        ),
        (
            # CLAP: text, and audio it reads apart from the text
            "clap",
            {"audio_config": _CLAP_AUDIO, "projection_dim": 8,
             "text_config": {"hidden_size": 32, "num_hidden_layers": 1,
                             "num_attention_heads": 2, "intermediate_size": 32,
                             "vocab_size": 100, "projection_dim": 8}},
            {"input_ids": (1, 128), "attention_mask": (1, 128),
             "input_features": (1, 1, 1001, 16)},
            0,
        ),
        (
            # a vocoder: a second of mel frames at its rate, 16 kHz in steps of 4 x 4 x 4 x 4
            "speecht5_hifigan",
            {"upsample_initial_channel": 16, "model_in_dim": 8},
            {"spectrogram": (1, 63, 8)},
            0,
        ),
        (
            # a vocoder whose configuration gives no rate: 100 frames
            "fastspeech2_conformer_hifigan",
            {"upsample_initial_channel": 16, "model_in_dim": 8},
            {"spectrogram": (1, 100, 8)},
            0,
        ),
        (
            "univnet",
            {"model_in_channels": 8, "model_hidden_channels": 8, "num_mel_bins": 10,
             "kernel_predictor_hidden_channels": 8},
            {"input_features": (1, 100, 10)},
            0,
        ),
        (
            # a mono codec: one second at its rate
            "dac",
            {"encoder_hidden_size": 4, "decoder_hidden_size": 8, "downsampling_ratios": [2, 4],
             "upsampling_ratios": [4, 2], "hidden_size": 16, "n_codebooks": 2,
             "codebook_size": 32, "codebook_dim": 4, "hop_length": 8, "sampling_rate": 1600},
            {"input_values": (1, 1, 1600)},
            0,
        ),
    ],
)  # fmt: skip
def test_more_speech_models_get_audio_counted_as_flop_counter_mode_counts(
    model_type, config, expected, uncounted, tmp_path, no_network
):
    """User trial: a Parakeet encoder, its CTC and TDT models, LASR's CTC model, Wav2Vec2-BERT,
    CLAP and its audio tower, three vocoders and a DAC codec were refused ("its forward requires
    input_features", "input_values"). Their audio as their feature extractors give it, and the
    MACs FlopCounterMode counts on the model built with weights (attention by the math
    backend, which it has formulas for) and the LSTM it counts as 0, on the meta device too."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from pytest_graphbudget import profile_model

    transformers = registered(model_type)
    transformers.AutoConfig.for_model(model_type, **config).save_pretrained(tmp_path)
    real = resolve(str(tmp_path), meta=False)
    assert shapes(real) == expected
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        real.model(**real.kwargs)
    assert counter.get_total_flops() > 0
    expected_macs = counter.get_total_flops() // 2 + uncounted
    assert profile_model(real).macs == expected_macs
    assert profile_model(resolve(str(tmp_path), meta=True)).macs == expected_macs


def test_an_image_model_sized_by_its_backbone_gets_that_size(tmp_path, no_network):
    """User trial: ViTPose (and SAM, sized by its ``vision_config``) got a 224 x 224 image and
    raised "Input image size (224*224) doesn't match model (256*192)": its size is its
    backbone's. By hand, 64 x 48 in 16 x 16 patches: 12 patches embedded, 12 x 32 x 3 x 16 x
    16; one layer, q, k, v, o 4 x 32 x 32 and MLP 2 x 32 x 64 a token, scores and values
    2 x 12 x 12 x 32; the simple head's 3 x 3 convolution onto 17 keypoints at 4x, 16 x 12 x 17
    x 32 x 9."""
    from pytest_graphbudget import profile_model

    transformers = registered("vitpose")
    backbone = {"model_type": "vitpose_backbone", "image_size": [64, 48], "patch_size": [16, 16],
                "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                "mlp_ratio": 2, "out_indices": [1]}  # fmt: skip
    transformers.VitPoseConfig(backbone_config=backbone, num_labels=17).save_pretrained(tmp_path)
    case = resolve(str(tmp_path), meta=True)
    assert shapes(case) == {"pixel_values": (1, 3, 64, 48)}
    expected = 12 * 32 * 3 * 16 * 16 + 12 * (4 * 32 * 32 + 2 * 32 * 64) + 2 * 12 * 12 * 32
    assert profile_model(case).macs == expected + 16 * 12 * 17 * 32 * 9


def test_a_model_of_scaled_patches_gets_the_image_its_smallest_scale_needs(tmp_path, no_network):
    """User trial: Depth Pro got 224 x 224 and raised "Image size 224x224 is too small to be
    scaled with scaled_images_ratios=(0.25, 0.5, 1) when patch_size=384". Its image is the side
    whose smallest scale is one patch (its processor's 1,536 by default; 32 / 0.25 = 128 here),
    counted as FlopCounterMode counts it built with weights, on the meta device too."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from pytest_graphbudget import profile_model

    transformers = registered("depth_pro")
    part = {"model_type": "dinov2", "image_size": 32, "patch_size": 8, "hidden_size": 16,
            "num_hidden_layers": 2, "num_attention_heads": 2, "mlp_ratio": 2}  # fmt: skip
    transformers.AutoConfig.for_model(
        "depth_pro", patch_size=32, fusion_hidden_size=8, intermediate_hook_ids=[1, 0],
        intermediate_feature_dims=[8, 8], scaled_images_feature_dims=[16, 16, 8],
        image_model_config=part, patch_model_config=part, fov_model_config=part,
    ).save_pretrained(tmp_path)  # fmt: skip
    real = resolve(str(tmp_path), meta=False)
    assert shapes(real) == {"pixel_values": (1, 3, 128, 128)}
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        real.model(**real.kwargs)
    assert counter.get_total_flops() > 0
    assert profile_model(real).macs == counter.get_total_flops() // 2
    assert profile_model(resolve(str(tmp_path), meta=True)).macs == counter.get_total_flops() // 2


_VIDEOPRISM = {"image_size": 36, "num_frames": 4, "tubelet_size": [1, 18, 18], "hidden_size": 32,
               "num_spatial_layers": 1, "num_temporal_layers": 1, "num_attention_heads": 2,
               "intermediate_size": 32}  # fmt: skip


@pytest.mark.parametrize(
    ("model_type", "config", "expected"),
    [
        (
            # V-JEPA 2: frames_per_clip at crop_size
            "vjepa2",
            # heads of 24 and 12 values: transformers 4 splits each in three for its rotary
            {"hidden_size": 48, "num_hidden_layers": 1, "num_attention_heads": 2,
             "mlp_ratio": 2, "pred_hidden_size": 24, "pred_num_hidden_layers": 1,
             "pred_num_attention_heads": 2, "frames_per_clip": 4, "crop_size": 32},
            (1, 4, 3, 32, 32),
        ),
        ("videoprism_vision_model", _VIDEOPRISM, (1, 4, 3, 36, 36)),
    ],
)  # fmt: skip
def test_a_video_model_gets_its_clip_as_pixel_values_videos(
    model_type, config, expected, tmp_path, no_network
):
    """User trial: V-JEPA 2 and VideoPrism were refused ("its forward requires
    pixel_values_videos"). Each gets the clip its configuration describes, counted as
    FlopCounterMode counts it built with weights, on the meta device too."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from pytest_graphbudget import profile_model

    registered(model_type).AutoConfig.for_model(model_type, **config).save_pretrained(tmp_path)
    real = resolve(str(tmp_path), meta=False)
    assert shapes(real) == {"pixel_values_videos": expected}
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        real.model(**real.kwargs)
    assert counter.get_total_flops() > 0
    assert profile_model(real).macs == counter.get_total_flops() // 2
    assert profile_model(resolve(str(tmp_path), meta=True)).macs == counter.get_total_flops() // 2


def test_a_video_and_text_model_gets_both(tmp_path, no_network):
    """VideoPrism's CLIP-style model reads text and a clip apart: it gets both, the clip its
    vision_config describes, counted as FlopCounterMode counts it (with autograd on: under
    no_grad its module tracker asserts on this model)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from pytest_graphbudget import profile_model

    text = {"hidden_size": 32, "num_text_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 32, "vocab_size": 100}  # fmt: skip
    transformers = registered("videoprism")
    config = {"vision_config": _VIDEOPRISM, "text_config": text}
    transformers.AutoConfig.for_model("videoprism", **config).save_pretrained(tmp_path)
    real = resolve(str(tmp_path), seq_len=16, meta=False)
    assert shapes(real) == {
        "input_ids": (1, 16), "attention_mask": (1, 16), "pixel_values_videos": (1, 4, 3, 36, 36)
    }  # fmt: skip
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        real.model(**real.kwargs)
    assert counter.get_total_flops() > 0
    assert profile_model(real).macs == counter.get_total_flops() // 2
    meta = resolve(str(tmp_path), seq_len=16, meta=True)
    assert profile_model(meta).macs == counter.get_total_flops() // 2


def test_a_text_model_with_its_own_image_size_gets_its_image(tmp_path, no_network):
    """User trial: ViLT got its text alone and raised "You have to specify either pixel_values
    or image_embeds": it reads an image beside the text, sized by its own ``image_size`` (no
    ``vision_config``). Counted as FlopCounterMode counts it built with weights, on the meta
    device too (where its sampled patches had raised an out-of-bounds index)."""
    from torch.utils.flop_counter import FlopCounterMode

    from pytest_graphbudget import profile_model

    transformers = registered("vilt")
    transformers.AutoConfig.for_model(
        "vilt", hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        image_size=64, patch_size=16,
    ).save_pretrained(tmp_path)  # fmt: skip
    real = resolve(str(tmp_path), seq_len=8, meta=False)
    assert shapes(real) == {
        "input_ids": (1, 8), "attention_mask": (1, 8), "token_type_ids": (1, 8),
        "pixel_values": (1, 3, 64, 64), "pixel_mask": (1, 64, 64),
    }  # fmt: skip
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        real.model(**real.kwargs)
    assert counter.get_total_flops() > 0
    assert profile_model(real).macs == counter.get_total_flops() // 2
    meta = resolve(str(tmp_path), seq_len=8, meta=True)
    assert profile_model(meta).macs == counter.get_total_flops() // 2


@pytest.mark.parametrize(
    ("model_type", "config"),
    [
        ("bros", {"num_hidden_layers": 1, "vocab_size": 100}),
        (
            "udop",
            {"d_model": 32, "d_kv": 16, "d_ff": 32, "num_layers": 1, "num_decoder_layers": 1,
             "num_heads": 2, "image_size": 32, "patch_size": 16,
             "relative_bias_args": [{"type": "1d"}]},
        ),
    ],
)  # fmt: skip
def test_a_document_model_gets_its_words_boxes(model_type, config, tmp_path, no_network):
    """User trial: BROS and UDOP raised "You have to specify bbox" ("Bbox is required"). A
    document model gets its words' boxes, ``batch x seq_len x 4`` zeros (LayoutLM's default
    when none is given), and UDOP its page's image too; counted as FlopCounterMode counts them
    built with weights (attention by the math backend). On the meta device UDOP reads its
    boxes' values through a tensor with no data: refused in one line that says to build it
    with weights (it had read "data is not allocated yet" alone)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from pytest_graphbudget import profile_model

    registered(model_type).AutoConfig.for_model(model_type, **config).save_pretrained(tmp_path)
    real = resolve(str(tmp_path), seq_len=8, meta=False)
    assert shapes(real)["bbox"] == (1, 8, 4)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        real.model(**real.kwargs)
    assert counter.get_total_flops() > 0
    assert profile_model(real).macs == counter.get_total_flops() // 2
    meta = resolve(str(tmp_path), seq_len=8, meta=True)
    if model_type == "bros":
        assert profile_model(meta).macs == counter.get_total_flops() // 2
    else:
        with pytest.raises(GraphBudgetError, match=r"build it with real weights \(meta=False\)"):
            profile_model(meta)


def test_a_detector_reading_text_gets_its_image_at_its_processors_size(tmp_path, no_network):
    """User trial: Grounding DINO was refused ("its forward requires pixel_values"): it reads
    text and an image apart, the image through a backbone (no ``vision_config``). It gets both,
    the image at the 800 px its processor resizes to (not its Swin's nominal 224), and is
    counted as FlopCounterMode counts it built with weights, on the meta device too."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from pytest_graphbudget import profile_model

    transformers = registered("grounding-dino")
    backbone = {
        "model_type": "swin",
        "embed_dim": 16,
        "depths": [1, 1],
        "num_heads": [1, 2],
        "window_size": 4,
        "out_indices": [1, 2],
        "image_size": 224,
    }
    text = {
        "model_type": "bert",
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 32,
    }
    transformers.AutoConfig.for_model(
        "grounding-dino", backbone_config=backbone, text_config=text, d_model=32,
        encoder_layers=1, decoder_layers=1, encoder_ffn_dim=32, decoder_ffn_dim=32,
        encoder_attention_heads=2, decoder_attention_heads=2, num_queries=10,
        num_feature_levels=2, max_text_len=16,
    ).save_pretrained(tmp_path)  # fmt: skip
    assert shapes(resolve(str(tmp_path), seq_len=16, meta=True)) == {
        "input_ids": (1, 16), "attention_mask": (1, 16), "pixel_values": (1, 3, 800, 800),
        "pixel_mask": (1, 800, 800),
    }  # fmt: skip
    small = {"seq_len": 16, "input_shape": (1, 3, 64, 64)}
    real = resolve(str(tmp_path), meta=False, **small)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        real.model(**real.kwargs)
    assert counter.get_total_flops() > 0
    assert profile_model(real).macs == counter.get_total_flops() // 2
    if int(transformers.__version__.split(".")[0]) >= 5:  # 4's reads a value on the meta device
        meta = resolve(str(tmp_path), meta=True, **small)
        assert profile_model(meta).macs == counter.get_total_flops() // 2


def test_oneformer_gets_its_task_beside_its_image(tmp_path, no_network):
    """User trial: OneFormer was refused ("its forward requires task_inputs"). Its task is
    ``task_seq_len`` token ids, as its processor tokenizes "the task is semantic", beside the
    800 px image its processor resizes to; counted as FlopCounterMode counts it built with
    weights (with autograd on: under no_grad its module tracker asserts on this model)."""
    from torch.utils.flop_counter import FlopCounterMode

    from pytest_graphbudget import profile_model

    transformers = registered("oneformer")
    backbone = {
        "model_type": "swin",
        "embed_dim": 16,
        "depths": [1, 1, 1, 1],
        "num_heads": [1, 1, 2, 2],
        "window_size": 4,
        "out_features": ["stage1", "stage2", "stage3", "stage4"],
    }
    transformers.AutoConfig.for_model(
        "oneformer", backbone_config=backbone, hidden_dim=32, conv_dim=32, mask_dim=32,
        encoder_feedforward_dim=32, dim_feedforward=32, encoder_layers=1, decoder_layers=2,
        num_attention_heads=2, num_queries=8, text_encoder_width=32, text_encoder_num_layers=1,
        text_encoder_proj_layers=1, text_encoder_n_ctx=4, task_seq_len=8,
        text_encoder_context_length=8, num_classes=5,
    ).save_pretrained(tmp_path)  # fmt: skip
    assert shapes(resolve(str(tmp_path), meta=True)) == {
        "pixel_values": (1, 3, 800, 800), "pixel_mask": (1, 800, 800), "task_inputs": (1, 8)
    }  # fmt: skip
    real = resolve(str(tmp_path), meta=False, input_shape=(1, 3, 64, 64))
    with FlopCounterMode(display=False) as counter:
        real.model(**real.kwargs)
    assert counter.get_total_flops() > 0
    assert profile_model(real).macs == counter.get_total_flops() // 2


@pytest.mark.parametrize(
    ("model_type", "side"),
    [("deformable_detr", 800), ("mask2former", 800), ("rt_detr", 640), ("d_fine", 640)],
)
def test_a_detr_style_detector_gets_the_image_its_processor_resizes_to(
    model_type, side, tmp_path, no_network
):
    """User trial: Deformable DETR, Mask2Former, RT-DETR and D-FINE were profiled at 224 x 224,
    where their image processors resize to a shortest edge of 800 (RT-DETR's and D-FINE's:
    640 x 640)."""
    transformers = registered(model_type)
    if model_type == "deformable_detr" and int(transformers.__version__.split(".")[0]) < 5:
        pytest.importorskip("timm")  # transformers 4 builds its backbone with timm
    transformers.AutoConfig.for_model(model_type).save_pretrained(tmp_path)
    found = shapes(resolve(str(tmp_path), meta=True))
    assert found["pixel_values"] == (1, 3, side, side)


def test_a_vision_tower_its_module_does_not_export_is_built(tmp_path, no_network):
    """Qwen2-VL's vision tower alone: transformers builds it only inside Qwen2-VL and exports
    no class for it, so a folder of its configuration was refused; it is built as the
    module's own class for that configuration, with a note, and counted as FlopCounterMode
    counts it on the tower built with weights (attention by the math backend)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from pytest_graphbudget import profile_model

    transformers = registered("qwen2_vl_vision")
    transformers.AutoConfig.for_model(
        "qwen2_vl_vision", depth=1, embed_dim=32, hidden_size=16, num_heads=2, mlp_ratio=2,
    ).save_pretrained(tmp_path)  # fmt: skip
    case = resolve(str(tmp_path), meta=True)
    assert "built as Qwen2VisionTransformerPretrainedModel" in case.note
    assert shapes(case) == {"hidden_states": (256, 3 * 2 * 14 * 14), "grid_thw": (1, 3)}
    real = resolve(str(tmp_path), meta=False)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        real.model(**real.kwargs)
    assert profile_model(case).macs == counter.get_total_flops() // 2 > 0


@pytest.mark.parametrize("model_type", ["superglue", "lightglue", "efficientloftr"])
def test_a_keypoint_matcher_gets_a_pair_of_images_at_its_processors_size(
    model_type, tmp_path, no_network
):
    """User trial: SuperGlue, LightGlue and EfficientLoFTR got one image and raised "Input must
    be a 5D tensor of shape (batch_size, 2, num_channels, height, width)". They get the pair
    they match, at the size their image processor resizes to (transformers' own, read here),
    and are counted as FlopCounterMode counts them on a smaller pair (attention by the math
    backend): how many keypoints the detector keeps depends on the weights' values, so no
    count by hand holds across them."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from pytest_graphbudget import profile_model

    transformers = registered(model_type)
    if model_type == "superglue" and int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers 4's default SuperGlue configuration has no encoder sizes")
    transformers.AutoConfig.for_model(model_type).save_pretrained(tmp_path)
    processor = {"superglue": "SuperGlue", "lightglue": "LightGlue"}.get(
        model_type, "EfficientLoFTR"
    )
    size = getattr(transformers, f"{processor}ImageProcessor")().size
    assert shapes(resolve(str(tmp_path))) == {
        "pixel_values": (1, 2, 3, size["height"], size["width"])
    }
    torch.manual_seed(0)
    case = resolve(str(tmp_path), input_shape=(1, 2, 3, 64, 96))
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        case.model(**case.kwargs)
    assert counter.get_total_flops() > 0
    assert profile_model(case).macs == counter.get_total_flops() // 2
