"""One training step (issue 12): the signature, the joint graph's figures against references."""

from __future__ import annotations

import json

import pytest
from conftest import skip_before_transformers_5, transformers_major

torch = pytest.importorskip("torch")
nn = torch.nn
F = nn.functional

from torch.profiler import ProfilerActivity, profile  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.engine.profile import profile_from_dict  # noqa: E402
from pytest_graphbudget.errors import GraphBudgetError  # noqa: E402


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "training"}, "mode must be 'eval' or 'train', not 'training'"),
        ({"mode": "train", "optimizer": "adamw"}, "optimizer must be 'adam', 'sgd' or None"),
        ({"optimizer": "adam"}, "optimizer applies to mode='train' only"),
        ({"loss": lambda out: out.sum()}, "loss applies to mode='train' only"),
        ({"mode": "train", "loss": "mse"}, "loss must be a callable of the outputs"),
    ],
)
def test_bad_mode_options_fail_in_one_line(options, message):
    with pytest.raises(GraphBudgetError, match=message) as info:
        profile_model(MLP(), torch.randn(2, 4), **options)
    assert "\n" not in str(info.value)


def test_a_step_that_cannot_be_taken_fails_in_one_line():
    frozen = MLP().requires_grad_(False)
    with pytest.raises(GraphBudgetError, match="no parameter that requires grad"):
        profile_model(frozen, torch.randn(2, 4), mode="train")
    with pytest.raises(
        GraphBudgetError, match="tracing the training step failed: IndexError"
    ) as info:
        profile_model(MLP(), torch.randn(2, 4), mode="train", loss=lambda out: out["logits"])
    assert "\n" not in str(info.value)


class Checkpointed(MLP):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.reentrant = reentrant

    def forward(self, x):
        run = super().forward
        return torch.utils.checkpoint.checkpoint(run, x, use_reentrant=self.reentrant)


def test_reentrant_checkpointing_is_refused_as_the_traces_limit_not_the_models():
    """torch's own text advised the user to change the model; eager ``loss.backward()`` takes
    it, the step's ``torch.autograd.grad`` does not."""
    x = torch.randn(2, 4)  # a Linear first: reentrant checkpointing needs an input with a grad
    with pytest.raises(GraphBudgetError, match="traced with torch.autograd.grad") as info:
        profile_model(nn.Sequential(nn.Linear(4, 4), Checkpointed(True)), x, mode="train")
    assert "use_reentrant=False" in str(info.value) and "\n" not in str(info.value)
    # Non-reentrant: the backward recomputes fc1 and the ReLU, up to fc2's saved input:
    # fc1's 2 x 4 x 8 MACs more than the plain step.
    plain = profile_model(nn.Sequential(nn.Linear(4, 4), MLP()), x, mode="train")
    checkpointed = nn.Sequential(nn.Linear(4, 4), Checkpointed(False))
    assert profile_model(checkpointed, x, mode="train").macs == plain.macs + 2 * 4 * 8


class Bag(nn.Module):
    def __init__(self, sparse: bool) -> None:
        super().__init__()
        self.table = nn.Embedding(100, 8, sparse=sparse)
        self.head = nn.Linear(8, 1)

    def forward(self, ids):
        return self.head(self.table(ids).mean(1))


def test_a_sparse_embedding_gradient_is_refused_naming_the_module_and_the_fix():
    """User trial: ``nn.Embedding(sparse=True)`` (recommenders) failed the step with torch's
    "Cannot access storage of SparseTensorImpl" and no word of what to change."""
    ids = torch.randint(0, 100, (4, 6))
    with pytest.raises(GraphBudgetError, match=r"table \(Embedding\) has sparse=True") as info:
        profile_model(Bag(True), ids, mode="train", optimizer="sgd")
    assert "sparse=False" in str(info.value) and "\n" not in str(info.value)

    class Functional(nn.Module):  # no module to name: the trace's failure says it
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(100, 8))

        def forward(self, ids):
            return F.embedding(ids, self.w, sparse=True).sum()

    with pytest.raises(GraphBudgetError, match="a sparse gradient .* sparse=False"):
        profile_model(Functional(), ids, mode="train")
    # A frozen table makes no gradient: the step is the head's alone. Forward: the mean's
    # 4 x 6 x 8 adds and 4 x 8 divides, the head's 4 x 8 MACs and 4 bias adds; backward: the
    # head's weight gradient (4 x 8 MACs) and bias gradient (4 adds), no input gradient.
    frozen = Bag(True)
    frozen.table.weight.requires_grad_(False)
    assert profile_model(frozen, ids, mode="train").macs == 4 * 8 + 4 * 8


