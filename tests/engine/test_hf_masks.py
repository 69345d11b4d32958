"""Hugging Face's attention masks on fakes as on the real inputs (``engine/hf_masks.py``).

transformers 5 reads a causal LM's ``attention_mask`` and position ids to decide whether its
attention needs an explicit mask; on fakes it cannot, builds the mask, and each layer of a
grouped-query model copies its keys and values for every head. The reference is the memory
profiler's peak of one real step (``test_train_peak_gaps.measured``, one intra-op thread).
"""

from __future__ import annotations

import sys

import pytest
from conftest import skip_before_transformers_5

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_train_peak_gaps import measured  # noqa: E402
from torch import nn  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.engine.hf_masks import given_inputs  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
}


class Logits(nn.Module):
    """A Llama with two key-value heads for four, called as training loops call it."""

    def __init__(self, use_cache: bool) -> None:
        super().__init__()
        config = transformers.LlamaConfig(**TINY)
        self.lm, self.use_cache = transformers.LlamaForCausalLM(config), use_cache

    def forward(self, ids, attention_mask=None, **kwargs):
        out = self.lm(ids, attention_mask=attention_mask, use_cache=self.use_cache, **kwargs)
        return out.logits


def _mask(ids: torch.Tensor, padded: bool) -> torch.Tensor:
    mask = torch.ones_like(ids)
    if padded:
        mask[1, 40:] = 0
    return mask


@pytest.mark.parametrize(
    ("use_cache", "given"),
    [
        (True, "unpadded"),
        (False, "unpadded"),
        (True, "padded"),
        (False, "positions"),
        (False, "nothing"),  # the forward makes its position ids: arange, as under checkpointing
    ],
)
def test_a_training_step_on_fakes_holds_what_the_real_step_holds(use_cache, given):
    # On fakes, an unpadded mask, and position ids without one, each read +6% (the mask, the
    # keys and values repeated); a padded mask takes the explicit mask for real too.
    skip_before_transformers_5("its masks are decided in modeling_attn_mask_utils")
    torch.manual_seed(0)
    model, ids = Logits(use_cache), torch.randint(0, 128, (2, 64))
    if given == "positions":  # one sequence a row, a keyword through the forward's **kwargs
        args, kwargs = (ids,), {"position_ids": torch.arange(64).repeat(2, 1)}
    elif given == "nothing":
        args, kwargs = (ids,), {}
    else:
        args, kwargs = (ids, _mask(ids, given == "padded")), {}
    ours = profile_model(model, args, kwargs, mode="train")
    assert ours.trace.method == "joint", ours.trace.failures  # on fakes
    assert ours.peak_memory_bytes == measured(model, args, kwargs=kwargs)


class Gapped(Logits):
    """Position ids the forward makes with a gap, as a vision-language model's skip its image
    tokens: transformers reads packed sequences and builds the mask for real too."""

    def forward(self, ids):
        positions = torch.cat([torch.arange(32), torch.arange(40, 72)])[None].expand(2, -1)
        return self.lm(ids, position_ids=positions, use_cache=False).logits


def test_position_ids_of_unknown_values_keep_transformers_explicit_mask():
    # A rule by model type (a text-only decoder's positions count up) would read this under.
    skip_before_transformers_5("its masks are decided in modeling_attn_mask_utils")
    torch.manual_seed(0)
    model, ids = Gapped(use_cache=False), torch.randint(0, 128, (2, 64))
    ours = profile_model(model, ids, mode="train")
    assert ours.trace.method == "joint" and ours.peak_memory_bytes == measured(model, (ids,))


