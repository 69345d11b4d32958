"""The profile cache never outlives the code it describes (issue 9, item 3).

The model under test is ``nn.Linear(8, 8, bias=False)`` on a ``(1, 8)`` input, followed by ``k``
additions of a constant: 2 * 8 * 8 = 128 FLOPs for the layer and 8 per addition, so ``k = 1``
gives 136 and ``k = 2`` gives 144. Each edit below moves ``k`` from 1 to 2 somewhere outside
the module class; the figures written by ``--graph-budget-update`` must follow, in the same
cache directory. That a run reused the cache is proven by a file the model's own code appends
to whenever it runs, not by anything the plugin says.
"""

from __future__ import annotations

import sys

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

BEFORE, AFTER = 136, 144

HELPERS = """
ADDS = 1
CONFIG = {"adds": 1}

def extra(x):
    return x + 1
"""

MODELS = """
import pathlib
import torch
from pytest_graphbudget import ModelCase
import helpers
from helpers import extra

ADDS = 1
CONFIG = {"adds": 1}

def local(x):
    return x + 1

def lazily(x):
    from lazy import later  # imported when it runs: not a global of this file

    return later(x)

def mark(x):
    with open(pathlib.Path(__file__).with_name("calls.log"), "a") as log:
        log.write("forward\\n")
    return x

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8, bias=False)

    def forward(self, x):
        x = mark(self.fc(x))
        return STEP(x)

def build():
    return ModelCase(Net(), (torch.randn(1, 8),), name="net")
"""

TEST = """
import pytest
from models import build

@pytest.fixture
def model():
    return build()

@pytest.mark.flops_max("1M")
def test_model(model):
    pass
"""

# Where the one extra addition goes: (file, the step the model runs, the text before and after).
EDITS = {
    "module-level helper": ("models", "local(x)", "return x + 1", "return x + 1 + 1"),
    "helper imported from another file": (
        "helpers",
        "extra(x)",
        "return x + 1",
        "return x + 1 + 1",
    ),
    "helper reached through its module": (
        "helpers",
        "helpers.extra(x)",
        "return x + 1",
        "return x + 1 + 1",
    ),
    "helper imported inside a function": ("lazy", "lazily(x)", "return x + 1", "return x + 1 + 1"),
    "constant": ("models", "adds(x, ADDS)", "ADDS = 1", "ADDS = 2"),
    "constant in another file": ("helpers", "adds(x, helpers.ADDS)", "ADDS = 1", "ADDS = 2"),
    "config dict": ("models", 'adds(x, CONFIG["adds"])', '{"adds": 1}', '{"adds": 2}'),
    "config dict in another file": (
        "helpers",
        'adds(x, helpers.CONFIG["adds"])',
        '{"adds": 1}',
        '{"adds": 2}',
    ),
}

LAZY = """
def later(x):
    return x + 1
"""

