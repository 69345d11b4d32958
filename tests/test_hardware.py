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


def test_a_card_given_only_its_datasheet_and_family_takes_the_familys_fit():
    from pytest_graphbudget.hardware import FAMILIES, from_table

    table = {"peak_tflops": {"float32": 110, "float16": 438.9}, "bandwidth_gbs": 1792}
    card = from_table("maxq", {**table, "family": "blackwell"})
    blackwell = FAMILIES["blackwell"]
    assert card.family == "blackwell" and card.launch_s == blackwell.launch_s
    assert dict(card.efficiency) == dict(blackwell.efficiency)
    own = from_table(
        "maxq", {**table, "family": "blackwell", "launch_us": 2, "efficiency": {"conv": [0.4, 0.9]}}
    )
    assert own.launch_s == pytest.approx(2e-6) and own.efficiency["conv"] == (0.4, 0.9)
    assert own.efficiency["norm"] == blackwell.efficiency["norm"]
    # the family's compiled fractions come along, but a kind the user names is the user's
    assert dict(card.compiled_efficiency) == dict(blackwell.compiled)
    assert "conv" not in own.compiled_efficiency
    assert own.compiled_efficiency["norm"] == blackwell.compiled["norm"]
    assert own.kind_time("conv", 4e11, 0, "float16", compiled=True) == pytest.approx(
        2e-6 + 4e11 / (0.4 * 438.9e12)
    )
    plain = from_table("plain", table)
    assert (plain.family, dict(plain.efficiency), plain.launch_s) == ("", {}, 0.0)


