"""Pointwise ops: a fixed number of FLOPs per output element.

Arithmetic, comparisons and the transcendental functions count 1. Composite activations count
the operations of their textbook formula, e.g. sigmoid = 1/(1+exp(-x)) is 4.
"""

from __future__ import annotations

from pytest_graphbudget.costs.registry import OpCost, numel, out_numel, register

PER_ELEMENT: dict[str, int] = {
    # arithmetic and selection
    **dict.fromkeys(
        "mul div true_divide floor_divide neg abs reciprocal square fmod remainder "
        "maximum minimum fmax fmin where masked_fill clamp clamp_min clamp_max clip hardtanh relu "
        "leaky_relu prelu _prelu_kernel threshold sign sgn floor ceil round trunc frac "
        "hardshrink softshrink nan_to_num conj_physical _conj_physical copysign signbit "
        "heaviside nextafter frexp deg2rad rad2deg".split(),
        1,
    ),
    # comparisons and logic
    **dict.fromkeys(
        "eq ne lt le gt ge logical_not logical_and logical_or logical_xor bitwise_and "
        "bitwise_or bitwise_xor bitwise_not isnan isinf isfinite isposinf isneginf "
        "bitwise_left_shift bitwise_right_shift __lshift__ __rshift__ __ilshift__ __irshift__ "
        "gcd lcm".split(),
        1,
    ),
    # transcendental functions
    **dict.fromkeys(
        "exp exp2 expm1 log log2 log10 log1p sqrt rsqrt tanh erf erfc erfinv sin cos tan asin "
        "acos atan atan2 sinh cosh asinh acosh atanh pow float_power angle".split(),
        1,
    ),
    # special functions: one evaluation each, as a transcendental function counts
    **dict.fromkeys(
        "i0 lgamma digamma polygamma igamma igammac special_i0e special_i1 special_i1e "
        "special_erfcx special_ndtri special_log_ndtr special_zeta special_airy_ai "
        "special_bessel_j0 special_bessel_j1 special_bessel_y0 special_bessel_y1 "
        "special_modified_bessel_i0 special_modified_bessel_i1 special_modified_bessel_k0 "
        "special_modified_bessel_k1 special_scaled_modified_bessel_k0 "
        "special_scaled_modified_bessel_k1 special_spherical_bessel_j0 "
        "special_chebyshev_polynomial_t special_chebyshev_polynomial_u "
        "special_chebyshev_polynomial_v special_chebyshev_polynomial_w "
        "special_shifted_chebyshev_polynomial_t special_shifted_chebyshev_polynomial_u "
        "special_shifted_chebyshev_polynomial_v special_shifted_chebyshev_polynomial_w "
        "special_hermite_polynomial_h special_hermite_polynomial_he "
        "special_laguerre_polynomial_l special_legendre_polynomial_p".split(),
        1,
    ),
    # composite activations: the operations of their formula
    "sigmoid": 4,  # neg, exp, add, reciprocal
    "silu": 5,  # x * sigmoid(x)
    "hardswish": 4,  # x * relu6(x + 3) / 6
    "hardsigmoid": 3,  # relu6(x + 3) / 6
    "softplus": 3,  # log(1 + exp(x))
    "mish": 5,  # x * tanh(softplus(x))
    "celu": 4,
    "selu": 5,  # exp, sub, mul, select (+ scale for selu)
    "glu": 5,  # a * sigmoid(b), per output element
    "log_sigmoid_forward": 5,
    "lerp": 2,
    "ldexp": 2,  # x * 2^e
    "special_xlog1py": 2,  # x * log1p(y)
    "special_entr": 3,  # -x * log(x)
    "sinc": 3,  # sin(pi x) / (pi x)
    "hypot": 4,  # sqrt(x^2 + y^2)
    "linalg_cross": 3,  # a_j b_k - a_k b_j
    "polar": 4,  # abs * cos(angle), abs * sin(angle), per complex element
    # ATen's max(a, b) + log1p(exp(-|a - b|)): max, subtract, abs, exp, log1p, add (logaddexp2:
    # exp2, and log1p's result divided by ln 2)
    "logaddexp": 6,
    "logaddexp2": 7,
}


