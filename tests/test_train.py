"""One training step (issue 12): the signature, the joint graph's figures against references."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.errors import GraphBudgetError  # noqa: E402
from pytest_graphbudget.profile import profile_from_dict  # noqa: E402


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
        "forward_flops": 216,
        "backward_flops": 216,
        "optimizer_flops": 480,
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