def test_a_hopper_card_moves_bytes_at_its_measured_share_of_adas_and_computes_at_adas():
    """hopper borrows ada's shares, its memory shares scaled by what an H200 was timed at
    (``memory_scale``): a user's hopper card, given its datasheet, prices a memory-bound
    kernel that much slower than ada's shares say and a compute-bound one as ada's."""
    from pytest_graphbudget.hardware import FAMILIES, from_table

    hopper, ada = FAMILIES["hopper"], FAMILIES["ada"]
    assert 0.3 < hopper.memory_scale < 0.7 and ada.memory_scale == 1.0
    card = from_table(
        "gh200", {"peak_tflops": {"float32": 67, "float16": 989.4}, "bandwidth_gbs": 4000,
                  "family": "hopper"}
    )  # fmt: skip
    for compiled, shares in ((False, ada.efficiency), (True, ada.compiled)):
        compute, memory = shares["elementwise"]
        moved = card.kind_time("elementwise", 0, 8e9, "float16", compiled) - card.launch_s
        assert moved == pytest.approx(8e9 / (memory * hopper.memory_scale * 4000e9))
        compute, memory = shares["matmul"]
        done = card.kind_time("matmul", 1e15, 0, "float16", compiled) - card.launch_s
        assert done == pytest.approx(1e15 / (compute * 989.4e12))


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"family": "blackwel"}, "unknown family 'blackwel' (did you mean 'blackwell'?); known: "),
        ({"family": 3}, "unknown family 3; known: ampere, ada, blackwell"),
        ({"family": "ada"}, "family 'ada' needs the card's float16 tensor peak (peak_tflops"),
        (
            {"efficiency": {"convv": [1, 1]}},
            "efficiency.convv: unknown kind (did you mean 'conv'?)",
        ),
        ({"efficiency": {"conv": [1]}}, "efficiency.conv must be [compute, memory] fractions"),
        ({"efficiency": {"conv": [0, 1]}}, "efficiency.conv must be a number > 0, got 0"),
        # a percentage without its sign: 50 would price conv at 50 times the peak
        (
            {"efficiency": {"conv": [50, 0.8]}},
            'efficiency.conv: 50 would be 5000% of the peak: did you mean 0.5 or "50%"?',
        ),
        ({"efficiency": {"conv": ["0%", 1]}}, "efficiency.conv must be a share above 0"),
        ({"efficiency": {"conv": ["500%", 1]}}, "'500%' is above 200% of the peak"),
        ({"launch_us": "fast"}, "launch_us must be a number >= 0, got 'fast'"),
        ({"launch_us": "4"}, "launch_us must be a number >= 0, got '4'"),
        ({"familly": "ada"}, "unknown key 'familly' (did you mean 'family'?)"),
        ({"notes": "ours"}, "unknown key 'notes'; keys: description, peak_tflops,"),
        ({"kernelsfoo": 5}, "unknown key 'kernelsfoo'"),
        # a misspelt dtype would leave float16 models on the float32 peak
        (
            {"peak_tflops": {"float32": 1, "floa16": 4}},
            "peak_tflops: unknown dtype 'floa16' (did you mean 'float16'?)",
        ),
        ({"peak_tflops": {"float32": True}}, "peak_tflops.float32 must be a number > 0, got True"),
        # a datasheet's spelling: fp32 is nearer tf32 letter by letter, but means float32
        ({"peak_tflops": {"fp32": 1}}, "unknown dtype 'fp32' (did you mean 'float32'?)"),
        (
            {"peak_tflops": {"float32": 1, "BF16": 2}},
            "unknown dtype 'BF16' (did you mean 'bfloat16'?)",
        ),
        ({"peak_tflops": 10}, "needs peak_tflops (or peak_flops) as a table per dtype"),
        ({"peak_tflops": [10, 40]}, "needs peak_tflops (or peak_flops) as a table per dtype"),
        ({"peak_tflops": {"float16": 1}}, "peak for float32 is required"),
        ({"bandwidth_gbs": "500"}, "bandwidth_gbs must be a number > 0, got '500'"),
        ({"bandwidth_gbs": {"hbm": 1}}, "bandwidth_gbs must be a number > 0, got {'hbm': 1}"),
        # both forms of one figure: one of them would be dropped without a word
        ({"bandwidth": 1e9}, "give bandwidth_gbs or bandwidth, not both"),
        ({"peak_flops": {"float32": 1e12}}, "give peak_tflops or peak_flops, not both"),
        ({"aliases": "mine"}, "aliases must be a list of names, got 'mine'"),
        ({"source": 5}, "source must be a string, got 5"),
        ({"matmul_source": [1]}, "matmul_source must be a string, got [1]"),
    ],
)
def test_a_bad_family_or_efficiency_is_one_line(extra, says):
    from pytest_graphbudget.hardware import from_table

    table = {"peak_tflops": {"float32": 1}, "bandwidth_gbs": 1, **extra}
    with pytest.raises(GraphBudgetError) as info:
        from_table("card", table)
    assert says in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "table", "says"),
    [
        ("x", None, "hardware 'x': must be a table, got None"),
        ("x", "abc", "hardware 'x': must be a table, got 'abc'"),
        (5, {"peak_tflops": {"float32": 1}, "bandwidth_gbs": 1}, "name must be a string, got 5"),
        ("", {"peak_tflops": {"float32": 1}, "bandwidth_gbs": 1}, "name must be a string, got ''"),
    ],
)
def test_from_table_in_python_refuses_what_toml_cannot_write(name, table, says):
    from pytest_graphbudget.hardware import from_table

    with pytest.raises(GraphBudgetError, match=re.escape(says)):
        from_table(name, table)


def test_a_family_card_without_a_bfloat16_peak_runs_bfloat16_at_its_float16_one():
    """Tensor cores since ampere run bfloat16 at the float16 rate: a user card of such a
    family that gives only float16 priced bfloat16 models at the float32 peak (4x slower here)
    under the family's tensor-core shares. Turing has no bfloat16 tensor cores."""
    from pytest_graphbudget.hardware import from_table

    figures = {"peak_tflops": {"float32": 10, "float16": 40}, "bandwidth_gbs": 100}
    for family, bf16 in (("ada", 40e12), ("cdna3", 40e12), ("turing", 10e12)):
        card = from_table("card", {**figures, "family": family})
        assert card.peak("bfloat16") == bf16, family
    own = from_table(
        "card",
        {**figures, "family": "ada", "peak_tflops": {"float32": 10, "float16": 40, "bfloat16": 20}},
    )
    assert own.peak("bfloat16") == 20e12  # the card's own figure, where it gives one
    assert from_table("plain", figures).peak("bfloat16") == 10e12  # no family: no guess


