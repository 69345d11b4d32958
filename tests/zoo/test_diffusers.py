"""diffusers models by name (``diffusers:PIPELINE/COMPONENT``, ``diffusers:CLASS``): built from
configuration, offline, without weights.

The big ones are built on the meta device (no weight is allocated), so these stay fast.
References: the parameter counts published for each pipeline's component, and DiT-XL/2's
118.6 GFLOPs (DiT paper, Table 4: fvcore's count, one per multiply-add).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from torch.utils._pytree import tree_map  # noqa: E402

from pytest_graphbudget import cli, profile_model  # noqa: E402
from pytest_graphbudget.errors import GraphBudgetError, UnknownModelError  # noqa: E402
from pytest_graphbudget.zoo import list_models, resolve  # noqa: E402
from pytest_graphbudget.zoo.diffusers import INPUTS, shipped  # noqa: E402


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def shapes(value):
    return tree_map(lambda x: tuple(x.shape) if isinstance(x, torch.Tensor) else x, value)


# The parameter counts of each shipped component as published (the weights' own count):
# SD 1.5's UNet 859,520,964 and VAE 83,653,863; SDXL's UNet 2,567,463,684 (its VAE is SD's
# architecture); SD3 Medium's MMDiT 2,028,328,000; FLUX.1-dev's transformer 11,901,408,320.
# DiT-XL/2: the DiT repository's 675,129,632, less its fixed sin-cos position table (294,912,
# a buffer in diffusers), plus the timestep and label embedder (2,777,472) that diffusers'
# checkpoint repeats in each of the 27 other blocks.
PUBLISHED = {
    "stable-diffusion-v1-5/unet": ("UNet2DConditionModel", 859_520_964),
    "stable-diffusion-v1-5/vae": ("AutoencoderKL", 83_653_863),
    "stable-diffusion-xl-base-1.0/unet": ("UNet2DConditionModel", 2_567_463_684),
    "stable-diffusion-xl-base-1.0/vae": ("AutoencoderKL", 83_653_863),
    "stable-diffusion-3-medium/transformer": ("SD3Transformer2DModel", 2_028_328_000),
    "FLUX.1-dev/transformer": ("FluxTransformer2DModel", 11_901_408_320),
    "DiT-XL-2-256/transformer": (
        "DiTTransformer2DModel",
        675_129_632 - 294_912 + 27 * 2_777_472,
    ),
}


def test_every_shipped_component_and_default_class_is_listed():
    listed = list_models()["diffusers"]
    assert set(PUBLISHED) == set(shipped())
    assert {f"diffusers:{name}" for name in (*shipped(), *INPUTS)} == set(listed)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_configurations_build_as_published(name, no_network):
    class_name, expected = PUBLISHED[name]
    case = resolve(f"diffusers:{name}", meta=True)
    assert type(case.model).__name__ == class_name
    assert n_params(case.model) == expected
    assert case.name == f"diffusers:{name}"
    assert no_network == []


def test_a_big_unet_is_built_on_meta_by_itself(no_network):
    case = resolve("diffusers:stable-diffusion-v1-5/unet")  # 860M parameters: above 300M
    assert {p.device.type for p in case.model.parameters()} == {"meta"}
    assert not case.model.training
    assert shapes(case.kwargs) == {
        "sample": (1, 4, 64, 64),
        "timestep": (1,),
        "encoder_hidden_states": (1, 77, 768),
    }
    assert no_network == []


def test_sdxl_unet_gets_its_pooled_text_and_time_ids(no_network):
    case = resolve("diffusers:stable-diffusion-xl-base-1.0/unet", batch=2, seq_len=154)
    assert shapes(case.kwargs) == {
        "sample": (2, 4, 128, 128),
        "timestep": (2,),
        "encoder_hidden_states": (2, 154, 2048),
        "added_cond_kwargs": {"text_embeds": (2, 1280), "time_ids": (2, 6)},
    }


@pytest.mark.parametrize(
    "spelling",
    [
        "diffusers:runwayml/stable-diffusion-v1-5/vae",
        "diffusers:stable-diffusion-v1-5/stable-diffusion-v1-5/vae",
        "DIFFUSERS:Stable-Diffusion-V1-5/VAE",
    ],
)
def test_hub_ids_and_any_case_name_the_shipped_component(spelling, no_network):
    case = resolve(spelling, meta=True, input_shape=(1, 3, 256, 256), seq_len=10)
    assert case.name == "diffusers:stable-diffusion-v1-5/vae"
    assert shapes(case.kwargs) == {"sample": (1, 3, 256, 256)}
    assert "seq_len ignored" in case.note


@pytest.mark.parametrize(
    "name, expected",
    [
        ("diffusers:stable-diffusion-v1-5/unt", "diffusers:stable-diffusion-v1-5/unet"),
        ("diffusers:UNet2DConditionModl", "diffusers:UNet2DConditionModel"),
    ],
)
def test_unknown_diffusers_name_suggests_the_close_ones(name, expected, no_network):
    with pytest.raises(UnknownModelError) as info:
        resolve(name)
    assert expected in str(info.value).split("did you mean:")[1]


# Every class from its defaults, and SDXL's UNet (the only one with added conditions; its meta
# forward alone takes ~2.5 s).
SDXL_UNET = pytest.param("stable-diffusion-xl-base-1.0/unet", marks=pytest.mark.slow)


@pytest.mark.parametrize("name", [*sorted(INPUTS), SDXL_UNET])
def test_every_listed_class_builds_from_its_defaults_and_runs_its_inputs(name, no_network):
    case = resolve(f"diffusers:{name}", meta=True)
    if name in INPUTS:
        assert hasattr(diffusers.models, name) and type(case.model).__name__ == name
    kwargs = tree_map(lambda x: x.to("meta") if isinstance(x, torch.Tensor) else x, case.kwargs)
    with torch.no_grad():
        case.model(**kwargs)  # on the meta device: shapes checked, nothing computed
    assert no_network == []


def test_a_small_default_model_profiles(no_network):
    prof = profile_model("diffusers:AutoencoderKL")
    assert prof.params == n_params(diffusers.AutoencoderKL()) and prof.macs > 0
    assert prof.coverage.unsupported_ops == {}
    assert [i.shape for i in prof.inputs] == [[1, 3, 32, 32]]
    assert no_network == []


def test_dit_xl_2_macs_equal_the_papers(no_network):
    prof = profile_model("diffusers:DiT-XL-2-256/transformer", meta=True)
    assert prof.macs == pytest.approx(118.6e9, rel=1e-3)  # DiT, Table 4: 118.6 Gflops
    assert prof.coverage.unsupported_ops == {}
    assert no_network == []


def test_graph_budget_list_shows_diffusers_names(capsys):
    assert cli.main(["list", "--family", "diffusers", "stable-diffusion-v1-5", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("diffusers (2)")
    assert "diffusers:stable-diffusion-v1-5/unet" in out
    assert "diffusers:stable-diffusion-v1-5/vae" in out


def test_without_diffusers_the_family_is_empty_and_a_name_says_what_to_install(monkeypatch):
    from pytest_graphbudget.zoo.diffusers import DiffusersLoader

    monkeypatch.setitem(__import__("sys").modules, "diffusers", None)  # `import diffusers` raises
    assert DiffusersLoader().names() == []
    with pytest.raises(GraphBudgetError, match=r"pip install 'pytest-graphbudget\[diffusers\]'"):
        resolve("diffusers:stable-diffusion-v1-5/unet")
