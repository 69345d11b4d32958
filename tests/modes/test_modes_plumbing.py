"""Issue 12, plumbing: ``mode``, ``optimizer`` and ``dtype`` reach ``profile_model`` from TOML
budget keys, the ``graph_budget`` marker and the CLI; the profile cache and the baseline keep
each variant of a model apart.

Every check reads what the run produced (the JSON report, the baseline file, the CLI's output),
never a mock. The model is ``nn.Linear(64, 32)`` on a ``(4, 64)`` input: 2,080 weights, 8,320
bytes in float32 and 4,160 in bfloat16; 2*4*64*32 + 4*32 = 16,512 FLOPs in both. The CLI's is
``Linear(8, 16) -> ReLU -> Linear(16, 4)`` at ``(2, 8)``: 212 weights, 848 bytes in float32,
424 in bfloat16, and 840 FLOPs. A training step with Adam keeps two moments per parameter:
2 * 2,080 * 4 = 16,640 bytes of optimizer state for the Linear (SGD's one momentum: 8,320),
2 * 212 * 4 = 1,696 for the CLI's model; in eval mode there is none.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from pytest_graphbudget import cli

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MODELS = """
import torch
from pytest_graphbudget import ModelCase

def linear():
    torch.manual_seed(0)
    return ModelCase(torch.nn.Linear(64, {width}), (torch.randn(4, 64),), name="linear")
"""
FP32_WEIGHTS, BF16_WEIGHTS = 8_320, 4_160


def project(pytester: pytest.Pytester, table: str, width: int = 32) -> None:
    """models.py (the factory) and budgets/nets.toml with one ``[models.lin]`` table."""
    pytester.makepyfile(models=MODELS.format(width=width))
    pytester.syspathinsert()
    path = pytester.path / "budgets" / "nets.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f'[models.lin]\nfactory = "models:linear"\n{textwrap.dedent(table)}')


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    """``pytest --graph-budget`` with a JSON report; the result and the report's models by id."""
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--graph-budget", "--graph-budget-json=report.json", *args
    )
    report = json.loads((pytester.path / "report.json").read_text())
    return result, {m["id"]: m for m in report["models"]}


def baseline(pytester: pytest.Pytester) -> dict:
    return tomllib.loads((pytester.path / "budgets" / "baseline.toml").read_text())["models"]


# -- TOML ----------------------------------------------------------------------------------


def test_toml_dtype_reaches_the_profile_and_the_report_names_the_variant(pytester):
    project(pytester, f'dtype = "bfloat16"\nweights_max = {BF16_WEIGHTS}\n')
    result, models = run(pytester)
    result.assert_outcomes(passed=1)  # 4,160 bytes: at the limit, not over
    [(ident, model)] = models.items()
    assert ident == "budgets/nets.toml::lin@bfloat16" and model["label"] == "lin@bfloat16"
    assert model["profile"]["dtype"] == "bfloat16"
    assert model["profile"]["totals"]["weights_bytes"] == BF16_WEIGHTS
    assert model["profile"]["totals"]["flops"] == 16_512


INT8_WEIGHTS = 64 * 32 + 8 + 8 + 32 * 4
"""``Linear(64, 32)`` quantized dynamically: int8 data, a float64 scale and an int64 zero point,
float32 bias: 2,192 bytes."""


def test_toml_int8_profiles_the_quantized_copy(pytester):
    project(pytester, f'dtype = "int8"\nweights_max = {INT8_WEIGHTS}\n')
    result, models = run(pytester)
    result.assert_outcomes(passed=1)  # 2,192 bytes: at the limit, not over
    profile = models["budgets/nets.toml::lin@int8"]["profile"]
    assert (profile["dtype"], profile["totals"]["weights_bytes"]) == ("int8", INT8_WEIGHTS)
    assert profile["totals"]["macs"] == 4 * 64 * 32


def test_toml_mode_and_optimizer_reach_the_profile(pytester):
    project(pytester, 'mode = "train"\noptimizer = "adam"\n')
    result, models = run(pytester)
    result.assert_outcomes(passed=1)
    profile = models["budgets/nets.toml::lin@train+adam"]["profile"]
    assert (profile["mode"], profile["dtype"]) == ("train", "float32")
    assert profile["totals"]["optimizer_state_bytes"] == 16_640


