"""``graph-budget explore``'s text (``cli/explore.py``): the node column of a deep model."""

from __future__ import annotations

from collections import OrderedDict

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.cli.explore import LEFT, explore_text  # noqa: E402


def test_a_long_node_name_is_shortened_but_not_its_number_and_kind():
    """FX names the Linear's call after its path, 64 characters here: the column keeps
    ``0. [call_module] `` whole and shortens the name as ``start...end``."""
    inner = nn.Sequential(OrderedDict(attention_output_projection_layer=nn.Linear(4, 4)))
    model = nn.Sequential(OrderedDict(encoder_block_with_a_long_name=inner))
    prof = profile_model(model, torch.randn(2, 4), tier="fx")
    text = explore_text(prof, range(len(prof.node_info)))
    line = next(line for line in text.splitlines() if line.startswith("0. "))
    name = "encoder_block_with_a_long_name_attention_output_projection_layer"
    assert prof.node_info[0].name == name
    column = line[:LEFT].rstrip()
    assert column.startswith("0. [call_module] encoder_bl")
    assert "..." in column and column.endswith("output_projection_layer")
    assert len(column) == LEFT - 1