def test_a_family_card_without_a_tf32_peak_runs_float32_convolutions_at_half_its_float16():
    """User trial: an A100 written from its datasheet (float32 19.5, float16 312) without a
    tf32 peak priced ResNet-50's float32 convolutions, which PyTorch runs on TF32, at the
    float32 peak: 54.1 ms at batch 64 where the shipped a100 reads 19.3. Every datasheet
    since ampere gives TF32 at half the dense float16 rate (A100 156 of 312, H100 494.7 of
    989.4, RTX 4090 82.6 of 165.2); turing has no TF32."""
    import torch
    import torchvision

    from pytest_graphbudget.api import profile_model
    from pytest_graphbudget.hardware import from_table

    figures = {"peak_tflops": {"float32": 10, "float16": 40}, "bandwidth_gbs": 100}
    for family, tf32 in (("ampere", 20e12), ("hopper", 20e12), ("turing", 10e12)):
        assert from_table("card", {**figures, "family": family}).peak("tf32") == tf32, family
    assert from_table("plain", figures).peak("tf32") == 10e12  # no family: no guess
    datasheet = {"float32": 19.5, "float16": 312, "bfloat16": 312}
    mine = {"peak_tflops": datasheet, "bandwidth_gbs": 2039, "family": "ampere"}
    mine |= {"matmul_tflops": 258.74, "matmul_tflops_float32": 19.18}  # as the shipped a100
    with torch.device("meta"):
        model = torchvision.models.resnet50().eval()
    x = torch.empty(64, 3, 224, 224, device="meta")
    shipped, written = (
        profile_model(model, (x,), hardware=card).est_latency_s
        for card in ("a100", from_table("my-a100", mine))
    )
    assert written == shipped  # the shipped card's datasheet gives tf32 = 156


def test_a_matmul_figure_in_the_wrong_unit_is_refused():
    """235,130 where 235.13 TFLOP/s goes (GFLOP/s) would scale every compute share 490x."""
    from pytest_graphbudget.hardware import from_table

    table = {"peak_tflops": {"float32": 110, "float16": 438.9}, "bandwidth_gbs": 1792}
    with pytest.raises(GraphBudgetError, match=r"is 536 times the float16 peak \(438.9 TFLOP/s\)"):
        from_table("maxq", {**table, "family": "blackwell", "matmul_tflops": 235130})


@pytest.mark.parametrize(
    ("figures", "says"),
    [
        ({"peak_tflops": {"float32": 40e12}}, "peak_tflops.float32 = 40000000000000.0 is 4e+10 PF"),
        ({"peak_flops": {"float32": 1e18}}, "peak_flops.float32 = 1e+18 is 1e+03 PFLOP/s"),
        # an A100's 19.5 in GFLOP/s: under 100 PFLOP/s, but no chip's float32 comes near
        ({"peak_tflops": {"float32": 19500}}, "float32 = 19500 is 19.5 PFLOP/s, beyond any chip's"),
        # a user trial: an A4000's float16 (76.7) in GFLOP/s, and a bandwidth in MB/s; a
        # latency_max of 1 ms passed a 2.2 TFLOP model at 59 us
        (
            {"peak_tflops": {"float32": 19.2, "float16": 76700}},
            "float16 = 76700 is 3.99e+03 times the float32 peak, where no chip's is more than 64",
        ),
        ({"bandwidth_gbs": 448000}, "bandwidth_gbs = 448000 is 448 TB/s, beyond any memory"),
        ({"bandwidth_gbs": 500e9}, "bandwidth_gbs = 500000000000.0 is 5e+08 TB/s"),
        # TFLOP/s and GB/s under the keys in FLOP/s and bytes/s: a ridge point of 0.04
        ({"peak_flops": {"float32": 2.0}}, "peak_flops.float32 = 2.0 is 2 FLOP/s, below any"),
        ({"bandwidth": 50}, "bandwidth = 50 is 50 bytes/s, below any memory: bandwidth_gbs is"),
    ],
)
def test_a_peak_or_bandwidth_in_the_wrong_unit_is_refused(figures, says):
    """User trial: 40e12 written where TFLOP/s goes (or GB/s where bandwidth_gbs goes) was
    taken as written: every kernel priced at nothing, every latency budget passed. The other
    way (``peak_flops = {float32 = 2.0}``, ``bandwidth = 50``), a linear layer read as 100%
    compute-bound against a compute_bound_min, and its latency as 12 days."""
    from pytest_graphbudget.hardware import from_table

    table = ({"bandwidth_gbs": 500} if "bandwidth" not in figures else {}) | figures
    if "peak_flops" not in table:
        table = {"peak_tflops": {"float32": 40}} | table
    with pytest.raises(GraphBudgetError, match=re.escape(says)):
        from_table("slip", table)
    # the fastest shipped card's figures are well inside (B200: 4,500 TFLOP/s, 8,000 GB/s)
    from_table("fast", {"peak_tflops": {"float32": 75, "int8": 4500}, "bandwidth_gbs": 8000})


