"""One training step per rank of a sharded run: ``profile_model(..., mode="train",
parallel={"fsdp": 8})``, ``{"zero": 1|2|3, "dp": N}``, ``{"tp": 2, "fsdp": 4}``.

Derived, not run: the step is profiled once on one rank's model (its Linear layers split as
Megatron-style tensor parallelism splits them, when ``tp`` > 1), then its model state is divided
as the sharding divides it: ZeRO-1 shards the optimizer's state, ZeRO-2 the gradients too,
ZeRO-3 and FSDP the parameters too; ``dp`` alone replicates. Each rank holds its shard, the
model's buffers whole (no stage shards them) and its own micro-batch's activations; the
inputs given are one rank's micro-batch. The bytes each step moves between ranks are the ring
volumes: an all-reduce of B bytes moves 2(N-1)/N * B per rank, an all-gather or
reduce-scatter (N-1)/N * B. The figures model the gloo backend's step on CPU
(``benchmarks/sharded.py`` checks them against a real run). With ``dtype="bfloat16"`` (or
float16) and an optimizer the state is mixed precision, as DeepSpeed's ZeRO and FSDP2's
``MixedPrecisionPolicy`` keep it: 16-bit parameters and gradients, fp32 master weights and
optimizer slots (Adam: 16 bytes per parameter before sharding).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError
from pytest_graphbudget.modes.shards import Parallel, parse

COLWISE = frozenset(
    "q k v q_proj k_proj v_proj query key value qkv c_attn wq wk wv up up_proj gate_proj "
    "fc1 w1 w3 c_fc".split()
)
"""Linear layers tensor parallelism splits by output features (column-parallel), by name."""
ROWWISE = frozenset("o o_proj out_proj c_proj wo down down_proj fc2 w2".split())
"""Linear layers it splits by input features (row-parallel): their outputs are all-reduced."""
HEADS = ("heads", "num_heads", "n_heads", "n_head", "num_attention_heads")
KV_HEADS = ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "n_kv_head")
"""Grouped-query attention's key and value heads, on a module or its ``config``: each rank
holds whole ones too."""
MASTER = 4
"""Bytes of an fp32 element: a master weight, an fp32 gradient shard, an optimizer slot."""
MIXED = ("bfloat16", "float16")
"""The ``dtype=`` values whose sharded training is mixed precision (fp32 master weights)."""


@dataclass
class PerRank:
    """One rank's share of the step, in bytes (``Profile.parallel``)."""

    params_bytes: int
    grads_bytes: int
    optimizer_state_bytes: int
    activation_bytes: int
    input_bytes: int
    transient_bytes: int
    buffers_bytes: int = 0
    collectives: dict[str, int] = field(default_factory=dict)
    update_bytes: int = 0
    """The optimizer's temporaries on this rank (Adam's ``denom``: a shard's where the state is
    sharded), live when no activation or all-gather is."""

    @property
    def model_state_bytes(self) -> int:
        """Parameters, gradients and optimizer state: what ZeRO's closed forms count (the
        buffers are beside them, whole on every rank)."""
        return self.params_bytes + self.grads_bytes + self.optimizer_state_bytes

    @property
    def peak_bytes(self) -> int:
        state = self.model_state_bytes + self.buffers_bytes + self.input_bytes
        return state + max(self.activation_bytes + self.transient_bytes, self.update_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "params_bytes": self.params_bytes,
            "buffers_bytes": self.buffers_bytes,
            "grads_bytes": self.grads_bytes,
            "optimizer_state_bytes": self.optimizer_state_bytes,
            "model_state_bytes": self.model_state_bytes,
            "activation_bytes": self.activation_bytes,
            "input_bytes": self.input_bytes,
            "transient_bytes": self.transient_bytes,
            "update_bytes": self.update_bytes,
            "peak_bytes": self.peak_bytes,
            **{f"{k}_bytes": v for k, v in self.collectives.items()},
        }