def test_toml_defaults_give_every_table_the_dtype(pytester):
    project(pytester, "")
    path = pytester.path / "budgets" / "nets.toml"
    path.write_text('[defaults]\ndtype = "float16"\n\n' + path.read_text())
    _, models = run(pytester)
    assert models["budgets/nets.toml::lin@float16"]["profile"]["dtype"] == "float16"


@pytest.mark.parametrize(
    "line, message",
    [
        ('dtype = "bf16"', "dtype in budgets/nets.toml::lin: one of 'float32', 'bfloat16', "
         "'float16', 'int8', 'float8_e4m3fn', 'amp_float16', 'amp_bfloat16', got 'bf16' (did "
         "you mean 'bfloat16'?)"),
        ('mode = "trian"', "mode in budgets/nets.toml::lin: one of 'eval', 'train', got 'trian' "
         "(did you mean 'train'?)"),
        ('optimiser = "adam"', "unknown budget key 'optimiser' in budgets/nets.toml::lin "
         "(did you mean 'optimizer'?)"),
    ],
)  # fmt: skip
def test_a_bad_toml_value_or_key_is_one_line_with_the_closest(pytester, line, message):
    project(pytester, f"{line}\n")
    result, _ = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{message}*"])


# -- markers -------------------------------------------------------------------------------

MARKED = """
import pytest
from models import linear

@pytest.fixture
def lin():
    return linear()

@pytest.mark.weights_max({limit})
@pytest.mark.graph_budget({settings})
def test_lin(lin):
    pass

@pytest.mark.graph_budget({settings})
def test_explicit(graph_profile):
    case = linear()
    prof = graph_profile(case.model, case.inputs)
    assert prof.to_dict()["dtype"] == {dtype!r}
"""


def test_the_marker_dtype_profiles_fixtures_and_graph_profile_in_bfloat16(pytester):
    project(pytester, "")
    settings = 'dtype="bfloat16"'
    pytester.makepyfile(
        test_marked=MARKED.format(limit=BF16_WEIGHTS, settings=settings, dtype="bfloat16")
    )
    result, models = run(pytester, "test_marked.py")
    result.assert_outcomes(passed=2)
    profile = models["test_marked.py::test_lin::lin@bfloat16"]["profile"]
    assert (profile["dtype"], profile["totals"]["weights_bytes"]) == ("bfloat16", BF16_WEIGHTS)


def test_the_marker_dtype_int8_profiles_the_quantized_copy(pytester):
    project(pytester, "")
    settings = 'dtype="int8"'
    pytester.makepyfile(
        test_marked=MARKED.format(limit=INT8_WEIGHTS, settings=settings, dtype="int8")
    )
    result, models = run(pytester, "test_marked.py")
    result.assert_outcomes(passed=2)
    profile = models["test_marked.py::test_lin::lin@int8"]["profile"]
    assert (profile["dtype"], profile["totals"]["weights_bytes"]) == ("int8", INT8_WEIGHTS)


def test_the_marker_mode_and_optimizer_profile_a_training_step(pytester):
    project(pytester, "")
    settings = 'mode="train", optimizer="sgd"'
    pytester.makepyfile(test_marked=MARKED.format(limit=1e9, settings=settings, dtype="float32"))
    result, models = run(pytester, "test_marked.py")
    result.assert_outcomes(passed=2)
    profile = models["test_marked.py::test_lin::lin@train+sgd"]["profile"]
    assert profile["mode"] == "train" and profile["totals"]["optimizer_state_bytes"] == 8_320


def test_without_the_marker_dtype_the_same_limit_fails(pytester):
    """The control of the test above: in float32 the weights are 8,320 bytes, over 4,160."""
    project(pytester, "")
    pytester.makepyfile(test_marked=MARKED.format(limit=BF16_WEIGHTS, settings="", dtype="float32"))
    result, _ = run(pytester, "test_marked.py")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*weights 8.32kB exceeds weights_max 4.16kB*"])