class Scored(nn.Module):
    """Takes its target to train, as a detector does: a loss in training, outputs in eval."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x, target=None):
        out = self.fc(x)
        if self.training:
            assert target is not None, "targets should not be none when in training mode"
            return F.mse_loss(out, target)
        return out


def test_a_case_trains_on_its_train_inputs_and_infers_on_its_inputs():
    """Hand count: eval is the Linear's 2 x 4 x 3 MACs; the step adds the weight gradient's
    2 x 4 x 3 (the input needs none), and the loss (sub, square, sum, mean: 6 + 6 + 5 + 1)."""
    from pytest_graphbudget import ModelCase

    x = torch.randn(2, 4)
    case = ModelCase(Scored(), (x,), train_inputs=(x, torch.randn(2, 3)))
    assert profile_model(case).macs == 2 * 4 * 3
    step = profile_model(case, mode="train")
    assert step.macs == 2 * (2 * 4 * 3)
    with pytest.raises(GraphBudgetError, match="targets should not be none"):
        profile_model(ModelCase(Scored(), (x,)), mode="train")


def test_a_batch_norm_at_batch_one_says_to_profile_a_larger_batch():
    net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    with pytest.raises(GraphBudgetError, match=r"batch of 2 or more \(batch=2") as info:
        profile_model(net, torch.randn(1, 4), mode="train")
    assert "meta" not in str(info.value)
    on_meta = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).to("meta")
    with pytest.raises(GraphBudgetError, match="batch of 2 or more") as info:
        profile_model(on_meta, torch.randn(1, 4), mode="train")
    assert "meta device" not in str(info.value)  # the model's own error, not the device's


def test_lazy_modules_get_their_weights_before_the_step():
    lazy = nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.Linear(8, 2))
    assert profile_model(lazy, torch.randn(3, 4), mode="train").flops == 348 + 438


def test_a_forward_that_keeps_a_tensor_leaves_the_model_as_it_was():
    """User trial: a module keeping ``self.mem = y.detach()`` (Transformer-XL's memory), and
    the old ``spectral_norm``'s ``weight``, were left holding the trace's fake tensor after a
    train profile: the next real forward returned a FakeTensor, and ``.item()`` raised."""
    from torch import nn

    class Memory(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj, self.mem = nn.Linear(8, 8), None

        def forward(self, x):
            y = self.proj(x)
            self.mem = y.detach()
            return y

    x = torch.randn(4, 8)
    model = Memory()
    profile_model(model, (x,), mode="train", optimizer="sgd")
    assert model.mem is None
    assert type(model(x)) is torch.Tensor and type(model.mem) is torch.Tensor
    normed = nn.utils.spectral_norm(nn.Linear(8, 8))
    weight = normed.weight
    profile_model(normed, (x,), mode="train")
    assert normed.weight is weight and type(normed(x)) is torch.Tensor


def test_a_loss_the_model_returns_is_the_default_loss():
    """User trial: a Hugging Face LM given ``labels`` returns its loss beside the logits; the
    default had summed both, adding a sum over the logits (B x L x V adds), a second gradient
    into them (as many adds) and the two terms' sum (1 + 1): what Trainer steps on is
    ``outputs.loss`` alone."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=16)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 100, (2, 8))
    batch = {"input_ids": ids, "labels": ids}
    default = profile_model(model, batch, mode="train")
    assert default.flops == profile_model(model, batch, mode="train", loss=lambda o: o.loss).flops

    def everything(out):
        return out.loss.sum() + out.logits.sum()

    summed = profile_model(model, batch, mode="train", loss=everything)
    assert summed.flops == default.flops + 2 * (2 * 8 * 100) + 2


def test_a_dataclass_output_is_summed_by_the_default_loss():
    """User trial: a model returning its own dataclass was refused ("no output of the model
    needs a gradient"): pytree saw one opaque leaf. ``Linear(8, 8) -> Linear(8, 4)`` on
    ``(2, 8)``, both outputs summed: forward 2*8*8 + 2*8*4 = 192 MACs; backward the second's
    weight and input gradients (64 + 64) and the first's weight gradient (128): 448."""
    from dataclasses import dataclass

    from torch import nn

    @dataclass
    class Out:
        logits: torch.Tensor
        feats: torch.Tensor

    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 4)

        def forward(self, x):
            feats = self.a(x)
            return Out(self.b(feats), feats)

    found = profile_model(TwoHeads(), (torch.randn(2, 8),), mode="train", optimizer="sgd")
    assert found.macs == 192 + 64 + 64 + 128


