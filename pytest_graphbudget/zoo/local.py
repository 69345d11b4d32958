"""Models on disk: a folder with ``config.json``, a ``.pt``/``.pth`` file, a ``.pt2`` export, or
an ultralytics model ``.yaml``.

``.pt``/``.pth`` files are loaded with ``torch.load(weights_only=True)``, which cannot run code
from the file. Official ultralytics checkpoints load that way too, against ultralytics' own
allow-list of its model classes. Any other full pickle (``torch.save(model)``) is refused with a
one-line message unless ``trust_pickle=True`` (``--trust-pickle``), because unpickling it runs
code from the file. A file holding only weights (a state dict) has no architecture to profile
and is refused as well.
"""

from __future__ import annotations

import inspect
import pickle
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.compat import unsafe_globals
from pytest_graphbudget.errors import GraphBudgetError, one_line
from pytest_graphbudget.zoo.base import LoadOptions, ModelLoader

if TYPE_CHECKING:
    from pytest_graphbudget.case import ModelCase

PICKLE_SUFFIXES = (".pt", ".pth")
YAML_SUFFIXES = (".yaml", ".yml")


class LocalLoader(ModelLoader):
    family = "local"

    def names(self) -> list[str]:
        return []

    def can_load(self, name: str) -> bool:
        path = Path(name).expanduser()
        if path.is_dir():
            return (path / "config.json").is_file()
        if path.is_file():
            return path.suffix.lower() in (*PICKLE_SUFFIXES, ".pt2", *YAML_SUFFIXES, ".json")
        return False

    def load(self, name: str, options: LoadOptions) -> ModelCase:
        path = Path(name).expanduser()
        suffix = path.suffix.lower()
        if path.is_dir() or suffix == ".json":
            return _load_config(path if path.is_dir() else path.parent, name, options)
        if suffix in YAML_SUFFIXES:
            return _load_yaml(path, name, options)
        if suffix == ".pt2":
            return _load_exported(path, name, options)
        return _load_pickle(path, name, options)


def _load_config(folder: Path, name: str, options: LoadOptions) -> ModelCase:
    from pytest_graphbudget.zoo import huggingface

    if not (folder / "config.json").is_file():
        raise GraphBudgetError(f"{name}: no config.json in {folder}")
    config = huggingface.config_from_folder(folder)
    return huggingface.build_case(config, name, options)


def _load_yaml(path: Path, name: str, options: LoadOptions) -> ModelCase:
    from pytest_graphbudget.case import ModelCase
    from pytest_graphbudget.zoo import ultralytics
    from pytest_graphbudget.zoo._build import build_module, image

    tasks = ultralytics.import_ultralytics().nn.tasks
    try:
        spec = tasks.yaml_model_load(path)
    except Exception as exc:
        raise GraphBudgetError(f"{name}: not a readable model YAML ({exc})") from exc
    if not isinstance(spec, dict) or "backbone" not in spec or "head" not in spec:
        raise GraphBudgetError(f"{name}: not an ultralytics model YAML (no backbone/head)")
    model = build_module(lambda: tasks.DetectionModel(cfg=spec, verbose=False), options.meta)
    shape = options.image_shape((1, 3, ultralytics.DEFAULT_IMGSZ, ultralytics.DEFAULT_IMGSZ))
    return ModelCase(model, (image(shape),), {}, name=name)


def _load_exported(path: Path, name: str, options: LoadOptions) -> ModelCase:
    """A ``torch.export`` archive: the program itself (profiled through its own graph, by the
    ``export`` tier) at the example inputs saved in it."""
    import torch

    from pytest_graphbudget.case import ModelCase
    from pytest_graphbudget.quiet import held

    try:
        with held(f"loading {name}"):  # a damaged archive makes torch log a traceback
            program = torch.export.load(path)
    except Exception as exc:
        first = one_line(exc)
        raise GraphBudgetError(f"{name}: not a torch.export archive ({first})") from None
    example = getattr(program, "example_inputs", None)
    if example is None:
        raise GraphBudgetError(
            f"{name}: the exported program carries no example inputs; export it with "
            "example inputs, or profile it from a fixture"
        )
    args, kwargs = example
    args, kwargs = _inputs_at(program, tuple(args), dict(kwargs), name, options)
    return ModelCase(program, args, kwargs, name=name)


