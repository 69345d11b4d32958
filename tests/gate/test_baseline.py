"""Issue 9: a hand-edited baseline never switches the regression check off without a word,
and a regression or a budget failure says what grew, where, and how to accept it.

The baselines here are written by hand, so each expected line number and figure is visible in
the test; the models are the tiny ones of ``test_plugin.py``: ``nn.Linear(64, 32)`` on a
``(4, 64)`` input does 2*4*64*32 + 4*32 = 16,512 FLOPs with 64*32 + 32 = 2,080 parameters.
"""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import asdict

import pytest
import torch
from torch import nn

from pytest_graphbudget.api import profile_model
from pytest_graphbudget.gate import baseline, budgets
from pytest_graphbudget.gate.budgets import Budget, check
from pytest_graphbudget.pytest_plugin.plugin import budget_dict
from pytest_graphbudget.reports import markdown
from pytest_graphbudget.units import format_bytes

LINEAR_FLOPS = 2 * 4 * 64 * 32 + 4 * 32
FIX = "fix it or rewrite it with --graph-budget-update"
# The linear model's other recorded figures, by hand: 4*64*32 = 8,192 MACs; 2,080 params of
# 4 bytes = 8,320 weight bytes; input 4*64*4 = 1,024 B and output 4*32*4 = 512 B, all live at
# once (peak) and each read or written once (traffic): 8,320 + 1,024 + 512 = 9,856 B.
LINEAR_OTHERS = (
    "macs = 8192\nparams = 2080\npeak_memory_bytes = 9856\nweights_bytes = 8320\n"
    "traffic_bytes = 9856\n"
)


def linear_tables(model: str, flops: int = 16512) -> str:
    """The tables by module of ``linear``'s entry: a bare Linear is all ``<root>``, so each holds
    the figure's total (its parameters 64 * 32 + 32, its peak and traffic as above)."""
    tables = {"modules": flops, "by_module.params": 2080}
    tables |= {"by_module.peak_memory_bytes": 9856, "by_module.traffic_bytes": 9856}
    return "".join(f'\n[models."{model}".{t}]\n"<root>" = {v}\n' for t, v in tables.items())


def write(tmp_path, text: str):
    path = tmp_path / "baseline.toml"
    path.write_text(textwrap.dedent(text).lstrip())
    return path


# -- item 4: the baseline is checked when it is read ---------------------------------------


def test_each_bad_value_is_one_line_that_names_the_file_and_line(tmp_path):
    path = write(
        tmp_path,
        """
        # a comment
        [models."budgets/nets.toml::resnet18"]
        flop = 1820000000
        macs = -5
        params = nan
        weights_bytes = inf
        traffic_bytes = true
        peak_memory_bytes = [1]

        [models."budgets/nets.toml::resnet18".modules]
        "layer1.0.conv1" = "lots"
        fc = 1000
        """,
    )
    found = baseline.read(path, "budgets/baseline.toml")
    assert found.error == ""
    where = "budgets/baseline.toml:{}: [budgets/nets.toml::resnet18] "
    assert found.problems["budgets/nets.toml::resnet18"] == [
        where.format(3) + f"flop: unknown key (did you mean 'flops'?); {FIX}",
        where.format(4) + f"macs: a figure cannot be negative, got -5; {FIX}",
        where.format(5) + f"params: expected a finite number, got nan; {FIX}",
        where.format(6) + f"weights_bytes: expected a finite number, got inf; {FIX}",
        where.format(7) + f"traffic_bytes: expected a number, got the boolean true; {FIX}",
        where.format(8) + f"peak_memory_bytes: expected a number, got an array; {FIX}",
        where.format(11) + "modules.\"layer1.0.conv1\": cannot read 'lots'; expected a number "
        'or a string with a decimal prefix: 2.2e10, "22G", "22 GFLOPs", "110M"; ' + FIX,
        # "flop" is not "flops": the entry records no FLOPs, which would go unchecked.
        where.format(2) + f"no flops: a figure missing from the entry is not checked; {FIX}",
    ]
    # What could be read still counts: the module that is right.
    assert found.entries["budgets/nets.toml::resnet18"].modules == {"fc": 1000}


