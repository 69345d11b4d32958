"""Zoo names profiled end to end: one model per family and per tracing tier, offline.

The whole zoo is swept by ``make zoo`` (``docs/zoo.md``); CI runs this representative subset.
Sequence lengths are kept short so that the suite stays fast; the figures themselves are
checked against published numbers in the ``test_reference_*`` modules.
"""

from __future__ import annotations

import json

import pytest
from conftest import skip_detr_without_timm

torch = pytest.importorskip("torch")

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.zoo import resolve  # noqa: E402


def profile(name, **options):
    case = resolve(name, **options)
    return case, profile_model(case.model, case.inputs, case.kwargs, name=case.name)


def assert_fully_costed(prof):
    assert prof.macs > 0 and prof.flops > 2 * prof.macs
    assert prof.coverage.unsupported_ops == {}
    assert prof.peak_memory_bytes > prof.weights_bytes


def test_torchvision_traces_with_fx(torchvision_reference, no_network):
    _, prof = profile("resnet18")
    assert prof.trace.method == "fx"
    assert prof.macs == pytest.approx(torchvision_reference("resnet18").macs, rel=1e-3)
    assert_fully_costed(prof)
    assert no_network == []


def test_by_name_through_profile_model(no_network):
    prof = profile_model("mobilenet_v3_small", batch=2)
    assert prof.params == 2_542_856  # torchvision's published num_params
    assert [i.shape for i in prof.inputs] == [[2, 3, 224, 224]]


def gpt2_macs(layers: int, s: int, h: int) -> int:
    return layers * (4 * s * h * h + 2 * s * h * 4 * h + 2 * s * s * h)


def test_gpt2_with_its_cache_on_traces(no_network):
    case, prof = profile("gpt2", seq_len=32)
    assert case.model.config.use_cache  # as published: the forward returns a KV cache
    assert prof.trace.method == "eager"
    assert prof.macs == gpt2_macs(12, 32, 768)
    assert prof.params == 124_439_808
    assert_fully_costed(prof)


def test_bert_style_encoder_with_token_types(no_network):
    case, prof = profile("distilbert-base-uncased", seq_len=32)
    assert set(case.kwargs) == {"input_ids", "attention_mask"}
    assert prof.params == 66_362_880
    assert_fully_costed(prof)


@pytest.mark.parametrize(
    "name", ["t5-small", pytest.param("facebook/bart-base", marks=pytest.mark.slow)]
)
def test_encoder_decoders_trace(name, no_network):
    case, prof = profile(name, seq_len=16)
    assert "decoder_input_ids" in case.kwargs
    assert prof.trace.method == "eager"
    assert_fully_costed(prof)


@pytest.mark.slow
def test_detr_traces(no_network):
    skip_detr_without_timm()
    case, prof = profile("facebook/detr-resnet-50", input_shape=(1, 3, 320, 320))
    assert set(case.kwargs) == {"pixel_values", "pixel_mask"}
    assert prof.params == 41_524_768
    assert_fully_costed(prof)


def test_yolo_traces(no_network):
    _, prof = profile("yolov8n")
    assert prof.params == 3_157_200
    assert prof.trace.method in ("fx", "eager")
    assert_fully_costed(prof)


def test_large_model_is_profiled_on_meta_without_weights(no_network):
    case, prof = profile("EleutherAI/gpt-neo-1.3B", seq_len=16)
    assert all(p.is_meta for p in case.model.parameters())
    assert prof.params == 1_315_575_808
    assert prof.weights_bytes >= 4 * 1_315_575_808
    assert_fully_costed(prof)


def test_local_folder_profiles(tmp_path, no_network):
    folder = tmp_path / "tiny-bert"
    folder.mkdir()
    config = {
        "model_type": "bert",
        "vocab_size": 500,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
    }
    (folder / "config.json").write_text(json.dumps(config))
    _, prof = profile(str(folder), seq_len=8)
    assert_fully_costed(prof)