@pytest.mark.parametrize(
    "settings, message",
    [
        ('dtype="fp16"', "dtype in @pytest.mark.graph_budget on test_marked.py::test_lin: one "
         "of 'float32', 'bfloat16', 'float16', 'int8', 'float8_e4m3fn', 'amp_float16', "
         "'amp_bfloat16', got 'fp16' (did you mean 'float16'?)"),
        ('dtyp="float16"', "unknown keyword 'dtyp' (did you mean 'dtype'?)"),
    ],
)  # fmt: skip
def test_a_bad_marker_keyword_is_one_line_with_the_closest(pytester, settings, message):
    project(pytester, "")
    pytester.makepyfile(test_marked=MARKED.format(limit=1e9, settings=settings, dtype=""))
    result, _ = run(pytester, "test_marked.py::test_lin")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*{message}*"])


BOTH = """
from models import linear

def test_both(graph_profile):
    case = linear()
    eval_ = graph_profile(case.model, case.inputs)
    train = graph_profile(case.model, case.inputs, mode="train", optimizer="adam")
    assert (eval_.to_dict()["mode"], train.to_dict()["mode"]) == ("eval", "train")
    assert train.to_dict()["totals"]["optimizer_state_bytes"] == 16_640
    half = graph_profile(case.model, case.inputs, dtype="bfloat16")
    assert half.to_dict()["totals"]["weights_bytes"] == 4_160
"""


def test_graph_profile_takes_the_variant_and_one_test_keeps_an_entry_for_each(pytester):
    """One test profiles the same model in eval, in train with Adam and in bfloat16: three
    baseline entries under one test. Without --graph-budget the keywords work the same."""
    project(pytester, "")
    pytester.makepyfile(test_both=BOTH)
    pytester.runpytest("-p", "no:cacheprovider", "test_both.py").assert_outcomes(passed=1)
    result, _ = run(pytester, "test_both.py", "--graph-budget-update")
    result.assert_outcomes(passed=1)
    entries = baseline(pytester)
    assert sorted(entries) == [
        "test_both.py::test_both::Linear",
        "test_both.py::test_both::Linear@bfloat16",
        "test_both.py::test_both::Linear@train+adam",
    ]


def test_a_swept_tables_growth_is_fitted_on_profiles_in_its_dtype(tmp_path, monkeypatch, capsys):
    """``[models.squeezenet1_1] batch = [1, 2, 3]`` with growth_max and dtype: the growth
    item profiles its points as the points' own items do, in bfloat16. The cache shares the
    points' profiles with it only when their keys, variant included, agree."""
    (tmp_path / "budgets").mkdir()
    (tmp_path / "budgets" / "sweep.toml").write_text(
        '[models.squeezenet1_1]\nbatch = [1, 2, 3]\ndtype = "bfloat16"\n'
        'growth_max = {batch = "linear"}\n'
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["check", "--json", "out.json"]) == 0, capsys.readouterr().out
    models = {m["id"]: m for m in json.loads((tmp_path / "out.json").read_text())["models"]}
    growth = models["budgets/sweep.toml::squeezenet1_1[growth]@bfloat16"]["profile"]
    point = models["budgets/sweep.toml::squeezenet1_1[batch=3]@bfloat16"]["profile"]
    assert growth["dtype"] == point["dtype"] == "bfloat16"
    assert growth["totals"] == point["totals"]


# -- the profile cache ---------------------------------------------------------------------


def test_the_cache_never_answers_for_another_dtype_or_mode(pytester):
    """Runs over the same cache: the second, in bfloat16, must not get the float32 profile
    stored by the first (its weights would be 8,320 bytes); the fourth, in train mode, must not
    get an eval profile."""
    project(pytester, "")
    _, first = run(pytester, "-v")
    assert first["budgets/nets.toml::lin"]["profile"]["totals"]["weights_bytes"] == FP32_WEIGHTS
    project(pytester, 'dtype = "bfloat16"\n')
    result, second = run(pytester, "-v")
    profile = second["budgets/nets.toml::lin@bfloat16"]["profile"]
    assert profile["totals"]["weights_bytes"] == BF16_WEIGHTS
    result.stdout.fnmatch_lines(["graph budget cache: 1 profiled and stored"])
    project(pytester, 'dtype = "bfloat16"\n')
    result, _ = run(pytester, "-v")  # the same variant again: now it is reused
    result.stdout.fnmatch_lines(["graph budget cache: 1 reused"])
    project(pytester, 'mode = "train"\n')
    result, third = run(pytester, "-v")  # nor does it answer for another mode
    assert third["budgets/nets.toml::lin@train"]["profile"]["mode"] == "train"
    result.stdout.fnmatch_lines(["graph budget cache: 1 profiled and stored"])


