"""``dtype="int8"`` and ``dtype="float8_e4m3fn"``: a quantized copy of the model, as shipped.

Only ``nn.Linear`` layers are quantized, the way both recipes do it by default; every other
layer (convolutions, norms, embeddings) and the inputs stay as they are:

- ``int8``: ``torch.ao.quantization.quantize_dynamic`` with its default qconfig: each Linear
  weight int8, per tensor (symmetric), packed for FBGEMM; each forward quantizes its input
  dynamically (per tensor) and runs ``quantized::linear_dynamic``, an int8 matrix product.
- ``float8_e4m3fn``: torchao's ``Float8WeightOnlyConfig``: each Linear weight float8_e4m3fn
  with one float32 scale per output row; each forward dequantizes it for the matrix product.

The caller's model is never touched: both work on a deep copy.
"""

from __future__ import annotations

from typing import Any

from pytest_graphbudget.errors import GraphBudgetError, one_line
from pytest_graphbudget.quiet import held

QUANTIZED = ("int8", "float8_e4m3fn")
"""The ``dtype=`` values that quantize a copy rather than cast one."""


def quantized_copy(model: Any, dtype: str) -> Any:
    """A copy of ``model`` with its ``nn.Linear`` layers quantized to ``dtype``."""
    import copy

    import torch

    if hasattr(model, "graph_signature"):
        raise GraphBudgetError(
            f"dtype={dtype!r} cannot quantize an exported program: quantize the model, then "
            "export it, and leave dtype unset"
        )
    from pytest_graphbudget.engine.quantized import holds_quantized

    if not isinstance(model, torch.nn.Module):  # not a model: profile_model says so
        return model
    if holds_quantized(model):  # its Linears are quantized ones: it had "none" of them
        raise GraphBudgetError(
            f"dtype={dtype!r} quantizes a copy of the model, and {type(model).__name__} is "
            "already quantized: leave dtype unset"
        )
    if not any(isinstance(m, torch.nn.Linear) for m in model.modules()):
        raise GraphBudgetError(
            f"dtype={dtype!r} quantizes nn.Linear layers and {type(model).__name__} has none: "
            "quantize it yourself and leave dtype unset"
        )
    kinds = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if dtype == "int8" and kinds - {torch.float32}:  # quantized::linear_dynamic's input
        raise GraphBudgetError(
            f"dtype='int8' quantizes float32 Linear layers, and {type(model).__name__}'s "
            f"weights are {', '.join(sorted(str(k).removeprefix('torch.') for k in kinds))}: "
            "give the model in float32"
        )
    if any(p.is_meta for p in model.parameters()):  # int8's observers read them: a traceback
        raise GraphBudgetError(  # float8's scales too: its dequantize went unpriced on meta
            f"dtype={dtype!r} quantizes the weights from their values (their range, the scales), "
            f"and {type(model).__name__} is on the meta device, which has none: build it with "
            "real weights (meta = false in its table, or without --meta)"
        )
    try:
        copied = copy.deepcopy(model)
    except Exception as exc:
        raise GraphBudgetError(
            f"dtype={dtype!r}: cannot copy {type(model).__name__} to quantize it "
            f"({one_line(exc, typed=True)}); quantize it yourself and leave dtype unset"
        ) from None
    # Both recipes replace a model's submodules, never the model itself: a model that is one
    # Linear is quantized as the only child of a container, then taken out of it.
    holder = torch.nn.Sequential(copied)
    with held(f"quantizing {type(model).__name__} to {dtype}"):  # torch.ao's deprecation notes
        if dtype == "int8":
            from torch.ao.quantization import quantize_dynamic

            quantize_dynamic(holder, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
        else:
            _float8(holder)
    if not holds_quantized(holder):  # every Linear one the recipe skips: a profile of nothing
        raise GraphBudgetError(
            f"dtype={dtype!r} quantized none of {type(model).__name__}'s Linear layers (the "
            "recipe skips attention's NonDynamicallyQuantizableLinear and bare weight "
            "parameters): its figures would be float32's; quantize it yourself, or leave "
            "dtype unset"
        )
    return holder[0]


def tied_notes(model: Any, dtype: str | None) -> list[str]:
    """What ``dtype`` quantizes of a Linear whose weight another module shares (GPT-2's
    ``lm_head``, tied to ``transformer.wte``): the other stays as it is, so the quantized
    weight is a second copy, which a profile's weights count (689 kB had become 753 kB of a
    small GPT-2 without a word)."""
    import torch

    if dtype not in QUANTIZED or not isinstance(model, torch.nn.Module):
        return []
    owners: dict[int, list[str]] = {}
    for path, module in model.named_modules(remove_duplicate=False):
        for key, tensor in module._parameters.items():
            if tensor is not None:
                owners.setdefault(id(tensor), []).append(f"{path}.{key}" if path else key)
    found = []
    for path, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and len(owners.get(id(module.weight), ())) > 1:
            other = next(p for p in owners[id(module.weight)] if p != f"{path}.weight")
            found.append(
                f"dtype={dtype!r}: {path}'s weight is tied to {other}, which stays as it is: "
                "the quantized weight is a second copy, counted in the weights"
            )
    return found


def _float8(model: Any) -> None:
    """``model``'s Linear weights in float8_e4m3fn, per row, by torchao (the ``quant`` extra)."""
    try:
        from torchao.quantization import Float8WeightOnlyConfig, quantize_
    except ImportError:
        raise GraphBudgetError(
            "dtype='float8_e4m3fn' needs torchao: pip install 'pytest-graphbudget[quant]'"
        ) from None
    quantize_(model, Float8WeightOnlyConfig())


def refuse_int8_on_a_gpu(dtype: str | None, hardware: Any, model: Any = None) -> None:
    """``int8`` runs ``quantized::linear_dynamic``, which has CPU kernels only (FBGEMM,
    QNNPACK): priced on a GPU profile it was a figure for a kernel no GPU runs (slower than
    float16 on every card, an H100 no faster than an A100). So does a ``model`` quantized by
    torch.ao already (``quantize_dynamic``, a static ``convert``), which had been priced at
    the card's int8 tensor-core peak."""
    found = _ao_quantized(model)
    if dtype != "int8" and found is None:
        return
    from pytest_graphbudget import hardware as hw

    target = hw.get(hardware)
    if target.family and found is not None:
        raise GraphBudgetError(
            f"{type(model).__name__} is quantized by torch.ao ({found}), whose kernels run on "
            f"CPU only: {target.name} ({target.family}) would price kernels no GPU runs; price "
            "it on a CPU profile (torchao's quantize_ runs on GPUs)"
        )
    if target.family:
        raise GraphBudgetError(
            f"dtype='int8' is torch.ao's dynamic quantization, whose quantized::linear_dynamic "
            f"runs on CPU only: {target.name} ({target.family}) would price a kernel no GPU "
            "runs; price int8 on a CPU profile, and float8_e4m3fn or float16 on a GPU"
        )


def _ao_quantized(model: Any) -> str | None:
    """The first torch.ao quantized module of ``model`` (``DynamicQuantizedLinear``), if any."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return None
    for module in model.modules():
        kind = type(module)
        if kind.__module__.startswith(AO_QUANTIZED) and hasattr(module, "_packed_params"):
            return kind.__name__ if kind.__name__ != "Linear" else f"{kind.__module__}.Linear"
    return None


AO_QUANTIZED = ("torch.ao.nn.quantized", "torch.ao.nn.intrinsic.quantized")
"""The packages of torch.ao's quantized modules, whose packed kernels (FBGEMM, QNNPACK) run on
the CPU only."""