def test_figures_with_units_are_read_as_a_budget_reads_them(tmp_path):
    path = write(
        tmp_path,
        """
        [models.net]
        flops = "635M"
        macs = "318M"
        params = "2.08k"
        peak_memory_bytes = "1.5 MiB"
        weights_bytes = "8.32kB"
        traffic_bytes = 4096
        """,
    )
    found = baseline.read(path)
    assert found.problems == {} and found.error == ""
    assert found.entries["net"].figures == {
        "flops": 635e6,
        "macs": 318e6,
        "params": 2080,
        "peak_memory_bytes": 1.5 * 2**20,
        "weights_bytes": 8320,
        "traffic_bytes": 4096,
    }
    # Figures that came in with units are written back as the numbers they stand for.
    assert "flops = 635000000\n" in baseline.dumps(found.entries)


def test_a_deleted_table_line_is_named_where_its_figures_landed(tmp_path):
    # The [models.b] line is gone: b's figures now read as modules of a.
    figures = "flops = 16512\n" + LINEAR_OTHERS
    path = write(tmp_path, f"[models.a]\n{figures}\n[models.a.modules]\nfc = 16512\n\n{figures}")
    found = baseline.read(path)
    assert found.problems["a"] == [
        "{}:12: [a] modules.flops: flops, macs, params, peak_memory_bytes, weights_bytes, "
        'traffic_bytes are a model\'s figures, not modules: was the [models."..."] line above '
        f"deleted?; {FIX}".format(path)
    ]


def test_an_entry_that_is_not_a_table_and_an_unknown_table(tmp_path):
    path = write(
        tmp_path,
        """
        [models]
        "a::net" = 5

        [models."b::net"]
        flops = 10
        macs = 5
        params = 1
        peak_memory_bytes = 4
        weights_bytes = 4
        traffic_bytes = 4

        [model."c::net"]
        flops = 10
        """,
    )
    found = baseline.read(path, "baseline.toml")
    assert found.problems == {
        "a::net": [f"baseline.toml:2: [a::net] must be a table of figures, got an integer; {FIX}"]
    }
    # A table no model can be found in: every model's check is in doubt.
    assert found.error == (
        f"baseline.toml:12: unknown table 'model' (did you mean 'models'?); {FIX}"
    )
    assert found.problems_of("b::net") == [found.error]
    assert found.entries["b::net"].figures["flops"] == 10


@pytest.mark.parametrize(
    ("environment", "line", "says"),
    [
        ('torc = "2.13.0"', 2, "unknown key 'torc' in [environment] (did you mean 'torch'?)"),
        (
            'tolerance = "50%"',
            2,
            "unknown key 'tolerance' in [environment]; keys: python, torch, torchvision, "
            "transformers, timm, diffusers, ultralytics, pytest-graphbudget, project",
        ),
        ("torch = 2.13", 2, "[environment] torch must be a version string, got 2.13"),
    ],
)
def test_a_hand_edited_environment_is_an_error(tmp_path, environment, line, says):
    """User trial: ``torc = "2.13.0"`` or ``torch = 2.13`` in the baseline's [environment]
    was taken without a word, and a regression then lost its "counter may have changed:
    torch ..." note; a tolerance there was taken as if it set one."""
    path = write(
        tmp_path,
        f"""
        [environment]
        {environment}

        [models."b::net"]
        flops = 10
        """,
    )
    found = baseline.read(path, "baseline.toml")
    assert found.error == f"baseline.toml:{line}: {says}; {FIX}"
    assert found.environment == {}


