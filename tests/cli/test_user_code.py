"""``graph-budget`` on the user's own code, with nothing exported first (issue 22, item 6):
``profile package.module:callable`` imports it from the current directory as ``check`` imports
factories, and a ``.pt`` full pickle of the user's classes loads with ``--trust-pickle``.

Each test writes a tiny package to ``tmp_path`` (a name nothing else on ``sys.path`` has) and
runs ``cli.main`` in-process from there. Its model, counted by hand at input 1x3x8x8:

  Conv2d(3, 8, 3, padding=1): 8 output channels x 8x8 positions x 3*3*3 taps = 13,824 MACs
  Linear(8, 10) on the channel means: 8*10 = 80 MACs
  total: 13,904 MACs
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from pytest_graphbudget import cli

PACKAGE = "gb_usercode_pkg"
MACS = 8 * 8 * 8 * 3 * 3 * 3 + 8 * 10

MODELS = """
import torch
from torch import nn

from pytest_graphbudget import ModelCase


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(self.conv(x).relu().mean((2, 3)))


def build_cnn():
    torch.manual_seed(0)
    return ModelCase(CNN(), (torch.randn(1, 3, 8, 8),), name="cnn")


def build_pair():
    return CNN(), (torch.randn(1, 3, 8, 8),)


def build_bare():
    return CNN()


def build_nothing():
    return 42


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4, bias=False)

    def forward(self, x):
        y = self.lin(x)
        if y.sum() > 0:  # a branch on a value: FX fails, Dynamo breaks the graph here
            return y * 2
        return y


def build_branchy():
    model = Branchy()
    nn.init.ones_(model.lin.weight)
    return model, (torch.ones(1, 4),)
"""


def forget_package() -> None:
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(f"{PACKAGE}.")]:
        del sys.modules[name]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project whose package is importable only from its own directory, the current one."""
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(textwrap.dedent(MODELS))
    (tmp_path / "pyproject.toml").write_text("[tool.graph_budget]\n")
    forget_package()
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    forget_package()


def profile_json(capsys, *argv: str) -> dict:
    code = cli.main(["profile", *argv, "--format", "json", "-q"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize(
    ("target", "extra"),
    [
        ("build_cnn", ()),  # a ModelCase
        ("build_pair", ()),  # a (model, inputs) pair
        ("build_bare", ("--input-shape", "1,3,8,8")),  # a bare model fed torch.randn(shape)
    ],
)
def test_profile_a_callable_of_the_users_package(project, capsys, target, extra):
    data = profile_json(capsys, f"{PACKAGE}.models:{target}", *extra)
    assert data["totals"]["macs"] == MACS
    assert data["inputs"][0]["shape"] == [1, 3, 8, 8]
    assert PACKAGE not in "".join(sys.path)  # imported for the load, then sys.path as it was


@pytest.mark.parametrize(
    ("argv", "snippet"),
    [
        (["build_bare"], "returned a bare module: give input_shape"),
        (["build_nothing"], "returned int, not a model, a (model, inputs) pair or a ModelCase"),
        (["missing"], "has no attribute 'missing'"),
        (["build_cnn", "--seq-len", "64"], "--seq-len applies to zoo models and files"),
        (["build_cnn", "--meta"], "--meta applies to zoo models and files"),
        (["build_cnn", "--input-shape", "1,3,16,16"], "returned its own inputs ([1, 3, 8, 8])"),
    ],
)
def test_a_callable_that_cannot_be_profiled_as_asked_is_one_line(project, capsys, argv, snippet):
    target, *flags = argv
    assert cli.main(["profile", f"{PACKAGE}.models:{target}", *flags]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("graph-budget: error:")]
    assert len(errors) == 1 and snippet in errors[0], err


def test_a_profiles_notes_are_said_on_stderr(project, capsys):
    # a step priced for a GPU keeps the host's peak; the note had been in the JSON alone
    code = cli.main(
        ["profile", f"{PACKAGE}.models:build_cnn", "--mode", "train", "--hardware", "h100"]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "note: cnn: peak memory counted as on the host, not as h100's CUDA caching" in err, err


def test_a_callable_named_on_its_package_says_which_submodule_has_it(capsys):
    # a user's first try: torchvision.models holds the builders, torchvision imports it
    assert cli.main(["profile", "torchvision:mobilenet_v3_small"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'torchvision.models:mobilenet_v3_small'?" in err, err


def test_a_full_pickle_of_the_users_classes_loads_from_the_current_directory(
    project, capsys, monkeypatch
):
    import torch

    with monkeypatch.context() as saving:  # torch.save needs the class importable, as a user has
        saving.syspath_prepend(str(project))
        from gb_usercode_pkg.models import CNN

        torch.save(CNN(), project / "model.pt")
    forget_package()
    data = profile_json(capsys, "model.pt", "--trust-pickle", "--input-shape", "1,3,8,8")
    assert data["totals"]["macs"] == MACS


def test_init_on_a_callable_writes_a_budget_that_check_passes(project, capsys):
    spec = f"{PACKAGE}.models:build_cnn"
    assert cli.main(["init", spec, "-q", "-o", "budgets/models.toml"]) == 0
    written = (project / "budgets" / "models.toml").read_text()
    assert f'factory = "{spec}"' in written and "input_shape" not in written
    assert 'macs_max = "16k"' in written  # 13,904 MACs plus 15% = 15,989.6, up to 16.0k
    capsys.readouterr()
    forget_package()
    assert cli.main(["check", "budgets"]) == 0, capsys.readouterr()


def test_breaks_prices_through_dynamo_and_lists_the_graph_break(project, capsys):
    from pytest_graphbudget.compat import dynamo_breaks_unavailable

    if why := dynamo_breaks_unavailable():
        pytest.skip(why)
    spec = f"{PACKAGE}.models:build_branchy"
    taped, broken = profile_json(capsys, spec), profile_json(capsys, spec, "--breaks")
    assert (taped["trace"]["method"], broken["trace"]["method"]) == ("eager", "dynamo-breaks")
    assert taped["trace"]["breaks"] == []
    assert len(broken["trace"]["breaks"]) >= 1  # the branch on y.sum()
    # lin: 1 x 4 x 4 = 16 MACs on either path (y = 4 everywhere: the doubling branch)
    assert taped["totals"]["macs"] == broken["totals"]["macs"] == 16
    assert cli.main(["profile", spec, "--breaks", "--mode", "train"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--breaks captures one eval forward" in err


@pytest.mark.parametrize(
    ("name", "factory"),
    [
        (f"{PACKAGE}.models:build_cnn", True),
        ("timmish:build", True),  # a package whose name starts like a zoo prefix
        ("timm:resnet50", False),  # the zoo's timm family, not `timm.resnet50()`
        ("TIMM:ResNet50", False),
        ("diffusers:UNet2DConditionModel", False),  # a class the zoo builds, not calls bare
    ],
)
def test_a_name_the_zoo_claims_by_its_prefix_is_no_callable(name, factory):
    from pytest_graphbudget.cli.loading import is_factory

    assert is_factory(name) is factory


def test_profile_a_timm_name_next_to_the_users_package(project, capsys, torchvision_reference):
    pytest.importorskip("timm")
    # timm's resnet18 is torchvision's network: 1.81 GMACs, 11,689,512 parameters published.
    published = torchvision_reference("resnet18")
    data = profile_json(capsys, "timm:resnet18", "--meta")
    assert data["model"] == "timm:resnet18"
    assert data["totals"]["macs"] == pytest.approx(published.macs, rel=1e-3)
    assert data["totals"]["params"] == published.num_params
