"""``graph-budget`` on the inputs that used to crash or flood it (issue 9, "Crashes and floods").

Everything runs in-process (``cli.main([...])`` with capsys, pytester for budgets) on a tiny
model whose figures are derived by hand:

  Linear(8, 16) -> ReLU -> Linear(16, 4) at input 2x8
  Linear(8, 16):  MACs 2*8*16 = 256, FLOPs 2*256 + bias 2*16 = 544, params 8*16+16 = 144
  ReLU:           FLOPs 2*16 = 32
  Linear(16, 4):  MACs 2*16*4 = 128, FLOPs 2*128 + bias 2*4 = 264, params 16*4+4 = 68
  total:          MACs 384, FLOPs 840, params 212
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_graphbudget import cli

TINY = {"macs": 384, "flops": 840, "params": 212}


def tiny_module():
    from torch import nn

    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def save_exported(path: Path, dynamic_batch: tuple[int, int] | None = None) -> Path:
    """``torch.export.save`` of the tiny model at input 2x8 (its batch a ``Dim`` from
    ``dynamic_batch[0]`` to ``dynamic_batch[1]`` when given)."""
    import torch

    shapes = None
    if dynamic_batch:
        low, high = dynamic_batch
        shapes = ({0: torch.export.Dim("batch", min=low, max=high)},)
    program = torch.export.export(tiny_module().eval(), (torch.randn(2, 8),), dynamic_shapes=shapes)
    torch.export.save(program, path)
    return path


def one_error_line(err: str) -> str:
    """The single ``graph-budget: error:`` line of a run, which must also be its last line."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("graph-budget: error:")]
    assert len(errors) == 1, err
    assert err.rstrip().splitlines()[-1] == errors[0], err
    return errors[0]


# ---------------------------------------------------------------------------------------------
# .pt2 files (torch.export.save) are profiled through their own graph


