"""profile_sweep on a small BERT (2 layers, hidden 64), against MACs counted by hand.

Per encoder layer at sequence length s and hidden h (intermediate 4h): the Q, K, V and output
projections are 4*s*h^2 MACs, attention scores and their weighted sum 2*s^2*h, the MLP 8*s*h^2;
the pooler adds h^2 (one token). Everything is per sequence, so batch multiplies it. The zoo's
bert-base-uncased has the same layout (intermediate_size 3072 = 4 x 768), checked below.
"""

from __future__ import annotations

import json

import pytest

from pytest_graphbudget.errors import GraphBudgetError

H, LAYERS = 64, 2
SEQ = [128, 256, 512]
UNMEASURED = 1024


def closed_form_macs(s: int, b: int = 1) -> int:
    per_layer = 4 * s * H * H + 2 * s * s * H + 8 * s * H * H
    return b * (LAYERS * per_layer + H * H)


def tiny_bert():
    from transformers import BertConfig, BertModel

    config = BertConfig(
        hidden_size=H,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        intermediate_size=4 * H,
        vocab_size=100,
        max_position_embeddings=UNMEASURED,
    )
    return BertModel(config).eval()


def token_ids(seq_len: int, batch: int = 1):
    import torch

    return torch.zeros(batch, seq_len, dtype=torch.long)


@pytest.fixture(scope="module")
def bert():
    return tiny_bert()


@pytest.fixture(scope="module")
def sweep(bert):
    from pytest_graphbudget import profile_sweep

    return profile_sweep(bert, seq_len=SEQ, inputs=lambda seq_len: token_ids(seq_len))


def test_zoo_bert_has_the_layout_the_closed_form_assumes():
    from pytest_graphbudget.zoo.huggingface import CONFIG_DIR

    config = json.loads((CONFIG_DIR / "bert-base-uncased.json").read_text())
    assert config["intermediate_size"] == 4 * config["hidden_size"]


def test_every_point_matches_the_closed_form(sweep):
    assert [p.values for p in sweep.points] == [{"seq_len": s} for s in SEQ]
    assert [p.profile.macs for p in sweep.points] == [closed_form_macs(s) for s in SEQ]


def test_fit_is_the_closed_form_and_predicts_an_unmeasured_seq_len(sweep, bert):
    from pytest_graphbudget import profile_model

    macs = sweep.fits["macs"]
    # closed form: 12*L*h^2*s + 2*L*h*s^2 + h^2
    assert macs.formula() == f"macs = {H * H} + {12 * LAYERS * H * H}*s + {2 * LAYERS * H}*s^2"
    for point in sweep.points:
        for name, fitted in sweep.fits.items():
            assert fitted(**point.values) == getattr(point.profile, name), name
    measured = profile_model(bert, token_ids(UNMEASURED))
    assert macs(seq_len=UNMEASURED) == closed_form_macs(UNMEASURED) == measured.macs
    for name in ("flops", "traffic_bytes", "peak_memory_bytes"):
        assert sweep.fits[name](seq_len=UNMEASURED) == getattr(measured, name), name


def test_json_is_plot_ready(sweep):
    data = json.loads(json.dumps(sweep.to_dict()))
    assert list(data) == ["sweep"]
    body = data["sweep"]
    assert list(body) == ["mode", "dtype", "axes", "points", "fit"]
    assert body["axes"] == {"seq_len": SEQ}
    assert [p["seq_len"] for p in body["points"]] == SEQ
    assert [p["totals"]["macs"] for p in body["points"]] == [closed_form_macs(s) for s in SEQ]
    assert body["fit"]["method"] == "interpolated"
    assert body["fit"]["variables"] == {"s": "seq_len"}
    macs = body["fit"]["figures"]["macs"]
    assert macs["degree"] == {"seq_len": 2}
    assert macs["coefficients"] == {"1": H * H, "s": 12 * LAYERS * H * H, "s^2": 2 * LAYERS * H}