def test_only_the_ops_that_keep_rows_counting_up_are_followed():
    from pytest_graphbudget.engine.hf_masks import _provenance

    with _provenance() as made:
        rows = torch.arange(8) + 3
        followed = [rows, rows.unsqueeze(0), 2 + rows.unsqueeze(0).expand(4, -1).reshape(2, 2, 8)]
        followed += [torch.arange(3, 11).view(1, 8).long()]
        unknown = [torch.arange(0, 16, 2), rows * 1, rows.unsqueeze(-1), rows.cumsum(0)]
        unknown += [rows.add(1, alpha=2), rows + rows, torch.arange(8.0), rows.flip(0)]
    assert all(t in made.rows for t in followed)
    assert not any(t in made.rows for t in unknown)


def test_only_the_ops_that_keep_a_tensor_all_ones_are_followed():
    from pytest_graphbudget.engine.hf_masks import _provenance

    with _provenance() as made:
        ones = torch.ones(2, 8)
        followed = [ones, ones.bool()[:, 2:], ones.new_full((2,), True), torch.full((3,), 1.0)]
        followed += [ones.to(torch.long).unsqueeze(1).expand(2, 4, 8), torch.ones_like(ones)]
        unknown = [torch.zeros(2, 8), torch.full((3,), 2), ones * 0, ones.cumsum(1)]
        unknown += [torch.nn.functional.pad(ones, (0, 2)), ones - 1, torch.empty(2, 8)]
    assert all(t in made.ones for t in followed)
    assert not any(t in made.ones for t in unknown)


@pytest.mark.parametrize("masked", [True, False])
def test_a_forward_on_the_meta_device_holds_what_the_real_one_holds(masked):
    skip_before_transformers_5("its masks are decided in modeling_attn_mask_utils")
    ids = torch.randint(0, 128, (2, 64))
    args = (ids, _mask(ids, False)) if masked else (ids,)
    torch.manual_seed(0)
    real = profile_model(Logits(use_cache=False), args)
    with torch.device("meta"):
        on_meta = Logits(use_cache=False)
    ours = profile_model(on_meta, args)
    assert ours.trace.cost_pass == "fake" and ours.peak_memory_bytes == real.peak_memory_bytes


def test_the_inputs_are_named_as_the_forward_names_them():
    mask, positions = torch.ones(1, 4), torch.arange(4)[None]
    named = given_inputs(Logits(True), (positions, mask), {"position_ids": positions})
    assert named == {"ids": positions, "attention_mask": mask, "position_ids": positions}
    assert given_inputs(object(), (mask,), {"a": 1}) == {"a": 1}  # nothing to bind them to


class Typed(nn.Module):
    """A transformers model built from its type, called with a mask."""

    def __init__(self, model_type: str) -> None:
        super().__init__()
        config = transformers.AutoConfig.for_model(
            model_type, **TINY, pad_token_id=0, use_cache=False
        )
        self.lm = transformers.AutoModel.from_config(config)

    def forward(self, ids, attention_mask=None):
        return self.lm(ids, attention_mask=attention_mask).last_hidden_state


@pytest.mark.parametrize(
    ("model_type", "masked", "scalars"),
    [
        ("modernbert", True, 0),  # an encoder's bidirectional mask (its sliding window): +1.8%
        ("jamba", True, 0),  # a recurrent layer's mask multiplied in: +0.6% forward on meta
        # The decoder's mask of ones, built by its forward: +0.5% step. Its peak holds one
        # 8-byte scalar tensor, which is not modelled (docs/metrics.md).
        ("bart", False, 8),
    ],
)
def test_unpadded_masks_are_skipped_on_fakes(model_type, masked, scalars):
    skip_before_transformers_5("its masks are decided in modeling_attn_mask_utils")
    torch.manual_seed(0)
    model, ids = Typed(model_type), torch.randint(0, 128, (2, 16))  # a scan's step per token
    args = (ids, _mask(ids, False)) if masked else (ids,)
    with torch.device("meta"):
        on_meta = Typed(model_type)
    eval_peak = profile_model(model, args).peak_memory_bytes
    assert profile_model(on_meta, args).peak_memory_bytes == eval_peak
    ours = profile_model(model, args, mode="train")
    assert ours.trace.method == "joint" and ours.peak_memory_bytes + scalars == measured(
        model, args
    )


