"""Pointwise ops: a fixed number of FLOPs per output element.

Arithmetic, comparisons and the transcendental functions count 1. Composite activations count
the operations of their textbook formula, e.g. sigmoid = 1/(1+exp(-x)) is 4.
"""

from __future__ import annotations

from pytest_graphbudget.costs.registry import OpCost, out_numel, register

PER_ELEMENT: dict[str, int] = {
    # arithmetic and selection
    **dict.fromkeys(
        "mul div true_divide floor_divide neg abs reciprocal square fmod remainder "
        "maximum minimum fmax fmin where masked_fill clamp clamp_min clamp_max clip hardtanh relu "
        "leaky_relu prelu _prelu_kernel threshold sign sgn floor ceil round trunc frac "
        "hardshrink softshrink nan_to_num conj_physical _conj_physical".split(),
        1,
    ),
    # comparisons and logic
    **dict.fromkeys(
        "eq ne lt le gt ge logical_not logical_and logical_or logical_xor bitwise_and "
        "bitwise_or bitwise_xor bitwise_not isnan isinf isfinite".split(),
        1,
    ),
    # transcendental functions
    **dict.fromkeys(
        "exp exp2 expm1 log log2 log10 log1p sqrt rsqrt tanh erf erfc erfinv sin cos tan asin "
        "acos atan atan2 sinh cosh asinh acosh atanh pow float_power angle".split(),
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
}


def _pointwise(cost: int):
    def formula(*_, out, **__) -> OpCost:
        return OpCost(other=cost * out_numel(out))

    return formula


for _name, _cost in PER_ELEMENT.items():
    register(_name, kind="relu6" if _name == "hardtanh" else None)(_pointwise(_cost))


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


@register("add", "sub", "rsub")
def add(*_, out, alpha=1, **__) -> OpCost:
    # a + alpha * b: one more multiply per element when alpha is not 1.
    return OpCost(other=(1 + int(alpha != 1)) * out_numel(out))


@register("addcmul", "addcdiv")
def addcmul(*_, out, value=1, **__) -> OpCost:
    # a + value * b * c (or b / c): one more multiply per element when value is not 1.
    return OpCost(other=(2 + int(value != 1)) * out_numel(out))