def check_model(model: Any, parallel: Parallel) -> None:
    """Refuse, in one line, a ``tp`` the model cannot be split by."""
    import torch

    if parallel.tp == 1 or not isinstance(model, torch.nn.Module):
        return
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.MultiheadAttention):
            raise GraphBudgetError(
                f"parallel: tp={parallel.tp} cannot split {name or 'the model'}, an "
                "nn.MultiheadAttention: its q, k and v are one packed in_proj_weight; "
                "profile it with fsdp or zero instead"
            )
        for owner in (module, getattr(module, "config", None)):
            for attr in (*HEADS, *KV_HEADS):
                heads = getattr(owner, attr, None)
                if isinstance(heads, int) and heads % parallel.tp:
                    raise GraphBudgetError(
                        f"parallel: tp={parallel.tp} does not divide {attr}={heads} of "
                        f"{name or 'the model'}: each rank holds whole attention heads"
                    )
    plan = tp_plan(model)
    if not plan:
        named = sorted(  # GPT-2's c_attn, c_fc, c_proj: transformers' Conv1D, (in, out)
            {type(m).__name__ for n, m in model.named_modules() if _splittable_name(n)}
        )
        why = (
            f"its layers of those names are {', '.join(named)}, not nn.Linear"
            if named
            else "name them as Megatron does (column: q, k, v, up, fc1, ...; row: o, down, "
            "fc2, ...)"
        )
        raise GraphBudgetError(
            f"parallel: tp={parallel.tp} splits no Linear layer of {type(model).__name__}: {why}"
        )
    for name, style in plan.items():
        linear = model.get_submodule(name)
        size = linear.out_features if style == "colwise" else linear.in_features
        if size % parallel.tp:
            side = "output" if style == "colwise" else "input"
            raise GraphBudgetError(
                f"parallel: tp={parallel.tp} does not divide the {size} {side} features of {name}"
            )


def _splittable_name(name: str) -> bool:
    return name.rpartition(".")[2] in COLWISE | ROWWISE


def tp_plan(model: Any) -> dict[str, str]:
    """Module name -> "colwise" or "rowwise": the Linear layers tensor parallelism splits."""
    import torch

    plan = {}
    for name, module in model.named_modules():
        last = name.rpartition(".")[2]
        if isinstance(module, torch.nn.Linear) and last in COLWISE | ROWWISE:
            plan[name] = "colwise" if last in COLWISE else "rowwise"
    return plan