def test_cache_keys_differ_by_mode_optimizer_and_dtype():
    from pytest_graphbudget.modes.request import Variant
    from pytest_graphbudget.run import cache

    variants = [
        Variant(),
        Variant(dtype="bfloat16"),
        Variant(dtype="float16"),
        Variant(mode="train"),
        Variant(mode="train", optimizer="adam"),
        Variant(mode="train", optimizer="sgd", dtype="bfloat16"),
    ]
    keys = {cache.name_key("resnet18", {}, "generic", v.options()) for v in variants}
    assert len(keys) == len(variants)


# -- the baseline --------------------------------------------------------------------------


def test_the_baseline_keeps_one_entry_per_variant_and_a_table_only_its_own(pytester, monkeypatch):
    """The same table updated in eval mode, in train mode, then in bfloat16: each variant its
    own entry. A training step does more than its forward (16,512 FLOPs), so sharing one entry
    would fail the eval run as a regression or hide the training step's growth. A table has
    one variant at a time: the entry of the one it left is stale (a user trial: kept, it was
    compared again once the table went back, with figures of long ago), and the update that
    records the new one drops it."""
    from pytest_graphbudget.compat import kernels as releases

    # oneDNN 3.10's bfloat16 products (torch 2.14's), whichever oneDNN is here (test_dtype.py)
    monkeypatch.setattr(releases, "onednn_brgemm_accumulates", lambda: True)
    eval_, train, half = (f"budgets/nets.toml::lin{s}" for s in ("", "@train", "@bfloat16"))
    found = {}
    for table, ident in (("", eval_), ('mode = "train"\n', train), ('dtype = "bfloat16"\n', half)):
        project(pytester, table)
        if found:  # the last variant's entry, now stale: said, not an error
            result, _ = run(pytester)
            result.assert_outcomes(passed=1)
            assert "stale" in result.stdout.str()
        run(pytester, "--graph-budget-update")[0].assert_outcomes(passed=1)
        entries = baseline(pytester)
        assert list(entries) == [ident]
        found[ident] = entries[ident]
    assert found[eval_]["flops"] == found[half]["flops"] == 16_512
    assert found[train]["flops"] > 2 * 16_512  # backward: about twice the forward's work
    assert found[eval_]["peak_memory_bytes"] == 8_320 + 1_024 + 512
    # bfloat16 halves each but adds oneDNN's product buffers (costs/brgemm.py): the result's
    # 4 x 32 block in float32 (512), the weight packed 64 x 64 x 2 (8,192) and 1,024
    assert found[half]["peak_memory_bytes"] == 4_160 + 512 + 256 + 512 + 8_192 + 1_024


def test_an_entry_without_a_suffix_is_the_own_dtype_one_and_no_other_variant_uses_it(pytester):
    """A baseline written before these options (no suffix) still judges the default variant:
    the model grown to 48 outputs regresses against it. The bfloat16 variant of the same grown
    model has no entry of its own, so it is not judged against the float32 one."""
    project(pytester, "")
    run(pytester, "--graph-budget-update")
    assert list(baseline(pytester)) == ["budgets/nets.toml::lin"]
    project(pytester, "", width=48)
    result, _ = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FLOPs regressed +50.0%*"])
    project(pytester, 'dtype = "bfloat16"\n', width=48)
    result, models = run(pytester)
    result.assert_outcomes(passed=1)
    assert models["budgets/nets.toml::lin@bfloat16"]["baseline"] is None


# -- the command line ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A directory with tiny.pt: ``Linear(8, 16) -> ReLU -> Linear(16, 4)``, pickled whole."""
    import torch
    from torch import nn

    root = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), root / "tiny.pt")
    return root


TINY = ["tiny.pt", "--input-shape", "2,8", "--trust-pickle", "-q"]


