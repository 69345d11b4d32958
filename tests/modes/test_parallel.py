"""Sharded training per rank (issue 27): model state against the closed forms, by hand."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.engine.profile import profile_from_dict  # noqa: E402
from pytest_graphbudget.errors import GraphBudgetError  # noqa: E402

# P = 8*16 + 16 + 16*8 + 8 = 280 parameters; fp32: W = 4P = 1120 bytes.
P = 280


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))


def ranks(parallel, optimizer="adam"):
    prof = profile_model(
        mlp(), torch.randn(4, 8), mode="train", optimizer=optimizer, parallel=parallel
    )
    return prof, prof.parallel["ranks"]


@pytest.mark.parametrize(
    ("parallel", "per_param"),
    [
        # fp32 Adam: 4 param + 4 grad + 8 state = 16 bytes per parameter, unsharded (dp).
        ({"dp": 2}, 16),
        # ZeRO-1 over 4: state sharded: 4 + 4 + 8/4 = 10.
        ({"zero": 1, "dp": 4}, 10),
        # ZeRO-2 over 4: gradients too: 4 + (4 + 8)/4 = 7.
        ({"zero": 2, "dp": 4}, 7),
        # ZeRO-3 over 4 and FSDP over 4: everything: 16/4 = 4.
        ({"zero": 3, "dp": 4}, 4),
        ({"fsdp": 4}, 4),
        ("fsdp=2", 8),
    ],
)
def test_model_state_per_rank_is_the_closed_form(parallel, per_param):
    _, found = ranks(parallel)
    assert {r["model_state_bytes"] for r in found} == {per_param * P}


def test_stages_shard_what_they_should():
    # ZeRO-2 over 4: params whole (1120), grads 1120/4 = 280, Adam's state 2240/4 = 560.
    _, found = ranks({"zero": 2, "dp": 4})
    r = found[0]
    assert (r["params_bytes"], r["grads_bytes"], r["optimizer_state_bytes"]) == (1120, 280, 560)


class Masked(nn.Module):
    """The MLP (P = 280 in T = 4 parameter tensors) with an 8 x 8 fp32 causal mask as a
    buffer: 64 * 4 = 256 B that is no parameter."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)
        self.register_buffer("mask", torch.tril(torch.ones(8, 8)))

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x @ self.mask)))


@pytest.mark.parametrize(
    ("parallel", "params", "grads", "state"),
    [
        # ZeRO-1 over 2: 4P + 4P + 8P/2 = 1120 + 1120 + 1120.
        ({"zero": 1, "dp": 2}, 1120, 1120, 1120),
        # ZeRO-2 over 4: 4P + 4P/4 + 8P/4 = 1120 + 280 + 560.
        ({"zero": 2, "dp": 4}, 1120, 280, 560),
        # ZeRO-3 over 4: 16P/4 = 280 + 280 + 560; the mask is not sharded with the parameters.
        ({"zero": 3, "dp": 4}, 280, 280, 560),
        ({"fsdp": 4}, 280, 280, 560),
    ],
)
def test_buffers_are_whole_on_every_rank_beside_the_model_state(parallel, params, grads, state):
    # Issue 35: the mask's 256 B were counted as parameters (model state 256 B above the
    # closed form under ZeRO-1/2, 256/N under ZeRO-3, missing under FSDP). What torch holds,
    # counted on a gloo run of DDP + ZeroRedundancyOptimizer(Adam) over 2 ranks of this model:
    # parameters 1120 and gradients 1120 on each rank, the mask 256 B on each rank (DDP
    # replicates buffers), Adam's moments for the rank's own tensors (576 and 544 B: torch
    # assigns whole tensors; the flat closed form is 560 each), and a float32 `step` of 4 B per
    # owned tensor (8 B each). The step counters are not counted, as the unsharded step's
    # `optimizer_state_bytes` does not count them either.
    x = torch.randn(4, 8)
    prof = profile_model(Masked(), x, mode="train", optimizer="adam", parallel=parallel)
    # The unsharded profile's weights: 4P + the mask = 1120 + 256.
    assert prof.weights_bytes == 1376
    for r in prof.parallel["ranks"]:
        assert (r["params_bytes"], r["grads_bytes"], r["optimizer_state_bytes"]) == (
            params,
            grads,
            state,
        )
        assert r["model_state_bytes"] == params + grads + state
        assert r["buffers_bytes"] == 256
        held = sum(r[f"{p}_bytes"] for p in ("model_state", "buffers", "input"))
        running = r["activation_bytes"] + r["transient_bytes"]  # the update comes after them
        assert r["peak_bytes"] == held + max(running, r["update_bytes"])