def test_a_malformed_file_names_its_line(tmp_path):
    path = write(tmp_path, '[models."x"]\nflops = 1\nflops = 2\n')
    found = baseline.read(path, "baseline.toml")
    assert found.error.startswith("baseline.toml:3: malformed baseline (")
    assert found.error.endswith(FIX)
    with pytest.raises(baseline.GraphBudgetError):
        baseline.load(path)


def test_update_keeps_an_entry_it_cannot_read_and_did_not_rewrite(tmp_path):
    path = write(
        tmp_path,
        """
        [models."old::net"]
        flop = 5

        [models."new::net"]
        flops = -1
        """,
    )
    recorded = dict.fromkeys(baseline.REGRESSION_FIGURES, 7)
    baseline.update(path, {"new::net": baseline.Entry(recorded, {})})
    found = baseline.read(path)
    # The rewritten entry is fixed; the other is kept as written, and still reported.
    assert found.entries["new::net"].figures == recorded
    assert list(found.problems) == ["old::net"]


# -- item 4 end to end: a bad entry is an error of its model, the others are still checked --

MODELS = """
import torch
from pytest_graphbudget import ModelCase

def linear(width=32):
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, width), (torch.randn(4, 64),), name=f"linear{width}")
"""

BUDGETS = """
[models.good]
factory = "models:linear"
flops_max = "1M"

[models.bad]
factory = "models:linear"
flops_max = "1M"
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(models=MODELS)
    pytester.syspathinsert()
    pytester.mkdir("budgets")
    pytester.path.joinpath("budgets", "nets.toml").write_text(BUDGETS)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--graph-budget", "budgets/", *args)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ('"635X"', "flops: cannot read '635X'"),
        ("-5", "flops: a figure cannot be negative, got -5"),
        ("nan", "flops: expected a finite number, got nan"),
        ("true", "flops: expected a number, got the boolean true"),
    ],
)
def test_a_bad_entry_is_an_error_and_the_other_models_are_still_checked(project, value, problem):
    # "good" was recorded at half its FLOPs: a regression that must still be found.
    project.path.joinpath("budgets", "baseline.toml").write_text(
        f'[models."budgets/nets.toml::good"]\nflops = {LINEAR_FLOPS // 2}\n{LINEAR_OTHERS}\n'
        f'[models."budgets/nets.toml::bad"]\nflops = {value}\n{LINEAR_OTHERS}'
        + linear_tables("budgets/nets.toml::good", LINEAR_FLOPS // 2)
        + linear_tables("budgets/nets.toml::bad")
    )
    result = run(project, "--graph-budget-json=out.json")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [f"*budgets/baseline.toml:10: [[]budgets/nets.toml::bad[]] {problem}*{FIX}*"]
    )
    result.stdout.fnmatch_lines(["*FLOPs regressed +100.0% (8.26k -> 16.5k*"])
    assert "Traceback" not in result.stdout.str()
    report = json.loads(project.path.joinpath("out.json").read_text())
    models = {m["id"]: m for m in report["models"]}
    assert models["budgets/nets.toml::bad"]["error"].startswith("budgets/baseline.toml:10: ")
    assert models["budgets/nets.toml::good"]["error"] is None
    assert [f["key"] for f in models["budgets/nets.toml::good"]["findings"]] == ["baseline.flops"]


def test_an_unknown_key_is_an_error_with_the_key_it_meant(project):
    project.path.joinpath("budgets", "baseline.toml").write_text(
        f'[models."budgets/nets.toml::bad"]\nflop = {LINEAR_FLOPS}\n'
    )
    result = run(project)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*budgets/baseline.toml:2: [[]budgets/nets.toml::bad[]] flop: unknown key "
            "(did you mean 'flops'?)*"
        ]
    )
    # --graph-budget-update rewrites the entry: the next run is green.
    run(project, "--graph-budget-update").assert_outcomes(passed=2)
    run(project).assert_outcomes(passed=2)


# -- what a reviewer sees: the biggest contributors, ranked by the figure that failed -------


class ConvThenFc(nn.Module):
    """A conv that does most of the FLOPs, then a linear layer that holds most of the
    parameters, weights, traffic and time: each ranking puts a different one first."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)  # 8*3*9 + 8 = 224 params
        self.fc = nn.Linear(8 * 32 * 32, 10)  # 8192*10 + 10 = 81,930 params

    def forward(self, x):
        return self.fc(self.conv(x).flatten(1))