def local_model(model: Any, tp: int) -> Any:
    """One tensor-parallel rank's copy of ``model``: a column-parallel Linear keeps 1/tp of
    its output features, a row-parallel one 1/tp of its input features and its whole bias
    (torch's ``ColwiseParallel``/``RowwiseParallel``); the user's model is untouched."""
    import torch

    if tp == 1:
        return model
    local = copy.deepcopy(model)
    for name, style in tp_plan(local).items():
        old = local.get_submodule(name)
        ins, outs = old.in_features, old.out_features
        ins, outs = (ins, outs // tp) if style == "colwise" else (ins // tp, outs)
        new = torch.nn.Linear(ins, outs, bias=old.bias is not None)
        new.to(dtype=old.weight.dtype, device=old.weight.device)
        for shard, whole in zip(new.parameters(), old.parameters(), strict=True):
            shard.requires_grad_(whole.requires_grad)  # a frozen layer's shard stays frozen
        parent, _, child = name.rpartition(".")
        setattr(local.get_submodule(parent) if parent else local, child, new)
    for module in local.modules():
        for attr in HEADS:
            if isinstance(getattr(module, attr, None), int):
                setattr(module, attr, getattr(module, attr) // tp)
    return local


def per_rank(
    model: Any,
    prof: Any,
    parallel: Parallel,
    slots: float,
    rows: int,
    mixed: bool = False,
    before_update: int | None = None,
) -> list[PerRank]:
    """Each rank's share of the step ``prof`` profiled on one tensor-parallel rank's ``model``
    (``local_model``): uneven shards (FSDP's dim-0 chunks) make ranks differ. ``slots``: the
    optimizer's state in bytes per byte of the parameters it updates (Adam 2: its slots);
    ``mixed``: the 16-bit parameters' optimizer keeps fp32 master weights and fp32 slots;
    ``before_update``: the step's activation peak before the optimizer's first op."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads_full = sum(p.numel() * p.element_size() for p in params)
    # Buffers (a causal mask, BatchNorm's running statistics) are no parameters: DDP and
    # FSDP keep them whole on every rank, and no ZeRO stage shards them.
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    weights = prof.weights_bytes - buffers
    whole = max(prof.activation_peak_bytes - grads_full, 0)
    activations = whole if before_update is None else max(before_update - grads_full, 0)
    n, stage = parallel.shards, parallel.stage
    # The update runs on each rank's shard of the state, after the backward has let go of the
    # activations and the all-gathers: its temporaries (Adam's denom) are a shard's.
    sharded = parallel.fsdp > 1 or stage >= 1
    update = -(-whole // n) if sharded else whole
    # ZeRO-3/FSDP: while one unit runs, its all-gather buffer, the unsharded parameters copied
    # out of it, its full gradients and their reduce-scatter input copy: 4x the unit.
    transient = 4 * _largest_unit(model) if stage == 3 else 0
    # Mixed (ZeRO): per parameter an fp32 master weight and fp32 slots beside the 16-bit
    # parameter and gradient, as DeepSpeed keeps them: Adam 4 + 4 + 4 = 12 bytes, SGD 4 + 4.
    numel = sum(p.numel() for p in params)
    per_byte = MASTER * (1 + slots) * numel / grads_full if mixed and grads_full else slots
    ranks = []
    for rank in range(n):
        if parallel.fsdp > 1:
            every = list(model.parameters())  # FSDP shards frozen parameters too
            params_b, grads_b, state_b = _fsdp_share(every, params, rank, n, slots, mixed)
        else:
            params_b = _flat_share(weights, rank, n) if stage == 3 else weights
            grads_b = _flat_share(grads_full, rank, n) if stage >= 2 else grads_full
            state_b = round(
                (_flat_share(grads_full, rank, n) if stage >= 1 else grads_full) * per_byte
            )
        ranks.append(
            PerRank(
                params_b,
                grads_b,
                state_b,
                activations,
                prof.input_bytes,
                transient,
                buffers,
                collectives(parallel, weights, grads_full, rows),
                update if before_update is not None else 0,
            )
        )
    return ranks


def _fsdp_share(every: list, params: list, rank: int, n: int, slots: float, mixed: bool) -> tuple:
    """FSDP2's parameters, gradients and optimizer state on ``rank``: each parameter's dim-0
    chunk, the parameters padded to the same rows on every rank (rank 0's chunk, the ceil).
    ``every`` parameter is sharded, frozen ones too; only the trainable ``params`` have
    gradients and slots. Mixed (``MixedPrecisionPolicy(param_dtype=bf16)``): the sharded
    parameters are the fp32 master weights, the gradients are reduced into fp32 shards, the
    slots are fp32."""
    size = {id(p): MASTER if mixed else p.element_size() for p in every}
    held = sum(_shard_numel(p, 0, n) * size[id(p)] for p in every)
    mine = sum(_shard_numel(p, rank, n) * size[id(p)] for p in params)
    return held, mine, round(mine * slots)


def _shard_numel(p: Any, rank: int, n: int) -> int:
    """Elements of ``p`` rank ``rank`` holds under FSDP2 (``torch.chunk`` of dim 0)."""
    rows = p.shape[0] if p.dim() else 1
    size = -(-rows // n)
    mine = max(min(size, rows - rank * size), 0)
    return mine * (p.numel() // max(rows, 1))


def _flat_share(total: int, rank: int, n: int) -> int:
    """ZeRO's partition of a flat buffer of ``total`` bytes: ceil(total/n), the last smaller."""
    size = -(-total // n)
    return max(min(size, total - rank * size), 0)


def _largest_unit(model: Any) -> int:
    """Bytes of the largest FSDP unit's parameters: one child of a ``ModuleList`` or
    ``Sequential`` (the layers one wraps with ``fully_shard``), else the whole model."""
    import torch

    units = [
        sum(p.numel() * p.element_size() for p in child.parameters())
        for m in model.modules()
        if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential))
        for child in m.children()
    ]
    whole = sum(p.numel() * p.element_size() for p in model.parameters())
    return max(units) if units else whole


def collectives(parallel: Parallel, weights: int, grads: int, rows: int) -> dict:
    """Bytes one rank sends per step in each collective (ring volumes)."""
    n, stage = parallel.shards, parallel.stage
    ring = (n - 1) / n if n > 1 else 0.0
    found = {"all_gather": 0, "reduce_scatter": 0, "all_reduce": 0}
    if stage == 3:  # parameters gathered for the forward and again for the backward
        found["all_gather"] = round(2 * ring * weights)
        found["reduce_scatter"] = round(ring * grads)
    elif stage in (1, 2):  # gradients reduced to their owners, the updated shards gathered
        found["all_gather"] = round(ring * weights)
        found["reduce_scatter"] = round(ring * grads)
    elif parallel.dp > 1:
        found["all_reduce"] = round(2 * (parallel.dp - 1) / parallel.dp * grads)
    if parallel.tp > 1:  # a row-parallel output in the forward, its pair's input grad back
        found["all_reduce"] += round(2 * 2 * (parallel.tp - 1) / parallel.tp * rows)
    return found


def _dtype(model: Any) -> str:
    """The parameters' dtype, as ``dtype=`` spells it ("float32")."""
    dtypes = {str(p.dtype).removeprefix("torch.") for p in model.parameters()}
    return "/".join(sorted(dtypes)) or "none"


def _before_update(measured: Any) -> int | None:
    """The step's activation peak before its optimizer's first op, or None without one: a
    rank's activations and all-gathers are live then, not during the update."""
    from pytest_graphbudget.engine.liveness import live_at_peak
    from pytest_graphbudget.modes.train import PHASES

    update = PHASES.index("optimizer")
    stop = next((i for i, node in enumerate(measured.nodes) if node.segment == update), None)
    return None if stop is None else sum(live_at_peak(measured, stop).values())


def row_outputs(model: Any, args: tuple, kwargs: dict[str, Any]) -> int:
    """Bytes of the row-parallel Linears' outputs in one forward (without autograd): what
    the forward all-reduces, and its pair's input gradient what the backward does."""
    import torch

    seen: list[int] = []
    plan = tp_plan(model)
    rows = [m for name, m in model.named_modules() if plan.get(name) == "rowwise"]
    hooks = [m.register_forward_hook(lambda _, i, out: seen.append(out.nbytes)) for m in rows]
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    return sum(seen)


def profile_sharded(request: Any) -> Any:
    """The training step of one rank of ``request`` (resolved, ``dispatch.profile``), with
    every rank's share as ``Profile.parallel``: the step's figures are one tensor-parallel
    rank's, before the state is sharded."""
    from dataclasses import replace

    from pytest_graphbudget.modes.train import profile_step

    parallel = parse(request.variant.parallel)
    check_model(request.model, parallel)
    local = local_model(request.model, parallel.tp)
    traced: list = []
    prof = profile_step(replace(request, model=local), traced)
    trained = sum(p.numel() * p.element_size() for p in local.parameters() if p.requires_grad)
    ratio = prof.optimizer_state_bytes / trained if trained else 0.0
    rows = row_outputs(local, request.inputs, request.kwargs) if parallel.tp > 1 else 0
    # A named optimizer on a 16-bit cast: its update runs on fp32 master weights.
    mixed = request.variant.dtype in MIXED and request.variant.optimizer is not None
    ranks = per_rank(local, prof, parallel, ratio, rows, mixed, _before_update(traced[0]))
    prof.parallel = {
        "parallel": parallel.text(),
        "world": parallel.world,
        "stage": parallel.stage,
        "backend": "gloo",
        "precision": f"mixed {request.variant.dtype}" if mixed else _dtype(local),
        "ranks": [rank.to_dict() for rank in ranks],
    }
    return prof
