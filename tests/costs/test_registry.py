"""The op registry (issue 11): one entry per op, custom formulas, and the plugin hook.

Counts are hand-derived from the formulas written here; fusion is checked against the rules
of ``partition.py`` applied by hand (an anchor starts a kernel, a pointwise op joins its
producer's kernel, a reduction after an anchor starts a kernel of its own).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from pytest_graphbudget import profile_model, register_formula  # noqa: E402
from pytest_graphbudget.costs import registry  # noqa: E402
from pytest_graphbudget.costs.registry import (  # noqa: E402
    REGISTRY,
    ROLES,
    ZERO_ROLES,
    FormulaError,
    RegistryError,
    Shape,
    op_key,
)
from pytest_graphbudget.hookspecs import hookimpl  # noqa: E402


# The schema is given: torch 2.4's custom_op cannot read this module's string annotations.
@torch.library.custom_op(
    "gbtest::scaled_mm", mutates_args=(), schema="(Tensor a, Tensor b) -> Tensor"
)
def scaled_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A matrix product plus one add per output element, hidden in one custom op."""
    return a @ b + 1


@scaled_mm.register_fake
def _(a, b):
    return a.new_empty(a.shape[0], b.shape[1])


@torch.library.custom_op("gbtest::mix", mutates_args=(), schema="(Tensor x) -> Tensor")
def mix(x: torch.Tensor) -> torch.Tensor:
    """One multiply per element, or a reduction: whatever role it is registered with."""
    return x * 2


@mix.register_fake
def _(x):
    return torch.empty_like(x)


@pytest.fixture(autouse=True)
def restored_registry():
    """Each test adds entries of its own: take them out again afterwards."""
    saved = dict(REGISTRY)
    yield
    REGISTRY.clear()
    REGISTRY.update(saved)


class ScaledMM(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 3))

    def forward(self, x):
        return torch.ops.gbtest.scaled_mm(x, self.w)


SCALED_MACS = 2 * 8 * 3  # (2, 8) @ (8, 3)
SCALED_FLOPS = 2 * SCALED_MACS + 2 * 3  # and one add per output element


def price_scaled_mm(calls: list) -> None:
    @register_formula(torch.ops.gbtest.scaled_mm.default, kind="matmul")
    def formula(a, b, *, out=None, **kwargs):
        calls.append((a, b, out))
        m, k = a
        n = b[1]
        return {"macs": m * k * n, "flops": 2 * m * k * n + m * n}


def test_a_custom_op_is_priced_by_its_registered_formula():
    unpriced = profile_model(ScaledMM(), (torch.randn(2, 8),))
    assert unpriced.coverage.unsupported_ops == {"gbtest.scaled_mm": 1}
    calls: list = []
    price_scaled_mm(calls)
    prof = profile_model(ScaledMM(), (torch.randn(2, 8),))
    assert (prof.macs, prof.flops) == (SCALED_MACS, SCALED_FLOPS)
    assert prof.coverage.unsupported_ops == {}
    # Formulas see shapes, as the built-in ones do: Shape objects, the output included.
    a, b, out = calls[-1]
    assert all(type(s) is Shape for s in (a, b, out))
    assert (a, b, out) == ((2, 8), (8, 3), (2, 3))
    # One anchor kernel; a "matmul" with a weight operand is labelled "linear", as aten.mm is.
    assert [(s.kind, s.flops) for s in prof.subgraphs] == [("linear", SCALED_FLOPS)]


def test_flops_below_twice_the_macs_fails_the_profile_in_one_line():
    @register_formula(torch.ops.gbtest.scaled_mm)
    def formula(a, b, *, out=None, **kwargs):
        return {"macs": 10, "flops": 19}

    with pytest.raises(FormulaError) as info:
        profile_model(ScaledMM(), (torch.randn(2, 8),))
    first = str(info.value).splitlines()[0]
    assert first.startswith("gbtest.scaled_mm: flops=19 is less than 2 * macs=20")


@pytest.mark.parametrize(
    "result", [{"flops": 4}, (4, 2), {"flops": -1, "macs": 0}, {"flops": 2.5, "macs": 1}]
)
def test_a_formula_result_that_is_not_a_cost_is_an_error(result):
    register_formula(torch.ops.gbtest.mix.default, role="pointwise")(lambda *a, **k: result)
    with pytest.raises(FormulaError, match="gbtest.mix: "):
        registry.price("gbtest.mix", (Shape((2,)),), {}, Shape((2,)))


