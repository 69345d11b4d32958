"""LLM decode (issue 13): one generated token with a KV cache of N positions, beside the prefill.

The references are hand counts, not the tool: a small GPT-2 (2 layers, hidden 64, vocabulary
1000) whose per-token MACs follow the closed form ``L*(12h^2 + 2(N+1)h) + h*V`` (per layer QKV
3h^2, output projection h^2, MLP 8h^2, attention over the N cached positions and the new one;
then the LM head on one position), GPT-2's published configuration for the cache's bytes
(2 x layers x positions x hidden x 4 bytes), PyTorch's FlopCounterMode on the model's own
``generate``-style path, and the zoo's ordinary profile for the prefill.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import warnings

import pytest
from conftest import skip_before_transformers_5, transformers_major

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from pytest_graphbudget import cli, hardware, profile_model  # noqa: E402
from pytest_graphbudget.errors import GraphBudgetError  # noqa: E402
from pytest_graphbudget.modes import decode, decode_step  # noqa: E402

LAYERS, HIDDEN, HEADS, VOCAB, POSITIONS = 2, 64, 4, 1000, 256
CONTEXT = 32


def closed_form_macs(context: int, layers=LAYERS, h=HIDDEN, vocab=VOCAB) -> int:
    return layers * (3 * h * h + h * h + 8 * h * h + 2 * (context + 1) * h) + h * vocab


def small_config():
    return transformers.GPT2Config(
        n_layer=LAYERS,
        n_embd=HIDDEN,
        n_head=HEADS,
        vocab_size=VOCAB,
        n_positions=POSITIONS,
        bos_token_id=0,
        eos_token_id=0,
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A model folder (``config.json``) the zoo builds the small GPT-2 from."""
    path = tmp_path_factory.mktemp("gpt2-small")
    small_config().to_json_file(str(path / "config.json"))
    return path


@pytest.fixture(scope="module")
def result(folder):
    return decode.profile_decode(str(folder), context=CONTEXT)


def test_kv_cache_bytes_of_gpt2_at_1024_positions_in_float32():
    """GPT-2's published configuration: 2 x 12 layers x 1024 positions x 768 x 4 bytes."""
    from pytest_graphbudget.zoo.huggingface import config_from_dict, config_path

    config = config_from_dict(json.loads(config_path("gpt2").read_text()))
    shapes = decode_step.cache_shapes(config, 1024, 1)
    assert decode_step.kv_cache_bytes(shapes, 4) == 2 * 12 * 1024 * 768 * 4 == 75_497_472


def test_decode_macs_equal_the_closed_form(result):
    """Exact (the issue asks for 0.1%): every matmul of one token, the attention over N + 1
    positions and the LM head on the new position."""
    assert result.decode.macs == closed_form_macs(CONTEXT) == 170_752
    assert result.decode.coverage.unsupported_ops == {}