F32 = 4
CONV_FLOPS = 2 * (8 * 32 * 32) * (3 * 9) + 8 * 32 * 32  # MACs x 2, plus the bias per output
FC_FLOPS = 2 * 8192 * 10 + 10
CONV_OUT = 8 * 32 * 32 * F32  # 32,768 bytes, live until fc has read it
# A 3x32x32 input (3,072 elements, under 20,480) and a 3x3 kernel: ATen's slow path, whose
# im2col columns hold 3 channels * 9 kernel values per output position, 32*32 of them, while
# the conv runs (costs/workspace.py): 27,648 floats, 110,592 bytes.
CONV_COLUMNS = 3 * 9 * 32 * 32 * F32
FC_WEIGHTS = 81_930 * F32  # 327,720 bytes
CONV_WEIGHTS = 224 * F32  # 896 bytes


@pytest.fixture(scope="module")
def conv_then_fc():
    torch.manual_seed(0)
    return profile_model(ConvThenFc(), (torch.randn(1, 3, 32, 32),))


def message(profile, key: str, limit) -> str:
    (finding,) = check(profile, Budget(limits={key: limit}))
    return finding.message


def test_the_biggest_subgraphs_are_ranked_by_the_figure_that_failed(conv_then_fc):
    assert conv_then_fc.flops == CONV_FLOPS + FC_FLOPS
    assert message(conv_then_fc, "flops_max", 1).endswith(
        "; biggest subgraphs by FLOPs: conv (conv) 451k, fc (linear) 164k"
    )
    # Parameters belong to layers, not to kernels: the layers are ranked.
    assert message(conv_then_fc, "params_max", 1).endswith(
        "; biggest layers by params: fc 81.9k, conv 224"
    )
    # At the peak (the conv running) its output and its columns are live, and every weight.
    assert conv_then_fc.activation_peak_bytes == CONV_OUT + CONV_COLUMNS
    assert message(conv_then_fc, "memory_max", 1).endswith(
        "; biggest subgraphs by memory live at the peak: "
        f"fc (linear) {format_bytes(FC_WEIGHTS)}, "
        f"conv (conv) {format_bytes(CONV_WEIGHTS + CONV_OUT + CONV_COLUMNS)}"
    )
    assert message(conv_then_fc, "traffic_max", 1).endswith(
        "; biggest subgraphs by traffic: "
        f"fc (linear) {format_bytes(CONV_OUT + FC_WEIGHTS + 10 * F32)}, "
        f"conv (conv) {format_bytes(3 * 32 * 32 * F32 + CONV_WEIGHTS + CONV_OUT)}"
    )
    # Both kernels are memory-bound on the generic profile: time follows bytes moved.
    assert "; biggest subgraphs by estimated time: fc (linear) " in message(
        conv_then_fc, "latency_max", 1e-9
    )


def test_the_markdown_ranks_the_biggest_subgraphs_by_the_failed_figure(conv_then_fc):
    from pytest_graphbudget.pytest_plugin.plugin import ModelResult

    budget = Budget(limits={"params_max": 1})
    result = ModelResult(
        "m",
        "m",
        "test_m.py::test_m",
        "test_m.py",
        1,
        budget_dict(budget),
        [asdict(f) for f in check(conv_then_fc, budget)],
        conv_then_fc.to_dict(),
    )
    text = markdown.render([result])
    assert (
        "No baseline to compare with; the biggest layers by params: `fc` 81.9k, `conv` 224." in text
    )


