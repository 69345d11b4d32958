"""The Profile object and its JSON (``Profile.to_dict()``), on small modules."""

from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from pytest_graphbudget import ModelCase, profile_model  # noqa: E402
from pytest_graphbudget.errors import GraphBudgetError, ModelRunError  # noqa: E402


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 256)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


@pytest.fixture(scope="module")
def mlp():
    return profile_model(MLP(), torch.randn(8, 64), tier="fx")


def test_json_has_every_key_of_the_spec(mlp):
    data = json.loads(json.dumps(mlp.to_dict()))
    assert data["schema"] == "graphbudget.profile/1"
    assert data["model"] == "MLP"
    assert data["inputs"] == [{"name": "x", "shape": [8, 64], "dtype": "float32"}]
    assert set(data["trace"]) == {"method", "failures", "nodes", "seconds"}
    assert data["trace"]["method"] == "fx" and data["trace"]["failures"] == {}
    assert set(data["totals"]) == {
        "flops",
        "macs",
        "flops_contraction",
        "params",
        "weights_bytes",
        "traffic_bytes",
        "activation_peak_bytes",
        "peak_memory_bytes",
        "arithmetic_intensity",
        "est_latency_s",
    }
    # The contract's two keys, and the roof they come from (generic: 1 TFLOP/s over 100 GB/s), which
    # the HTML report draws: eager subgraph times are not on it, so it cannot be read back
    assert len(data["hardware"].pop("pricing")) == 12  # compare's digest: test_compare.py
    assert data["hardware"] == {
        "name": "generic",
        "ridge_point": 10.0,
        "peak_flops_per_s": 1e12,
        "bandwidth_bytes_per_s": 1e11,
    }
    for side in ("compute_bound", "memory_bound"):
        assert set(data["bottleneck"][side]) == {"subgraphs", "share", "flops_share", "time_share"}
    assert set(data["coverage"]) == {
        "nodes",
        "costed",
        "unsupported_ops",
        "unsupported_contractions",
    }
    assert set(data["subgraphs"][0]) == {
        "id",
        "kind",
        "module",
        "nodes",
        "flops",
        "macs",
        "bytes_in",
        "bytes_out",
        "bytes_weights",
        "arithmetic_intensity",
        "bottleneck",
        "reason",
        "est_latency_s",
        "peak_bytes",
    }
    assert data["modules"]["fc1"] == {
        "flops": 2 * 8 * 64 * 256 + 8 * 256,
        "macs": 8 * 64 * 256,
        "params": 64 * 256 + 256,
        "weights_bytes": (64 * 256 + 256) * 4,  # its weight and bias, float32
        "type": "Linear",  # its class: a report names an index path by it ("0 (Linear)")
    }


def test_mlp_by_hand(mlp):
    # fc1: 8x64 @ 64x256 plus bias; ReLU on 8x256; fc2: 8x256 @ 256x10 plus bias.
    macs = 8 * 64 * 256 + 8 * 256 * 10
    assert mlp.macs == macs
    assert mlp.flops == 2 * macs + 8 * 256 + 8 * 256 + 8 * 10
    assert mlp.params == 64 * 256 + 256 + 256 * 10 + 10
    # Two kernels: fc1 with its ReLU epilogue, then fc2.
    assert [s.kind for s in mlp.subgraphs] == ["linear+relu", "linear"]
    first, second = mlp.subgraphs
    assert first.bytes_in == 8 * 64 * 4 and first.bytes_out == 8 * 256 * 4
    assert first.bytes_weights == (64 * 256 + 256) * 4
    assert second.bytes_in == 8 * 256 * 4 and second.bytes_out == 8 * 10 * 4
    assert mlp.traffic_bytes == first.traffic_bytes + second.traffic_bytes
    assert mlp.arithmetic_intensity == pytest.approx(mlp.flops / mlp.traffic_bytes)


def test_roofline_on_generic_hardware():
    # generic: 1 TFLOP/s over 100 GB/s. A kernel is compute-bound when FLOPs/byte >= 10;
    # compiled, a fused group is one kernel.
    mlp = profile_model(MLP(), torch.randn(8, 64), execution="compiled")
    for s in mlp.subgraphs:
        expected = "compute_bound" if s.flops / s.traffic_bytes >= 10 else "memory_bound"
        assert s.bottleneck == expected
        assert s.est_latency_s == pytest.approx(max(s.flops / 1e12, s.traffic_bytes / 100e9))
    assert mlp.est_latency_s == pytest.approx(sum(s.est_latency_s for s in mlp.subgraphs))
    mix = mlp.bottleneck
    assert mix["compute_bound"]["share"] + mix["memory_bound"]["share"] == pytest.approx(1.0)
    assert mix["compute_bound"]["flops_share"] + mix["memory_bound"][
        "flops_share"
    ] == pytest.approx(1.0)