def test_a_profile_s_own_words_are_kept_and_a_share_may_be_a_percentage():
    from pytest_graphbudget.hardware import from_table, get

    card = from_table(
        "Edge-NPU",
        {
            "peak_tflops": {"float32": 2, "float16": 8},
            "bandwidth_gbs": 50,
            "source": "our lab, 2026-11",
            "aliases": ["npu"],
            "efficiency": {"conv": ["60%", 0.9]},
        },
    )
    assert (card.source, card.aliases, card.efficiency["conv"]) == (
        "our lab, 2026-11",
        ("npu",),
        (0.6, 0.9),
    )
    # a name is matched as the user wrote it or in any case, and so are its aliases
    for name in ("Edge-NPU", "edge-npu", "NPU"):
        assert get(name, {"Edge-NPU": card}) is card


def test_a_user_profile_is_found_before_a_shipped_alias_and_a_shadowed_card_keeps_its_own():
    """A user's ``a100-80gb`` (the shipped a100's alias) is the user's card, not the shipped
    one; a user's ``h100`` replaces the shipped one by that name, and ``h100-sxm`` still
    names the shipped card it was an alias of."""
    from pytest_graphbudget.hardware import BUILTIN, from_table, get

    figures = {"peak_tflops": {"float32": 1, "float16": 2}, "bandwidth_gbs": 1}
    ampere, hopper = {**figures, "family": "ampere"}, {**figures, "family": "hopper"}
    mine = {"a100-80gb": from_table("a100-80gb", ampere), "h100": from_table("h100", hopper)}
    assert get("a100-80gb", mine) is mine["a100-80gb"]
    assert get("h100", mine) is mine["h100"]
    shipped = next(hw for hw in BUILTIN if hw.name == "h100")
    found = get("h100-sxm", mine)
    assert "h100-sxm" in shipped.aliases
    assert (found.peak_flops, found.bandwidth) == (shipped.peak_flops, shipped.bandwidth)
    # named by the alias asked for: a budget keeps the name, and looks it up again
    assert found.name == "h100-sxm" and get(found.name, mine) == found
    with pytest.raises(
        GraphBudgetError, match=r"unknown hardware 'h1000' \(did you mean 'h100'\?\)"
    ):
        get("h1000", mine)
    # an alias's near miss names the alias: "a100-40gb" had been "did you mean 'a10g'?"
    for typed, meant in (("a100-40gb", "a100-80gb"), ("h100-sxn", "h100-sxm")):
        with pytest.raises(GraphBudgetError, match=rf"\(did you mean '{meant}'\?\)"):
            get(typed, {})
    with pytest.raises(GraphBudgetError, match="hardware must be a profile name .*got None"):
        get(None, {})  # type: ignore[arg-type]


def test_names_in_any_case_reach_the_users_profile_or_are_refused():
    """Names are matched in any case: a user's ``H100`` is the user's wherever ``h100`` is
    written, a user's alias comes before a shipped card's, and two user profiles named alike
    (or an alias that is a profile's name) are refused, not resolved to one of them."""
    from pytest_graphbudget.hardware import from_tables, get, profiles

    figures = {"peak_tflops": {"float32": 1}, "bandwidth_gbs": 10}
    mine = from_tables(
        {"H100": {**figures, "launch_us": 4}, "mycard": {**figures, "aliases": ["4090"]}}
    )
    for name in ("h100", "H100"):
        assert get(name, mine) is mine["H100"]
    assert get("4090", mine) is mine["mycard"]  # the shipped rtx4090's alias too
    assert "h100" not in profiles(mine) and profiles(mine)["H100"] is mine["H100"]
    with pytest.raises(GraphBudgetError, match="'Edge' and 'edge': names are matched in any"):
        from_tables({"Edge": figures, "edge": figures})
    with pytest.raises(GraphBudgetError, match="alias 'H100' is the name of the profile 'H100'"):
        from_tables({"mine": {**figures, "aliases": ["H100"]}})
    with pytest.raises(GraphBudgetError, match="alias 'edge' is the name of the profile 'Edge'"):
        from_tables({"Edge": figures, "mine": {**figures, "aliases": ["edge"]}})