def test_the_decode_graph_reads_the_cache(result):
    """The cache tensors are graph inputs, and the kernels that append to them read them: a
    cache baked into the graph as constants would bring no input bytes."""
    cache_bytes = 2 * LAYERS * CONTEXT * HIDDEN * 4
    assert result.kv_cache_bytes == cache_bytes
    cache_inputs = [i for i in result.decode.inputs if i.name.startswith("past_key_values")]
    assert [i.shape for i in cache_inputs] == [[1, HEADS, CONTEXT, HIDDEN // HEADS]] * 4
    assert result.decode.input_bytes >= cache_bytes
    assert sum(s.bytes_in for s in result.decode.subgraphs) >= cache_bytes
    # Every weight its kernels read, a lookup its rows: one of the 256 positions of wpe, and
    # one row of the tied wte besides the LM head's whole read (a step had been charged every
    # row of both tables: an untied 32k-vocabulary Llama's 1.85x)
    # GPT-2's parameters by hand (transformers 4 also holds each layer's causal-mask buffer,
    # which a step does not read): the tables, per layer 12h^2 + 13h, the final norm's 2h.
    h = HIDDEN
    weights = 4 * (VOCAB * h + POSITIONS * h + LAYERS * (12 * h * h + 13 * h) + 2 * h)
    rows = (POSITIONS - 1) * HIDDEN * 4
    assert result.bytes_read == weights - rows + HIDDEN * 4 + cache_bytes
    # The step's module paths are the model's own (DecodeStep's wrapper is not shown).
    assert set(result.decode.modules) == set(result.prefill.modules)


def test_the_decode_step_is_the_models_generate_path():
    """Against the model's own path (a prefill that fills a DynamicCache, then one token):
    the same logits, and PyTorch's FlopCounterMode counts the same weight matmuls."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    lm = decode_step.build_lm(small_config(), meta=False)
    ids = torch.randint(3, VOCAB, (1, CONTEXT + 1))
    # transformers 5.24 renamed the cache ``cache`` (``past_key_values`` warns, and goes in 5.40)
    keyword = "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"
    with torch.no_grad():
        cache = getattr(lm(ids[:, :CONTEXT], use_cache=True), keyword)
        tensors = tuple((layer.keys.clone(), layer.values.clone()) for layer in cache.layers)
        mask, new = torch.ones(1, CONTEXT + 1, dtype=torch.long), ids[:, CONTEXT:]
        with FlopCounterMode(display=False) as counter:
            real = lm(new, attention_mask=mask, logits_to_keep=1, **{keyword: cache})
        step = decode_step.DecodeStep(lm, CONTEXT)(new, tensors, mask)
    assert torch.allclose(step.logits, real.logits, atol=1e-5)
    # Before torch 2.15 FlopCounterMode has no formula for the CPU flash-attention op: it
    # sees the weight matmuls and the LM head, which are the closed form less the attention.
    # From 2.15 it counts that op too, and gives the whole closed form.
    from pytest_graphbudget.compat import torch_version

    attention = LAYERS * 2 * (CONTEXT + 1) * HIDDEN
    unseen = 0 if torch_version() >= (2, 15) else attention
    assert counter.get_total_flops() == 2 * (closed_form_macs(CONTEXT) - unseen)


def test_the_decode_step_passes_its_cache_under_the_name_the_model_takes():
    """transformers 5.24 renamed ``past_key_values`` to ``cache``: the old name still works
    there but warns, and is to go in 5.40. The step calls the model as it is, without the
    warning, on the pinned transformers and on newer ones (the tiny model really runs)."""
    torch.manual_seed(0)
    lm = decode_step.build_lm(small_config(), meta=False)
    inputs = decode_step.decode_inputs(lm, lm.config, CONTEXT, 1, VOCAB)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        out = decode_step.DecodeStep(lm, CONTEXT)(**inputs)
    assert out.logits.shape == (1, 1, VOCAB)
    assert not [w for w in caught if "past_key_values" in str(w.message)]


def test_a_model_in_training_mode_is_decoded_in_eval_and_left_training(result):
    """User trial: ``profile_decode`` of a model in train mode left it in eval mode, unlike
    ``profile_model``; its figures are the eval ones (no dropout), as the zoo's model's."""
    torch.manual_seed(0)
    lm = decode_step.build_lm(small_config(), meta=False).train()
    found = decode.profile_decode(lm, context=CONTEXT)
    assert lm.training and all(m.training for m in lm.modules())
    assert found.decode.macs == closed_form_macs(CONTEXT) == result.decode.macs
    assert found.decode.flops == result.decode.flops  # no dropout priced
    profile_model(lm, decode=True, context=CONTEXT)
    assert lm.training


def test_decode_is_memory_bound_on_every_builtin_hardware(result):
    steps = {r.hardware: r for r in result.by_hardware()}
    assert set(steps) == {hw.name for hw in hardware.BUILTIN}
    for hw in hardware.BUILTIN:
        assert steps[hw.name].bottleneck == "memory_bound", hw.name
        assert steps[hw.name].est_latency_s == result.bytes_read / hw.bandwidth
    assert result.decode.bottleneck["memory_bound"]["time_share"] == 1.0
    # The verdict is computed: a machine whose ridge point is under the step's intensity
    # (about 0.47 FLOPs/byte here) makes the same step compute-bound.
    fast = hardware.Hardware("fast-memory", "", {"float32": 1e12}, bandwidth=1e13)
    assert result.roofline(fast).bottleneck == "compute_bound"


def test_prefill_equals_the_ordinary_profile_at_seq_len_n(result, folder):
    """The zoo's ordinary profile is the base model; the prefill adds the LM head on the last
    position only (as ``generate`` runs it: ``logits_to_keep=1``), with tied weights."""
    ordinary = profile_model(str(folder), seq_len=CONTEXT)
    body = result.prefill.modules["transformer"]
    assert (body.flops, body.macs) == (ordinary.flops, ordinary.macs)
    assert result.prefill.macs == ordinary.macs + HIDDEN * VOCAB
    assert result.prefill.params == ordinary.params


def test_profile_model_with_decode_gives_the_step_budgets_check(folder):
    """Two sequences decode together: twice the MACs of one, at another context."""
    step = profile_model(str(folder), decode=True, context=CONTEXT - 1, batch=2)
    assert step.macs == 2 * closed_form_macs(CONTEXT - 1)
    cache = [i.shape for i in step.inputs if i.name.startswith("past_key_values")]
    assert cache == [[2, HEADS, CONTEXT - 1, HIDDEN // HEADS]] * 2 * LAYERS


def test_grouped_query_and_sliding_window_caches_follow_the_config():
    """A Mistral-style model: 2 key/value heads of 4 (grouped-query attention) and a window of
    8, so the cache keeps 7 positions and the new token attends to 8. Per layer: q and o h^2,
    k and v h x 32 (2 heads of 16), gate/up/down 3 x h x 128, attention 2 x 8 x h."""
    skip_before_transformers_5("its sliding-window cache layers keep other lengths")
    config = transformers.MistralConfig(
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
        max_position_embeddings=256,
        sliding_window=8,
    )
    lm = transformers.AutoModelForCausalLM.from_config(config)
    step = profile_model(lm, decode=True, context=CONTEXT)
    h = 64
    assert step.macs == 2 * (2 * h * h + 2 * h * 32 + 3 * h * 128 + 2 * 8 * h) + h * 100
    cache = [i.shape for i in step.inputs if i.name.startswith("past_key_values")]
    assert cache == [[1, 2, 7, 16]] * 4


def tiny_lm(kind: str):
    """Causal LMs (from configuration, no weights) whose caches are not one head dim of keys
    and values per layer: state-space, recurrent, latent attention, hybrid."""
    t = transformers
    configs = {
        "mamba": lambda: t.MambaConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, state_size=8, num_hidden_layers=2
        ),
        "rwkv": lambda: t.RwkvConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, intermediate_size=128
        ),
        "deepseek_v3": lambda: t.DeepseekV3Config(
            vocab_size=VOCAB,
            hidden_size=128,
            intermediate_size=256,
            moe_intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            first_k_dense_replace=1,
            kv_lora_rank=32,
            q_lora_rank=48,
            qk_rope_head_dim=16,
            qk_nope_head_dim=32,
            v_head_dim=24,
            n_group=1,
            topk_group=1,
        ),
        "jamba": lambda: t.JambaConfig(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=2,
            expert_layer_offset=1,
            num_experts=2,
            mamba_d_state=8,
        ),
    }
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(configs[kind]())


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("mamba", "(a state-space or recurrent state: no layer keeps keys and values)"),
        ("rwkv", "(a state-space or recurrent state: its configuration names no attention heads)"),
        (
            "deepseek_v3",
            "latent attention, kv_lora_rank 32: key and value head dims differ, 48 and 24",
        ),
        ("jamba", "(hybrid layers: layers 0, 2 of 4 keep a linear-attention or state-space state"),
    ],
)
def test_caches_that_are_not_attention_kv_are_refused_in_one_line(kind, why):
    """User trial: Mamba and RWKV ended in an AttributeError traceback, DeepSeek-V3 and Jamba
    in a "ModelRunError" blaming the model for the (batch, heads, positions, head dim) cache
    built for it. Said from the configuration, before the prefill is profiled."""
    if kind == "jamba":
        skip_before_transformers_5("Jamba's configuration names its mamba layers from 5 on")
    if kind == "mamba" and transformers_major() < 5:  # its cache has no layers by kind
        why = "(a state-space or recurrent state: its configuration names no attention heads)"
    lm = tiny_lm(kind)
    with pytest.raises(GraphBudgetError) as caught:
        decode.profile_decode(lm, context=8)
    message = str(caught.value)
    assert type(caught.value) is GraphBudgetError and "\n" not in message
    assert "decode prices a KV cache of attention layers" in message
    assert why in message, message
    with pytest.raises(GraphBudgetError, match="is not supported"):
        profile_model(lm, decode=True, context=8)


def test_cli_refuses_a_state_space_model_with_exit_2(tmp_path, capsys):
    """``graph-budget profile FOLDER --decode`` of a Mamba configuration: exit 2, one line."""
    tiny_lm("mamba").config.to_json_file(str(tmp_path / "config.json"))
    assert cli.main(["profile", str(tmp_path), "--decode", "--context", "8", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "state-space or recurrent state" in err[0], err
    assert "Traceback" not in err[0]


def test_cli_decode_json(folder, result, capsys):
    argv = ["profile", str(folder), "--decode", "--context", str(CONTEXT), "--format", "json"]
    assert cli.main([*argv, "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "graphbudget.decode/1"
    assert (data["context"], data["batch"]) == (CONTEXT, 1)
    assert data["kv_cache_bytes"] == result.kv_cache_bytes
    assert data["decode"]["totals"]["macs"] == closed_form_macs(CONTEXT)
    assert data["prefill"]["totals"]["macs"] == result.prefill.macs
    assert data["step"]["bytes_read"] == result.bytes_read
    assert data["step"]["bottleneck"] == "memory_bound"
    assert set(data["by_hardware"]) == {hw.name for hw in hardware.BUILTIN}


def test_cli_decodes_a_model_of_the_users_code(tmp_path, monkeypatch, capsys):
    """``graph-budget profile package.module:callable --decode``: the causal LM the user's
    function builds, the same closed form as the folder's; a factory of no causal LM says so."""
    (tmp_path / "lms.py").write_text(
        "import transformers\n"
        "def small():\n"
        f"    return transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer={LAYERS}, "
        f"n_embd={HIDDEN}, n_head={HEADS}, vocab_size={VOCAB}, n_positions={POSITIONS}))\n"
        "def mlp():\n"
        "    import torch\n"
        "    return torch.nn.Linear(4, 4)\n"
        "def pair():\n"  # the (module, inputs) a factory returns for profile
        "    import torch\n"
        "    return small(), (torch.zeros(1, 4, dtype=torch.long),)\n"
    )
    monkeypatch.chdir(tmp_path)
    for factory in ("lms:small", "lms:pair"):  # a pair was "tuple is not a causal LM"
        argv = ["profile", factory, "--decode", "--context", "8", "--batch", "2", "--format"]
        assert cli.main([*argv, "json", "-q"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["batch"] == 2
        assert data["decode"]["totals"]["macs"] == 2 * closed_form_macs(8)
    assert cli.main(["profile", "lms:mlp", "--decode", "--context", "8", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a causal language model" in err[0], err


def test_table_puts_prefill_and_decode_side_by_side(result):
    from pytest_graphbudget.cli import decode as view

    text = view.render(result, "table", top=3)
    header = next(line for line in text.splitlines() if "prefill" in line)
    assert "prefill (32 tokens)" in header and "decode (1 token)" in header
    macs = next(line for line in text.splitlines() if line.strip().startswith("MACs"))
    assert macs.split()[-1] == "171k"  # 170,752
    for hw in hardware.BUILTIN:
        row = next(line for line in text.splitlines() if line.strip().startswith(hw.name + " "))
        assert " memory " in row, row
    assert "past_key_values[0..3] 1x4x32x16 float32" in text


def test_a_decode_profiles_repr_is_one_line_and_its_notebook_cell_a_table(result):
    """User trial: ``repr(result)`` was 62k characters (both whole profiles). The step's MACs
    are the closed form's 170,752; the cache 2 x 2 layers x 32 positions x 64 x 4 bytes."""
    text = repr(result)
    assert text.startswith(
        f"<DecodeProfile {result.model!r} on generic, float32: context 32, batch 1; per step "
    )
    assert "171k MACs" in text and "(KV cache 32.8kB)" in text and text.endswith("memory-bound>")
    assert closed_form_macs(CONTEXT) == 170_752 and len(text) < 300
    html = result._repr_html_()
    assert "prefill (32 tokens)</th>" in html and "decode (1 token)</th>" in html
    assert '<tr><th>MACs</th><td class="num">' in html and ">171k</td></tr>" in html
    assert "<script" not in html


def test_a_misspelt_keyword_is_named_with_the_one_meant():
    """User trial: ``hardwre=`` was Python's TypeError; refused before any model is built."""
    with pytest.raises(GraphBudgetError) as info:
        decode.profile_decode("distilgpt2", context=16, hardwre="a100")
    assert str(info.value) == "unknown keyword 'hardwre' (did you mean 'hardware'?)"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bert-base-uncased", "--decode", "--context", "8"], "not a causal language model"),
        (["t5-small", "--decode", "--context", "8"], "not a causal language model"),
        pytest.param(
            ["resnet18", "--decode", "--context", "8"],
            "not a causal language model",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("torchvision") is None, reason="needs torchvision"
            ),
        ),
        (["gpt2", "--decode", "--context", "1024"], "at most 1023"),
        (["gpt2", "--decode"], "--decode needs --context"),
        (["gpt2", "--context", "8"], "--context needs --decode"),
        (["gpt2", "--decode", "--context", "8", "--seq-len", "8"], "--seq-len does not apply"),
        (["gpt2", "--decode", "--context", "8", "--dtype", "bfloat16"], "--dtype not available"),
    ],
)
def test_cli_refuses_what_it_cannot_decode(argv, message, capsys):
    assert cli.main(["profile", *argv, "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert "Traceback" not in err[0]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"decode": "yes", "context": 8}, "decode in t: true or false"),
        ({"context": 8}, "context in t needs decode = true"),
        ({"decode": True}, "needs context = N"),
        ({"decode": True, "context": 0}, "context in t must be a positive integer"),
        ({"decode": True, "context": 8, "seq_len": 8}, "seq_len in t does not apply"),
    ],
)
def test_budget_table_decode_keys_are_checked(table, message):
    with pytest.raises(GraphBudgetError, match=message):
        decode.wanted(table, "t")
    assert decode.wanted({"seq_len": 8}, "t") is False
    assert decode.wanted({"decode": False}, "t") is False


def test_toml_budgets_check_the_decode_figures(pytester, folder):
    """``decode = true`` makes the budget's MACs the decode step's: a limit at the closed
    form passes, one MAC under it fails (the prefill's MACs are ~20x larger)."""
    macs = closed_form_macs(CONTEXT)
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets" / "llm.toml").write_text(
        f'[models.at]\nmodel = "{folder}"\ndecode = true\ncontext = {CONTEXT}\n'
        f"macs_max = {macs}\n\n"
        f'[models.under]\nmodel = "{folder}"\ndecode = true\ncontext = {CONTEXT}\n'
        f"macs_max = {macs - 1}\n\n"
        f'[models.cast]\nmodel = "{folder}"\ndecode = true\ncontext = {CONTEXT}\n'
        f'dtype = "bfloat16"\nmacs_max = {macs}\n'
    )
    run = pytester.runpytest("-p", "no:cacheprovider", "--graph-budget", "budgets")
    run.assert_outcomes(passed=1, failed=2)
    run.stdout.fnmatch_lines(["*FAILED*under*"])
    run.stdout.fnmatch_lines(["*cast: decode = true profiles one generated token in eval mode*"])