def test_uneven_fsdp_shards_differ_by_rank():
    # fsdp=3, dim-0 chunks of ceil(rows/3): fc1 16 rows -> 6, 6, 4 (x8 weights + 1 bias each);
    # fc2 8 rows -> 3, 3, 2 (x16 + 1). Rank 0: 6*9 + 3*17 = 105 params, rank 2: 4*9 + 2*17 = 70.
    # Every rank holds the padded chunk of the parameters (105 * 4 B); grads and Adam's
    # state are the real chunk: rank 0 420 + 840 B, rank 2 280 + 560 B.
    _, found = ranks({"fsdp": 3})
    assert [r["params_bytes"] for r in found] == [420, 420, 420]
    assert [r["grads_bytes"] for r in found] == [420, 420, 280]
    assert [r["optimizer_state_bytes"] for r in found] == [840, 840, 560]


def test_adams_update_runs_on_a_shard_after_the_all_gathers():
    """User trial against FSDP2 on gloo (Linear(2048, 2048) twice, batch 1, Adam): a rank read
    +18%, the unsharded step's Adam temporaries (denom's sqrt and division, each a whole
    weight) counted beside the all-gather transient. On a rank they are a shard's, and the
    update runs after the backward let go of both: Linear(512, 512) twice over 2 ranks, one
    weight 512*512*4 B = 1 MiB, two of them halved, with the first bias's denom (512*4 B)
    that torch's loop still holds while the second weight's is computed: 1,049,612 B on a
    real rank's opt.step()."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512))
    prof = profile_model(
        model, torch.randn(1, 512), mode="train", optimizer="adam", parallel="fsdp=2"
    )
    rank = prof.parallel["ranks"][0]
    held = 512 * 4  # the previous parameter's denom
    assert abs(rank["update_bytes"] - (2 * 512 * 512 * 4 + held) // 2) <= 8  # + the step count
    assert rank["activation_bytes"] < 4096  # a row of 512 activations, no update temporary
    state = rank["model_state_bytes"] + rank["input_bytes"]
    assert rank["peak_bytes"] == state + rank["activation_bytes"] + rank["transient_bytes"]


def test_collective_volumes_are_ring_volumes():
    # fsdp=4: all-gather forward and backward 2 * 3/4 * 1120 = 1680, reduce-scatter 3/4 * 1120.
    _, found = ranks({"fsdp": 4})
    assert (found[0]["all_gather_bytes"], found[0]["reduce_scatter_bytes"]) == (1680, 840)
    # dp=2: one all-reduce of the gradients, 2 * (2-1)/2 * 1120 = 1120.
    _, found = ranks({"dp": 2})
    assert (found[0]["all_reduce_bytes"], found[0]["all_gather_bytes"]) == (1120, 0)


class Feed(nn.Module):
    num_heads = 4

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(8, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def test_tensor_parallel_splits_the_linear_layers():
    # tp=2: up column-parallel 8 -> 16 (128 + 16), down row-parallel 16 -> 8 with its whole
    # bias (128 + 8): 280 parameters per rank, 1120 bytes; Adam: 16 * 280 = 4480 per rank.
    prof = profile_model(
        Feed(), torch.randn(4, 8), mode="train", optimizer="adam", parallel={"tp": 2}
    )
    r = prof.parallel["ranks"][0]
    assert (prof.params, r["params_bytes"], r["model_state_bytes"]) == (280, 1120, 4480)
    # down's output, 4 x 8 fp32 = 128 B, all-reduced forward and (its pair's input) backward:
    # 2 * 2 * (2-1)/2 * 128 = 256.
    assert r["all_reduce_bytes"] == 256


def test_peak_per_rank_is_a_budget_figure_and_round_trips():
    prof, found = ranks({"fsdp": 3})
    totals = prof.to_dict()["totals"]
    assert totals["peak_memory_per_rank_bytes"] == max(r["peak_bytes"] for r in found)
    again = profile_from_dict(json.loads(json.dumps(prof.to_dict())))
    assert again.parallel == prof.parallel


def test_a_per_rank_limit_reads_back():
    import re

    from pytest_graphbudget import units
    from pytest_graphbudget.gate import budgets

    prof, _ = ranks({"fsdp": 2})
    value = prof.peak_memory_per_rank_bytes
    (finding,) = budgets.check(prof, budgets.Budget(limits={"memory_per_rank_max": value / 2}))
    shown = re.search(
        r"peak memory per rank (.+?) exceeds memory_per_rank_max (.+?) \(", finding.message
    )
    assert shown, finding.message
    printed, bound = (units.parse(text, "bytes") for text in shown.groups())
    assert printed == pytest.approx(value, rel=5e-3)
    assert bound == pytest.approx(value / 2, rel=5e-3)


def kv_feed() -> torch.nn.Module:
    """``Feed``, with 2 key-value heads in its config, as a grouped-query LLM keeps them."""
    from types import SimpleNamespace

    model = Feed()
    model.config = SimpleNamespace(num_key_value_heads=2)
    return model


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"parallel": {"fsdq": 2}}, "unknown key 'fsdq' (did you mean 'fsdp'?)"),
        ({"parallel": {"fsdp": 0}}, "fsdp must be a whole number of ranks >= 1, got 0"),
        ({"parallel": {"tp": 1.5}}, "tp must be a whole number of ranks >= 1, got 1.5"),
        ({"parallel": {"zero": 2}}, "zero=2 shards over the dp ranks: give dp >= 2"),
        ({"parallel": {"zero": 4, "dp": 2}}, "zero is a ZeRO stage, 1, 2 or 3, got 4"),
        ({"parallel": {"fsdp": 2, "dp": 2}}, "fsdp shards like zero=3"),
        ({"parallel": "fsdp8"}, "write KEY=N pairs"),
        ({"parallel": "fsdp=8,fsdp=4"}, "fsdp is given twice in 'fsdp=8,fsdp=4': give it once"),
        ({"parallel": {}}, "a table of dp, fsdp, zero, tp"),
        # dropped without a word: a memory_per_rank_max then said parallel was missing
        ({"parallel": {"fsdp": 1}}, "{'fsdp': 1} is one rank, which shards nothing: give 2"),
        ({"parallel": "dp=1,tp=1"}, "is one rank, which shards nothing"),
        ({"parallel": {"tp": 3}, "model": Feed()}, "tp=3 does not divide num_heads=4"),
        ({"parallel": {"tp": 2}, "model": mlp()}, "tp=2 splits no Linear layer"),
        # user trial: it said "give dp >= 2", then, given it, "drop zero/dp"
        ({"parallel": {"fsdp": 2, "zero": 2}}, "fsdp shards like zero=3 over its own ranks"),
        # a user's trial: each failed deep in the trace (mat1 and mat2 shapes, a bad view)
        (
            {"parallel": {"tp": 2}, "model": torch.nn.MultiheadAttention(8, 2)},
            "cannot split the model, an nn.MultiheadAttention: its q, k and v are one packed",
        ),
        ({"parallel": {"tp": 4}, "model": kv_feed()}, "tp=4 does not divide num_key_value_heads=2"),
        ({"parallel": {"fsdp": 2}, "mode": "eval"}, "pass mode='train' too"),
    ],
)
def test_bad_parallel_is_one_line(kwargs, message):
    model = kwargs.pop("model", Feed())
    kwargs.setdefault("mode", "train")
    with pytest.raises(GraphBudgetError, match=None) as info:
        profile_model(model, torch.randn(4, 8), **kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_cli_parallel(tmp_path, monkeypatch):
    from pytest_graphbudget.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["profile", "resnet18", "--parallel", "fsdp=2"]) == 2  # eval: refused
    assert main(["profile", "resnet18", "--mode", "train", "--parallel", "tp=x"]) == 2


@pytest.mark.skipif(
    not hasattr(torch.distributed, "is_gloo_available")
    or not torch.distributed.is_gloo_available(),
    reason="no gloo backend",
)
@pytest.mark.skipif(
    importlib.util.find_spec("torch.distributed.fsdp._fully_shard") is None,
    reason="the gloo run uses torch.distributed.fsdp.fully_shard (2.4's composable FSDP2, "
    "under another name, asks for CUDA in its forward)",
)
def test_per_rank_peak_within_ten_percent_of_a_gloo_run():
    # Two processes, FSDP2 under gloo on CPU: the allocator's own peak on each rank.
    import socket

    with socket.socket() as free:  # a port no other run rendezvouses on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [
            sys.executable,
            str(root / "benchmarks" / "sharded.py"),
            "--parallel",
            "fsdp=2",
            "--json",
            "--port",
            str(port),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(rows) == 2
    for row in rows:
        assert 0.9 <= row["derived"] / row["measured"] <= 1.1, row


def test_the_profile_view_has_a_row_per_run_of_equal_ranks():
    from pytest_graphbudget.cli.sections import rank_rows

    prof, _ = ranks({"fsdp": 3})  # grads: 420 B on ranks 0 and 1, 280 B on rank 2 (above)
    rows = dict(rank_rows(prof.parallel))
    assert list(rows) == ["parallel", "ranks 0-1", "rank 2", "moved per rank"]
    assert "grads 420B" in rows["ranks 0-1"] and "grads 280B" in rows["rank 2"]
    # 2 * 2/3 * 1120 = 1493 B gathered, 2/3 * 1120 = 747 B reduce-scattered.
    assert rows["moved per rank"].startswith("all-gather 1.49kB, reduce-scatter 747B")
    _, even = ranks({"zero": 2, "dp": 4})
    assert [label for label, _ in rank_rows({**prof.parallel, "ranks": even})][1] == "each rank"


def bf16_ranks(parallel, optimizer="adam"):
    prof = profile_model(
        mlp(),
        torch.randn(4, 8),
        mode="train",
        optimizer=optimizer,
        dtype="bfloat16",
        parallel=parallel,
    )
    return prof, prof.parallel["ranks"]


@pytest.mark.parametrize(
    ("parallel", "per_param"),
    [
        # Mixed-precision Adam, P = 280 (divisible by 4: no uneven shard). Per parameter:
        # bf16 parameter 2 + bf16 gradient 2 + fp32 master 4, m 4, v 4 = 16 bytes unsharded.
        # dp alone (ZeRO-0): 2, 2, 12 -> 560, 560, 3360.
        ({"dp": 4}, (2, 2, 12)),
        # ZeRO-1 over 4: 2, 2, 12/4 = 3 -> 560, 560, 840.
        ({"zero": 1, "dp": 4}, (2, 2, 3)),
        # ZeRO-2 over 4: 2, 2/4, 12/4 -> 560, 140, 840.
        ({"zero": 2, "dp": 4}, (2, 0.5, 3)),
        # ZeRO-3 over 4: 2/4, 2/4, 12/4 -> 140, 140, 840: 16/4 = 4 bytes per parameter.
        ({"zero": 3, "dp": 4}, (0.5, 0.5, 3)),
        # FSDP2 over 4 with MixedPrecisionPolicy(param_dtype=bf16): fp32 parameter shards (the
        # master) 4/4, gradients reduced into fp32 shards 4/4, Adam's fp32 m and v 8/4 ->
        # 280, 280, 560: also 16/4 = 4 bytes per parameter.
        ({"fsdp": 4}, (1, 1, 2)),
    ],
)
def test_mixed_precision_adam_is_16_bytes_per_parameter_sharded_per_stage(parallel, per_param):
    prof, found = bf16_ranks(parallel)
    expected = tuple(round(b * P) for b in per_param)
    for r in found:
        assert (r["params_bytes"], r["grads_bytes"], r["optimizer_state_bytes"]) == expected
        assert r["model_state_bytes"] == sum(expected)
    assert prof.parallel["precision"] == "mixed bfloat16"


def test_mixed_precision_sgd_keeps_a_master_and_a_momentum():
    # SGD with momentum on bf16, dp=2 (ZeRO-0): 2 + 2 + (fp32 master 4 + momentum 4) = 12 B per
    # parameter: 560, 560, 2240. ZeRO-2 over 4: 560, 560/4 = 140, 2240/4 = 560.
    _, found = bf16_ranks({"dp": 2}, optimizer="sgd")
    r = found[0]
    assert (r["params_bytes"], r["grads_bytes"], r["optimizer_state_bytes"]) == (560, 560, 2240)
    _, found = bf16_ranks({"zero": 2, "dp": 4}, optimizer="sgd")
    r = found[0]
    assert (r["params_bytes"], r["grads_bytes"], r["optimizer_state_bytes"]) == (560, 140, 560)


def test_float32_sharded_state_is_not_mixed():
    # fp32 Adam, ZeRO-2 over 4, as before: 4P = 1120 whole, 1120/4 = 280, 8P/4 = 560.
    prof, found = ranks({"zero": 2, "dp": 4})
    r = found[0]
    assert (r["params_bytes"], r["grads_bytes"], r["optimizer_state_bytes"]) == (1120, 280, 560)
    assert prof.parallel["precision"] == "float32"


def test_bfloat16_without_parallel_stays_pure_bfloat16():
    # No `parallel`: torch.optim's Adam on bf16 parameters keeps bf16 moments: 2 * 2P = 1120.
    prof = profile_model(mlp(), torch.randn(4, 8), mode="train", optimizer="adam", dtype="bfloat16")
    assert (prof.optimizer_state_bytes, prof.parallel) == (2 * 2 * P, None)


def test_the_views_say_the_state_is_mixed():
    from pytest_graphbudget.cli.sections import rank_rows
    from pytest_graphbudget.reports.markdown import rank_table

    prof, _ = bf16_ranks({"fsdp": 4})
    assert dict(rank_rows(prof.parallel))["parallel"].endswith(
        "gloo backend, mixed bfloat16 (fp32 master weights)"
    )
    assert rank_table(prof.parallel)[0] == "Per rank, `fsdp=4` (4 ranks, mixed bfloat16):"
    fp32, _ = ranks({"fsdp": 4})
    assert "mixed" not in dict(rank_rows(fp32.parallel))["parallel"]


class Frozen(torch.nn.Module):
    """Three Linear layers, the first two frozen (a fine-tuned head on a fixed trunk)."""

    def __init__(self):
        super().__init__()
        self.emb, self.q, self.o = (
            torch.nn.Linear(32, 64),
            torch.nn.Linear(64, 64),
            torch.nn.Linear(64, 64),
        )
        self.emb.requires_grad_(False)
        self.q.requires_grad_(False)

    def forward(self, x):
        return self.o(torch.relu(self.q(torch.relu(self.emb(x)))))


def test_frozen_parameters_are_sharded_and_stay_frozen():
    """User trial against FSDP2 on gloo: ``fully_shard`` shards frozen parameters too, so
    each of 2 ranks holds (32*64+64 + 64*64+64 frozen + 64*64+64 trainable) * 4 / 2 =
    20,864 B, gradients 16,640 / 2 = 8,320 B and Adam's two slots 16,640 B; fsdp left the
    frozen ones out of the parameters (8,320). tp=2 rebuilt the frozen q as trainable:
    only o's row shard (64*32 + 64 = 2,112 parameters) has gradients, 8,448 B."""
    step = {"mode": "train", "optimizer": "adam"}
    fsdp = profile_model(Frozen(), torch.randn(4, 32), **step, parallel={"fsdp": 2})
    rank = fsdp.parallel["ranks"][0]
    assert (rank["params_bytes"], rank["grads_bytes"]) == (20_864, 8_320)
    assert rank["optimizer_state_bytes"] == 16_640
    tp = profile_model(Frozen(), torch.randn(4, 32), **step, parallel={"tp": 2})
    rank = tp.parallel["ranks"][0]
    assert (rank["grads_bytes"], rank["optimizer_state_bytes"]) == (8_448, 16_896)


class Conv1DBlock(nn.Module):
    """GPT-2's MLP in small: transformers' Conv1D layers (weights (in, out)), named c_fc and
    c_proj, as tensor parallelism's split layers are named."""

    def __init__(self) -> None:
        super().__init__()
        conv1d = pytest.importorskip("transformers.pytorch_utils").Conv1D
        self.c_fc, self.c_proj = conv1d(16, 8), conv1d(8, 16)

    def forward(self, x):
        return self.c_proj(self.c_fc(x).relu())


def test_tensor_parallelism_names_the_layers_it_cannot_split():
    # User trial: GPT-2 with tp=2 was told to name its layers as Megatron does, and the docs
    # list its c_attn, c_fc and c_proj among the split names: they are Conv1D, not nn.Linear.
    with pytest.raises(GraphBudgetError, match="of those names are Conv1D, not nn.Linear"):
        profile_model(Conv1DBlock(), torch.randn(2, 8), mode="train", parallel={"tp": 2})
