"""The graph-break tiers (issue 10): ``dynamo-breaks`` and ``eager``.

References nobody here wrote: hand counts written as the arithmetic that produces them (the
cost table of docs/metrics.md: 2 FLOPs per MAC, +1 per element summed or compared), and
PyTorch's own ``FlopCounterMode`` over the same real forward for the detectors.
"""

from __future__ import annotations

import inspect
import json

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from pytest_graphbudget import profile_model  # noqa: E402
from pytest_graphbudget.compat import dynamo_breaks_unavailable  # noqa: E402
from pytest_graphbudget.engine.profile import profile_from_dict  # noqa: E402

pytestmark = pytest.mark.skipif(
    dynamo_breaks_unavailable() is not None, reason=str(dynamo_breaks_unavailable())
)


class Branchy(nn.Module):
    """A data-dependent branch: ``fx`` and ``export`` cannot capture it, Dynamo breaks on it."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(8, 16, bias=False)
        self.pos = nn.Linear(16, 32, bias=False)
        self.neg = nn.Linear(16, 4, bias=False)
        nn.init.ones_(self.stem.weight)  # y = sum(x) in every column: its sign is x's

    def forward(self, x):
        y = self.stem(x)
        if y.sum() > 0:
            return self.pos(y)
        return self.neg(y)


def _branch_line() -> int:
    lines, first = inspect.getsourcelines(Branchy.forward)
    return first + next(i for i, line in enumerate(lines) if "if y.sum() > 0" in line)


# Batch 2, x: 2x8.
#   stem: 2*8*16 = 256 MACs; y.sum(): 2*16 = 32 FLOPs; > 0: 1 FLOP
#   pos:  2*16*32 = 1024 MACs;  neg: 2*16*4 = 128 MACs
STEM_MACS, SUM, GT = 2 * 8 * 16, 2 * 16, 1
POS_MACS, NEG_MACS = 2 * 16 * 32, 2 * 16 * 4


@pytest.mark.parametrize(
    ("sign", "branch", "macs"),
    [(1.0, "pos", STEM_MACS + POS_MACS), (-1.0, "neg", STEM_MACS + NEG_MACS)],
    ids=["positive-branch", "negative-branch"],
)
def test_each_side_of_a_data_dependent_branch_gets_its_hand_count(sign, branch, macs):
    prof = profile_model(Branchy(), (torch.full((2, 8), sign),), tier="dynamo-breaks")
    assert prof.trace.method == "dynamo-breaks"
    assert set(prof.trace.failures) == {"fx"}  # export is skipped when the breaks are asked
    assert prof.macs == macs
    assert prof.flops == 2 * macs + SUM + GT
    assert prof.coverage.unsupported_ops == {}
    # One module tree: the branch not taken costs nothing, the one taken is where it belongs.
    assert prof.modules["stem"].macs == STEM_MACS
    assert prof.modules[branch].macs == macs - STEM_MACS
    other = "neg" if branch == "pos" else "pos"
    assert prof.modules.get(other) is None or prof.modules[other].macs == 0


def test_graph_break_is_reported_with_its_place_and_reason():
    prof = profile_model(Branchy(), (torch.ones(2, 8),), tier="dynamo-breaks")
    assert prof.trace.graphs == 2
    assert len(prof.trace.breaks) == 1
    where, _, reason = prof.trace.breaks[0].partition(": ")
    assert where.endswith(f"test_breaks.py:{_branch_line()}")
    assert reason.startswith("a Python branch on a tensor's value (")  # then Dynamo's words


def test_breaks_survive_the_json_round_trip():
    prof = profile_model(Branchy(), (torch.ones(2, 8),), tier="dynamo-breaks")
    again = profile_from_dict(json.loads(json.dumps(prof.to_dict())))
    assert again.trace.method == "dynamo-breaks"
    assert again.trace.graphs == 2
    assert again.trace.breaks == prof.trace.breaks


def test_profile_and_explore_show_the_breaks():
    from pytest_graphbudget.cli import explore
    from pytest_graphbudget.cli import profile_view as profile

    prof = profile_model(Branchy(), (torch.ones(2, 8),), tier="dynamo-breaks")
    text = profile.profile_text(prof)
    explored = explore.explore_text(prof, range(len(prof.node_info)))
    for shown in (text, explored):
        assert "dynamo-breaks" in shown
        assert prof.trace.breaks[0] in shown
        assert "2 graphs" in shown


class BreakInChain(nn.Module):
    """Two pointwise ops a compiler fuses, with a graph break between them."""

    def forward(self, x):
        y = x * 2
        if y.sum() > 0:
            return y + 1
        return y - 1


class NoBreak(nn.Module):
    def forward(self, x):
        return x * 2 + 1


def test_a_graph_break_ends_the_fused_kernel():
    x = torch.ones(4, 4)
    fused = profile_model(NoBreak(), (x,), tier="fx")
    assert fused.trace.method == "fx"
    assert len([s for s in fused.subgraphs if "mul" in s.kind and "add" in s.kind]) == 1

    broken = profile_model(BreakInChain(), (x,), tier="dynamo-breaks")
    assert broken.trace.method == "dynamo-breaks"
    of = {n.target: n.subgraph for n in broken.node_info}
    mul = next(n.subgraph for n in broken.node_info if n.kind == "mul")
    add = next(n.subgraph for n in broken.node_info if n.kind == "add")
    assert mul != add, of
    assert "graph break" in broken.subgraphs[add].reason
    # 16 muls, 16 sums, 1 compare, 16 adds
    assert broken.flops == 16 + 16 + 1 + 16


class NotForDynamo(nn.Module):
    """Dynamo is told to keep out: only the eager tier can price it."""

    def __init__(self):
        super().__init__()
        self.inner = Branchy()

    @torch._dynamo.disable
    def forward(self, x):
        return self.inner(x)


def test_eager_tier_prices_every_op_of_one_real_forward():
    prof = profile_model(NotForDynamo(), (torch.ones(2, 8),), tier="dynamo-breaks")
    assert prof.trace.method == "eager"
    assert "dynamo-breaks" in prof.trace.failures
    assert prof.macs == STEM_MACS + POS_MACS
    assert prof.flops == 2 * (STEM_MACS + POS_MACS) + SUM + GT
    assert prof.modules["inner.pos"].macs == POS_MACS
    assert "one eager run" in prof.trace.note


def test_asking_for_an_unknown_tier_is_one_line():
    from pytest_graphbudget.errors import GraphBudgetError

    with pytest.raises(GraphBudgetError, match=r"tier must be one of dynamo, dynamo-breaks"):
        profile_model(Branchy(), (torch.ones(2, 8),), tier="jit")


def test_model_on_meta_device_is_refused_in_one_line():
    from pytest_graphbudget.errors import ModelRunError

    with torch.device("meta"):
        model = Branchy()
    with pytest.raises(ModelRunError, match=r"build it with real weights \(meta=False\)") as info:
        profile_model(model, (torch.ones(2, 8, device="meta"),))
    assert "\n" not in str(info.value)


class Picks(torch.nn.Module):
    """An output sized by values (a detector's kept boxes): ``nonzero`` on the meta device
    raises DynamicOutputShapeException, not a data-dependent branch."""

    def __init__(self):
        super().__init__()
        self.score = torch.nn.Linear(8, 1)

    def forward(self, x):
        return x[self.score(x).squeeze(-1) > 0]


def test_an_output_sized_by_values_on_meta_says_to_build_with_weights():
    from pytest_graphbudget.errors import ModelRunError

    with torch.device("meta"):
        model = Picks()
    with pytest.raises(ModelRunError, match=r"build it with real weights \(meta=False\)") as info:
        profile_model(model, (torch.ones(2, 8, device="meta"),))
    assert "\n" not in str(info.value) and "DynamicOutputShape" in str(info.value)


# --------------------------------------------------------------------------------------------
# Detectors: the smallest two, against FlopCounterMode over the same real forward


@pytest.fixture(
    scope="module",
    params=[
        # the larger one in make test-sweep and CI only: make test stays under 4 minutes
        pytest.param("fasterrcnn_mobilenet_v3_large_320_fpn", marks=pytest.mark.sweep),
        "ssdlite320_mobilenet_v3_large",
    ],
)
def detector(request, refuse_network):
    """Built and profiled once per module, offline (nothing may reach the network)."""
    from pytest_graphbudget import zoo

    with pytest.MonkeyPatch.context() as patch:
        attempts = refuse_network(patch)
        case = zoo.resolve(request.param)
        prof = profile_model(case, tier="dynamo-breaks")
    assert attempts == []
    return case, prof


@pytest.mark.slow
def test_detector_macs_equal_flop_counter_mode(detector, flop_counter, rel_err):
    case, prof = detector
    reference = sum(flop_counter(case.model, case.inputs).values()) / 2
    assert prof.trace.method == "dynamo-breaks"
    assert rel_err(prof.macs, reference) < 0.005
    assert prof.coverage.unsupported_ops == {}


@pytest.mark.slow
def test_detector_is_one_profile_of_many_graphs(detector):
    case, prof = detector
    assert prof.trace.graphs > 1 and prof.trace.breaks
    assert all(":" in b for b in prof.trace.breaks)
    # One module tree: every MAC is under one of the detector's top-level modules.
    top = {name for name, _ in case.model.named_children()}
    assert sum(prof.modules[m].macs for m in top if m in prof.modules) == prof.macs
    assert prof.modules["backbone"].macs > 0


@pytest.mark.slow
def test_detector_that_fx_cannot_trace_says_why_and_is_fully_costed(detector):
    _, prof = detector
    assert set(prof.trace.failures) >= {"fx"}
    assert all(reason and "\n" not in reason for reason in prof.trace.failures.values())
    assert prof.macs > 0 and prof.flops > 2 * prof.macs
    assert prof.coverage.unsupported_ops == {}
    assert prof.peak_memory_bytes > prof.weights_bytes


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("fasterrcnn_mobilenet_v3_large_320_fpn", 320),
        ("fasterrcnn_mobilenet_v3_large_fpn", 800),
        ("ssdlite320_mobilenet_v3_large", 320),
    ],
)
def test_detectors_get_a_list_of_images_at_their_transform_size(name, size):
    from pytest_graphbudget import zoo

    case = zoo.resolve(name, meta=True)  # the size is the transform's: no weights needed
    (images,) = case.inputs
    assert isinstance(images, list) and len(images) == 1
    assert tuple(images[0].shape) == (3, size, size)


def test_zoo_sweep_counts_each_tier_and_notes_the_breaks(tmp_path):
    from pytest_graphbudget.cli import zoo_sweep as sweep

    rows = [
        sweep.Result("resnet18", "torchvision", ok=True, tier="fx", macs=1),
        sweep.Result("ssdlite", "torchvision", ok=True, tier="dynamo-breaks", macs=1,
                     graphs=18, breaks=4),
        sweep.Result("odd", "torchvision", ok=True, tier="eager", macs=1),
        sweep.Result("broken", "torchvision", error="no tier"),
    ]  # fmt: skip
    text = sweep.render(rows, total_seconds=1.0, environment="test")
    assert "| family | models | fx | dynamo | dynamo-breaks | eager | failed |" in text
    assert "| torchvision | 4 | 1 | 0 | 1 | 1 | 1 | 0 |" in text
    ssdlite = next(line for line in text.splitlines() if line.startswith("| `ssdlite`"))
    assert "| dynamo-breaks |" in ssdlite and "18 graphs, 4 breaks" in ssdlite


# --------------------------------------------------------------------------------------------
# The plugin: budgets on a data-dependent model, and a cache that knows values matter

BRANCHY_PROJECT = f"""
import inspect, torch
from torch import nn
from pytest_graphbudget import ModelCase

SIGN = -1.0

{inspect.getsource(Branchy)}

def branchy():
    torch.manual_seed(0)
    return ModelCase(Branchy(), (torch.full((2, 8), SIGN),), name="branchy")
"""


def test_budget_on_a_branchy_model_and_the_cache_sees_changed_values(pytester):
    pytester.makepyfile(models=BRANCHY_PROJECT)
    pytester.syspathinsert()
    # Between the negative branch's hand count and the positive one's.
    pytester.makepyfile(
        test_branchy=f"""
        import pytest
        from models import branchy

        @pytest.fixture
        def model():
            return branchy()

        @pytest.mark.macs_max({STEM_MACS + NEG_MACS})
        def test_fits(model):
            pass
        """
    )
    args = ("-p", "no:cacheprovider", "--graph-budget")
    pytester.runpytest(*args).assert_outcomes(passed=1)
    assert list((pytester.path / ".graph_budget_cache").rglob("*.json"))
    # Same shapes, other values: the other branch runs, and the cached profile is not reused.
    pytester.makepyfile(models=BRANCHY_PROJECT.replace("SIGN = -1.0", "SIGN = 1.0"))
    result = pytester.runpytest(*args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*MACs 1.28k exceeds macs_max {STEM_MACS + NEG_MACS}*"])
    assert STEM_MACS + POS_MACS == 1280


def test_zoo_detectors_are_built_with_the_same_weights_every_time():
    from pytest_graphbudget import zoo

    first = zoo.resolve("ssdlite320_mobilenet_v3_large").model.state_dict()
    second = zoo.resolve("ssdlite320_mobilenet_v3_large").model.state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_toml_budget_on_a_branchy_model(pytester):
    pytester.makepyfile(models=BRANCHY_PROJECT.replace("SIGN = -1.0", "SIGN = 1.0"))
    pytester.syspathinsert()
    budgets = pytester.mkdir("budgets")
    (budgets / "models.toml").write_text(
        f'[models.fits]\nfactory = "models:branchy"\nmacs_max = {STEM_MACS + POS_MACS}\n'
        f'[models.tight]\nfactory = "models:branchy"\nmacs_max = {STEM_MACS + POS_MACS - 1}\n'
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--graph-budget", "budgets/")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*MACs 1,280 exceeds macs_max 1,279*"])


class RoiAndNms(nn.Module):
    def forward(self, x, rois, boxes, scores):
        from torchvision.ops import nms, roi_align

        return roi_align(x, rois, output_size=(2, 2), sampling_ratio=2), nms(boxes, scores, 0.5)


def test_detection_ops_have_hand_counted_formulas():
    x = torch.rand(1, 2, 8, 8)
    rois = torch.tensor([[0.0, 0.0, 0.0, 4.0, 4.0]])
    boxes = torch.tensor([[0.0, 0.0, 2.0, 2.0]] * 5) + torch.arange(5.0)[:, None]
    scores = torch.rand(5)
    prof = profile_model(RoiAndNms(), (x, rois, boxes, scores))
    assert prof.coverage.unsupported_ops == {}
    # roi_align: 1 RoI x 2 channels x 2x2 bins = 8 bins; each averages 2x2 bilinear samples
    # (7 FLOPs to interpolate + 1 to add) and divides once: 8 * (4 * 8 + 1).
    roi = 8 * (4 * 8 + 1)
    # nms over 5 boxes: areas 3*5, sort 5*log2(8)=5*3, IoU (10 FLOPs) of 5*4/2 pairs.
    nms = 3 * 5 + 5 * 3 + 10 * (5 * 4 // 2)
    assert prof.flops == roi + nms
    assert prof.macs == 0


class Nms(nn.Module):
    def forward(self, boxes, scores):
        from torchvision.ops import nms

        return nms(boxes, scores, 0.5)


def test_nms_counts_the_pairs_its_kept_boxes_can_compare():
    """Two pairs of near-identical boxes: nms keeps 2 of 4, and the greedy scan compares each
    kept box with those after it, at most 3 + 2 = 5 pairs (it compares 4: the second box of
    the first pair is suppressed before its turn), not the 4 * 3 / 2 = 6 of every pair."""
    boxes = torch.tensor(
        [[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 10.0, 9.0], [50.0, 50, 60, 60], [50.0, 50, 60, 59]]
    )
    scores = torch.tensor([0.9, 0.8, 0.7, 0.6])
    prof = profile_model(Nms(), (boxes, scores))
    # areas 3*4, sort 4*ceil(log2 4)=4*2, IoU (10 FLOPs) of 2*3 - 2*1/2 = 5 pairs
    assert prof.flops == 3 * 4 + 4 * 2 + 10 * 5
