"""Hardware profiles (``pytest_graphbudget/hardware.py``): the built-in ones and their docs.

A new built-in profile needs no edit here: every entry of ``BUILTIN`` is checked for what the
roofline needs and for its row in docs/metrics.md's table. Published figures are the
datasheets' (dense, no structured sparsity), written out as the vendors print them.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.hardware import BUILTIN, get

METRICS = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"


def test_hardware_profiles_have_published_figures():
    names = {hw.name for hw in BUILTIN}
    assert {"generic", "a100", "h100", "t4"} <= names and len(names) >= 5
    assert get("generic").ridge_point() == 10.0
    assert get("H100").peak("bfloat16") == 989.4e12
    with pytest.raises(GraphBudgetError, match="known profiles: .*a100"):
        get("tpu-v9")


@pytest.mark.parametrize("hw", BUILTIN, ids=lambda hw: hw.name)
def test_every_builtin_profile_has_a_roofline_and_a_source(hw):
    assert hw.name == hw.name.lower() and hw.description and hw.source
    assert "float32" in hw.peak_flops  # every other dtype falls back to it
    figures = [*hw.peak_flops.values(), hw.bandwidth]
    assert all(math.isfinite(v) and v > 0 for v in figures), figures
    assert get(hw.name) is hw
    for alias in hw.aliases:
        assert get(alias) is hw, alias


def test_names_and_aliases_are_unique():
    spellings = [spelling for hw in BUILTIN for spelling in (hw.name, *hw.aliases)]
    assert len(spellings) == len(set(spellings))


def test_docs_list_every_builtin_profile():
    """docs/metrics.md's "Hardware profiles" table has one row per built-in profile."""
    section = METRICS.read_text().split("## Hardware profiles", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE))
    missing = [hw.name for hw in BUILTIN if hw.name not in rows]
    assert not missing, f"add a row to docs/metrics.md's Hardware profiles table for {missing}"