ADDS_HELPER = """
def adds(x, n):
    for _ in range(n):
        x = x + 1
    return x
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    # An edit that keeps a file's size within the same second would otherwise be hidden by the
    # bytecode cache (it checks size and whole-second mtime), whatever our cache does.
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    pytester.syspathinsert()
    pytester.makepyfile(helpers=HELPERS, lazy=LAZY, test_model=TEST)
    return pytester


def write_models(pytester: pytest.Pytester, step: str) -> None:
    pytester.makepyfile(models=MODELS.replace("STEP(x)", step) + ADDS_HELPER)


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--graph-budget", "-v", *args)


def baseline_flops(pytester: pytest.Pytester) -> int:
    data = tomllib.loads((pytester.path / "budgets" / "baseline.toml").read_text())
    return data["models"]["test_model.py::test_model::model"]["flops"]


def forward_calls(pytester: pytest.Pytester) -> int:
    log = pytester.path / "calls.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def entries(pytester: pytest.Pytester) -> int:
    return len(list((pytester.path / ".graph_budget_cache").rglob("*.json")))


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edit_outside_the_module_class_reaches_the_baseline(project, edit):
    filename, step, before, after = EDITS[edit]
    write_models(project, step)
    run(project, "--graph-budget-update").assert_outcomes(passed=1)
    assert baseline_flops(project) == BEFORE
    assert entries(project) == 1
    calls = forward_calls(project)
    assert calls > 0

    path = project.path / f"{filename}.py"
    path.write_text(path.read_text().replace(before, after, 1))
    run(project, "--graph-budget-update").assert_outcomes(passed=1)
    assert baseline_flops(project) == AFTER, f"{edit}: the cache served the old figures"
    assert forward_calls(project) > calls  # profiled again, not served from the cache
    assert entries(project) == 2


def test_unchanged_code_is_served_from_the_cache(project):
    write_models(project, "local(x)")
    first = run(project, "--graph-budget-update")
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["graph budget cache: 1 profiled and stored"])
    calls = forward_calls(project)
    assert calls > 0 and baseline_flops(project) == BEFORE

    # A rewritten file with the same code, a fresh process-level import, new random weights:
    # nothing the graph depends on changed, so the model never runs.
    (project.path / "models.py").write_text((project.path / "models.py").read_text() + "\n# x\n")
    second = run(project, "--graph-budget-update")
    second.assert_outcomes(passed=1)
    second.stdout.fnmatch_lines(["graph budget cache: 1 reused"])
    assert forward_calls(project) == calls
    assert baseline_flops(project) == BEFORE
    assert entries(project) == 1


def test_a_model_without_a_sound_fingerprint_is_profiled_every_time(project):
    write_models(project, "local(x)")
    models = project.path / "models.py"
    models.write_text(
        models.read_text().replace(
            "self.fc = torch.nn.Linear(8, 8, bias=False)",
            "self.fc = torch.nn.Linear(8, 8, bias=False)\n"
            "        import threading\n"
            "        self.lock = threading.Lock()",
        )
    )
    for _ in range(2):
        calls = forward_calls(project)
        result = run(project, "--graph-budget-update")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(
            [
                "graph budget cache: 1 not cached",
                "  net: not cached, profiled every run: a _thread.lock object has no stable form",
            ]
        )
        assert forward_calls(project) > calls
        assert baseline_flops(project) == BEFORE
    assert entries(project) == 0


# -- the fingerprint itself, on modules built here ------------------------------------------


def scaled(k):
    return lambda x: x * k


def _net(k=2, index=(0, 1, 2, 3), act=None):
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)
            self.k = k
            self.act = act or scaled(k)
            self.register_buffer("index", torch.tensor(index))

        def forward(self, x):
            return self.act(self.fc(x))[:, self.index]

    return Net()


def test_the_same_code_and_data_give_the_same_fingerprint_whatever_the_weights():
    from pytest_graphbudget.run.fingerprint import fingerprint

    # Fresh random weights each time: an unseeded fixture must still hit the cache.
    assert fingerprint(_net()) == fingerprint(_net())


@pytest.mark.parametrize(
    "change",
    [
        "hyper-parameter and closure",
        "integer buffer values",
        "forward hook",
        "patched library method",
        "patched library function",
        "value of a small float buffer",
        "numpy table",
    ],
)
def test_what_steers_the_graph_changes_the_fingerprint(change, monkeypatch):
    import torch

    from pytest_graphbudget.run.fingerprint import fingerprint

    before = fingerprint(_net())
    if change == "hyper-parameter and closure":
        after = fingerprint(_net(k=3))
    elif change == "integer buffer values":
        after = fingerprint(_net(index=(3, 2, 1, 0)))
    elif change == "forward hook":
        net = _net()
        net.fc.register_forward_hook(lambda module, args, out: out * 2)
        after = fingerprint(net)
    elif change == "patched library method":
        original = torch.nn.Linear.forward
        monkeypatch.setattr(torch.nn.Linear, "forward", lambda self, x: original(self, x) * 2)
        after = fingerprint(_net())
    elif change == "value of a small float buffer":
        nets = [_net(), _net()]
        nets[0].register_buffer("temperature", torch.tensor(0.5))
        nets[1].register_buffer("temperature", torch.tensor(0.7))
        before, after = map(fingerprint, nets)
    elif change == "numpy table":
        import numpy as np

        table = np.arange(5000)  # numpy prints it with "...": its repr hides the middle
        edited = table.copy()
        edited[2500] = -1
        before = fingerprint(_net(act=scaled(table)))
        after = fingerprint(_net(act=scaled(edited)))
    else:
        before = fingerprint(_net(act=_gelu))
        gelu = torch.nn.functional.gelu
        monkeypatch.setattr(torch.nn.functional, "gelu", lambda x: gelu(x) * 2)
        after = fingerprint(_net(act=_gelu))
    assert after != before


def _gelu(x):
    import os

    import torch.nn.functional as F

    os.path.basename("a cycle of library modules: os.path.os.path...")
    return F.gelu(x)


def test_an_object_without_a_stable_form_makes_the_model_uncacheable():
    import threading

    from pytest_graphbudget.run.fingerprint import Unfingerprintable, fingerprint

    net = _net()
    net.lock = threading.Lock()
    with pytest.raises(Unfingerprintable, match="_thread.lock"):
        fingerprint(net)


def test_a_local_model_is_keyed_by_its_bytes_and_a_pickle_by_what_it_builds(tmp_path):
    from pytest_graphbudget.run.cache import name_key

    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert", "num_hidden_layers": 1}')
    first = name_key(str(folder), {}, "generic")
    assert first == name_key(str(folder), {}, "generic")
    (folder / "config.json").write_text('{"model_type": "bert", "num_hidden_layers": 2}')
    assert name_key(str(folder), {}, "generic") not in (None, first)
    pickled = tmp_path / "model.pt"
    pickled.write_bytes(b"not read")
    # Its classes live in the project: the key must come from the module it unpickles to.
    assert name_key(str(pickled), {}, "generic") is None
    assert name_key("resnet18", {}, "generic") == name_key("resnet18", {}, "generic")


@pytest.mark.parametrize("switch", ["default dtype", "flash attention", "MHA fast path"])
def test_a_torch_setting_that_changes_the_graph_changes_a_zoo_key(switch):
    """A key names torch's settings only where they differ from its defaults (so that a warm
    run need not import torch), and then it must."""
    import torch

    from pytest_graphbudget.run.cache import name_key

    before = name_key("resnet18", {}, "generic")
    if switch == "default dtype":
        torch.set_default_dtype(torch.float64)
        try:
            after = name_key("resnet18", {}, "generic")
        finally:
            torch.set_default_dtype(torch.float32)
    elif switch == "flash attention":
        torch.backends.cuda.enable_flash_sdp(False)
        try:
            after = name_key("resnet18", {}, "generic")
        finally:
            torch.backends.cuda.enable_flash_sdp(True)
    else:
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            after = name_key("resnet18", {}, "generic")
        finally:
            torch.backends.mha.set_fastpath_enabled(True)
    assert after != before
    assert name_key("resnet18", {}, "generic") == before


def test_a_toml_budget_built_by_a_factory_follows_an_edited_helper(project):
    write_models(project, "local(x)")
    project.mkdir("budgets")
    (project.path / "budgets" / "net.toml").write_text(
        '[models.net]\nfactory = "models:build"\nflops_max = "1M"\n'
    )

    def flops() -> int:
        run(project, "budgets/", "--graph-budget-update").assert_outcomes(passed=1)
        data = tomllib.loads((project.path / "budgets" / "baseline.toml").read_text())
        return data["models"]["budgets/net.toml::net"]["flops"]

    assert flops() == BEFORE
    models = project.path / "models.py"
    models.write_text(models.read_text().replace("return x + 1", "return x + 1 + 1", 1))
    assert flops() == AFTER


def test_a_cache_entry_gives_back_the_profile_it_was_made_from(tmp_path):
    """``entry_of``/``from_entry`` are the one form a profile takes in the cache: through the
    cache's JSON file and back, ``Profile.to_dict()`` is byte-identical and the graph nodes an
    HTML report draws come back whole (``nn.Linear(8, 8, bias=False)`` on ``(1, 8)``: 2*8*8 =
    128 FLOPs, by hand)."""
    import json

    import torch

    from pytest_graphbudget.api import profile_model
    from pytest_graphbudget.run.cache import ProfileCache
    from pytest_graphbudget.run.profiler import entry_of, from_entry

    prof = profile_model(torch.nn.Linear(8, 8, bias=False), (torch.randn(1, 8),), name="lin")
    assert prof.node_info  # the nodes that must survive
    cache = ProfileCache(tmp_path)
    cache.put("ab" * 16, entry_of(prof, nodes=True))
    back = from_entry(cache.get("ab" * 16))
    assert back.to_dict()["totals"]["flops"] == 128
    assert json.dumps(back.to_dict()) == json.dumps(prof.to_dict())
    assert back.node_info == prof.node_info
    assert from_entry(entry_of(prof, nodes=False)).node_info == []


def _doubled(x):
    return x * 2


def _quadrupled(x):
    return x * 2 * 2


@pytest.mark.parametrize("wrap", ["no_grad", "inference_mode", "singledispatch", "contextmanager"])
def test_a_project_function_inside_a_library_wrapper_is_part_of_the_key(wrap):
    """User trial: a helper decorated with ``@torch.no_grad()`` (or singledispatch, or a
    contextmanager) was keyed by the library wrapper's name alone, so an edit of its body
    kept serving the old figures from the cache."""
    import contextlib
    import functools

    import torch

    from pytest_graphbudget.run.fingerprint import fingerprint

    def wrapped(body):
        if wrap == "no_grad":
            return torch.no_grad()(body)
        if wrap == "inference_mode":
            return torch.inference_mode()(body)
        if wrap == "singledispatch":
            return functools.singledispatch(body)
        return contextlib.contextmanager(lambda x: (yield body(x)))

    class Helper(torch.nn.Module):
        def __init__(self, helper):
            super().__init__()
            self.fc, self.helper = torch.nn.Linear(4, 4), helper

        def forward(self, x):
            if wrap == "contextmanager":
                with self.helper(x) as y:
                    return self.fc(y)
            return self.fc(self.helper(x))

    assert fingerprint(Helper(wrapped(_doubled))) != fingerprint(Helper(wrapped(_quadrupled)))


def test_a_cache_that_cannot_be_written_costs_no_model_its_verdict(project):
    """User trial: a cache directory that is a file (or read-only) made every model an
    "internal error ... this is a bug" though each profiled fine; only storing it failed.
    The model is judged, and the cache says in one note that nothing was stored."""
    write_models(project, "local(x)")
    (project.path / "not-a-dir").write_text("a file where the cache goes\n")
    result = run(project, "--graph-budget-cache-dir=not-a-dir")
    result.assert_outcomes(passed=1)
    assert "internal error" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "graph budget cache: 1 not stored",
            "  the profile cache cannot be written (NotADirectoryError: *): not stored",
        ]
    )


def _linear_doubled(x, weight, bias=None):
    return _F_LINEAR(x, weight, bias) * 2


def _linear_quadrupled(x, weight, bias=None):
    return _F_LINEAR(x, weight, bias) * 2 * 2


_F_LINEAR = __import__("torch").nn.functional.linear


@pytest.mark.parametrize("patch", ["project function", "partial", "another function"])
def test_a_patch_only_library_code_calls_changes_the_fingerprint(patch, monkeypatch):
    """User trial: ``F.linear`` replaced in a conftest, reached only through ``nn.Linear``
    (library code), or ``F.gelu = F.softsign``, or a ``functools.partial`` with another
    argument: the model's own code names none of them, and the cache served the old figures."""
    import functools

    import torch
    from torch.nn import functional as F

    from pytest_graphbudget.run.fingerprint import fingerprint

    def key() -> str:
        return fingerprint(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU()))

    if patch == "project function":
        monkeypatch.setattr(F, "linear", _linear_doubled)
        before = key()
        monkeypatch.setattr(F, "linear", _linear_quadrupled)
    elif patch == "partial":
        monkeypatch.setattr(F, "gelu", functools.partial(F.gelu, approximate="none"))
        before = key()
        monkeypatch.setattr(F, "gelu", functools.partial(F.gelu, approximate="tanh"))
    else:
        before = key()
        monkeypatch.setattr(F, "gelu", F.softsign)
    assert key() != before
