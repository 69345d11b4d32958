"""Dynamo name abbreviation (``pytest_graphbudget.names``) and the CLI's pure helpers.

The examples are the abbreviations ``profile_graph.py`` printed, which its users rely on.
Nothing here imports torch.
"""

from __future__ import annotations

import pytest

from pytest_graphbudget.cli import join_shape_tokens
from pytest_graphbudget.cli.explore import node_range
from pytest_graphbudget.cli.views import percent
from pytest_graphbudget.reports.names import Abbreviator, abbreviate, mangle, rules, truncate


def test_seed_examples():
    # "g__model___model_0_conv -> model.0.conv"
    assert abbreviate("g__model___model_0_conv") == "model.0.conv"
    # The seed prints this one as `model.22.cv3.0[0][0].conv`, which contradicts its own rule 2
    # (`_23_` -> `.23.`): the layer number is kept as written.
    assert (
        abbreviate("getattr_getattr_L__yolo_model___model_23_cv3_0___0_____0___conv")
        == "model.23.cv3.0[0][0].conv"
    )
    # "Standard FX names: layer1.0.conv1 -> layer1.0.conv1 (unchanged)"
    assert abbreviate("layer1.0.conv1") == "layer1.0.conv1"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # Rule 1: prefixes go.
        ("L__self___layer1_0_conv1", "layer1.0.conv1"),
        ("l__self___features_3", "features.3"),
        ("getattr_L__self___blocks_2_attn", "blocks.2.attn"),
        # Rule 2: numbers between underscores are path segments; an underscore between two
        # words may be the name's own (`word_embeddings`) and stays without known paths.
        ("g__model___model_10_m_0_cv1", "model.10.m.0.cv1"),
        ("g__model___model_10_m_0_cv1_conv", "model.10.m.0.cv1_conv"),
        # Rule 3: a repeated root collapses.
        ("L__self___model_model_0_conv", "model.0.conv"),
        # Rule 4: indices behind three or more underscores.
        ("L__self___cv3_0___1___conv", "cv3.0[1].conv"),
        # Dynamo's newer style (torch >= 2.5).
        (
            "L_self_modules_layer1_modules_0_modules_conv1_parameters_weight_",
            "layer1.0.conv1.weight",
        ),
        # Names without a Dynamo prefix are never touched, even with underscores and digits.
        ("conv_1", "conv_1"),
        ("layer1_0_conv1", "layer1_0_conv1"),
        ("linear", "linear"),
        ("", ""),
    ],
)
def test_rules(name, expected):
    assert abbreviate(name) == expected


def test_known_module_paths_resolve_what_the_rules_cannot():
    known = [
        "encoder",
        "encoder.layer",
        "encoder.layer.0",
        "encoder.layer.0.attention",
        "encoder.layer.0.attention.self",
        "encoder.layer.0.attention.self.query",
        "embeddings",
        "embeddings.word_embeddings",
    ]
    names = Abbreviator(known)
    # Without the paths, single underscores between words are ambiguous and kept.
    assert rules("encoder_layer_0_attention_self_query") == "encoder_layer.0.attention_self_query"
    assert names("l__self___encoder_layer_0_attention_self_query") == (
        "encoder.layer.0.attention.self.query"
    )
    # Exported programs' parameter and buffer placeholders.
    assert names.placeholder("p_model_encoder_layer_0_attention_self_query_weight") == (
        "encoder.layer.0.attention.self.query.weight"
    )
    assert names.placeholder("p_model_embeddings_word_embeddings_weight") == (
        "embeddings.word_embeddings.weight"
    )
    assert names.placeholder("b_model_embeddings_position_ids") == "embeddings.position_ids"
    # A user input or an op node is not a placeholder of state.
    assert names.placeholder("tensors_0") == "tensors_0"
    assert names.placeholder("linear_3") == "linear_3"
    yolo = Abbreviator(
        [
            "model",
            "model.10",
            "model.10.m",
            "model.10.m.0",
            "model.10.m.0.cv1",
            "model.10.m.0.cv1.conv",
        ]
    )
    assert yolo("g__model___model_10_m_0_cv1_conv") == "model.10.m.0.cv1.conv"
    # A known path is returned as is.
    assert names("embeddings.word_embeddings") == "embeddings.word_embeddings"


def test_mangle_is_what_dynamo_does():
    assert mangle("encoder.layer.0.attention") == "encoder_layer_0_attention"
    assert mangle("cv3[0]") == "cv3_0_"


def test_truncate_keeps_start_and_end():
    name = "encoder.layer.11.attention.self.query"
    assert truncate(name, 100) == name
    short = truncate(name, 24)
    assert len(short) == 24 and short.startswith("encoder") and short.endswith("self.query")
    assert "..." in short


def test_shape_tokens_from_the_source_documents():
    argv = ["profile", "--input-shape", "1", "3", "640", "640", "yolov8n.pt"]
    assert join_shape_tokens(argv) == ["profile", "--input-shape", "1,3,640,640", "yolov8n.pt"]
    argv = ["profile", "yolov8n.pt", "--input-shape", "1,3,640,640"]
    assert join_shape_tokens(argv) == argv


def test_node_ranges():
    assert node_range(317, around=30, context=20) == range(10, 51)
    assert node_range(317, start=1, end=15) == range(1, 16)
    assert node_range(317, start=300, end=999) == range(300, 317)
    assert node_range(317, max_nodes=15) == range(15)
    assert node_range(317, around=3, context=10) == range(14)


def test_percent_stays_readable():
    assert percent(0.97) == "97.0%"
    assert percent(0.00077) == "0.08%"
    assert percent(3e-8) == "<0.01%"
    assert percent(0) == "0.0%"


def test_views_never_import_torch():
    """The renderers work on saved profiles too: no torch import anywhere in them."""
    import importlib

    for module in (
        "pytest_graphbudget.reports.names",
        "pytest_graphbudget.cli.views",
        "pytest_graphbudget.cli.sections",
        "pytest_graphbudget.cli.profile",
        "pytest_graphbudget.cli.profile_view",
        "pytest_graphbudget.reports.layers",
        "pytest_graphbudget.cli.explore",
        "pytest_graphbudget.cli.compare",
        "pytest_graphbudget.cli.hardware",
        "pytest_graphbudget.reports.tables",
        "pytest_graphbudget.reports.visualize",
    ):
        source = importlib.import_module(module).__file__
        with open(source, encoding="utf-8") as handle:
            text = handle.read()
        assert "import torch" not in text