class TinyAttention:
    """Scores and their weighted sum with one projection, width 8: per sequence
    8*8*s (projection) + 8*s^2 (scores) + 8*s^2 (weighted sum) MACs."""

    @staticmethod
    def build():
        import torch

        class Attention(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.q = torch.nn.Linear(8, 8, bias=False)

            def forward(self, x):
                q = self.q(x)
                return (q @ q.transpose(-1, -2)) @ x

        return Attention()

    @staticmethod
    def macs(s: int, b: int) -> int:
        return b * (64 * s + 16 * s * s)


def test_batch_and_seq_len_grid():
    import torch

    from pytest_graphbudget import profile_sweep

    grid = profile_sweep(
        TinyAttention.build(),
        seq_len=[8, 16, 32],
        batch=[1, 2],
        inputs=lambda seq_len, batch: torch.zeros(batch, seq_len, 8),
    )
    assert [p.values for p in grid.points][:2] == [
        {"seq_len": 8, "batch": 1},
        {"seq_len": 8, "batch": 2},
    ]
    assert [p.profile.macs for p in grid.points] == [
        TinyAttention.macs(s, b) for s in (8, 16, 32) for b in (1, 2)
    ]
    macs = grid.fits["macs"]
    assert macs.formula() == "macs = 64*s*b + 16*s^2*b"
    assert (macs.degree("seq_len"), macs.degree("batch")) == (2, 1)
    assert macs(seq_len=64, batch=4) == TinyAttention.macs(64, 4)
    assert grid.to_dict()["sweep"]["fit"]["variables"] == {"s": "seq_len", "b": "batch"}


def test_profile_options_apply_at_every_point():
    import torch

    from pytest_graphbudget import profile_sweep

    sweep = profile_sweep(
        TinyAttention.build(),
        seq_len=[8, 16],
        inputs=lambda seq_len: torch.zeros(1, seq_len, 8),
        dtype="bfloat16",
    )
    assert [p.profile.dtype for p in sweep.points] == ["bfloat16", "bfloat16"]
    assert [p.profile.macs for p in sweep.points] == [TinyAttention.macs(s, 1) for s in (8, 16)]


def test_a_module_needs_an_inputs_callable_that_takes_the_axes(bert):
    from pytest_graphbudget import profile_sweep

    with pytest.raises(GraphBudgetError, match="needs inputs="):
        profile_sweep(bert, seq_len=[8, 16])
    with pytest.raises(
        GraphBudgetError, match=r"accept the swept axes as keywords \(seq_len, batch\)"
    ):
        profile_sweep(
            bert, seq_len=[8, 16], batch=[1, 2], inputs=lambda seq_len: token_ids(seq_len)
        )
    with pytest.raises(GraphBudgetError, match="positive integers"):
        profile_sweep(bert, seq_len=[0, 8], inputs=token_ids)
    with pytest.raises(GraphBudgetError, match="needs seq_len"):
        profile_sweep(bert, inputs=token_ids)


@pytest.mark.parametrize(
    ("axes", "says"),
    [
        ({"batch": 4}, "batch: a sweep needs at least two values to fit, got [4]"),
        ({"batch": [4]}, "batch: a sweep needs at least two values to fit, got [4]"),
        ({"seq_len": [8], "batch": [4]}, "seq_len: a sweep needs at least two values to fit"),
    ],
)
def test_an_axis_of_one_value_is_refused_not_fitted_as_a_constant(axes, says):
    """User trial: ``batch=4`` (or ``[4]``) fitted ``flops = 99456``, as if FLOPs did not
    depend on the batch. One value beside a swept axis holds it (below)."""
    import torch

    from pytest_graphbudget import profile_sweep

    with pytest.raises(GraphBudgetError) as info:
        profile_sweep(torch.nn.Linear(8, 8), inputs=lambda **point: torch.zeros(1, 8), **axes)
    assert str(info.value).startswith(says)
    assert str(info.value).endswith("; profile one point with profile_model")


def test_a_range_or_a_tuple_of_values_is_an_axis():
    """User trial: ``batch=range(1, 4)`` was refused as not "a list of positive integers".
    A Linear(8, 8) does 2*8*8 + 8 FLOPs per row."""
    import torch

    from pytest_graphbudget import profile_sweep

    linear = torch.nn.Linear(8, 8)
    swept = profile_sweep(linear, batch=range(1, 4), inputs=lambda batch: torch.zeros(batch, 8))
    assert swept.axes == {"batch": [1, 2, 3]}
    assert swept.fits["flops"].formula() == f"flops = {2 * 8 * 8 + 8}*b"
    grid = profile_sweep(linear, batch=(1, 2), inputs=lambda batch: torch.zeros(batch, 8))
    assert grid.axes == {"batch": [1, 2]}
    # one value beside a swept axis holds it: 4 rows of seq_len tokens, 4 * 136 FLOPs each
    held = profile_sweep(
        linear,
        seq_len=[2, 3],
        batch=4,
        inputs=lambda seq_len, batch: torch.zeros(batch, seq_len, 8),
    )
    assert held.fits["flops"].formula() == f"flops = {4 * (2 * 8 * 8 + 8)}*s"


@pytest.mark.parametrize(
    ("model", "given", "says"),
    [
        ("module", {"batch": [1, 2], "hardwre": "a100"}, "'hardwre' (did you mean 'hardware'?)"),
        ("bert-base-uncased", {"seqlen": [16, 32]}, "'seqlen' (did you mean 'seq_len'?)"),
        ("module", {"batch": [1, 2], "symbolc": True}, "'symbolc' (did you mean 'symbolic'?)"),
    ],
)
def test_a_misspelt_keyword_is_named_with_the_one_meant(model, given, says):
    """User trial: ``hardwre=`` on a module was called an option of zoo names, ``seqlen=`` on a
    name ended in "a sweep needs seq_len=[...] or batch=[...]"."""
    import torch

    from pytest_graphbudget import profile_sweep

    if model == "module":
        model, given = torch.nn.Linear(8, 8), {**given, "inputs": lambda batch: torch.zeros(1, 8)}
    with pytest.raises(GraphBudgetError) as info:
        profile_sweep(model, **given)
    assert str(info.value) == f"unknown keyword {says}"


def test_a_sweeps_repr_is_one_line_and_its_notebook_cell_a_table(sweep):
    """User trial: ``repr(sweep)`` was 15k characters (every point's whole profile)."""
    flops = sweep.fits["flops"].formula()
    assert repr(sweep) == (
        f"<Sweep 'BertModel' on generic, eval float32: seq_len={SEQ}, 3 points; {flops}>"
    )
    html = sweep._repr_html_()
    assert "<h2>BertModel (eval, float32)</h2>" in html and "<script" not in html
    assert '<svg class="growth" data-figure="flops"' in html
    cells = [f'<tr><td class="num">{s}</td>' for s in SEQ]
    assert all(cell in html for cell in cells)


def test_an_axis_the_model_ignores_is_an_error_not_a_constant():
    import torch

    from pytest_graphbudget import profile_sweep

    with pytest.raises(GraphBudgetError, match="seq_len=8 and seq_len=16 profile the same inputs"):
        profile_sweep(
            TinyAttention.build(), seq_len=[8, 16], inputs=lambda seq_len: torch.zeros(1, 4, 8)
        )


class Branchy:
    """Doubles its work past 16 positions: no one trace at symbolic shapes covers both sides."""

    @staticmethod
    def build():
        import torch

        class Branch(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.q = torch.nn.Linear(8, 8, bias=False)

            def forward(self, x):
                y = self.q(x)
                return self.q(y) if x.shape[1] > 16 else y

        return Branch()


def _dim_auto_missing() -> bool:
    from pytest_graphbudget.compat import dim_auto

    return dim_auto() is None


NEEDS_DIM_AUTO = pytest.mark.skipif(
    "_dim_auto_missing()", reason="a symbolic sweep exports with torch.export.Dim.AUTO"
)


def _symbolic_attention_grid():
    """TinyAttention swept over 3 lengths and 2 batches, its formulas asked of one export."""
    import torch

    from pytest_graphbudget import profile_sweep

    return profile_sweep(
        TinyAttention.build(),
        seq_len=[8, 16, 32],
        batch=[2, 3],
        inputs=lambda seq_len, batch: torch.zeros(batch, seq_len, 8),
        symbolic=True,
    )


@NEEDS_DIM_AUTO
def test_symbolic_formulas_from_one_export_match_the_hand_count():
    grid = _symbolic_attention_grid()
    macs = grid.fits["macs"]
    assert macs.method == "symbolic" and grid.method == "symbolic"
    assert macs.formula() == "macs = 64*s*b + 16*s^2*b"
    assert macs.held_out == 6  # derived from none of the points, checked on all six
    assert grid.fits["traffic_bytes"].method == "interpolated"  # bytes need concrete shapes
    fit_json = grid.to_dict()["sweep"]["fit"]
    assert fit_json["method"] == "symbolic"
    assert fit_json["figures"]["macs"]["method"] == "symbolic"


@NEEDS_DIM_AUTO
def test_a_symbolic_sweep_of_bert_given_a_mask_derives_its_flops_too(bert):
    """The export at symbolic shapes had kept the attention mask an unpadded one lets eager
    drop (transformers cannot read its values there): a mask built and added to every score,
    so FLOPs came out over every point and fell back to interpolation, on every Hugging Face
    encoder and decoder. MACs: the closed form above."""
    import torch

    from pytest_graphbudget import profile_sweep

    sweep = profile_sweep(
        bert,
        seq_len=[8, 16, 32],
        inputs=lambda seq_len: (token_ids(seq_len), torch.ones(1, seq_len, dtype=torch.long)),
        symbolic=True,
    )
    assert {name: sweep.fits[name].method for name in ("flops", "macs")} == {
        "flops": "symbolic",
        "macs": "symbolic",
    }, sweep.fits["flops"].note
    macs = f"macs = {H * H} + {12 * LAYERS * H * H}*s + {2 * LAYERS * H}*s^2"
    assert sweep.fits["macs"].formula() == macs


@NEEDS_DIM_AUTO
def test_a_symbolic_formula_that_misses_a_point_is_not_used():
    import torch

    from pytest_graphbudget import profile_sweep

    sweep = profile_sweep(
        Branchy.build(),
        seq_len=[8, 16, 32, 64],
        inputs=lambda seq_len: torch.zeros(1, seq_len, 8),
        symbolic=True,
    )
    macs = sweep.fits["macs"]
    # One projection (64*s MACs) up to 16 positions, two beyond: the trace at 64 sees two.
    assert [p.profile.macs for p in sweep.points] == [64 * 8, 64 * 16, 128 * 32, 128 * 64]
    assert macs.method == "interpolated"
    assert "symbolic macs = 128*s gives 1024 at seq_len=8, measured 512" in macs.note
    assert not macs.polynomial or macs.held_out == 0  # no honest low-degree fit either


def test_a_torch_without_dim_auto_falls_back_to_the_points_and_says_why(monkeypatch):
    """On torch 2.4 (``torch.export.Dim`` a function, no ``AUTO``) ``symbolic=True`` had ended
    in a traceback, ``'function' object has no attribute 'AUTO'``."""
    from pytest_graphbudget import compat

    monkeypatch.setattr(compat, "dim_auto", lambda: None)
    grid = _symbolic_attention_grid()
    macs = grid.fits["macs"]
    assert macs.method != "symbolic" and grid.method != "symbolic"
    assert "symbolic derivation not used: it needs torch.export.Dim.AUTO" in macs.note
    # each point still profiled: b * (64*s + 16*s^2) MACs, the hand count above
    assert [p.profile.macs for p in grid.points[:2]] == [b * (64 * 8 + 16 * 8**2) for b in (2, 3)]


def test_symbolic_is_not_tried_at_a_size_export_fixes():
    import torch

    from pytest_graphbudget import profile_sweep

    sweep = profile_sweep(
        TinyAttention.build(),
        batch=[2, 1],  # the last point is the one exported
        inputs=lambda batch: torch.zeros(batch, 4, 8),
        symbolic=True,
    )
    assert sweep.fits["macs"].method == "interpolated"
    assert sweep.fits["macs"].note == (
        "symbolic derivation not used: batch=1: export fixes sizes 0 and 1, sweep from 2"
    )


def test_symbolic_is_not_tried_for_another_variant_than_the_models_own():
    """User trial: ``--dtype int8 --symbolic`` printed the float32 export's formula as the
    int8 sweep's symbolic one: the export is of the model as it is. A sweep in bfloat16 (or
    train mode) keeps its measured fits, and says why."""
    import torch

    from pytest_graphbudget import profile_sweep

    sweep = profile_sweep(
        TinyAttention.build(),
        batch=[2, 3, 4],
        inputs=lambda batch: torch.zeros(batch, 4, 8),
        symbolic=True,
        dtype="bfloat16",
    )
    assert sweep.fits["macs"].method == "interpolated"
    assert sweep.fits["macs"].note == (
        "symbolic derivation not used: it exports the model's own forward, not dtype=bfloat16"
    )


def test_a_zoo_sweep_point_that_input_shape_contradicts_is_refused():
    """``batch=[1, 2, 4]`` beside ``input_shape=(1, 3, 64, 64)`` profiled 1x3x64x64 three times."""
    from pytest_graphbudget import profile_sweep

    with pytest.raises(GraphBudgetError, match="batch 2 disagrees with input_shape 1,3,64,64"):
        profile_sweep("resnet18", batch=[1, 2, 4], input_shape=(1, 3, 64, 64))
    with pytest.raises(GraphBudgetError, match="seq_len 32 disagrees with input_shape 1,16"):
        profile_sweep("bert-base-uncased", seq_len=[16, 32], input_shape=[1, 16], meta=True)