# -- what a reviewer sees: growth of params, memory and traffic named by layer -------------


class MLP(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.encoder = nn.Linear(64, hidden)
        self.head = nn.Linear(hidden, 8)

    def forward(self, x):
        return self.head(torch.relu(self.encoder(x)))


def mlp_entry(hidden: int) -> baseline.Entry:
    torch.manual_seed(0)
    return baseline.entry_from(profile_model(MLP(hidden), (torch.randn(4, 64),)))


def test_the_baseline_records_params_memory_and_traffic_by_layer(conv_then_fc, tmp_path):
    entry = baseline.entry_from(conv_then_fc)
    assert entry.by_module["params"] == {"conv": 224, "fc": 81_930}
    # Each layer's weights and the activations it allocated that are live at the peak; the
    # input (3x32x32 floats) is the model's own.
    assert entry.by_module["peak_memory_bytes"] == {
        "<root>": 3 * 32 * 32 * F32,
        "conv": CONV_WEIGHTS + CONV_OUT + CONV_COLUMNS,
        "fc": FC_WEIGHTS,
    }
    assert sum(entry.by_module["peak_memory_bytes"].values()) == conv_then_fc.peak_memory_bytes
    assert entry.by_module["traffic_bytes"] == {
        "conv": 3 * 32 * 32 * F32 + CONV_WEIGHTS + CONV_OUT,
        "fc": CONV_OUT + FC_WEIGHTS + 10 * F32,
    }
    # Written and read back unchanged.
    path = tmp_path / "baseline.toml"
    path.write_text(baseline.dumps({"m": entry}))
    assert "[models.m.by_module.params]\nconv = 224\nfc = 81930\n" in path.read_text()
    found = baseline.read(path)
    assert found.problems == {} and found.entries["m"] == entry


def test_params_memory_and_traffic_growth_name_the_layers_that_grew():
    # The hidden layer widens from 32 to 48: encoder gains 64*16 + 16 parameters, head 16*8.
    findings = baseline.compare(mlp_entry(48), mlp_entry(32), 0.02)
    messages = {f.key: f.message for f in findings}
    assert messages["baseline.params"] == (
        "params regressed +49.8% (2.34k -> 3.51k, tolerance 2.0%); "
        "grew most: encoder +1.04k, head +128"
    )
    # Memory at the peak: encoder's weights (65 floats a channel) and its two live
    # activations (4 rows, relu's input and output: 8 floats a channel); head's weights.
    assert messages["baseline.peak_memory_bytes"].endswith(
        f"grew most: encoder +{format_bytes(16 * (65 + 8) * F32)}, "
        f"head +{format_bytes(16 * 8 * F32)}"
    )
    # Traffic: encoder's weights and its output (4 rows); head reads that output and its
    # own weights.
    assert messages["baseline.traffic_bytes"].startswith("traffic regressed +44.9% ")
    assert (
        f"grew most: encoder +{format_bytes(16 * (65 + 4) * F32)}, "
        f"head +{format_bytes(16 * (4 + 8) * F32)}" in messages["baseline.traffic_bytes"]
    )


class SharedThenHead(nn.Module):
    """One linear layer called twice, then a head: its weights are read by two kernels."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(16, 16)  # 16*16 + 16 = 272 params
        self.head = nn.Linear(16, 4)  # 16*4 + 4 = 68 params

    def forward(self, x):
        return self.head(self.shared(self.shared(x)))


def test_a_weight_two_kernels_read_is_counted_once_in_the_memory_split():
    prof = profile_model(SharedThenHead(), (torch.randn(2, 16),))
    shared, head, rows = 272 * F32, 68 * F32, 2 * 16 * F32  # 1,088, 272 and 128 bytes
    # At the peak (shared's second call) its input and its output are live: 2 rows of 16.
    assert prof.activation_peak_bytes == 2 * rows
    assert prof.peak_memory_bytes == shared + head + rows + 2 * rows == 1_744
    entry = baseline.entry_from(prof)
    assert entry.by_module["params"] == {"shared": 272, "head": 68}
    # shared's weights once, not once per call (2,704 bytes in all, over a peak of 1,744),
    # with the two activations its calls left live; the input is the model's own.
    assert entry.by_module["peak_memory_bytes"] == {
        "<root>": rows,
        "shared": shared + 2 * rows,
        "head": head,
    }
    assert sum(entry.by_module["peak_memory_bytes"].values()) == prof.peak_memory_bytes
    # Traffic is per kernel: each call of shared reads 2 rows and its weights and writes 2
    # rows; head reads 2 rows and its weights and writes 2 rows of 4. A weight read twice is
    # moved twice, in traffic_bytes as here.
    assert entry.by_module["traffic_bytes"] == {
        "shared": 2 * (rows + shared + rows),
        "head": rows + head + 2 * 4 * F32,
    }
    assert sum(entry.by_module["traffic_bytes"].values()) == prof.traffic_bytes == 3_120


class Tied(nn.Module):
    """An embedding whose table is the output layer's weight: either registers it first."""

    def __init__(self, embed_first: bool):
        super().__init__()
        if embed_first:
            self.embed = nn.Embedding(10, 8)
            self.out = nn.Linear(8, 10, bias=False)
            self.out.weight = self.embed.weight
        else:
            self.out = nn.Linear(8, 10, bias=False)
            self.embed = nn.Embedding(10, 8)
            self.embed.weight = self.out.weight

    def forward(self, tokens):
        return self.out(self.embed(tokens))


@pytest.mark.parametrize("owner", ["embed", "out"])
def test_a_tied_weight_is_charged_to_the_module_its_params_are(owner):
    prof = profile_model(Tied(owner == "embed"), (torch.tensor([[1, 2, 3]]),))
    table, tokens = 10 * 8 * F32, 3 * 8  # 320 bytes of weights; 3 int64 tokens, 24 bytes
    # One kernel (the lookup fused into the matmul, anchored at out): 3 rows of 8, 3 of 10.
    activations = 3 * 8 * F32 + 3 * 10 * F32
    assert prof.peak_memory_bytes == table + tokens + activations == 560
    entry = baseline.entry_from(prof)
    # The table is registered twice; it is charged once, where params count it: the module
    # that registers it first.
    assert entry.by_module["params"] == {owner: 80}
    memory = {"<root>": tokens, owner: table}
    memory["out"] = memory.get("out", 0) + activations
    assert entry.by_module["peak_memory_bytes"] == memory
    assert sum(memory.values()) == prof.peak_memory_bytes


def saved_profile(weights_by_module: bool) -> dict:
    """A saved profile (``Profile.to_dict()``'s keys that the split reads), written by hand:
    ``block.conv`` = Conv2d(3, 8, 3), 224 params; ``block.bn`` = BatchNorm2d(8), 16 params
    and 2*8 floats and one int64 of buffers (136 bytes); a 1-float parameter of the model's
    own. Input 3x8x8 floats; conv's and bn's outputs, 8x6x6 floats each, live at the peak."""
    modules = {
        "block": {"flops": 0, "macs": 0, "params": 240, "weights_bytes": 1_032},
        "block.conv": {"flops": 0, "macs": 0, "params": 224, "weights_bytes": 896},
        "block.bn": {"flops": 0, "macs": 0, "params": 16, "weights_bytes": 136},
    }
    if not weights_by_module:  # written before the modules recorded their weights
        modules = {
            path: {k: v for k, v in m.items() if k != "weights_bytes"}
            for path, m in modules.items()
        }
    out = 8 * 6 * 6 * F32
    subgraphs = [
        {"module": "block.conv", "bytes_in": 768, "bytes_out": out, "bytes_weights": 896,
         "peak_bytes": out},
        {"module": "block.bn", "bytes_in": out, "bytes_out": out, "bytes_weights": 136,
         "peak_bytes": out},
    ]  # fmt: skip
    totals = {"params": 241, "weights_bytes": 1_036, "peak_memory_bytes": 1_036 + 768 + 2 * out}
    return {"totals": totals, "modules": modules, "subgraphs": subgraphs}


def test_the_memory_split_charges_each_module_the_weights_it_registers():
    data = saved_profile(weights_by_module=True)
    # Children excluded (block registers none itself); the model's own float is left out.
    assert budgets.owned_weights(data) == {"block.conv": 896, "block.bn": 136}
    out = 8 * 6 * 6 * F32  # 1,152 bytes
    split = baseline.by_subgraph_module(data, "peak_memory_bytes")
    assert split == {"block.conv": 896 + out, "block.bn": 136 + out, "<root>": 768 + 4}
    assert sum(split.values()) == data["totals"]["peak_memory_bytes"] == 4_108
    # A profile saved without them shares the weights out by params, 1,036 bytes over 241:
    # bn's buffers are not known to be bn's.
    data = saved_profile(weights_by_module=False)
    owned = budgets.owned_weights(data)
    assert owned == {"block.conv": 224 * 1_036 // 241, "block.bn": 16 * 1_036 // 241}
    split = baseline.by_subgraph_module(data, "peak_memory_bytes")
    assert sum(split.values()) == data["totals"]["peak_memory_bytes"]


def test_a_regression_ends_with_how_to_accept_it():
    findings = baseline.compare(mlp_entry(48), mlp_entry(32), 0.02, "ci/budgets/baseline.toml")
    failed = [f for f in findings if f.severity == "fail"]
    hint = (
        "; if intended, run pytest --graph-budget --graph-budget-update "
        "and commit ci/budgets/baseline.toml"
    )
    # Once per model, at the end of its last regression: the end of the whole message.
    assert failed[-1].message.endswith(hint)
    assert not any(hint in f.message for f in failed[:-1])
    assert baseline.compare(mlp_entry(32), mlp_entry(32), 0.02) == []


def test_growth_is_not_attributed_without_the_baselines_split():
    """A baseline entry written without per-module figures (older files) cannot say who grew:
    naming each module's whole value as its growth would point at the wrong layer."""
    current = baseline.Entry(
        {"params": 150, "flops": 100}, by_module={"params": {"neck": 100, "head": 50}}
    )
    base = baseline.Entry({"params": 140, "flops": 100})
    (finding,) = baseline.compare(current, base, 0.01)
    assert finding.key == "baseline.params" and "grew most" not in finding.message
    split = baseline.Entry(base.figures, by_module={"params": {"neck": 90, "head": 50}})
    (finding,) = baseline.compare(current, split, 0.01)
    assert "grew most: neck +10" in finding.message


def test_growth_is_not_attributed_to_a_module_whose_line_was_deleted():
    """User trial: ``conv2``'s line deleted from the entry's split, the model heavier: it read
    ``grew most: conv2 +3.56M``, its whole value, for a growth of +1.18M. The entry's split
    adds up to its total, so one short of it that lacks a module the model has lost that
    line; a module new to the model leaves the split whole, and grew by all of it."""
    current = baseline.Entry(
        {"params": 170, "flops": 100}, by_module={"params": {"neck": 100, "head": 70}}
    )
    deleted = baseline.Entry({"params": 150, "flops": 100}, by_module={"params": {"neck": 90}})
    (finding,) = baseline.compare(current, deleted, 0.01)
    assert finding.key == "baseline.params" and "grew most" not in finding.message
    whole = baseline.Entry({"params": 90, "flops": 100}, by_module={"params": {"neck": 90}})
    (finding,) = baseline.compare(current, whole, 0.01)  # head is new: 100 - 90 and 70 - 0
    assert "grew most: head +70, neck +10" in finding.message


def test_a_figure_recorded_as_zero_still_regresses():
    base = baseline.Entry({"params": 0, "flops": 100})
    (finding,) = baseline.compare(baseline.Entry({"params": 10, "flops": 100}), base, 0.01)
    assert finding.key == "baseline.params"
    assert finding.message.startswith("params regressed from 0 (0 -> 10, tolerance 1.0%)")


def test_the_regression_message_in_pytest_ends_with_how_to_accept_it(project):
    run(project, "--graph-budget-update").assert_outcomes(passed=2)
    project.makepyfile(models=MODELS.replace("width=32", "width=48"))
    result = run(project, "-k", "good")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*params regressed +50.0% (2.08k -> 3.12k, tolerance 1.0%); grew most: <root> +1.04k",
            "*traffic regressed*; grew most: <root> +*; if intended, run pytest --graph-budget "
            "--graph-budget-update and commit budgets/baseline.toml",
        ]
    )


