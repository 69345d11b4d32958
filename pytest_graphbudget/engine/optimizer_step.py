"""The optimizer's update in a traced training step, written as torch's single-tensor loops
(``torch.optim.Adam`` and ``SGD`` with momentum, ``foreach=False``), and the unscale of a
``GradScaler`` before it: ``joint.capture`` traces them after the backward.
"""

from __future__ import annotations

from typing import Any

ADAM = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8}
SGD = {"lr": 1e-2, "momentum": 0.9}
"""The hyperparameters the update is traced with; its cost does not depend on their values
(nonzero weight decay would add work and is not modelled)."""


def optimizer_slots(optimizer: str | None) -> tuple[str, ...]:
    """The state tensors the optimizer keeps per parameter."""
    return {"adam": ("exp_avg", "exp_avg_sq"), "sgd": ("momentum_buffer",)}.get(optimizer, ())


def optimizer_state(params: dict[str, Any], optimizer: str | None, mode: Any) -> dict[str, Any]:
    """The optimizer's state, zeros in each parameter's dtype as ``torch.optim`` keeps it
    (``zeros_like``: float32 for a float32 model, bfloat16 for one cast to bfloat16), made in
    the fake ``mode`` (None: real)."""
    import contextlib

    import torch

    keys = [(f"{s}.{name}", p) for name, p in params.items() for s in optimizer_slots(optimizer)]
    with mode or contextlib.nullcontext():
        return {k: torch.zeros(p.shape, dtype=p.dtype, device=p.device) for k, p in keys}


def state_made(slots: dict[str, Any], used: list[bool], optimizer: str | None) -> int:
    """The bytes of the state the step made: a parameter the loss never reached (an unused
    head) gets no gradient, and Adam or SGD makes no state for it (state is made at its first
    step with a gradient)."""
    per = len(optimizer_slots(optimizer))
    kept = [t for i, t in enumerate(slots.values()) if used[i // per]] if per else []
    return sum(t.numel() * t.element_size() for t in kept)


def update(
    optimizer: str,
    names: list[str],
    params: tuple,
    grads: tuple,
    slots: tuple,
    tags: Any,
    scale: float | None = None,
) -> None:
    """The update of torch's single-tensor Adam or SGD (momentum), in place, one parameter at a
    time; every node it adds belongs to that parameter's module. As in torch's loop
    (``_single_tensor_adam``), Adam's ``denom`` is a local of the loop: the previous
    parameter's stays bound while the next one's ``sqrt`` and division run, and dies when the
    name is rebound (three parameter-sized temporaries at once, the last one held to the end
    of the update). SGD's loop keeps no temporary: its buffer is updated in place. A
    ``GradScaler``'s ``scale`` is undone first (``unscale``)."""
    import torch

    if scale:
        unscale([g for g in grads if g is not None], scale)
    per = len(optimizer_slots(optimizer))
    with torch.no_grad():
        for i, (name, param, grad) in enumerate(zip(names, params, grads, strict=True)):
            if grad is None:
                continue
            tags.optimizer_module = name.rpartition(".")[0]
            state = slots[i * per : (i + 1) * per]
            if optimizer == "adam":
                denom = _adam_denom(grad, *state)  # the last parameter's dies only now
                param.addcdiv_(state[0], denom, value=-ADAM["lr"] / (1 - ADAM["betas"][0]))
            else:
                _sgd(param, grad, *state)


def unscale(grads: list, scale: float) -> None:
    """``GradScaler.step``'s unscale: every gradient times ``1 / scale`` and checked for an
    inf or NaN, in one foreach op (the step it may skip is priced as taken)."""
    import torch

    device = grads[0].device
    found_inf = torch.zeros(1, device=device)
    inv_scale = torch.full((1,), 1.0 / scale, device=device)
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)


def _adam_denom(grad: Any, exp_avg: Any, exp_avg_sq: Any, step: int = 1) -> Any:
    """torch.optim.Adam's single-tensor update (no weight decay, not capturable, the first
    step) up to its ``denom``, which the caller binds and divides by in ``addcdiv_``."""
    beta1, beta2 = ADAM["betas"]
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad.conj(), value=1 - beta2)
    bias_correction2_sqrt = (1 - beta2**step) ** 0.5
    return (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(ADAM["eps"])


def _sgd(param: Any, grad: Any, momentum_buffer: Any) -> None:
    """torch.optim.SGD's single-tensor update with momentum (no dampening, no weight decay)."""
    momentum_buffer.mul_(SGD["momentum"]).add_(grad)
    param.add_(momentum_buffer, alpha=-SGD["lr"])