def test_a_profile_named_like_a_shipped_gpu_keeps_its_family_or_says_how_it_prices():
    """A user's ``h100`` of datasheet figures alone had replaced the shipped h100 as a bare
    roofline: ResNet-50's float16 forward at batch 1 read 0.07 ms against the shipped card's
    2.5 ms, with no word. It is refused with the family to give; with it, or with pricing of its own
    (``efficiency``, ``launch_us``), or under a name of its own, it is the user's card."""
    from pytest_graphbudget.hardware import from_tables

    datasheet = {"peak_tflops": {"float32": 67, "float16": 989}, "bandwidth_gbs": 3350}
    says = "hardware 'h100' replaces the shipped h100, .* give it family = \"hopper\" to keep"
    for name in ("h100", "H100"):
        with pytest.raises(GraphBudgetError, match=says.replace("'h100'", repr(name))):
            from_tables({name: datasheet})
    for own in ({"family": "hopper"}, {"efficiency": {"matmul": [0.5, 0.8]}}, {"launch_us": 5}):
        assert from_tables({"h100": {**datasheet, **own}})["h100"].name == "h100"
    assert from_tables({"my-h100": datasheet})["my-h100"].family == ""
    with pytest.raises(GraphBudgetError, match='replaces the shipped t4, .*"turing"'):
        from_tables({"T4": {"peak_tflops": {"float32": 8.1}, "bandwidth_gbs": 320}})
    # User trial: under a shipped alias, with an empty kernels table, or one profile from
    # Python, the same datasheet had been taken (ResNet-50 "on h100" 0.2 ms for 2.7)
    from pytest_graphbudget.hardware import from_table

    with pytest.raises(GraphBudgetError, match="'a100-80gb' replaces the shipped a100"):
        from_tables({"a100-80gb": datasheet})
    with pytest.raises(GraphBudgetError, match=says):
        from_tables({"h100": {**datasheet, "kernels": {}}})
    with pytest.raises(GraphBudgetError, match=says):
        from_table("h100", datasheet)


def test_a_card_that_sustains_half_what_the_fit_card_did_computes_at_half_the_rate():
    """The RTX 4090 ada was fitted on runs a large float16 matmul at 166.87 TFLOP/s (public
    measurements) on a 165.2 TFLOP/s datasheet. A card with that datasheet measured at half
    that matmul rate takes twice as long on a compute-bound kernel of any kind, eager or
    compiled, and as long on a memory-bound one."""
    from pytest_graphbudget.hardware import from_table

    table = {"peak_tflops": {"float32": 82.6, "float16": 165.2}, "bandwidth_gbs": 1008}
    full = from_table("full", {**table, "family": "ada", "matmul_tflops": 166.87})
    half = from_table("half", {**table, "family": "ada", "matmul_tflops": 166.87 / 2})
    assert full.compute_scale == 1.0 and half.compute_scale == pytest.approx(0.5)
    launch = full.launch_s
    for kind in ("matmul", "conv", "attention"):
        for compiled in (False, True):
            fast = full.kind_time(kind, 1e13, 1e3, "float16", compiled=compiled) - launch
            slow = half.kind_time(kind, 1e13, 1e3, "float16", compiled=compiled) - launch
            assert slow == pytest.approx(2 * fast)
    memory = [h.kind_time("elementwise", 1e3, 1e10, "float16") for h in (full, half)]
    assert memory[0] == memory[1]
    # a kind the user sets is the user's own fraction of the datasheet, not scaled
    own = from_table(
        "own", {**table, "family": "ada", "matmul_tflops": 80, "efficiency": {"conv": [0.4, 1]}}
    )
    assert own.efficiency["conv"] == (0.4, 1.0)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"matmul_tflops": 50}, "matmul_tflops needs a family whose fit card's matmul was"),
        (
            {"family": "ada", "matmul_tflops": 50, "peak_tflops": {"float32": 1}},
            "family 'ada' needs the card's float16 tensor peak",
        ),
        ({"family": "ada", "matmul_tflops": 0}, "matmul_tflops must be a number > 0, got 0"),
        ({"family": "ada", "matmul_tflops": 1e308}, "is inf times the float16 peak (4 TFLOP/s)"),
        ({"family": "ada", "matmul_tflop": 50}, "unknown key 'matmul_tflop' (did you mean 'matmul"),
        ({"family": "ada", "matmul_tflops": "fast"}, "matmul_tflops must be a number > 0"),
    ],
)
def test_a_bad_matmul_figure_is_one_line(extra, says):
    from pytest_graphbudget.hardware import from_table

    table = {"peak_tflops": {"float32": 1, "float16": 4}, "bandwidth_gbs": 1, **extra}
    with pytest.raises(GraphBudgetError) as info:
        from_table("card", table)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_every_shipped_gpu_prices_a_large_matmul_as_its_fit_card_does_against_measurement():
    """Whatever its datasheet says, a shipped card's priced matmul rate stands to its published
    measured matmul as its family's fit card's does to its own: the family's fit transfers
    through what each card was measured to sustain, not through its datasheet peak."""
    from pytest_graphbudget.hardware import _DATA, FAMILIES

    families, gpus = _DATA["families"], _DATA["gpus"]
    measured = {n: t["matmul_tflops"] * 1e12 for n, t in gpus.items() if "matmul_tflops" in t}
    shipped = {"t4", "a100", "rtx-a6000", "l4", "l40s", "h100", "h100-pcie", "h200", "b200"}
    assert shipped | {"mi300x"} <= set(measured)

    def priced(hw, compiled):  # FLOP/s of a compute-bound float16 matmul
        return 1e15 / (hw.kind_time("matmul", 1e15, 0, "float16", compiled) - hw.launch_s)

    for hw in BUILTIN:
        if hw.name not in measured:
            assert hw.compute_scale == 1.0
            continue
        fit = get(families[families[hw.family].get("borrowed", hw.family)]["fitted_on"])
        for compiled in (False, True):
            assert priced(hw, compiled) / measured[hw.name] == pytest.approx(
                priced(fit, compiled) / measured[fit.name]
            ), hw.name
        assert "measured matmul" in hw.source and FAMILIES[hw.family].matmul_share


