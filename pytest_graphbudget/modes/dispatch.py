"""``profile_model``: a thin facade. Its keywords become one ``Request`` (``request``, every
check in one place), which ``profile`` hands to exactly one mode: the decode step
(``decode.py``), the training step (``train.py``) or one forward (``engine.pipeline``), cast
(``dtype.py``) and timed (``runtime.py``) as asked. No mode calls back here; a sweep, above,
hands each of its points' requests to ``profile``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.case import ModelCase
from pytest_graphbudget.engine.profile import Profile
from pytest_graphbudget.errors import GraphBudgetError, ModelRunError, closest
from pytest_graphbudget.modes import runtime

if TYPE_CHECKING:
    from pytest_graphbudget.modes.request import Request


def preload() -> None:
    """Import what a first profile would import: torch, the engine's capture, pricing and
    assembly, the dtype step (about 25 ms besides torch). ``from pytest_graphbudget import
    profile_model`` calls it, so that the first profile of a process pays for profiling only,
    as ``FlopCounterMode``'s machinery loads with its import; the package itself, which pytest
    imports for every run, stays free of torch (``pytest_graphbudget.__getattr__``)."""
    from pytest_graphbudget import hardware  # noqa: F401
    from pytest_graphbudget.engine import (  # noqa: F401
        assemble,
        breaks,
        latency,
        partition,
        replay,
        tiers,
        trace,
    )
    from pytest_graphbudget.modes import dtype, quantize, request  # noqa: F401


def profile_model(
    model: Any,
    inputs: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    hardware: Any = "generic",
    name: str | None = None,
    mode: str = "eval",
    loss: Callable | None = None,
    optimizer: str | None = None,
    dtype: str | None = None,
    measure: bool | int = False,
    device: str | None = None,
    tier: str | None = None,
    parallel: Any = None,
    execution: str = "eager",
    **zoo_options: Any,
) -> Profile:
    """Profile one forward pass of ``model`` at ``inputs`` (and keyword ``kwargs``).

    ``inputs``: a tensor, a tuple or list of positional inputs, or a dict of keyword inputs
    (``{"input_ids": ids, "attention_mask": mask}``, as a tokenizer returns them; not beside
    ``kwargs``). A forward that takes one dict positionally gets it in a tuple, ``(batch,)``.

    ``model`` is an ``nn.Module``, a ``ModelCase``, or a zoo name such as ``"resnet50"`` (then
    ``seq_len``, ``batch``, ``input_shape`` and the other zoo options may be given).
    ``mode="train"`` profiles one training step instead: forward, ``loss`` (a callable of the
    outputs; default the ``loss`` they hold, else their sum), backward and, when ``optimizer``
    ("adam" or "sgd") is named, its update (``train.py``).
    ``dtype`` ("float32", "bfloat16", "float16"; None: the model's own) profiles a cast copy
    of the model and of its floating inputs (``dtype.py``): bytes and peak are that dtype's;
    "int8" and "float8_e4m3fn" a copy with its Linear layers quantized (``quantize.py``);
    "amp_float16" and "amp_bfloat16" the model as it is, under CUDA's autocast (``amp.py``):
    each op's bytes in the dtype autocast gives it, the peak the low dtype's.
    ``decode=True, context=N`` profiles one generated token of a causal LM instead
    (``decode.step_profile``; ``profile_decode`` gives the prefill beside it).
    ``measure`` (True: 20 runs, or a number of runs) also times it here (``runtime.py``), on
    ``device`` ("cpu", "cuda", "cuda:N"; None: where the model is) as a copy (``device.py``).
    A model ``fx`` cannot trace is priced from one taped forward; ``tier="dynamo"`` asks for
    a whole graph from ``torch.export`` instead, ``tier="dynamo-breaks"`` for Dynamo's graph
    breaks (where and why the forward breaks).
    ``parallel`` (``{"fsdp": 8}``, ``{"zero": 2, "dp": 4}``, ``{"tp": 2, "fsdp": 4}`` or
    ``"fsdp=8,tp=2"``) profiles one rank of a sharded training step (``parallel.py``).
    ``execution`` says how the model runs, which ``est_latency_s`` prices: ``"eager"`` (the
    default: one kernel per op, each with its launch, as PyTorch runs without
    ``torch.compile``) or ``"compiled"`` (one kernel per fused group, as ``torch.compile``).
    """
    return profile(
        request(
            model,
            inputs,
            kwargs,
            hardware=hardware,
            name=name,
            mode=mode,
            loss=loss,
            optimizer=optimizer,
            dtype=dtype,
            measure=measure,
            device=device,
            tier=tier,
            parallel=parallel,
            execution=execution,
            **zoo_options,
        )
    )


def request(
    model: Any,
    inputs: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    hardware: Any = "generic",
    name: str | None = None,
    mode: str = "eval",
    loss: Callable | None = None,
    optimizer: str | None = None,
    dtype: str | None = None,
    measure: bool | int = False,
    device: str | None = None,
    tier: str | None = None,
    parallel: Any = None,
    execution: str = "eager",
    **options: Any,
) -> Request:
    """``profile_model``'s keywords as one checked ``Request``: every keyword refused here, in
    one line, before any model is built; the plugin, ``graph-budget`` and the sweeps build
    theirs here too."""
    from pytest_graphbudget.modes.request import (
        Request,
        Variant,
        check_dtype,
        check_execution,
        check_mode,
    )

    check_mode(mode, loss, optimizer)
    check_dtype(dtype, mode, parallel)
    check_execution(execution)
    runs = runtime.runs_asked(measure, mode, options, isinstance(model, str))
    runtime.check_where(device, runs)
    inputs, kwargs = keyword_inputs(inputs, kwargs)
    decode = bool(options.get("decode")) or "context" in options
    check_tier(tier, mode, decode)
    if decode:
        from pytest_graphbudget.modes.decode import step_options

        if mode != "eval" or dtype is not None:
            raise GraphBudgetError(
                "decode profiles one generated token in eval mode, in the "
                "model's own dtype: drop mode/dtype"
            )
        options = step_options(options)
    else:
        options.pop("decode", None)
        _refuse_unknown(options, kwargs)
        if options and not isinstance(model, str):
            unknown = ", ".join(sorted(options))
            raise GraphBudgetError(f"options {unknown} only apply to zoo model names")
    variant = Variant(mode, optimizer, dtype, sharded(parallel, mode, decode))
    found = tuple(sorted(options.items()))
    return Request(
        model,
        inputs,
        kwargs,
        hardware,
        name,
        variant,
        loss,
        runs,
        found,
        decode,
        device,
        tier,
        execution,
    )


def keyword_inputs(inputs: Any, kwargs: Any) -> tuple[Any, Any]:
    """A dict given as ``inputs`` is the keyword inputs, as a sweep's ``inputs=`` may return
    one: ``profile_model(model, {"input_ids": ids, "attention_mask": mask})``, what a
    tokenizer returns, had reached the forward as one positional dict (``'dict' object has no
    attribute 'size'``). A forward that takes one dict gets it in a tuple, ``(batch,)``."""
    if not isinstance(inputs, Mapping):
        return inputs, kwargs
    if kwargs is not None:
        raise GraphBudgetError(
            "inputs is a dict, the keyword inputs, and kwargs= is given too: pass the keyword "
            "inputs in one of them (a forward that takes one dict: inputs=(the_dict,))"
        )
    return (), dict(inputs)


def sharded(parallel: Any, mode: str, decode: bool) -> str | None:
    """``parallel`` as its text ("fsdp=8"), checked: it shards a training step's state."""
    if parallel is None:
        return None
    from pytest_graphbudget.modes.shards import parse

    text = parse(parallel).text()
    if mode != "train" or decode:
        raise GraphBudgetError(
            "parallel shards a training step's parameters, gradients and optimizer state: "
            "pass mode='train' too"
        )
    return text


def check_tier(tier: str | None, mode: str, decode: bool) -> None:
    """``tier`` picks how one eval forward is captured; a training step and a decode step are
    captured their own way, so asking there would be silently ignored: refused instead."""
    if tier is None:
        return
    from pytest_graphbudget.engine.tiers import ASKED

    if tier not in ASKED:
        hint = closest(tier, ASKED) if isinstance(tier, str) else ""  # dynamo_breaks
        raise GraphBudgetError(f"tier must be one of {', '.join(ASKED)}, got {tier!r}{hint}")
    if mode != "eval" or decode:
        step = "a decode step" if decode else "a training step"
        raise GraphBudgetError(
            f"tier={tier!r} picks how one eval forward is captured, not {step}: drop tier"
        )


def profile(request: Request) -> Profile:
    """The profile ``request`` asks for, from exactly one mode: the decode step, the training
    step, or one forward (cast as asked, and timed when it asks for runs). A model whose code
    calls ``sys.exit`` is an error of that model: ``sys.exit(0)`` in a forward had ended
    ``graph-budget check`` with exit 0 and no report, the failures before it lost."""
    try:
        return _profile(request)
    except SystemExit as exc:
        raise ModelRunError(f"the model's code called sys.exit({exc.code!r})") from exc


def _profile(request: Request) -> Profile:
    from pytest_graphbudget.engine.pipeline import is_program  # imports torch: not at the top,
    # where a warm run's requests (of budgets the cache answers) would import it for nothing

    if request.decode:
        from pytest_graphbudget.modes.decode import step_profile

        return step_profile(request)
    model, inputs, kwargs, name = request.model, request.inputs, request.kwargs, request.name
    if isinstance(model, str):
        from pytest_graphbudget import zoo

        model = zoo.resolve(model, **dict(request.options))
    load = runtime.loaded(model) if request.runs else None
    note = model.note if isinstance(model, ModelCase) else None  # a zoo option it ignored
    if isinstance(model, ModelCase):
        name = name or model.name
        inputs = model.inputs_for(request.variant.mode) if inputs is None else inputs
        kwargs = model.kwargs if kwargs is None else kwargs
        model = model.model
    model = eager_module(model)
    if is_program(model):
        inputs, kwargs = _saved_inputs(model, inputs, kwargs)
    name = name or type(model).__name__
    with eager_children(model):
        prof = _one_forward(request, model, inputs, kwargs, name, load)
    prof.notes += [note] if note else []  # said in Python too, where no console says it
    return prof


def _one_forward(
    request: Request, model: Any, inputs: Any, kwargs: Any, name: str, load: Any
) -> Profile:
    """The training step, or one forward of the resolved ``model``."""
    from pytest_graphbudget.engine.pipeline import profile_graph
    from pytest_graphbudget.modes.dtype import cast
    from pytest_graphbudget.modes.quantize import refuse_int8_on_a_gpu, tied_notes

    variant = request.variant
    refuse_int8_on_a_gpu(variant.dtype, request.hardware, model)
    notes = tied_notes(model, variant.dtype)
    args, kwargs = _as_tuple(inputs), dict(kwargs or {})
    _refuse_nested(args, kwargs)
    model, args, kwargs = cast(model, args, kwargs, variant.dtype)
    if variant.mode == "train":
        from pytest_graphbudget.modes.parallel import profile_sharded
        from pytest_graphbudget.modes.train import profile_step

        step = profile_sharded if variant.parallel else profile_step
        # The request resolved: its module (cast), its inputs as a tuple, its label.
        return step(replace(request, model=model, inputs=args, kwargs=kwargs, name=name))
    with _autocast(variant.dtype):
        prof = profile_graph(
            model, args, kwargs, request.hardware, name, request.tier, request.execution
        )
        prof.notes += notes
        if not request.runs:
            return prof
        return runtime.attach(prof, model, args, kwargs, request.runs, load, request.device)


KEYWORDS = (
    "hardware name mode loss optimizer dtype measure device tier parallel execution decode "
    "context seq_len batch input_shape meta trust_pickle"
).split()
"""``profile_model``'s keywords and the zoo's options (``zoo.resolve``)."""


def _refuse_unknown(options: dict[str, Any], kwargs: Any) -> None:
    """A misspelt keyword (``hardwre=``) is named, with the one meant: it had reached the
    zoo's loader as a ``TypeError``, or been called an option of zoo names; ``kwargs`` that
    is no mapping had been a ``TypeError`` deep in the cast."""
    from pytest_graphbudget.errors import closest

    for key in options:
        if key not in KEYWORDS:
            raise GraphBudgetError(f"unknown keyword {key!r}{closest(key, KEYWORDS)}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise GraphBudgetError(
            f"kwargs= takes the keyword inputs as a dict, got {type(kwargs).__name__}"
        )


def _refuse_nested(args: tuple, kwargs: dict) -> None:
    """A nested tensor (``torch.nested``) is refused as an input before any tier runs: the
    tape's ops on it are its subclass's, not ATen's on dense tensors (priced at zero), and a
    warm-up ended in a RecursionError the model's forward was blamed for."""
    from torch.utils import _pytree as pytree

    for where, value in [*enumerate(args), *kwargs.items()]:
        if any(getattr(t, "is_nested", False) is True for t in pytree.tree_leaves(value)):
            raise GraphBudgetError(
                f"input {where!r} is a nested tensor (torch.nested), which graph-budget does "
                "not support as an input: pass padded dense tensors"
            )


def eager_module(model: Any) -> Any:
    """The module a ``torch.compile``'d one wraps, profiled in its place: Inductor's kernels
    hide every op but the library calls from the capture (a compiled MLP lost its GELU,
    norm and softmax FLOPs), its modules would be named ``_orig_mod.*``, and the graph is
    the original's (``execution="compiled"`` prices it as torch.compile runs it). TorchScript
    is refused in one line: its methods have no Python signature to read inputs by; so are a
    class and a ``(module, inputs)`` pair given as the model."""
    if type(model).__name__ == "OptimizedModule" and hasattr(model, "_orig_mod"):
        return eager_module(model._orig_mod)
    import torch

    _refuse_class_or_pair(model, torch.nn.Module)
    if isinstance(model, torch.jit.ScriptModule):
        raise GraphBudgetError(
            f"{type(model).__name__} is TorchScript (torch.jit.trace or torch.jit.script), "
            "which graph-budget cannot trace; profile the eager model instead"
        )
    return model


def _refuse_class_or_pair(model: Any, module: type) -> None:
    """The two usual slips, said with their fix: a class for an instance (``nn.Linear``), and a
    ``(module, inputs)`` pair, as fixtures return them, given as the model: both had been
    "expected a torch.nn.Module, got type" (or "got tuple")."""
    if isinstance(model, type):
        named = model.__name__
        fix = f"; pass an instance, {named}(...)" if issubclass(model, module) else ""
        raise GraphBudgetError(f"expected a torch.nn.Module, got the class {named}{fix}")
    if isinstance(model, tuple) and model and isinstance(model[0], module):
        raise GraphBudgetError(
            "expected a torch.nn.Module, got a tuple: a (module, inputs) pair is passed as "
            "profile_model(module, inputs)"
        )


@contextlib.contextmanager
def eager_children(model: Any) -> Iterator[None]:
    """Submodules compiled apart run as the modules they wrap while the block runs, then are
    put back: ``torch.compile(child)`` held by an eager parent, or ``child.compile()``, had
    been captured through Inductor's kernels (a compiled MLP lost its ReLU's FLOPs, and its
    Linear's were charged to the wrapper, ``enc._orig_mod.0`` at 0), as ``eager_module``
    says of a compiled model."""
    import torch

    swapped: list = []
    called: list = []
    if isinstance(model, torch.nn.Module):
        _unwrap(model, swapped)
        for module in model.modules():
            if getattr(module, "_compiled_call_impl", None) is not None:
                called.append((module, module._compiled_call_impl))
                module._compiled_call_impl = None
    try:
        yield
    finally:
        for module, impl in called:
            module._compiled_call_impl = impl
        for parent, key, child in reversed(swapped):
            parent._modules[key] = child


def _unwrap(module: Any, swapped: list) -> None:
    for key, child in list(module._modules.items()):
        if type(child).__name__ == "OptimizedModule" and hasattr(child, "_orig_mod"):
            swapped.append((module, key, child))
            module._modules[key] = child = eager_module(child)
        if child is not None:
            _unwrap(child, swapped)


def _autocast(dtype: str | None) -> Any:
    """CUDA's autocast for an ``amp_`` dtype (``amp.py``), else nothing."""
    from pytest_graphbudget.modes.amp import AMP, cuda_autocast

    return cuda_autocast(dtype) if dtype in AMP else contextlib.nullcontext()


def _saved_inputs(program: Any, inputs: Any, kwargs: Any) -> tuple[Any, Any]:
    """The example inputs an exported program was saved with, when none are given."""
    if kwargs or (inputs is not None and not (isinstance(inputs, (tuple, list)) and not inputs)):
        return inputs, kwargs
    example = getattr(program, "example_inputs", None)
    return example if example is not None else (inputs, kwargs)


def _as_tuple(inputs: Any) -> tuple:
    if inputs is None:
        return ()
    if isinstance(inputs, tuple):
        return inputs
    if isinstance(inputs, list):
        return tuple(inputs)
    return (inputs,)