def _inputs_at(
    program: Any, args: tuple, kwargs: dict[str, Any], name: str, options: LoadOptions
) -> tuple[tuple, dict[str, Any]]:
    """The saved example inputs, resized to ``input_shape``/``batch``/``seq_len`` when asked.

    The main input is the first tensor. A dimension the program was exported with as dynamic
    (``torch.export.Dim``) may change within its range, and every input that shares it follows;
    a static one may not: that is a one-line error, never a profile at the wrong shape.
    """
    import torch
    from torch.utils import _pytree as pytree

    leaves, spec = pytree.tree_flatten((args, kwargs))
    tensors = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    saved = list(leaves[tensors[0]].shape) if tensors else []
    wanted = list(options.input_shape) if options.input_shape is not None else list(saved)
    if options.batch is not None:
        wanted[:1] = [options.batch]
    if options.seq_len is not None:
        wanted[1:2] = [options.seq_len]
    if wanted == saved:
        return args, kwargs

    def refuse(why: str) -> GraphBudgetError:
        return GraphBudgetError(
            f"{name} was exported at input shape {saved}, so it cannot be profiled at {wanted}: "
            f"{why}; export it again at that shape (or with a torch.export.Dim for it)"
        )

    nodes = {n.name: n for n in program.graph_module.graph.nodes if n.op == "placeholder"}
    users = [
        nodes[s.arg.name].meta.get("val")
        for s in program.graph_signature.input_specs
        if s.kind.name == "USER_INPUT"
    ]
    if not tensors or len(users) != len(leaves) or len(wanted) != len(saved):
        raise refuse(f"the main input has {len(saved)} dimensions")
    mapping: dict[Any, int] = {}
    for dim, (exported, size) in enumerate(zip(users[tensors[0]].shape, wanted, strict=True)):
        if isinstance(exported, int):
            if exported != size:
                raise refuse(f"dimension {dim} is static")
            continue
        symbol = exported.node.expr
        limits = program.range_constraints.get(symbol)
        if not symbol.is_Symbol:
            raise refuse(f"dimension {dim} is derived from others ({symbol})")
        if limits is not None and not limits.lower <= size <= limits.upper:
            upper = "any size" if "oo" in str(limits.upper) else str(limits.upper)
            raise refuse(f"dimension {dim} is dynamic from {limits.lower} to {upper}")
        mapping[symbol] = size

    def resized(leaf: Any, exported: Any) -> Any:
        if not isinstance(leaf, torch.Tensor):
            return leaf
        shape = []
        for old, dim in zip(leaf.shape, exported.shape, strict=True):
            expr = None if isinstance(dim, int) else dim.node.expr
            known = expr is not None and expr.free_symbols <= mapping.keys()
            shape.append(int(expr.xreplace(mapping)) if known else old)
        if leaf.is_floating_point():
            return torch.randn(shape, dtype=leaf.dtype)
        return torch.zeros(shape, dtype=leaf.dtype)

    new = [resized(leaf, exported) for leaf, exported in zip(leaves, users, strict=True)]
    args, kwargs = pytree.tree_unflatten(new, spec)
    return tuple(args), dict(kwargs)


def _load_pickle(path: Path, name: str, options: LoadOptions) -> ModelCase:
    import torch

    from pytest_graphbudget.case import ModelCase

    if _is_torchscript(path):
        raise GraphBudgetError(
            f"{name} is a TorchScript archive, which graph-budget cannot trace; "
            "profile the eager model instead"
        )
    note = None
    from pytest_graphbudget.quiet import held

    try:
        with held(f"loading {name}"):  # torch's deprecation warnings, as a quantized model's
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        globals_ = unsafe_globals(path, exc)
        if any(g.startswith("ultralytics.") for g in globals_):
            loaded = _load_ultralytics(path, name, trust=options.trust_pickle)
            note = "ultralytics checkpoint"
        elif options.trust_pickle:
            loaded = _unpickle(path, name)
        elif not globals_:  # not a checkpoint torch.save wrote: never suggest unpickling it
            raise GraphBudgetError(
                f"{name} is not a readable PyTorch file ({_unpickler_reason(exc)})"
            ) from None
        else:
            # the project's own classes first, then torch's; sorted: torch's finder returns a
            # set's order, which differs from one process to the next
            shown = ", ".join(sorted(globals_, key=lambda g: (g.startswith("torch."), g))[:2])
            raise GraphBudgetError(
                f"{name} is a full pickle ({shown}); loading it runs code from the file. "
                "Pass trust_pickle=True (--trust-pickle) if you trust it"
            ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, KeyError, ValueError) as exc:
        first = one_line(exc, typed=isinstance(exc, (KeyError, ValueError)))  # a text file
        raise GraphBudgetError(f"{name} is not a readable PyTorch file ({first})") from None

    model = _module_in(loaded)
    if model is None:
        what = "a state dict (weights only)" if isinstance(loaded, dict) else type(loaded).__name__
        raise GraphBudgetError(
            f"{name} holds {what}, not a model: there is no architecture to profile; "
            "build the model in a fixture and load the weights there"
        )
    model = model.float().eval()
    shape = _input_shape(model, name, options, loaded)
    from pytest_graphbudget.zoo._build import image

    return ModelCase(model, (image(shape),), {}, name=name, note=note)