def test_every_gpu_profile_has_a_family_with_fitted_efficiencies_and_their_source():
    from pytest_graphbudget.hardware import EFFICIENCY_KINDS, FAMILIES

    gpus = [hw for hw in BUILTIN if hw.family]
    assert {"l4", "a10g", "l40s", "rtx4090", "a100", "h100", "h200", "b200", "mi300x", "t4"} <= {
        hw.name for hw in gpus
    }
    for hw in gpus:
        family = FAMILIES[hw.family]
        assert set(hw.efficiency) == set(EFFICIENCY_KINDS) and hw.launch_s == family.launch_s
        assert set(hw.compiled_efficiency) == set(EFFICIENCY_KINDS)
        assert family.source and "float16" in hw.peak_flops


def test_a_pyprojects_profile_is_found_by_name_from_python(tmp_path, monkeypatch):
    """``profile_model(..., hardware="NAME")`` finds ``[tool.graph_budget.hardware_profiles.NAME]``
    in the nearest pyproject.toml from the working directory up, as the CLI does."""
    import torch

    from pytest_graphbudget import profile_model

    (tmp_path / "pyproject.toml").write_text(
        "[tool.graph_budget.hardware_profiles.my-card]\n"
        'peak_tflops = {float32 = 2.0, float16 = 8.0}\nbandwidth_gbs = 50\nfamily = "ada"\n'
    )
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "src" / "pkg")
    prof = profile_model(torch.nn.Linear(4, 4), torch.randn(2, 4), hardware="my-card")
    assert prof.hardware.name == "my-card" and prof.hardware.bandwidth == 50e9
    assert prof.hardware.family == "ada"
    (tmp_path / "pyproject.toml").write_text(
        "[tool.graph_budget.hardware_profiles.my-card]\nbandwidth_gbs = 50\n"
    )
    with pytest.raises(GraphBudgetError, match=r"pyproject.toml: .*'my-card': needs peak_tflops"):
        get("my-card")


