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