def _load_ultralytics(path: Path, name: str, *, trust: bool) -> Any:
    """An ultralytics checkpoint: weights_only against ultralytics' class allow-list, or, when
    the user trusts the file, ultralytics' own loader (which unpickles it fully)."""
    from pytest_graphbudget.zoo import ultralytics

    tasks = ultralytics.import_ultralytics().nn.tasks
    safe = getattr(tasks, "_SafeLoad", None)
    if safe is not None and getattr(safe, "SUPPORTED", False):
        try:
            checkpoint, _ = tasks.torch_safe_load(str(path), safe_only=True)
            return checkpoint
        except Exception as exc:
            if not trust:
                first = one_line(exc)
                raise GraphBudgetError(
                    f"{name} could not be loaded with weights_only safety ({first}); "
                    "pass trust_pickle=True (--trust-pickle) if you trust the file"
                ) from None
    elif not trust:
        import torch

        why = (
            "this ultralytics version cannot load it with weights_only safety"
            if safe is None  # else its safe loader wants torch's finder of a file's globals
            else f"ultralytics' weights_only loader needs torch>=2.5, not {torch.__version__}"
        )
        raise GraphBudgetError(
            f"{name} is an ultralytics checkpoint and {why}; "
            "pass trust_pickle=True (--trust-pickle) if you trust it"
        )
    # The checkpoint as saved, not ``load_checkpoint``'s model: that one's ``args`` are replaced
    # by ultralytics' defaults and ``train_args``, which loses the trainer's own ``imgsz``.
    taken = inspect.signature(tasks.torch_safe_load).parameters
    unsafe = {"safe_only": False} if "safe_only" in taken else {}
    try:
        checkpoint, _ = tasks.torch_safe_load(str(path), **unsafe)
    except Exception as exc:
        first = one_line(exc)
        raise GraphBudgetError(f"{name}: ultralytics could not load it ({first})") from None
    return checkpoint


def _unpickle(path: Path, name: str) -> Any:
    import torch

    from pytest_graphbudget.quiet import held

    try:
        with held(f"loading {name}"):  # TypedStorage's and quantized tensors' deprecations
            return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:
        first = one_line(exc)
        raise GraphBudgetError(f"{name} could not be unpickled ({first})") from None


def _module_in(loaded: Any) -> Any:
    """The model in what ``torch.load`` returned: a module, or a checkpoint dict's
    ``ema``/``model`` entry (the ultralytics layout)."""
    import torch

    if isinstance(loaded, torch.nn.Module):
        return loaded
    if isinstance(loaded, dict):
        for key in ("ema", "model"):
            if isinstance(loaded.get(key), torch.nn.Module):
                return loaded[key]
    return None


def _input_shape(model: Any, name: str, options: LoadOptions, loaded: Any) -> tuple[int, ...]:
    if options.input_shape is not None:
        return options.image_shape(options.input_shape)
    if hasattr(model, "yaml") and hasattr(model, "stride"):  # an ultralytics model
        imgsz = _trained_imgsz(model, loaded)
        if isinstance(imgsz, (list, tuple)):
            height, width = int(imgsz[0]), int(imgsz[-1])
        else:
            height = width = int(imgsz)
        channels = int(model.yaml.get("channels", model.yaml.get("ch", 3)) or 3)
        return options.image_shape((1, channels, height, width))
    raise GraphBudgetError(
        f"{name}: cannot tell the model's input shape; pass input_shape (--input-shape 1,3,224,224)"
    )


def _trained_imgsz(model: Any, loaded: Any) -> Any:
    """The ``imgsz`` an ultralytics checkpoint was trained at: its ``train_args`` (what
    ultralytics' own loader reads), else the model's ``args`` (a dict, or the namespace the
    trainer attaches), else ultralytics' default, 640."""
    from pytest_graphbudget.zoo.ultralytics import DEFAULT_IMGSZ

    train_args = loaded.get("train_args") if isinstance(loaded, dict) else None
    for args in (train_args, getattr(model, "args", None)):
        imgsz = args.get("imgsz") if isinstance(args, dict) else getattr(args, "imgsz", None)
        sides = list(imgsz) if isinstance(imgsz, (list, tuple)) else [imgsz]
        if sides and all(type(side) is int and side > 0 for side in sides):
            return imgsz
    return DEFAULT_IMGSZ


def _unpickler_reason(exc: BaseException) -> str:
    """The line of a weights-only load error that says what was wrong with the file."""
    marker = "WeightsUnpickler error:"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if marker in line:
            said = line.partition(marker)[2].strip()
            return said or (lines[i + 1] if i + 1 < len(lines) else line)
    return lines[0] if lines else type(exc).__name__


def _is_torchscript(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return any(n.endswith("/constants.pkl") for n in archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return False