def _bert() -> nn.Module:
    config = transformers.BertConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        vocab_size=128, attn_implementation="sdpa",
    )  # fmt: skip
    return transformers.BertModel(config).eval()


def _eager_sdpa_masks(model: nn.Module, args: tuple) -> list:
    """The ``attn_mask`` of every SDPA call eager torch makes, logged as it runs."""
    seen: list = []
    original = torch.nn.functional.scaled_dot_product_attention

    def logged(*call, **options):
        seen.append(options.get("attn_mask", call[3] if len(call) > 3 else None))
        return original(*call, **options)

    torch.nn.functional.scaled_dot_product_attention = logged
    try:
        with torch.no_grad():
            model(*args)
    finally:
        torch.nn.functional.scaled_dot_product_attention = original
    return seen


@pytest.mark.parametrize("given", ["unpadded", "nothing", "padded"])
def test_every_tier_takes_eagers_mask_decision(given):
    """An encoder given a mask that masks nothing (or none): eager drops it, and SDPA runs
    without one; given padding, it keeps it. Export (``tier="dynamo"``, a symbolic sweep) kept
    every mask, as transformers cannot read the values there: it had built the unpadded one
    and added it to every score (+0.011% FLOPs on bert-base-uncased). transformers' read of
    the values (an ``all``, one FLOP a token) was counted with real weights, never on fakes.
    Now every tier prices eager's path, and none counts the read."""
    torch.manual_seed(0)
    model, ids = _bert(), torch.randint(0, 128, (2, 16))
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0 if given == "padded" else 1  # the second row's last 4 tokens padding
    args = (ids,) if given == "nothing" else (ids, mask)
    masks = _eager_sdpa_masks(model, args)
    assert len(masks) == 2 and all((m is not None) == (given == "padded") for m in masks)
    with torch.device("meta"):
        on_meta = _bert()
    profiles = [
        profile_model(model, args),
        profile_model(on_meta, args),
        profile_model(model, args, tier="dynamo"),
    ]
    assert [p.trace.method for p in profiles] == ["eager", "eager", "dynamo"]
    assert len({(p.flops, p.macs, p.traffic_bytes) for p in profiles}) == 1
    for prof in profiles:
        kinds = {info.kind for info in prof.node_info}
        assert "all" not in kinds, kinds  # the read of the mask's values, on no tier's books
        made = kinds & {"where", "masked_fill"}  # the mask made into a bias (transformers 5, 4)
        assert bool(made) == (given == "padded"), kinds


def test_a_function_imported_by_name_is_answered_in_every_module_that_holds_it(monkeypatch):
    """Modeling files import transformers' mask decisions by name, so each module holding one
    is swapped for the block. Where they are held is remembered (reading every name of 300
    modeling files took 31 ms, twice a profile), but a module that gained a name since (an
    import under way), or a module imported since, is read again, and each is put back after."""
    import types

    from pytest_graphbudget.engine.hf_masks import _everywhere

    def decision():
        return "transformers'"

    def answer():
        return "ours"

    module = types.ModuleType("transformers.graphbudget_test_modeling")
    module.decision = decision
    monkeypatch.setitem(sys.modules, module.__name__, module)
    with _everywhere({decision: answer}):
        assert module.decision is answer
    assert module.decision is decision
    module.imported_later = decision
    with _everywhere({decision: answer}):
        assert module.decision is answer and module.imported_later is answer
    assert module.decision is decision and module.imported_later is decision
    second = types.ModuleType("transformers.graphbudget_test_imported_after")
    second.decision = decision
    monkeypatch.setitem(sys.modules, second.__name__, second)
    with _everywhere({decision: answer}):
        assert second.decision is answer and module.decision is answer
    assert second.decision is decision