class LinearMix(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(torch.ops.gbtest.mix(self.fc(x)))


@pytest.mark.parametrize(
    "role, kinds",
    [
        # pointwise: joins the linear's kernel, as relu does after it
        ("pointwise", ["linear+gbtest.mix+relu"]),
        # reduction: needs the linear's whole output, so starts a kernel; relu joins it
        ("reduction", ["linear", "gbtest.mix+relu"]),
    ],
)
def test_the_role_decides_fusion(role, kinds):
    @register_formula(torch.ops.gbtest.mix.default, role=role)
    def formula(x, *, out=None, **kwargs):
        return {"macs": 0, "flops": x[0] * x[1]}

    prof = profile_model(LinearMix(), (torch.randn(2, 8),))
    assert [s.kind for s in prof.subgraphs] == kinds
    # linear: 2*8*8 MACs and a bias add per output; mix and relu: one FLOP per element
    assert prof.flops == 2 * (2 * 8 * 8) + 16 + 16 + 16


def test_an_op_has_one_entry():
    with pytest.raises(RegistryError, match="mm already has a registry entry"):
        register_formula(torch.ops.aten.mm.default)(lambda *a, **k: {"flops": 0, "macs": 0})
    register_formula(torch.ops.gbtest.mix.default, role="pointwise")(lambda *a, **k: {})
    with pytest.raises(RegistryError, match="gbtest.mix already has a registry entry"):
        register_formula(torch.ops.gbtest.mix)(lambda *a, **k: {})
    with pytest.raises(RegistryError, match="softmax already has"):
        registry.register("_softmax", role="reduction")(lambda *a, **k: registry.OpCost())


def test_a_misspelt_key_is_an_error():
    with pytest.raises(RegistryError, match="convolutoin: no such op in torch.ops.aten"):
        registry.register("convolutoin", role="anchor")(lambda *a, **k: registry.OpCost())
    with pytest.raises(RegistryError, match="roi_algin: no such op in torch.ops.torchvision"):
        registry.check_key("torchvision.roi_algin")
    assert "convolutoin" not in REGISTRY


def test_an_op_this_torch_predates_has_neither_entry_nor_workspace(monkeypatch):
    # compat.NEWER_OPS: on a torch older than an op (_safe_softmax before 2.5) its entry is
    # skipped, and so must its workspace be (the torch 2.4 run had failed at import).
    monkeypatch.setattr(registry, "op_available", lambda name: name != "no_such_newer_op")
    registry.register("no_such_newer_op", role="reduction")(lambda *a, **k: registry.OpCost())
    registry.workspace("no_such_newer_op")(lambda *a, **k: 0)
    assert "no_such_newer_op" not in REGISTRY
    with pytest.raises(RegistryError, match="convolutoin: a workspace needs the op's entry"):
        registry.workspace("convolutoin")(lambda *a, **k: 0)


def test_a_role_must_be_known():
    with pytest.raises(RegistryError, match="unknown role 'elementwise'"):
        register_formula(torch.ops.gbtest.mix, role="elementwise")
    with pytest.raises(RegistryError, match="needs a formula"):
        registry.zero_cost("relu6", role="pointwise")
    with pytest.raises(RegistryError, match="register_formula takes an op"):
        register_formula("gbtest::mix")


def installed_at_least(package: str, version: str) -> bool:
    from importlib import metadata

    from packaging.version import Version

    try:
        return Version(metadata.version(package)) >= Version(version)
    except metadata.PackageNotFoundError:
        return False


def test_every_key_is_a_real_op_and_every_entry_has_a_role():
    pytest.importorskip("torchvision")  # defines torch.ops.torchvision
    # transformers defines torch.ops.transformers: the pinned release (constraints.txt) has
    # every op a key names; older ones some (5.20: no fallback backward) or none (4.x)
    try:
        import transformers.integrations.moe  # noqa: F401
    except ImportError:
        pass
    unloaded = () if installed_at_least("transformers", "5.23") else ("transformers.",)
    for name in REGISTRY:
        if not name.startswith(unloaded):
            registry.check_key(name)
    for name, entry in REGISTRY.items():
        assert entry.name == name and entry.kind
        assert entry.role in ROLES, name
        assert entry.formula is not None or entry.role in ZERO_ROLES, name
    roles = {entry.role for entry in REGISTRY.values()}
    assert roles == set(ROLES)


def test_op_keys():
    assert op_key(torch.ops.gbtest.mix) == op_key(torch.ops.gbtest.mix.default) == "gbtest.mix"
    assert op_key(torch.ops.aten.relu_.default) == "relu"  # in-place variants share an entry
    assert op_key(torch.ops.aten.addmm.out) == "addmm"


# The pluggy hook: a package's formulas, registered when the registry is first used


class FakePlugin:
    """What an installed package exposes under the ``graphbudget`` entry-point group."""

    @hookimpl
    def graphbudget_register_formulas(self, register):
        @register(torch.ops.gbtest.scaled_mm.default, kind="matmul")
        def formula(a, b, *, out=None, **kwargs):
            return {"macs": a[0] * a[1] * b[1], "flops": 2 * a[0] * a[1] * b[1] + a[0] * b[1]}


class BrokenPlugin:
    @hookimpl
    def graphbudget_register_formulas(self, register):
        register(torch.ops.aten.mm.default)(lambda *a, **k: {"flops": 0, "macs": 0})


@pytest.fixture
def plugin_manager(monkeypatch):
    """The process-wide plugin manager, with the registry's hook not yet called."""
    from pytest_graphbudget.zoo import plugin_manager

    pm = plugin_manager()
    monkeypatch.setitem(registry._plugins, "state", "new")
    monkeypatch.setitem(registry._plugins, "error", None)
    registered = []
    yield lambda plugin: registered.append(pm.register(plugin) and plugin)
    for plugin in registered:
        pm.unregister(plugin)


def test_an_installed_plugin_prices_its_ops(plugin_manager):
    plugin_manager(FakePlugin())
    prof = profile_model(ScaledMM(), (torch.randn(2, 8),))
    assert (prof.macs, prof.flops) == (SCALED_MACS, SCALED_FLOPS)
    assert prof.coverage.unsupported_ops == {}
    assert registry._plugins["state"] == "loaded"
    registry.lookup("mm")  # once loaded, the hook is not called again (it would raise)
    assert REGISTRY["gbtest.scaled_mm"].kind == "matmul"


def test_a_broken_plugin_fails_every_lookup(plugin_manager):
    plugin_manager(BrokenPlugin())
    for _ in range(2):
        with pytest.raises(RegistryError, match="mm already has a registry entry"):
            registry.lookup("mm")