def test_named_hardware_changes_the_ridge_point():
    prof = profile_model(MLP(), torch.randn(8, 64), hardware="a100")
    # NVIDIA's A100 datasheet: 19.5 TFLOP/s in float32 over 2,039 GB/s
    hardware = prof.to_dict()["hardware"]
    hardware.pop("pricing")
    assert hardware == {
        "name": "a100",
        "ridge_point": 19.5e12 / 2039e9,
        "peak_flops_per_s": 19.5e12,
        "bandwidth_bytes_per_s": 2039e9,
    }


def test_peak_memory_is_weights_inputs_and_activations(mlp):
    assert mlp.peak_memory_bytes == mlp.weights_bytes + 8 * 64 * 4 + mlp.activation_peak_bytes


def test_model_case_and_keyword_inputs():
    class Scale(nn.Module):
        def forward(self, x, *, factor):
            return x * factor

    case = ModelCase(Scale(), (), {"x": torch.randn(4, 4), "factor": torch.randn(4, 4)}, "scale")
    prof = profile_model(case)
    assert prof.model == "scale" and prof.flops == 16
    assert [i.name for i in prof.inputs] == ["x", "factor"]


class Tokens(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, input_ids, attention_mask=None):
        return self.fc(input_ids * attention_mask)


def test_a_dict_given_as_inputs_is_the_keyword_inputs():
    """User trial: ``profile_model(model, {"input_ids": ids, "attention_mask": mask})``, what a
    tokenizer returns, reached the forward as one positional dict and failed there. By hand:
    the mask multiply 2*8 FLOPs, the Linear 2*2*8*4 + 2*4 (its bias)."""
    ids, mask = torch.randn(2, 8), torch.ones(2, 8)
    prof = profile_model(Tokens(), {"input_ids": ids, "attention_mask": mask})
    assert prof.flops == 2 * 8 + 2 * 2 * 8 * 4 + 2 * 4
    assert [i.name for i in prof.inputs] == ["input_ids", "attention_mask"]
    with pytest.raises(GraphBudgetError) as info:
        profile_model(Tokens(), {"input_ids": ids}, kwargs={"attention_mask": mask})
    assert str(info.value) == (
        "inputs is a dict, the keyword inputs, and kwargs= is given too: pass the keyword "
        "inputs in one of them (a forward that takes one dict: inputs=(the_dict,))"
    )


def test_a_profile_repr_is_one_short_line(mlp):
    """User trial: ``repr(prof)`` was the dataclass's, 20-90k characters (the hardware, every
    subgraph and module). MLP by hand: 151,552 MACs, 307,280 FLOPs, 19,210 params."""
    from pytest_graphbudget.units import format_bytes, format_seconds

    assert repr(mlp) == (
        "<Profile 'MLP' on generic, eval float32: 307k FLOPs, 152k MACs, 19.2k params, "
        f"peak memory {format_bytes(mlp.peak_memory_bytes)}, "
        f"est. latency {format_seconds(mlp.est_latency_s)}>"
    )
    assert len(repr(mlp)) < 150 and str(mlp) == repr(mlp)


def test_two_profiles_of_one_model_are_equal_whatever_the_wall_clock():
    """User trial: two profiles of the same model compared unequal, only because the trace's
    wall-clock ``seconds`` took part; a figure that differs still makes them unequal."""
    model, x = MLP(), torch.randn(8, 64)
    first, again = profile_model(model, x), profile_model(model, x)
    again.trace = dataclasses.replace(again.trace, seconds=first.trace.seconds + 1.0)
    assert first == again
    assert first != dataclasses.replace(again, flops=again.flops + 1)


def test_model_case_with_inputs_none_has_no_positional_inputs():
    # None was passed as the one positional input: "got multiple values for argument 'input'"
    case = ModelCase(nn.Linear(4, 2), None, {"input": torch.randn(3, 4)})
    assert case.inputs == ()
    prof = profile_model(case)
    assert prof.macs == 3 * 4 * 2  # 3 rows of 4 inputs, each into 2 outputs
    assert [(i.name, list(i.shape)) for i in prof.inputs] == [("input", [3, 4])]


def test_a_forward_that_raises_is_reported_as_the_models_error():
    class Broken(nn.Module):
        def forward(self, x):
            raise ValueError("bad shape for this model")

    with pytest.raises(ModelRunError, match="ValueError: bad shape for this model"):
        profile_model(Broken(), torch.randn(2))


