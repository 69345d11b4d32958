"""The figures of a hardware profile's TOML table, checked one by one.

A user writes these by hand, so each is refused in one line with its fix rather than read
some other way: a number in quotes, ``true`` for a peak, a dtype misspelt, a percentage
without its sign, TFLOP/s read as GFLOP/s. ``hardware.from_table`` puts them together.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError, closest

TERA = 1e12
GIGA = 1e9

SHARE_MAX = 2.0
"""The largest bare efficiency share: a kernel may beat the datasheet a little (a GeForce
card's boost clock, a norm reading its input from cache: the fits reach 1.5), never 2x."""
MATMUL_ABOVE_PEAK = 1.5
"""``matmul_tflops`` above this many times the float16 peak is a unit slip or a datasheet's
"with sparsity" figure, which is exactly twice (the GeForce fit cards, the highest, measure
1.01-1.10)."""
FLOAT32_ABOVE_PEAK = 1.2
"""``matmul_tflops_float32`` above this many times the float32 peak was timed on TF32's tensor
cores (``allow_tf32`` on: an H100's "float32" product at 404 TFLOP/s of 67), or is a unit
slip; the cards measured reach 0.51-0.98 of it."""
PEAK_DTYPES = (
    "float64", "float32", "tf32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float4_e2m1fn_x2", "int64", "int32", "int16",
    "int8", "uint8", "int4",
)  # fmt: skip
"""The dtypes a profile may give a peak for: torch's names (a model's dtype is looked up by
them), ``tf32`` and ``int4``."""
SHORT_DTYPES = {
    "fp64": "float64", "f64": "float64", "fp32": "float32", "f32": "float32",
    "fp16": "float16", "f16": "float16", "half": "float16", "bf16": "bfloat16",
    "fp8": "float8_e4m3fn", "float": "float32", "double": "float64",
}  # fmt: skip
"""Datasheet spellings of torch's dtype names: ``fp32`` is nearer ``tf32`` than ``float32``
letter by letter, and a hint to the wrong one would send the user round twice."""


MAX_PEAK = 1e17
"""FLOP/s no chip reaches (100 PFLOP/s; a B200 runs FP4, dense, at 9): a figure
above it is one written in the wrong unit (40e12 as TFLOP/s), which would price every kernel
at nothing and pass every latency budget."""
MAX_WIDE_PEAK = {"float64": 2e15, "float32": 2e15}
"""float64 and float32 FLOP/s no chip reaches (2 PFLOP/s; the MI300X's float32 is 0.16): an
A100's 19.5 written as 19500 (GFLOP/s in ``peak_tflops``) is under ``MAX_PEAK`` but would price
every float32 kernel 1000x fast."""
ABOVE_FLOAT32 = {
    **dict.fromkeys(("int8", "uint8", "float8_e4m3fn", "float8_e5m2"), 128),
    **dict.fromkeys(("float8_e4m3fnuz", "float8_e5m2fnuz"), 128),
    **dict.fromkeys(("float4_e2m1fn_x2", "int4"), 256),
}
"""How many times its float32 peak a chip's peak of an 8- or 4-bit dtype may be (any other:
64): the B200 runs float16 at 30 times its float32, FP8 at 60, FP4 at 120. A peak written in
GFLOP/s among others in TFLOP/s (an A4000's float16 as 76700) is thousands of times."""
B200_RATIO = {"float16": 30, "bfloat16": 30, "tf32": 15, "int8": 60, "float8_e4m3fn": 60}
MAX_BANDWIDTH = 1e14
"""Bytes/s no DRAM reaches (100 TB/s; a B200's is 8 TB/s), for the same slip: 448 GB/s
written in MB/s (``bandwidth_gbs = 448000``) had priced every memory-bound kernel 1000x fast."""
MIN_FIGURE = 1e6
"""FLOP/s or bytes/s below any chip or memory a model runs on (a microcontroller computes
at 100 MFLOP/s): a figure under it is one written in the wrong unit (``peak_flops = {float32
= 2.0}`` meant as TFLOP/s), which would price every model as memory- or compute-bound at
random and every latency in days."""


def one_of(name: str, table: Mapping[str, object], scaled: str, plain: str) -> str | None:
    """Which of a figure's two forms the table gives (``bandwidth_gbs`` or ``bandwidth``):
    both at once are refused (one would be dropped); None when neither is given."""
    if scaled in table and plain in table:
        raise GraphBudgetError(f"hardware {name!r}: give {scaled} or {plain}, not both")
    return scaled if scaled in table else plain if plain in table else None


def bandwidth_of(name: str, table: Mapping[str, object]) -> float:
    """``bandwidth_gbs`` (or ``bandwidth``) in bytes/s."""
    key = one_of(name, table, "bandwidth_gbs", "bandwidth")
    if key is None:
        raise GraphBudgetError(f"hardware {name!r}: needs bandwidth_gbs (or bandwidth in bytes/s)")
    found = number(name, key, table[key], positive=True) * (GIGA if key == "bandwidth_gbs" else 1)
    if found < MIN_FIGURE:
        raise GraphBudgetError(
            f"hardware {name!r}: {key} = {table[key]!r} is {found:.3g} bytes/s, below any "
            "memory: bandwidth_gbs is in GB/s, bandwidth in bytes/s"
        )
    if found > MAX_BANDWIDTH:
        raise GraphBudgetError(
            f"hardware {name!r}: {key} = {table[key]!r} is {found / TERA:.3g} TB/s, beyond any "
            f"memory (the B200's is 8): bandwidth_gbs is in GB/s (bandwidth in bytes/s)"
        )
    return found


def peaks_of(name: str, table: Mapping[str, object]) -> dict[str, float]:
    """``peak_tflops`` (or ``peak_flops``) as FLOP/s per dtype: float32's at least."""
    key = one_of(name, table, "peak_tflops", "peak_flops")
    found = table.get(key) if key else None
    if not isinstance(found, Mapping):
        raise GraphBudgetError(
            f"hardware {name!r}: needs peak_tflops (or peak_flops) as a table per dtype, "
            "e.g. peak_tflops = {float32 = 19.5, float16 = 312}"
        )
    peaks = {}
    for dtype, value in found.items():
        if dtype not in PEAK_DTYPES:
            spelt = SHORT_DTYPES.get(str(dtype).lower())
            hint = f" (did you mean {spelt!r}?)" if spelt else closest(str(dtype), PEAK_DTYPES)
            hint = hint or f"; dtypes: {', '.join(PEAK_DTYPES)}"
            raise GraphBudgetError(f"hardware {name!r}: {key}: unknown dtype {dtype!r}{hint}")
        unit = TERA if key == "peak_tflops" else 1.0
        peaks[str(dtype)] = number(name, f"{key}.{dtype}", value, positive=True) * unit
        if peaks[str(dtype)] < MIN_FIGURE:
            raise GraphBudgetError(
                f"hardware {name!r}: {key}.{dtype} = {value!r} is {peaks[str(dtype)]:.3g} "
                "FLOP/s, below any chip: peak_tflops is in TFLOP/s, peak_flops in FLOP/s"
            )
        wide = MAX_WIDE_PEAK.get(str(dtype))
        if wide is not None and peaks[str(dtype)] > wide:
            raise GraphBudgetError(
                f"hardware {name!r}: {key}.{dtype} = {value!r} is {peaks[str(dtype)] / 1e15:.3g} "
                f"PFLOP/s, beyond any chip's {dtype} (the MI300X's float32 is 0.16): "
                "peak_tflops is in TFLOP/s (peak_flops in FLOP/s)"
            )
        if peaks[str(dtype)] > MAX_PEAK:
            raise GraphBudgetError(
                f"hardware {name!r}: {key}.{dtype} = {value!r} is {peaks[str(dtype)] / 1e15:.3g} "
                "PFLOP/s, beyond any chip (a B200 runs FP4 at 9): peak_tflops is in TFLOP/s "
                "(peak_flops in FLOP/s)"
            )
    if "float32" not in peaks:
        raise GraphBudgetError(f"hardware {name!r}: peak for float32 is required")
    for dtype, peak in peaks.items():  # one peak in GFLOP/s among others in TFLOP/s
        most = ABOVE_FLOAT32.get(dtype, 64)
        if peak > most * peaks["float32"]:
            raise GraphBudgetError(
                f"hardware {name!r}: {key}.{dtype} = {found[dtype]!r} is "
                f"{peak / peaks['float32']:.3g} times the float32 peak, where no chip's is "
                f"more than {most} (the B200's {dtype}: {B200_RATIO.get(dtype, 30)}): "
                "peak_tflops is in TFLOP/s (peak_flops in FLOP/s)"
            )
    return peaks


def compute_scale(
    name: str, table: Mapping[str, object], peaks: Mapping[str, float], share: float | None
) -> float:
    """How much of its family's compute shares a card reaches: its measured matmul's share of
    its own float16 peak over the fit card's (``share``; 1 without ``matmul_tflops``). A 72 W
    L4 reaches 0.57 of its datasheet where the RTX 4090 ada was fitted on reaches 1.01."""
    if "matmul_tflops" not in table:
        return 1.0
    measured = number(name, "matmul_tflops", table["matmul_tflops"], positive=True) * TERA
    if share is None:
        raise GraphBudgetError(
            f"hardware {name!r}: matmul_tflops needs a family whose fit card's matmul was "
            "measured: it scales that family's compute shares"
        )
    if measured > MATMUL_ABOVE_PEAK * peaks["float16"]:  # TFLOP/s read as GFLOP/s, or a typo
        raise GraphBudgetError(
            f"hardware {name!r}: matmul_tflops = {table['matmul_tflops']!r} is "
            f"{measured / peaks['float16']:.3g} times the float16 peak "
            f"({peaks['float16'] / TERA:g} TFLOP/s); give it in TFLOP/s, dense (a datasheet's "
            "'with sparsity' figure is twice the dense one)"
        )
    return measured / peaks["float16"] / share


def float32_share(
    name: str,
    table: Mapping[str, object],
    peaks: Mapping[str, float],
    family: float | None,
    scale: float,
) -> float | None:
    """The share of its float32 peak that a large float32 product reaches on the card, off
    the tensor cores (TF32 off, PyTorch's default for products): ``matmul_tflops_float32``,
    else its family's fit card's share (``family``) times its ``compute_scale`` (``scale``:
    its power limit); None without either. The float16 fits say nothing of it: a GeForce
    card's float32 peak counts two datapaths a product fills two thirds of (the RTX 4090:
    54.7 of 82.6), an A100's one it fills (19.2 of 19.5)."""
    if "matmul_tflops_float32" not in table:
        return None if family is None else family * scale
    key = "matmul_tflops_float32"
    measured = number(name, key, table[key], positive=True) * TERA
    if measured > FLOAT32_ABOVE_PEAK * peaks["float32"]:
        raise GraphBudgetError(
            f"hardware {name!r}: {key} = {table[key]!r} is {measured / peaks['float32']:.3g} "
            f"times the float32 peak ({peaks['float32'] / TERA:g} TFLOP/s): time it with "
            "TF32 off (torch.backends.cuda.matmul.allow_tf32 = False), in TFLOP/s"
        )
    return measured / peaks["float32"]


def capability(name: str, value: object) -> tuple[int, int]:
    """``compute_capability = "8.9"``: the CUDA compute capability as
    ``torch.cuda.get_device_capability()`` gives it, which sets the workspaces a GPU's peak
    memory counts (``engine.allocator``). A TOML number (``8.9``) is read as its text; a bare
    major (``9``) or an SM name (``"sm_90"``) is refused with the form."""
    shown = str(value) if isinstance(value, (str, float)) and not isinstance(value, bool) else ""
    match = re.fullmatch(r"([0-9]{1,2})\.([0-9])", shown.strip())
    if match is None or not 3 <= int(match[1]) <= 15:
        raise GraphBudgetError(
            f"hardware {name!r}: compute_capability must be the card's CUDA compute capability "
            f'as "major.minor" (torch.cuda.get_device_capability(): "8.9" for an L4), got {value!r}'
        )
    return int(match[1]), int(match[2])


def text(name: str, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise GraphBudgetError(f"hardware {name!r}: {key} must be a string, got {value!r}")
    return value


def fractions(name: str, kind: str, pair: object) -> tuple[float, float]:
    """``[compute, memory]``: two shares of the peaks, each above 0, as fractions (``0.6``)
    or percentages (``"60%"``); a bare number above ``SHARE_MAX`` is a percentage written
    without its sign, and is refused with its fix."""
    if not isinstance(pair, (list, tuple)) or len(pair) != 2:
        raise GraphBudgetError(
            f"hardware {name!r}: efficiency.{kind} must be [compute, memory] fractions, "
            f"got {pair!r}"
        )
    found = []
    for value in pair:
        where = f"efficiency.{kind}"
        if isinstance(value, str) and value.strip().endswith("%"):
            try:
                found.append(float(value.strip()[:-1]) / 100)
            except ValueError:
                found.append(math.nan)
            if not 0 < found[-1] < math.inf:
                raise GraphBudgetError(
                    f"hardware {name!r}: {where} must be a share above 0, got {value!r}"
                )
            if found[-1] > SHARE_MAX:  # "500%": five times the peak, as a bare 5 would be
                raise GraphBudgetError(
                    f"hardware {name!r}: {where}: {value!r} is above {SHARE_MAX * 100:g}% of "
                    "the peak, which no kernel reaches"
                )
            continue
        share = number(name, where, value, positive=True)
        if share > SHARE_MAX:
            raise GraphBudgetError(
                f"hardware {name!r}: {where}: {value!r} would be {share * 100:g}% of the peak: "
                f'did you mean {share / 100:g} or "{share:g}%"?'
            )
        found.append(share)
    return found[0], found[1]


def number(name: str, where: str, value: object, positive: bool = False) -> float:
    """A finite number (a TOML integer or float; a string is a number in quotes, refused so
    that ``"500"`` is not read one way here and another elsewhere)."""
    figure = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            figure = float(value)
        except OverflowError:  # an integer beyond any float (legal TOML) is no figure either
            figure = math.inf
    if not (math.isfinite(figure) and (figure > 0 if positive else figure >= 0)):
        bound = "> 0" if positive else ">= 0"
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}... (too large)"
        raise GraphBudgetError(f"hardware {name!r}: {where} must be a number {bound}, got {shown}")
    return figure


def check_names(
    found: Mapping[str, Any], shipped: Mapping[str, Any], aliases: Mapping[str, Any] | None = None
) -> None:
    """Names are matched in any case: two profiles named alike, an alias that is another
    profile's name, or one alias of two profiles would leave one of them unreachable without
    a word. A profile named like a shipped GPU (``shipped``, by lowercase name) that gives no
    ``family``, ``efficiency``, ``launch_us`` or calibrated kernels would price that card as a
    bare roofline, far faster than the card it replaces (ResNet-50 on h100: 0.07 ms for 2.5):
    it is refused too, under a shipped alias (``aliases``: ``a100-80gb``, which a user's
    profile may otherwise take) and with an empty ``kernels`` table."""
    names: dict[str, str] = {}
    for name in found:
        if name.lower() in names:
            raise GraphBudgetError(
                f"hardware {names[name.lower()]!r} and {name!r}: names are matched in any "
                "case, so one of them could never be used; rename one"
            )
        names[name.lower()] = name
    for name, hw in found.items():
        card = shipped.get(name.lower()) or (aliases or {}).get(name.lower())
        if (
            card is not None
            and card.family
            and not (hw.family or hw.efficiency or hw.launch_s or any(hw.kernels.values()))
        ):
            raise GraphBudgetError(
                f"hardware {name!r} replaces the shipped {card.name}, which is priced with "
                f'{card.family}\'s fitted efficiencies; give it family = "{card.family}" to '
                "keep them (or efficiency or kernels of its own), or another name"
            )
    aliases: dict[str, str] = {}
    for name, hw in found.items():
        for alias in hw.aliases:
            taken = names.get(alias.lower()) or (alias.lower() in shipped and alias)
            if taken and taken != name:
                raise GraphBudgetError(
                    f"hardware {name!r}: alias {alias!r} is the name of the profile "
                    f"{taken!r}, which a name always reaches first; drop the alias, or name "
                    f"this profile {alias!r} to stand in for it"
                )
            other = aliases.setdefault(alias.lower(), name)
            if other != name:
                raise GraphBudgetError(
                    f"hardware {other!r} and {name!r}: both give the alias {alias!r}, which "
                    "would reach only one of them; drop it from one"
                )