def test_profile_pt2_counts_by_hand(tmp_path, capsys):
    model = save_exported(tmp_path / "tiny.pt2")
    code = cli.main(["profile", str(model), "--format", "json", "-q"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert data["trace"]["method"] == "export"
    assert {k: data["totals"][k] for k in TINY} == TINY
    # named as the program's own module names its input: "input" (Sequential's), or torch
    # 2.4's generated "arg_0"
    import inspect

    import torch

    (name,) = inspect.signature(torch.export.load(model).module().forward).parameters
    assert data["inputs"] == [{"name": name, "shape": [2, 8], "dtype": "float32"}]
    assert data["coverage"]["unsupported_ops"] == {}


def test_profile_pt2_table_names_layer_types(tmp_path, capsys):
    import torch

    model = save_exported(tmp_path / "tiny.pt2")
    stacks = [n.meta.get("nn_module_stack") or {} for n in torch.export.load(model).graph.nodes]
    if any(path == "getattr" for stack in stacks for path, _ in stack.values()):
        pytest.skip("this torch's archive cuts each module's path to 'getattr' (2.4's)")
    assert cli.main(["profile", str(model), "-q"]) == 0
    out = capsys.readouterr().out
    assert "export trace" in out
    assert any(line.split()[:2] == ["0", "Linear"] for line in out.splitlines()), out


@pytest.mark.slow
def test_pt2_resnet18_matches_torchvision_published_macs(tmp_path, capsys, torchvision_reference):
    """A real exported model: torchvision publishes resnet18's GMACs (1.814) and params."""
    import torch
    import torchvision

    model = torchvision.models.resnet18().eval()
    program = torch.export.export(model, (torch.randn(1, 3, 224, 224),))
    torch.export.save(program, tmp_path / "resnet18.pt2")
    assert cli.main(["profile", str(tmp_path / "resnet18.pt2"), "--format", "json", "-q"]) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    reference = torchvision_reference("resnet18")
    assert round(totals["macs"] / 1e9, 3) == reference.gmacs
    assert totals["params"] == reference.num_params


def test_pt2_other_shape_is_a_one_line_error(tmp_path, capsys):
    model = save_exported(tmp_path / "tiny.pt2")
    code = cli.main(["profile", str(model), "--input-shape", "4,8"])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2
    assert "exported at input shape [2, 8], so it cannot be profiled at [4, 8]" in line
    assert "dimension 0 is static" in line


def test_pt2_with_a_dynamic_batch_profiles_at_another_batch(tmp_path, capsys):
    """Batch 8 is four times batch 2: MACs 4 * 384, FLOPs 4 * 840; outside the Dim's range
    (2 to 64) it is refused."""
    model = str(save_exported(tmp_path / "dynamic.pt2", dynamic_batch=(2, 64)))
    assert cli.main(["profile", model, "--batch", "8", "--format", "json", "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["totals"]["macs"], data["totals"]["flops"]) == (4 * 384, 4 * 840)
    assert data["inputs"][0]["shape"] == [8, 8]
    assert cli.main(["profile", model, "--batch", "65"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "dimension 0 is dynamic from 2 to 64" in line


def test_pt2_that_is_not_an_archive(tmp_path, capsys):
    bad = tmp_path / "junk.pt2"
    bad.write_bytes(b"not a zip file")
    assert cli.main(["profile", str(bad)]) == 2
    assert "not a torch.export archive" in one_error_line(capsys.readouterr().err)


def test_pt2_budget_in_toml_is_checked(pytester):
    save_exported(pytester.path / "tiny.pt2")
    pytester.makefile(
        ".toml",
        **{
            "budgets/pt2": textwrap.dedent(
                """
                [models.fits]
                model = "tiny.pt2"
                macs_max = 384
                params_max = 212

                [models.over]
                model = "tiny.pt2"
                macs_max = 383
                """
            )
        },
    )
    result = pytester.runpytest("--graph-budget", "budgets/", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*MACs 384 exceeds macs_max 383*"])


def test_init_on_pt2_writes_a_budget_that_passes(pytester, capsys):
    save_exported(pytester.path / "tiny.pt2")
    assert cli.main(["init", "tiny.pt2", "-o", "budgets/models.toml", "-q"]) == 0
    written = (pytester.path / "budgets" / "models.toml").read_text()
    assert "input_shape = [2, 8]" in written
    result = pytester.runpytest("--graph-budget", "budgets/", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_init_from_a_subdirectory_names_the_model_path_from_the_root(pytester, monkeypatch, capsys):
    # User trial: `graph-budget init ../tiny.pt2` from tests/ wrote "../tiny.pt2", which
    # check and pytest read against the project's root, where it is "tiny.pt2".
    save_exported(pytester.path / "tiny.pt2")
    (pytester.path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (pytester.path / "tests").mkdir()
    monkeypatch.chdir(pytester.path / "tests")
    assert cli.main(["init", "../tiny.pt2", "-q"]) == 0, capsys.readouterr().err
    written = (pytester.path / "budgets" / "models.toml").read_text()
    assert '[models."tiny.pt2"]' in written and "../" not in written
    result = pytester.runpytest("--graph-budget", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    monkeypatch.chdir(pytester.path)
    assert cli.main(["check", "-q"]) == 0, capsys.readouterr()


# ---------------------------------------------------------------------------------------------
# A model no tier can trace: a handful of lines and the one-line error; -v shows torch's output

FLOOD = 400  # lines the model makes torch log on every traced call (thousands in real models)


@pytest.fixture
def untraceable():
    """A loader (family ``gatetest``) whose model ``untraceable`` runs once for real (the
    warm-up) and then, like a model torch cannot capture, floods torch's log, prints and warns,
    and raises on every later or traced call, whichever tier makes it."""
    import logging
    import warnings

    import torch
    from torch import nn
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    from pytest_graphbudget import zoo
    from pytest_graphbudget.case import ModelCase
    from pytest_graphbudget.hookspecs import hookimpl
    from pytest_graphbudget.zoo.base import ModelLoader

    class Untraceable(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)
            self.calls = 0

        def forward(self, x):
            # Traced (a proxy, a fake, a dispatch mode such as the tape's) it always fails; a
            # plain call works the first time only (the warm-up)
            traced = type(x) is not torch.Tensor or _get_current_dispatch_mode() is not None
            self.calls += not traced
            if traced or self.calls > 1:
                logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
                logger.warning("generated code follows\n" + "    GENERATED = x\n" * FLOOD)
                print("PRINTED while tracing")
                warnings.warn("WARNED while tracing", UserWarning, stacklevel=1)
                raise RuntimeError("this graph cannot be captured")
            return self.fc(x)

    class Loader(ModelLoader):
        family = "gatetest"

        def names(self):
            return ["untraceable"]

        def load(self, name, options):
            return ModelCase(Untraceable(), (torch.ones(2, 8),), name=name)

    class Plugin:
        @hookimpl
        def graphbudget_model_loaders(self):
            return [Loader()]

    plugin = Plugin()
    zoo.plugin_manager().register(plugin)
    yield "untraceable"
    zoo.plugin_manager().unregister(plugin)


def test_untraceable_model_is_one_line_not_a_flood(untraceable, capsys):
    code = cli.main(["profile", untraceable])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.splitlines()) <= 4, err  # loading, profiling, the error
    line = one_error_line(err)
    assert "could not trace the model" in line
    assert "fx: this graph cannot be captured" in line and "dynamo:" in line
    assert "-v shows torch's output" in line
    for torch_said in ("GENERATED", "PRINTED", "WARNED"):
        assert torch_said not in err


def test_untraceable_model_with_verbose_shows_what_torch_said(untraceable, capsys):
    code = cli.main(["profile", untraceable, "-v"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("GENERATED = x") >= FLOOD
    assert "PRINTED while tracing" in err and "WARNED while tracing" in err
    line = one_error_line(err)  # the error is still the last line, after the details
    assert "could not trace the model" in line and "-v shows" not in line


def test_list_check_quiet_on_an_untraceable_model(untraceable, capsys):
    code = cli.main(["list", "--check", "-q", "--family", "gatetest"])
    out, err = capsys.readouterr()
    assert code == 1
    assert err.splitlines() == ["graph-budget: FAILED: 1 of 1 models failed to profile"]
    (row,) = [line for line in out.splitlines() if line.startswith("untraceable")]
    assert "FAILED" in row and "could not trace the model" in row


def test_torch_own_flood_is_held_back(capsys, caplog):
    """Not a stand-in: torch itself logs the generated code of a graph whose branch depends
    on data when export gives up on it; ``held`` keeps all of it for DEBUG."""
    import logging

    import torch
    from torch import nn

    from pytest_graphbudget.quiet import held

    class Branchy(nn.Module):
        def forward(self, x):
            return x.nonzero() if x.sum() > 0 else x

    with caplog.at_level(logging.DEBUG, logger="pytest_graphbudget"):
        with pytest.raises(RuntimeError), held("exporting Branchy"):
            torch.export.export(Branchy(), (torch.randn(2, 8),), strict=False)
    out, err = capsys.readouterr()
    assert (out, err) == ("", "")
    (record,) = [r for r in caplog.records if r.name == "pytest_graphbudget.torch"]
    assert record.levelno == logging.DEBUG
    header, _, body = record.getMessage().partition("\n")
    assert header == "torch's output while exporting Branchy:" and body.strip()
    from pytest_graphbudget.compat import torch_at_least

    if torch_at_least(2, 9):  # 2.4 logs the failed guard, not the graph's code
        assert "def forward" in body


def test_a_torch_logger_made_since_is_held_back_too(capsys):
    """The loggers named torch are remembered between blocks; one made after, or a placeholder
    that became a logger since and got a handler (as torch's own logging set-up does), is held
    back by the next block all the same."""
    import logging

    from pytest_graphbudget.quiet import held

    child = logging.getLogger("torch.graphbudget_test_late.child")  # its parent: a placeholder
    with held("before"):
        pass
    loggers = [child, logging.getLogger("torch.graphbudget_test_late")]  # the parent, made now
    handlers = [logging.StreamHandler() for _ in loggers]
    try:
        for logger, handler in zip(loggers, handlers, strict=True):
            logger.addHandler(handler)
            logger.propagate = False
        with held("after"):
            for logger in loggers:
                logger.warning("torch's noise")
        assert capsys.readouterr() == ("", "")
    finally:
        for logger, handler in zip(loggers, handlers, strict=True):
            logger.removeHandler(handler)


# ---------------------------------------------------------------------------------------------
# init --trust-pickle writes a budget that loads the file the same way, and passes


def test_init_trust_pickle_budget_passes(pytester, capsys):
    import torch

    torch.save(tiny_module(), pytester.path / "tiny.pt")  # a full pickle, not weights only
    args = ["init", "tiny.pt", "--trust-pickle", "--input-shape", "2,8", "-q"]
    assert cli.main([*args, "-o", "budgets/models.toml"]) == 0, capsys.readouterr().err
    written = (pytester.path / "budgets" / "models.toml").read_text()
    assert "trust_pickle = true" in written
    assert 'macs_max = "450"' in written  # 384 MACs plus 15% headroom = 441.6, rounded up
    result = pytester.runpytest("--graph-budget", "budgets/", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["tiny.pt*840/970*"])  # 840 x 1.15 = 966, rounded up


def test_trust_pickle_false_in_a_budget_refuses_the_pickle(pytester):
    import torch

    torch.save(tiny_module(), pytester.path / "tiny.pt")
    pytester.makefile(
        ".toml",
        **{
            "budgets/pickles": textwrap.dedent(
                """
                [models.trusted]
                model = "tiny.pt"
                trust_pickle = true
                input_shape = [2, 8]
                macs_max = 384

                [models.untrusted]
                model = "tiny.pt"
                input_shape = [2, 8]
                macs_max = 384

                [models.says_no]
                model = "tiny.pt"
                trust_pickle = "no"
                input_shape = [2, 8]
                macs_max = 384
                """
            )
        },
    )
    result = pytester.runpytest("--graph-budget", "budgets/", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*tiny.pt is a full pickle*trust_pickle=True*"])
    result.stdout.fnmatch_lines(["*trust_pickle must be true or false, got 'no'*"])


# ---------------------------------------------------------------------------------------------
# The seed scripts' spellings: --model NAME, --list, -v/--verbose


def test_model_option_is_the_model_argument(tmp_path, capsys):
    model = str(save_exported(tmp_path / "tiny.pt2"))
    assert cli.main(["profile", "--model", model, "--format", "json", "-q"]) == 0
    by_option = json.loads(capsys.readouterr().out)
    assert cli.main(["profile", model, "--format", "json", "-q", "--verbose"]) == 0
    by_argument = json.loads(capsys.readouterr().out)
    assert by_option["totals"] == by_argument["totals"]
    assert by_option["totals"]["macs"] == TINY["macs"]


@pytest.mark.parametrize(
    ("argv", "snippet"),
    [
        (["profile"], "required: MODEL (`graph-budget profile resnet18`"),
        (["explore", "a.pt2", "--model", "b.pt2"], "two models given (a.pt2 and --model b.pt2)"),
    ],
)
def test_model_missing_or_given_twice(argv, snippet, capsys):
    assert cli.main(argv) == 2
    assert snippet in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("spelling", [["--list"], ["profile", "--list"]])
def test_list_option_means_the_list_command(spelling, capsys):
    assert cli.main(["list", "resnet1*", "-q"]) == 0
    expected = capsys.readouterr().out
    assert "resnet18" in expected
    assert cli.main([*spelling, "resnet1*", "-q"]) == 0
    assert capsys.readouterr().out == expected


def test_garbage_pt_file_is_not_called_a_pickle_to_trust(tmp_path, capsys):
    """A file torch.save did not write must not be answered with "pass --trust-pickle": that
    would invite unpickling whatever it is."""
    junk = tmp_path / "junk.pt"
    junk.write_text("x = 1\n")
    assert cli.main(["profile", str(junk), "--input-shape", "2,8"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "junk.pt is not a readable PyTorch file (Unsupported operand" in line
    assert "trust" not in line
    junk.write_text("hello world, not a model\n")  # was "could not load the model (KeyError"
    assert cli.main(["profile", str(junk), "--input-shape", "2,8"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "junk.pt is not a readable PyTorch file (KeyError:" in line and "trust" not in line


@pytest.mark.parametrize(
    ("argv", "snippet"),
    [
        (["profile", "resnet18", "--mode", "training"], "invalid choice: 'training'"),
        (["profile", "resnet18", "--dtype", "bf16"], "invalid choice: 'bf16'"),
        (["profile", "resnet18", "--depth", "x"], "--depth"),
        (["profil", "resnet18"], "invalid choice: 'profil'"),
    ],
)
def test_a_usage_error_is_one_line(argv, snippet, capsys):
    """argparse's usage block above the error made a mistyped flag value several lines."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert snippet in err[0] and "--help" in err[0]