def _pointwise(cost: int):
    def formula(*_, out, **__) -> OpCost:
        return OpCost(other=cost * out_numel(out))

    return formula


for _name, _cost in PER_ELEMENT.items():
    register(_name, kind="relu6" if _name == "hardtanh" else None)(_pointwise(_cost))


PRIMS = (
    "abs acos acosh add asin asinh atan atan2 atanh bitwise_and bitwise_not bitwise_or "
    "bitwise_xor ceil conj_physical cos cosh digamma div eq erf erfc exp exp2 expm1 floor fmax "
    "fmin fmod frexp gcd ge gt hypot igamma igammac isfinite le lgamma log log10 log1p log2 lt "
    "maximum minimum mul ne neg nextafter pow reciprocal remainder round rsqrt sign signbit sin "
    "sinh sqrt sub tan tanh trunc where"
).split()
"""``torch.ops.prims``'s pointwise ops, each the ATen op of its name: what a backward's
arithmetic on a ``ZeroTensor`` (``sgn``'s gradient) runs through ``torch._refs`` under a
fake or meta tensor. Priced as that op, labelled by its name (unpriced, a step had failed its
budget on ``prims.mul`` as an op that may contract)."""

for _name in PRIMS:
    register(f"prims.{_name}", kind=_name)(_pointwise(PER_ELEMENT.get(_name, 1)))


@register("elu")
def elu(x, alpha=1.0, scale=1.0, input_scale=1.0, *, out, **_) -> OpCost:
    """exp, sub, mul, select, and a multiply for each scale that is not 1: ``nn.SELU`` runs
    as ``elu`` with a scale (5, as the ``selu`` entry that inference tensors would reach)."""
    return OpCost(other=(4 + (scale != 1) + (input_scale != 1)) * out_numel(out))


@register("rrelu_with_noise")
def rrelu_with_noise(x, noise, lower=0.125, upper=1 / 3, training=False, *_, out, **__) -> OpCost:
    """In training, a comparison and a multiply by the slope drawn for the element (counted on
    every element, as the negative ones are data; the draw is free, as ``uniform``'s); in eval,
    ``leaky_relu`` with the mean slope (1)."""
    return OpCost(other=(2 if training else 1) * out_numel(out))


@register("gelu")
def gelu(x, approximate: str = "none", *, out, **_) -> OpCost:
    # exact: x * 0.5 * (1 + erf(x / sqrt 2)) = 5; tanh form: 0.5x(1 + tanh(c(x + 0.044715x^3))) = 9
    return OpCost(other=(9 if approximate == "tanh" else 5) * out_numel(out))


@register("logit")
def logit(x, eps=None, *_, out, **__) -> OpCost:
    """log(x / (1 - x)): subtract, divide, log; with ``eps``, the clamp to [eps, 1 - eps]
    first (1, as ``clamp``)."""
    return OpCost(other=(3 + int(eps is not None)) * out_numel(out))


@register("mvlgamma")
def mvlgamma(x, p: int, *_, out, **__) -> OpCost:
    """ATen's sum of ``p`` shifted ``lgamma``: per output element, p shifts, p ``lgamma`` and
    p adds (the sum's p - 1 and the constant's one)."""
    return OpCost(other=3 * p * out_numel(out))


@register("add", "sub", "rsub")
def add(*_, out, alpha=1, **__) -> OpCost:
    # a + alpha * b: one more multiply per element when alpha is not 1.
    return OpCost(other=(1 + int(alpha != 1)) * out_numel(out))


@register("_amp_foreach_non_finite_check_and_unscale")
def amp_unscale(grads, found_inf, inv_scale, *_, out, **__) -> OpCost:
    # GradScaler's unscale: each gradient element times 1 / scale, and checked for inf or NaN.
    return OpCost(other=2 * sum(numel(g) for g in grads))


@register("addcmul", "addcdiv")
def addcmul(*_, out, value=1, **__) -> OpCost:
    # a + value * b * c (or b / c): one more multiply per element when value is not 1.
    return OpCost(other=(2 + int(value != 1)) * out_numel(out))