# -- the lock file beside the baseline ------------------------------------------------------

WRITER = """
import sys
from pathlib import Path
from pytest_graphbudget.gate import baseline

path, worker = Path(sys.argv[1]), sys.argv[2]
for i in range(15):
    recorded = dict.fromkeys(baseline.REGRESSION_FIGURES, i)
    baseline.update(path, {f"w{worker}::m{i}": baseline.Entry(recorded, {})})
"""


def test_concurrent_updates_keep_every_entry_and_leave_no_lock_file(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "budgets" / "baseline.toml"
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(w)]) for w in range(4)
    ]
    assert [w.wait(timeout=300) for w in writers] == [0, 0, 0, 0]
    found = baseline.read(path)
    assert found.problems == {} and found.error == ""
    assert set(found.entries) == {f"w{w}::m{i}" for w in range(4) for i in range(15)}
    assert sorted(p.name for p in path.parent.iterdir()) == ["baseline.toml"]


# -- no baseline file, however edited, gets past read() as a traceback ---------------------


def test_no_baseline_text_raises_and_every_entry_is_accounted_for(tmp_path):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    import tomlkit

    values = st.one_of(
        st.integers(min_value=-(2**64), max_value=2**64),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.sampled_from(["635M", "1.5 MiB", "2%", "lots", "", "-3k", "1e999"]),
        st.lists(st.integers(), max_size=2),
    )
    keys = st.sampled_from([*baseline.REGRESSION_FIGURES, "flop", "modules", "by_module", "x"])
    layers = st.dictionaries(st.sampled_from(["<root>", "fc", "a.b"]), values, max_size=3)
    tables = st.dictionaries(
        keys,
        st.one_of(values, layers, st.dictionaries(st.sampled_from(["params", "p"]), layers)),
        max_size=5,
    )
    models = st.dictionaries(st.sampled_from(["a::m", "b::m", "c"]), st.one_of(tables, values))

    @hypothesis.settings(max_examples=150, deadline=None)
    @hypothesis.given(models, st.text(max_size=40))
    def check(entries, junk):
        path = tmp_path / "baseline.toml"
        for text, written in ((tomlkit.dumps({"models": entries}), entries), (junk, {})):
            path.write_text(text)
            found = baseline.read(path)  # never raises
            if not found.error:  # every entry is checked, or said to be unreadable
                assert set(written) <= found.keys()
            for entry in found.entries.values():
                for value in entry.figures.values():
                    assert math.isfinite(value) and value >= 0
                # A readable entry can always be compared with: no overflow, no division by 0.
                baseline.compare(entry, entry, 0.01)
                baseline.compare(baseline.Entry(dict.fromkeys(entry.figures, 1)), entry, 0.01)
            for problems in found.problems.values():
                assert all(p.startswith(str(path)) and "\n" not in p for p in problems)

    check()