def test_an_embedding_lookup_reads_the_rows_it_returns_not_the_table():
    # 5 token ids into a 10,000 x 16 table: the kernel reads 5 rows of 16 floats (320 bytes),
    # not the 640,000-byte table; the ids (5 int64) come in, the 5x16 floats go out.
    table = nn.Embedding(10_000, 16)
    prof = profile_model(table, torch.tensor([[1, 2, 3, 4, 5]]))
    (kernel,) = prof.subgraphs
    assert kernel.kind == "embedding"
    assert kernel.bytes_weights == 5 * 16 * 4
    assert kernel.bytes_in == 5 * 8 and kernel.bytes_out == 5 * 16 * 4
    assert prof.weights_bytes == 10_000 * 16 * 4


@pytest.mark.parametrize(
    ("layers", "branch"),
    [(0, False), (64, False), (0, True)],
    ids=["fx first", "taped first", "fx failed before"],
)
def test_profiling_leaves_the_models_state_its_inputs_and_the_random_state_as_they_were(
    layers, branch
):
    """User trial: an eval profile ran the forward, and kept what it wrote in place: an EMA
    buffer moved (twice: warm-up and tape), a weight clamped under no_grad stayed clamped, an
    input the model adds to in place changed, and the global random state advanced. With 64
    layers more the model is taped first, and the tape copies only what an op writes: the
    weight, the buffer and the input here, none of the 64 layers' weights (a copy of every
    tensor up front had cost resnet50 20 ms a profile). A model whose FX trace failed in an
    earlier profile (a branch on a value) is taped first from then on, and copies the same
    (every tensor had been copied before that tape: 17 of bloom's 38 ms)."""
    import torch
    from torch import nn

    from pytest_graphbudget import profile_model
    from pytest_graphbudget.engine import kept

    class Stateful(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(16, 16)
            self.register_buffer("ema", torch.zeros(16))
            self.rest = nn.Sequential(*(nn.Linear(16, 16, bias=False) for _ in range(layers)))

        def forward(self, x):
            with torch.no_grad():
                self.proj.weight.clamp_(-0.01, 0.01)
            x.add_(1)
            y = nn.functional.dropout(self.proj(x), 0.1, training=True)
            self.ema.mul_(0.9).add_(y.detach().mean(0), alpha=0.1)
            if branch and bool(y.sum() > 1e9):  # FX's trace cannot take this branch
                y = y * 2
            return self.rest(y)

    torch.manual_seed(0)
    model, x = Stateful().eval(), torch.randn(4, 16)
    if branch:
        profile_model(model, (x,))
    weight, given = model.proj.weight.detach().clone(), x.clone()
    state = torch.random.get_rng_state()
    copied = []
    keep = kept.Kept._save
    with pytest.MonkeyPatch.context() as patch:  # which tensors the profile copied
        patch.setattr(kept.Kept, "_save", lambda self, key: copied.append(key) or keep(self, key))
        found = profile_model(model, (x,))
    # the Linears (4*16*16 each) are priced as they run
    assert found.macs == (1 + layers) * 4 * 16 * 16
    assert torch.equal(model.ema, torch.zeros(16)) and torch.equal(model.proj.weight, weight)
    assert torch.equal(x, given) and torch.equal(torch.random.get_rng_state(), state)
    assert model.proj.weight.requires_grad and not model.training
    written = {t.untyped_storage().data_ptr() for t in (model.proj.weight, model.ema, x)}
    assert written <= set(copied)
    if layers or branch:  # taped first: what no op wrote was never copied
        assert set(copied) == written


def test_an_object_among_the_inputs_is_left_as_it_was():
    """User trial: a transformers ``DynamicCache`` passed as ``past_key_values`` came back one
    token longer from each profile (it rebinds its layers' tensors to longer ones, which no
    version counter sees), so profiling the same decode step twice priced a longer cache.
    Here a cache of 4 positions gains one: a Linear (16 x 16 = 256 MACs), then the scores of
    the 5 cached positions against each other (5 x 5 x 16 = 400)."""
    import torch
    from torch import nn

    from pytest_graphbudget import profile_model

    class Cache:
        def __init__(self):
            self.keys, self.seen = torch.zeros(1, 4, 16), []

    class Step(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(16, 16)

        def forward(self, x, cache):
            cache.keys = torch.cat([cache.keys, self.proj(x)], dim=1)
            cache.seen.append(x.shape[1])
            return cache.keys @ cache.keys.transpose(1, 2)

    cache, model = Cache(), Step().eval()
    keys, x = cache.keys, torch.randn(1, 1, 16)
    for _ in range(2):
        assert profile_model(model, (x,), {"cache": cache}).macs == 256 + 400
        assert cache.keys is keys and cache.seen == []


def test_modules_in_a_plain_list_are_said_not_counted():
    """User trial: ``self.layers = [nn.Linear(64, 64), nn.Linear(64, 32)]`` (not a ModuleList)
    gave params 0 and no weights, without a word: nn.Module registers neither. The forward
    still runs them (FLOPs count them); the profile names them, and a budget warns.
    Their parameters: 64*64 + 64 + 64*32 + 32 = 6,240."""
    import torch
    from torch import nn

    from pytest_graphbudget import profile_model
    from pytest_graphbudget.gate.budgets import Budget, coverage_findings

    class Listed(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = [nn.Linear(64, 64), nn.Linear(64, 32)]

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    class Aliased(nn.Module):  # a plain list of registered modules counts them already
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(64, 64)])
            self.order = list(self.blocks)

        def forward(self, x):
            return self.order[0](x)

    x = torch.randn(8, 64)
    found = profile_model(Listed(), (x,))
    assert found.params == 0 and found.macs == 8 * 64 * 64 + 8 * 64 * 32
    # Their bytes are read and held all the same (a later trial: traffic had left them out,
    # 6% of it, and the stack read as compute-bound): 6,240 float32 weights, and each layer
    # reads its input and writes its output (8x64 in, 8x64, then 8x32 out).
    assert found.weights_bytes == 6_240 * 4
    assert found.traffic_bytes == 6_240 * 4 + 4 * (8 * 64 + 8 * 64 + 8 * 64 + 8 * 32)
    assert found.peak_memory_bytes >= found.weights_bytes
    assert found.coverage.unregistered == {"layers": 6_240}
    assert found.to_dict()["coverage"]["unregistered"] == {"layers": 6_240}
    (warned,) = [f for f in coverage_findings(found, Budget()) if "plain list" in f.message]
    assert warned.severity == "warn" and warned.message.startswith("layers: 6240 params in ")
    strict = coverage_findings(found, Budget(), strict=True)
    assert any(f.severity == "fail" and "plain list" in f.message for f in strict)
    aliased = profile_model(Aliased(), (x,))
    assert aliased.coverage.unregistered == {} and aliased.params == 64 * 64 + 64
    assert "unregistered" not in aliased.to_dict()["coverage"]


def test_tensors_kept_as_plain_attributes_are_weights_in_eval_and_training():
    """User trial: a rotary table kept as plain attributes (``self.cos_cached = ...``, neither
    parameter nor buffer, as hand-written LLM code keeps it) was in no figure of the forward,
    and a training step counted it as activations (2 MB of them). By hand: two 4096 x 64
    float32 tables, 2 * 4096 * 64 * 4 = 2,097,152 bytes, beside the Linear's 64 * 64 * 4 + 64 * 4
    = 16,640. Kept as buffers instead, every figure is the same."""
    import torch
    from torch import nn

    from pytest_graphbudget import profile_model

    class Rotary(nn.Module):
        def __init__(self, buffers: bool):
            super().__init__()
            self.proj = nn.Linear(64, 64)
            angles = torch.arange(4096)[:, None] * torch.ones(64)[None]
            for name, table in (("cos_cached", angles.cos()), ("sin_cached", angles.sin())):
                if buffers:
                    self.register_buffer(name, table)
                else:
                    setattr(self, name, table)

        def forward(self, x):
            n = x.shape[1]
            return self.proj(x) * self.cos_cached[:n] + x * self.sin_cached[:n]

    x = torch.randn(1, 128, 64)
    for mode in ("eval", "train"):
        plain = profile_model(Rotary(buffers=False), (x,), mode=mode)
        held = profile_model(Rotary(buffers=True), (x,), mode=mode)
        assert plain.weights_bytes == 2 * 4096 * 64 * 4 + 16_640, mode
        assert plain.activation_peak_bytes == held.activation_peak_bytes, mode
        assert plain.peak_memory_bytes == held.peak_memory_bytes, mode
        assert plain.traffic_bytes == held.traffic_bytes, mode


def test_a_layer_is_named_by_its_class_where_its_path_ends_in_an_index():
    """``features.3`` or ``0`` (a Sequential's child) says nothing of what grew."""
    from pytest_graphbudget.engine.profile import layer_label

    assert layer_label("features.3", "Conv2d") == "features.3 (Conv2d)"
    assert layer_label("0", "Linear") == "0 (Linear)"
    assert layer_label("layer1.0.conv1", "Conv2d") == "layer1.0.conv1"
    assert layer_label("features.3", None) == "features.3"  # a profile saved before types
    assert layer_label("<root>", "MLP") == "<root>"