def test_a_float32_product_runs_as_measured_off_the_tensor_cores_eager_and_compiled():
    """PyTorch runs a float32 product without TF32 by default. The float16 fits say nothing of
    that rate: the RTX 4090's float32 peak (82.6) counts two datapaths a product fills two
    thirds of (54.72 measured), an A100's one it fills (19.18 of 19.5). A shipped card with a
    published figure prices a large float32 product at it, compiled as eager (Inductor calls
    the same cuBLAS); before, an A100 read 15.2 TFLOP/s eager and 12.8 compiled, a 4090 86.7."""
    from pytest_graphbudget.hardware import _DATA

    measured = {
        n: t["matmul_tflops_float32"] * 1e12
        for n, t in _DATA["gpus"].items()
        if "matmul_tflops_float32" in t
    }
    assert measured["a100"] == 19.18e12 and measured["rtx4090"] == 54.72e12  # database.md
    for name, rate in measured.items():
        hw = get(name)
        for compiled in (False, True):
            seconds = hw.kind_time("matmul", 1e15, 0, "float32", compiled) - hw.launch_s
            assert 1e15 / seconds == pytest.approx(rate), (name, compiled)


def test_a_card_without_a_float32_figure_takes_its_familys_share_at_its_power_limit():
    """A user's ada card measured at half the 4090's float16 share of its datasheet runs a
    float32 product at half the 4090's float32 share (54.72 of 82.6) of its own float32 peak;
    ``matmul_tflops_float32`` replaces that guess with its own measurement."""
    from pytest_graphbudget.hardware import from_table

    table = {"peak_tflops": {"float32": 30, "float16": 120}, "bandwidth_gbs": 300}
    half = from_table("half", {**table, "family": "ada", "matmul_tflops": 120 * 166.87 / 165.2 / 2})
    assert half.float32_share == pytest.approx(54.72 / 82.6 / 2)
    timed = from_table("timed", {**table, "family": "ada", "matmul_tflops_float32": 12})
    assert timed.float32_share == pytest.approx(12 / 30)
    seconds = timed.kind_time("matmul", 1e15, 0, "float32") - timed.launch_s
    assert 1e15 / seconds == pytest.approx(12e12)


@pytest.mark.parametrize(
    "extra, says",
    [
        ({"family": "hopper", "matmul_tflops_float32": 402.15}, "6 times the float32 peak (67"),
        ({"matmul_tflops_float32": 52}, "matmul_tflops_float32 needs a family (or efficiency"),
        ({"family": "hopper", "matmul_tflops_float32": "52"}, "must be a number > 0"),
    ],
)
def test_a_bad_float32_matmul_figure_is_one_line(extra, says):
    """402.15 is an H100's "float32" product with TF32 on; without a family nothing would
    price by it."""
    from pytest_graphbudget.hardware import from_table

    table = {"peak_tflops": {"float32": 67, "float16": 989.4}, "bandwidth_gbs": 3350, **extra}
    with pytest.raises(GraphBudgetError) as info:
        from_table("card", table)
    assert says in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        # the datasheet's "with sparsity" figure: exactly twice the dense peak
        ({"matmul_tflops": 153.4}, "is 2 times the float16 peak (76.7 TFLOP/s); give it in"),
        ({"launch_us": 8e-6}, "launch_us = 8e-06 is 0.008 ns: launch_us is in microseconds"),
        ({"peak_tflops": {"float32": 19.2, "tf32": 38400, "float16": 76.7}}, "tf32 = 38400 is"),
    ],
)
def test_a_family_cards_figure_in_another_unit_is_refused(extra, says):
    """User trial: each slip loaded without a word, pricing a card 2x to 2000x off."""
    from pytest_graphbudget.hardware import from_table

    table = {"peak_tflops": {"float32": 19.2, "float16": 76.7}, "bandwidth_gbs": 448}
    with pytest.raises(GraphBudgetError) as info:
        from_table("a4000", {**table, "family": "ampere", **extra})
    assert says in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_a_dtype_a_card_runs_at_its_float32_peak_is_priced_as_float32():
    """User trial: a T4 (turing: no bfloat16 nor TF32 on its tensor cores) priced a bfloat16
    product, and a float32 one with TF32 allowed, at 4.90 TFLOP/s, above its measured float32
    product (4.35, zzc0721's database): those dtypes run at the float32 peak, and took the
    float16 fits' share of it."""
    t4 = get("t4")
    for dtype in ("float32", "bfloat16", "tf32"):
        seconds = t4.kind_time("matmul", 1e15, 0, dtype) - t4.launch_s
        assert 1e15 / seconds == pytest.approx(4.35e12), dtype