def test_eval_profile_says_its_mode_and_old_json_reads_back_as_eval():
    data = json.loads(json.dumps(profile_model(MLP(), torch.randn(2, 4)).to_dict()))
    assert data["mode"] == "eval"
    assert profile_from_dict(data).mode == "eval"
    data["mode"] = "train"
    assert profile_from_dict(data).mode == "train"
    del data["mode"]  # a profile saved before issue 12
    assert profile_from_dict(data).mode == "eval"


@pytest.fixture(scope="module")
def mlp_adam():
    torch.manual_seed(0)
    return profile_model(MLP(), torch.randn(3, 4), mode="train", optimizer="adam")


def test_mlp_with_adam_matches_hand_counts(mlp_adam):
    """Linear(4, 8) -> ReLU -> Linear(8, 2), batch 3, loss = sum of the outputs, Adam.

    Forward: fc1 addmm 3*4*8 = 96 MACs + 24 bias adds = 216 FLOPs; ReLU 24; fc2 addmm
    3*8*2 = 48 MACs + 6 bias adds = 102; the loss's sum 6. Total 348, 144 MACs.
    Backward: fc2's input gradient (3x2 @ 2x8) and weight gradient (2x3 @ 3x8), 48 MACs each,
    and its bias gradient (a sum over the batch, 6): 198; ReLU's 24; fc1's weight gradient
    (8x3 @ 3x4) 96 MACs = 192 and bias gradient 24 (no input gradient: x needs none): 216.
    Total 438, 192 MACs.
    Adam, per parameter element: lerp 2, mul 1, addcmul 3 (value != 1), sqrt 1, div 1, add eps 1,
    addcdiv 3 (value != 1) = 12; 58 parameters (40 in fc1, 18 in fc2): 696.
    The step: 348 + 438 + 696 = 1482 FLOPs, 336 MACs; two fp32 moments: 2 * 58 * 4 = 464 bytes.
    """
    totals = mlp_adam.to_dict()["totals"]
    assert (totals["flops"], totals["macs"]) == (1482, 336)
    assert (totals["forward_flops"], totals["forward_macs"]) == (348, 144)
    assert (totals["backward_flops"], totals["backward_macs"]) == (438, 192)
    assert (totals["optimizer_flops"], totals["optimizer_macs"]) == (696, 0)
    assert totals["optimizer_state_bytes"] == 464 and totals["weights_bytes"] == 232
    modules = mlp_adam.to_dict()["modules"]
    assert modules["fc1"] == {
        "flops": 216 + 216 + 480,
        "macs": 96 + 96,
        "params": 40,
        "weights_bytes": 40 * 4,
        "forward_flops": 216,
        "backward_flops": 216,
        "optimizer_flops": 480,
        "type": "Linear",
    }
    assert [modules["fc2"][f"{p}_flops"] for p in ("forward", "backward", "optimizer")] == [
        102,
        198,
        216,
    ]
    assert modules["act"]["forward_flops"] == modules["act"]["backward_flops"] == 24


def test_train_profile_reads_back_from_its_json(mlp_adam):
    data = json.loads(json.dumps(mlp_adam.to_dict()))
    assert data["mode"] == "train"
    again = profile_from_dict(data)
    assert again.to_dict()["totals"] == data["totals"]
    assert again.peak_memory_bytes == mlp_adam.peak_memory_bytes
    assert again.phases == mlp_adam.phases


def test_sgd_keeps_one_buffer_and_no_optimizer_keeps_none():
    """SGD with momentum, per element: buf * momentum + grad (2), param - lr * buf (2)."""
    sgd = profile_model(MLP(), torch.randn(3, 4), mode="train", optimizer="sgd").to_dict()
    bare = profile_model(MLP(), torch.randn(3, 4), mode="train").to_dict()
    assert sgd["totals"]["optimizer_flops"] == 4 * 58
    assert sgd["totals"]["optimizer_state_bytes"] == 58 * 4
    assert bare["totals"]["optimizer_flops"] == bare["totals"]["optimizer_state_bytes"] == 0
    assert bare["totals"]["flops"] == 348 + 438