def test_cli_profile_dtype(tiny, monkeypatch, capsys):
    monkeypatch.chdir(tiny)
    assert cli.main(["profile", *TINY, "--dtype", "bfloat16", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dtype"] == "bfloat16" and data["inputs"][0]["dtype"] == "bfloat16"
    assert (data["totals"]["weights_bytes"], data["totals"]["flops"]) == (424, 840)


def test_cli_profile_dtype_int8(tiny, monkeypatch, capsys):
    """The tiny model's Linears int8 with a scale and a zero point (16 bytes) each, float32
    biases: (8*16 + 16 + 16*4) + (16*4 + 16 + 4*4) = 304 bytes (848 in float32)."""
    monkeypatch.chdir(tiny)
    assert cli.main(["profile", *TINY, "--dtype", "int8", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dtype"] == "int8" and data["inputs"][0]["dtype"] == "float32"
    assert data["totals"]["weights_bytes"] == 304
    assert data["totals"]["macs"] == 2 * 8 * 16 + 2 * 16 * 4


def test_cli_profile_mode_and_optimizer(tiny, monkeypatch, capsys):
    monkeypatch.chdir(tiny)
    args = ["profile", *TINY, "--mode", "train", "--optimizer", "adam", "--format", "json"]
    assert cli.main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mode"] == "train" and data["totals"]["optimizer_state_bytes"] == 1_696


def test_cli_an_optimizer_without_train_mode_is_one_line(tiny, monkeypatch, capsys):
    monkeypatch.chdir(tiny)
    assert cli.main(["profile", *TINY, "--optimizer", "adam"]) == 2
    err = capsys.readouterr().err
    assert "--optimizer needs --mode train" in err and "Traceback" not in err


def test_cli_compare_profiles_both_models_in_the_dtype(tiny, monkeypatch, capsys):
    monkeypatch.chdir(tiny)
    args = ["compare", "tiny.pt", "tiny.pt", *TINY[1:], "--format", "json"]
    assert cli.main([*args, "--dtype", "float16"]) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    assert totals["weights_bytes"]["a"] == totals["weights_bytes"]["b"] == 424


def test_cli_compare_a_saved_float32_profile_with_the_model_in_bfloat16(tiny, monkeypatch, capsys):
    """--dtype applies to the side profiled now; the saved side stays as saved, and a note
    says so rather than ignoring the flag without a word."""
    monkeypatch.chdir(tiny)
    assert cli.main(["profile", *TINY, "--format", "json", "-o", "fp32.json"]) == 0
    args = ["compare", "fp32.json", "tiny.pt", *TINY[1:], "--format", "json"]
    assert cli.main([*args, "--dtype", "bfloat16"]) == 0
    captured = capsys.readouterr()
    weights = json.loads(captured.out)["totals"]["weights_bytes"]
    assert (weights["a"], weights["b"]) == (848, 424)
    assert "fp32.json is a saved profile (eval, float32): --dtype bfloat16 applies" in captured.err


def test_cli_rejects_an_unknown_dtype_before_loading(tiny, monkeypatch, capsys):
    monkeypatch.chdir(tiny)
    assert cli.main(["profile", *TINY, "--dtype", "bf16"]) == 2
    assert (
        "invalid choice: 'bf16' (choose from 'float32', 'bfloat16', 'float16', 'int8', "
        "'float8_e4m3fn', 'amp_float16', 'amp_bfloat16')" in capsys.readouterr().err
    )


def test_cli_init_writes_the_dtype_and_check_profiles_in_it(tiny, monkeypatch, capsys):
    """init's memory limit is bfloat16's figure plus headroom: the budget it writes holds only
    if ``graph-budget check`` profiles in bfloat16 too (float32 needs twice the bytes)."""
    monkeypatch.chdir(tiny)
    out = ["-o", "budgets/tiny.toml", "--force"]
    assert cli.main(["init", *TINY, "--mode", "train", "--optimizer", "sgd", *out]) == 0
    table = tomllib.loads((tiny / "budgets" / "tiny.toml").read_text())["models"]["tiny.pt"]
    assert (table["mode"], table["optimizer"]) == ("train", "sgd")
    assert cli.main(["init", *TINY, "--dtype", "bfloat16", *out]) == 0
    table = tomllib.loads((tiny / "budgets" / "tiny.toml").read_text())["models"]["tiny.pt"]
    assert table["dtype"] == "bfloat16" and "mode" not in table
    capsys.readouterr()
    assert cli.main(["check", "budgets/tiny.toml", "--no-cache"]) == 0, capsys.readouterr().out
    del table["dtype"]  # the control: the same limits in the model's own dtype fail
    text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items())
    (tiny / "budgets" / "tiny.toml").write_text(f'[models."tiny.pt"]\n{text}')
    assert cli.main(["check", "budgets/tiny.toml", "--no-cache"]) == 1