# Truth against torch: FlopCounterMode over forward + loss.backward(), the memory profiler ------


def contraction_flops(model, *inputs, loss=lambda out: out.sum()) -> int:
    """What FlopCounterMode counts (contractions only) over one forward and ``backward()``."""
    model.train()
    with FlopCounterMode(display=False) as counter:
        loss(model(*inputs)).backward()
    return counter.get_total_flops()


def step_peak(prof) -> int:
    """The most bytes the step held at once above what was allocated before it: the running
    sum of the profiler's allocation and free records, in time order."""
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return peak


def within(ours: float, reference: float, share: float) -> bool:
    return abs(ours - reference) <= share * reference


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Real steps on one intra-op thread: on a shared machine, threads that wait for each other
    make a resnet18 step 30 times slower; the counts and bytes are the same."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def resnet18_step():
    """Our profile of one step of resnet18 (no optimizer), and one real step of the same model
    and input under FlopCounterMode and the memory profiler (grads start unallocated)."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    x = torch.randn(2, 3, 64, 64)
    ours = profile_model(model, x, mode="train")
    model.train()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with FlopCounterMode(display=False) as counter:
            model(x).sum().backward()
    return ours, counter.get_total_flops(), step_peak(prof)


def test_resnet18_step_contractions_match_torch(resnet18_step):
    ours, flops, _ = resnet18_step
    assert within(ours.flops_contraction, flops, 0.005), (ours.flops_contraction, flops)


@pytest.mark.slow
@pytest.mark.onednn_avx512
def test_resnet18_step_peak_matches_torch(resnet18_step):
    ours, _, peak = resnet18_step
    # The activation peak over the joint graph holds the saved activations and the gradients
    # made so far; the profiler's peak is the same step's, above the weights and input.
    assert within(ours.activation_peak_bytes, peak, 0.10), (ours.activation_peak_bytes, peak)
    before = ours.weights_bytes + ours.input_bytes
    assert within(ours.peak_memory_bytes, before + peak, 0.10)


def test_resnet18_phases_add_up_per_module_and_in_totals(resnet18_step):
    data = resnet18_step[0].to_dict()
    totals = data["totals"]
    phases = [totals[f"{p}_flops"] for p in ("forward", "backward", "optimizer")]
    assert sum(phases) == totals["flops"] and phases[2] == 0
    # A convolution's backward computes two convolutions of the forward's size (one for
    # conv1, whose input needs no gradient); batch norm, ReLU and pooling add their own.
    conv1 = data["modules"]["conv1"]["macs"] // 2  # its forward, and its weight gradient
    assert totals["backward_macs"] == 2 * totals["forward_macs"] - conv1
    for path, module in data["modules"].items():
        split = module["forward_flops"] + module["backward_flops"] + module["optimizer_flops"]
        assert split == module["flops"], path
    assert sum(s["flops"] for s in data["subgraphs"]) == totals["flops"]


@pytest.mark.slow
def test_bert_base_step_contractions_match_flop_counter():
    """bert-base (BertConfig's defaults, no weights: built on the meta device) at seq 128."""
    skip_before_transformers_5("its BERT reads the mask's values, which fake tensors lack")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = transformers.BertModel(transformers.BertConfig())
    ids = torch.zeros(1, 128, dtype=torch.long, device="meta")
    ours = profile_model(model, ids, mode="train")
    flops = contraction_flops(
        model, ids, loss=lambda out: out.last_hidden_state.sum() + out.pooler_output.sum()
    )
    assert within(ours.flops_contraction, flops, 0.005), (ours.flops_contraction, flops)
    assert ours.coverage.unsupported_ops == {}


class Logits(nn.Module):
    """A causal LM's logits alone, which a plain ``.sum().backward()`` can take."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, ids):
        return self.lm(ids).logits


def test_a_float32_mixture_of_experts_steps_on_the_meta_device():
    """transformers 5 runs Mixtral's experts through ``_grouped_mm``, whose meta kernel refuses
    float32: built on the meta device (as a Mixtral too large for real weights is), its step
    had failed, "a model on the meta device has no values to branch on". Its step on fakes is
    the real model's, and its peak is the profiler's. transformers 4 routes each expert's
    tokens by value (``torch.where`` of its mask): there the refusal is the truth."""
    transformers = pytest.importorskip("transformers")
    config = transformers.MixtralConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        vocab_size=128,
    )
    ids = torch.randint(0, 128, (1, 64))
    with torch.device("meta"):
        meta_model = Logits(transformers.MixtralForCausalLM(config))
    if transformers_major() < 5:
        with pytest.raises(GraphBudgetError, match=r"meta device has no values to branch on"):
            profile_model(meta_model, ids, mode="train")
        return
    on_meta = profile_model(meta_model, ids, mode="train")
    torch.manual_seed(0)
    model = Logits(transformers.MixtralForCausalLM(config))
    ours = profile_model(model, ids, mode="train")
    assert (on_meta.macs, on_meta.peak_memory_bytes) == (ours.macs, ours.peak_memory_bytes)
    assert on_meta.coverage.unsupported_ops == {}
    model.train()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model(ids).sum().backward()
    held = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    assert ours.peak_memory_bytes == held + ids.nbytes + step_peak(prof)


class TiedLM(nn.Module):
    """A language model whose output projection is its embedding table (one parameter)."""

    def __init__(self, vocab: int = 100, width: int = 32) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.hidden = nn.Linear(width, width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.hidden(self.emb(ids))))


def test_tied_weights_step_counts_the_shared_gradient_once_per_use():
    torch.manual_seed(0)
    model, ids = TiedLM(), torch.randint(0, 100, (4, 16))
    ours = profile_model(model, ids, mode="train", optimizer="adam")
    assert ours.flops_contraction == contraction_flops(model, ids)
    # One Adam state for the tied table, not two: 100*32 + 32*32 + 32 parameters.
    assert ours.optimizer_state_bytes == 2 * 4 * (100 * 32 + 32 * 32 + 32)


class LSTMLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True)
        self.head = nn.Linear(32, 50)

    def forward(self, ids):
        return self.head(self.lstm(self.emb(ids))[0])


@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")
def test_lstm_step_contractions_match_flop_counter():
    """On CPU the LSTM runs as mkldnn_rnn_layer (and its backward), which FlopCounterMode has
    no formula for: the reference runs with oneDNN off, where the same LSTM is matrix products
    it counts. Its one difference: no gradient for the zero initial state (one hidden product
    per layer, 1/(6T) of the layer's work), 0.27% at T = 64."""
    torch.manual_seed(0)
    model, ids = LSTMLM(), torch.randint(0, 50, (3, 64))
    ours = profile_model(model, ids, mode="train")
    with torch.backends.mkldnn.flags(enabled=False):
        flops = contraction_flops(model, ids)
    assert within(ours.flops_contraction, flops, 0.005), (ours.flops_contraction, flops)
    assert ours.coverage.unsupported_ops == {}


class Block(nn.Module):
    """A transformer MLP block: wide enough that its tensors dwarf the allocator's noise."""

    def __init__(self, width: int = 512) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 4 * width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x + self.fc2(self.act(self.fc1(x))))


def test_adam_step_peak_matches_the_memory_profiler():
    """The second real step of torch.optim.Adam (its moments exist from the first, as in every
    step after it), under the profiler; grads are set to None before it, as zero_grad does."""
    torch.manual_seed(0)
    model, x = Block(), torch.randn(256, 512)
    ours = profile_model(model, x, mode="train", optimizer="adam")
    adam = torch.optim.Adam(model.parameters(), foreach=False)

    def step():
        adam.zero_grad(set_to_none=True)
        model(x).sum().backward()
        adam.step()

    step()
    adam.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    state = sum(t.numel() * t.element_size() for s in adam.state.values() for t in s.values())
    assert ours.optimizer_state_bytes == state - 4 * len(adam.state)  # less Adam's step counts
    peak = step_peak(prof)
    assert within(ours.activation_peak_bytes, peak, 0.10), (ours.activation_peak_bytes, peak)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    before = weights + state + x.numel() * x.element_size()
    assert within(ours.peak_memory_bytes, before + peak, 0.10)


@pytest.mark.parametrize("model", [TiedLM, LSTMLM])
def test_pricing_from_recorded_values_equals_the_ordinary_fake_pass(model):
    """The joint graph's nodes with a formula are priced from the values the trace recorded,
    without running them again: every node's figures are those of the ordinary fake pass,
    the one torch before 2.14 takes. An LSTM layer's saved workspace among them: the fresh
    pass had run its meta kernel, which returns it empty (a step 72% under on torch 2.11)."""
    from pytest_graphbudget.compat import export_values_match_fresh
    from pytest_graphbudget.engine.joint import capture
    from pytest_graphbudget.engine.measure import measure
    from pytest_graphbudget.engine.measure_export import measure_exported
    from pytest_graphbudget.engine.trace import Example
    from pytest_graphbudget.modes.train import _joint_interpreter

    torch.manual_seed(0)
    model, ids = model(), torch.randint(0, 50, (4, 16))
    model.train()
    joint = capture(model, Example((ids,), {}), None, "adam")
    quick = measure_exported(joint.holder, joint.traced, _joint_interpreter())
    if not export_values_match_fresh():  # torch<2.14: recorded values are never reused
        assert quick is None
        pytest.skip("torch<2.14 prices on fresh fakes (compat.EXPORT_VALUES_AS_FRESH)")
    ordinary = measure(joint.holder, joint.traced, [ids])

    def figures(measured):
        return [
            (n.name, n.macs, n.other, n.category, n.kind, n.shapes, sorted(n.weights.values()))
            for n in measured.nodes
        ]

    assert figures(quick) == figures(ordinary)
    assert sum(n.macs for n in quick.nodes) > 0


class Attention(nn.Module):
    def __init__(self, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return nn.functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])


def test_attention_backward_is_priced_by_torch_own_formula():
    """On CPU, attention's backward is one fused op that FlopCounterMode has no entry for (it
    counts 0); its formula for the fused backward kernels (score recompute and four products)
    is the reference: batch 2, 4 heads, 16 positions, head width 8."""
    from torch.utils.flop_counter import sdpa_backward_flop_count

    prof = profile_model(Attention(), torch.randn(2, 16, 32), mode="train")
    backward = [n for n in prof.node_info if "attention_for_cpu_backward" in n.target]
    assert len(backward) == 1
    shape = (2, 4, 16, 8)
    assert 2 * backward[0].macs == sdpa_backward_flop_count(shape, shape, shape, shape)


class Mixed(nn.Module):
    """Backward ops with per-element formulas: layer norm, GELU, a nearest upsample."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 8)
        self.norm = nn.LayerNorm(8)
        self.act = nn.GELU()
        self.up = nn.Upsample(scale_factor=2, mode="nearest")

    def forward(self, x):
        return self.up(self.act(self.norm(self.fc(x))).view(1, 2, 3, 4))


def test_pointwise_and_norm_backward_ops_match_hand_counts():
    """Batch 3 x 8 features = 24 elements: layer norm's backward 9 per element (docs of
    costs/backward.py) = 216, GELU's 8 = 192; the upsample's output gradient, 1 x 2 x 6 x 8 =
    96 elements, each added into its source = 96."""
    prof = profile_model(Mixed(), torch.randn(3, 4), mode="train")
    flops = {n.target.split(".")[0]: n.flops for n in prof.node_info if "backward" in n.target}
    assert flops["native_layer_norm_backward"] == 216
    assert flops["gelu_backward"] == 192
    assert flops["upsample_nearest2d_backward"] == 96
    assert prof.coverage.unsupported_ops == {}


class Gated(nn.Module):
    """SiLU, Mish and a nearest upsample: ops with a kernel of their own, and a composite
    besides (in C++, or in Python: the upsample's ``_unsafe_index``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 8)

    def forward(self, x):
        return F.interpolate(F.mish(F.silu(self.fc(x))).view(1, 3, 2, 4), scale_factor=2)


def test_ops_eager_runs_as_one_kernel_are_one_node_of_the_step():
    """``silu_backward``, ``mish_backward`` and ``upsample_nearest2d`` run as one kernel each,
    but have a composite too, which make_fx before torch 2.10 traced instead (SiLU's backward
    as sigmoid, a ones tensor, sub and three muls; the upsample as aranges and an index, its
    backward an index_put: a Mixtral's step read 2.5% over its measured peak, a nearest
    upsample's 48% under). Per element, 24 of them: SiLU's backward 8 FLOPs
    (costs/backward.py: sigmoid's 4, then dy * s * (1 + x * (1 - s))), Mish's 14; the
    upsample's backward adds each of its 96 gradients into its source."""
    prof = profile_model(Gated(), torch.randn(3, 4), mode="train", optimizer=None)
    ops = [n.target.split(".")[0] for n in prof.node_info]
    assert not {"sigmoid", "softplus", "_unsafe_index", "arange"} & set(ops), ops
    flops = {op: n.flops for op, n in zip(ops, prof.node_info, strict=True)}
    assert (flops["silu_backward"], flops["mish_backward"]) == (8 * 24, 14 * 24)
    assert flops["upsample_nearest2d_backward"] == 96
    assert prof.coverage.unsupported_ops == {}


def test_bfloat16_step_keeps_the_optimizer_state_in_the_weights_dtype():
    """The hand-count MLP in bfloat16: 58 weights of 2 bytes = 116; the optimizer's state is
    in the weights' dtype, as torch.optim keeps it (zeros_like): Adam's two moments
    2 * 58 * 2 = 232, SGD's momentum buffer 58 * 2 = 116. The FLOPs are float32's."""
    x = torch.randn(3, 4)
    adam = profile_model(MLP(), x, mode="train", optimizer="adam", dtype="bfloat16")
    sgd = profile_model(MLP(), x, mode="train", optimizer="sgd", dtype="bfloat16")
    assert adam.weights_bytes == sgd.weights_bytes == 116
    assert (adam.optimizer_state_bytes, sgd.optimizer_state_bytes) == (232, 116)
    assert (adam.flops, sgd.flops) == (1482, 348 + 438 + 4 * 58)


def test_grouped_convolution_backward_matches_hand_counts():
    """A 1x1 conv to 8 channels, then a depthwise 3x3 (groups 8), on a 4x4 image. Forward:
    8*16*1 + 8*16*9 = 128 + 1152 MACs. Backward: the depthwise conv's input and weight
    gradients, 1152 MACs each; the 1x1 conv's weight gradient, 128 (its input needs none).
    FlopCounterMode agrees on the forward and on the input gradient, but counts the grouped
    weight gradient as if ungrouped (8 times 1152; see benchmarks/RESULTS.md, mobilenet_v2)."""
    model = nn.Sequential(nn.Conv2d(1, 8, 1), nn.Conv2d(8, 8, 3, padding=1, groups=8))
    prof = profile_model(model, torch.randn(1, 1, 4, 4), mode="train")
    assert prof.phases["forward"]["macs"] == 128 + 1152
    assert prof.phases["backward"]["macs"] == 1152 + 1152 + 128


# A Python branch on a tensor's value (issue 22, item 5) -----------------------------------------


class Gate(nn.Module):
    """Takes one of two paths on the sign of its input's sum: a Python branch on a value, which
    fake tensors cannot take."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)
        self.c = nn.Linear(8, 16)

    def forward(self, x):
        h = self.a(x)
        if x.sum() > 0:
            return self.b(h)
        return self.c(h)


@pytest.mark.parametrize(
    ("sign", "flops", "macs", "forward", "backward"),
    [
        # x.sum() > 0, the path through b (8 -> 4), batch 2. Forward: a's addmm 2*8*8 = 128
        # MACs + 16 bias adds = 272; x.sum() 16; the comparison 1; b's addmm 2*8*4 = 64 MACs
        # + 8 = 136; the loss's sum 8: 433, 192 MACs. Backward: b's input and weight
        # gradients 64 MACs each (256) and its bias gradient 8; a's weight gradient 128 MACs
        # (256) and bias gradient 16 (x needs no gradient): 536, 256 MACs. c is not run.
        (1, 433 + 536, 192 + 256, 433, 536),
        # x.sum() < 0, the path through c (8 -> 16). Forward: 272 + 16 + 1; c's addmm 2*8*16 =
        # 256 MACs + 32 = 544; the loss's sum 32: 865, 384 MACs. Backward: c's gradients 256
        # MACs each (1024) + 32; a's 256 + 16: 1328, 640 MACs.
        (-1, 865 + 1328, 384 + 640, 865, 1328),
    ],
)
def test_a_branch_on_a_value_is_the_path_one_real_step_takes(sign, flops, macs, forward, backward):
    torch.manual_seed(0)
    model, x = Gate(), sign * torch.ones(2, 8)
    ours = profile_model(model, x, mode="train")
    assert (ours.flops, ours.macs) == (flops, macs)
    assert (ours.phases["forward"]["flops"], ours.phases["backward"]["flops"]) == (
        forward,
        backward,
    )
    assert ours.flops_contraction == contraction_flops(model, x) == 2 * macs
    assert ours.trace.method == "joint-real" and ours.trace.cost_pass == "real"
    assert "DataDependent" in ours.trace.failures["joint"]
    assert ours.coverage.unsupported_ops == {}


def test_a_real_step_leaves_the_model_its_inputs_and_the_random_state_as_they_were():
    """With SGD the real step updates its weights (and dropout draws random numbers): on copies.
    SGD costs 4 FLOPs per weight that got a gradient: a's 72 and b's 36 (c's got none, and
    torch.optim skips it too): 432 more than the bare step's 969."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Dropout(0.5), Gate())
    model.eval()
    x = torch.ones(2, 8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    ours = profile_model(model, x, mode="train", optimizer="sgd")
    assert ours.trace.method == "joint-real"
    assert ours.phases["optimizer"]["flops"] == 4 * (72 + 36)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng) and torch.equal(x, torch.ones(2, 8))
    assert not model.training and all(p.grad is None for p in model.parameters())


def test_a_branch_on_a_value_of_a_meta_model_fails_in_one_line():
    with torch.device("meta"):
        model = Gate()
    with pytest.raises(GraphBudgetError, match=r"meta=False") as info:
        profile_model(model, torch.ones(2, 8), mode="train")
    assert "\n" not in str(info.value) and "DataDependent" in str(info.value)


def test_a_real_step_prices_a_graph_as_the_fake_step_does():
    """The same step traced both ways (no branch, so fake tensors can take it): every figure
    of every node, and the liveness over them, are the same."""
    from pytest_graphbudget.engine.joint import capture
    from pytest_graphbudget.engine.liveness import live_at_peak
    from pytest_graphbudget.engine.measure import measure
    from pytest_graphbudget.engine.trace import Example
    from pytest_graphbudget.modes.train import _real_step

    torch.manual_seed(0)
    model, ids = TiedLM(), torch.randint(0, 100, (4, 16))
    model.train()
    example = Example((ids,), {})
    joint = capture(model, example, None, "adam")
    fake = measure(joint.holder, joint.traced, [ids])
    _, real = _real_step(model, example, None, "adam")

    def figures(measured):
        return [(n.macs, n.other, n.category, n.shapes) for n in measured.nodes]

    assert figures(real) == figures(fake)
    assert sum(live_at_peak(real).values()) == sum(live_at_peak(fake).values())


def test_a_parameter_without_a_gradient_gets_no_optimizer_state():
    """A head the loss never reaches: torch.optim makes state at a parameter's first step
    with a gradient, so Adam holds 2 x (64*64 + 64) x 4 = 33,280 B, as a real step leaves
    it; the profile counted the unused head's 2 x 266,240 x 4 too (2.16 MB, the peak +182%)."""

    class Unused(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.head = torch.nn.Linear(64, 64), torch.nn.Linear(64, 4096)

        def forward(self, x):
            return self.used(x)

    prof = profile_model(Unused(), torch.randn(8, 64), mode="train", optimizer="adam")
    assert prof.optimizer_state_bytes == 2 * (64 * 64 + 64) * 4
    model = Unused()
    adam = torch.optim.Adam(model.parameters())
    model(torch.randn(8, 64)).sum().backward()
    adam.step()
    made = sum(t.numel() * t.element_size() for s in adam.state.values() for t in s.values())
    assert made - 4 * len(adam.state) == prof.optimizer_state_bytes  # less the step counters


def test_a_backward_op_run_op_by_op_stays_in_the_backward_phase():
    """User trial: ``mish_backward`` has no fused kernel on the CPU and is recorded op by op
    (``mish_backward.softplus``, ...); those ops had fallen back to the forward phase, fused
    into the forward's convolution kernel. By hand, 144 activations (1 x 4 x 6 x 6): the 1x1
    convolution 2 x 144 x 3 = 864 + its bias 144, Mish 5 a element = 720, the default loss's
    sum 144: a forward of 1,872; the rest is backward."""
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.Mish())
    prof = profile_model(model, torch.randn(1, 3, 6, 6), mode="train")
    assert prof.phases["forward"]["flops"] == 864 + 144 + 720 + 144
    assert prof.modules["1"].forward_flops == 720
    assert prof.modules["1"].backward_flops == prof.modules["1"].flops - 720 > 0
    for group in prof.subgraphs:  # no kernel crosses from one phase to the next
        split = {name.startswith("mish_backward.") for name in group.nodes}
        assert len(split) == 1, group.nodes
