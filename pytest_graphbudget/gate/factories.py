"""A budget table's ``factory = "package.module:function"``: the user's function called, what
it returns read as a model and its inputs, and the table's keys its model cannot take.

The function is the user's code: whatever it raises is the table's one-line error, never
"our bug"; a bare module it returns is fed ``torch.randn(input_shape)``, the shape read as a
zoo model's is.
"""

from __future__ import annotations

from typing import Any

from pytest_graphbudget.case import as_case
from pytest_graphbudget.errors import GraphBudgetError, one_line


def call_factory(spec: str, name: str) -> Any:
    """What ``package.module:function`` returns, as it returns it."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise GraphBudgetError(f"factory {spec!r} for {name}: expected 'package.module:function'")
    if module_name.endswith(".py"):  # a file where a module goes: "No module named 'nets.py'"
        raise GraphBudgetError(f"factory {spec!r} for {name}: {file_hint(module_name, attr)}")
    module = None
    try:
        module = importlib.import_module(module_name)
        function = getattr(module, attr)
    except (Exception, SystemExit) as exc:  # not found, or the module raised (or exited)
        found = isinstance(exc, (ImportError, AttributeError))
        why = str(exc) if found else f"importing it raised {one_line(exc, typed=True)}"
        if isinstance(exc, AttributeError) and module is not None:
            why += submodule_hint(module, attr)
        raise GraphBudgetError(f"factory {spec!r} for {name}: {why}") from None
    try:
        return function()
    except (Exception, SystemExit) as exc:  # theirs, never "our bug"; sys.exit(0) no pass
        raised = one_line(exc, typed=True)
        raise GraphBudgetError(f"factory {spec!r} for {name} raised {raised}") from exc


def submodule_hint(module: Any, attr: str) -> str:
    """Where ``attr`` is, when a submodule the package imports has it: ``torchvision:resnet18``
    is ``torchvision.models:resnet18``."""
    import types

    for value in vars(module).values():
        if (
            isinstance(value, types.ModuleType)
            and value.__name__.startswith(module.__name__ + ".")
            and callable(getattr(value, attr, None))
        ):
            return f"; did you mean '{value.__name__}:{attr}'?"
    return ""


def file_hint(path: str, attr: str) -> str:
    """What to write instead of ``nets.py:build`` or ``src/nets.py:build``: the module's dotted
    name, importable from the folder it is run in or the project's ``pythonpath``."""
    from pathlib import Path

    file = Path(path)
    if file.is_absolute():
        file = file.relative_to(Path.cwd()) if file.is_relative_to(Path.cwd()) else Path(file.name)
    parts = file.with_suffix("").parts
    dotted = ".".join(parts) if all(p.isidentifier() for p in parts) else file.stem
    return (
        f"name the module, not its file: '{dotted}:{attr}' (importable from the current "
        "folder, the project's root or its [tool.pytest.ini_options] pythonpath)"
    )


def load_factory(spec: str, name: str, options: dict[str, Any]) -> Any:
    """``factory = "package.module:function"``: the function returns a ModelCase, a
    ``(module, inputs)`` pair, or a module (fed ``torch.randn(input_shape)``)."""
    built = call_factory(spec, name)
    case = as_case(built, name)
    if case is None:
        import torch

        if not isinstance(built, torch.nn.Module):
            raise GraphBudgetError(
                f"factory {spec!r} returned {type(built).__name__}, not a "
                "model, a (model, inputs) pair or a ModelCase"
            )
        if "input_shape" not in options:
            raise GraphBudgetError(f"factory {spec!r} returned a bare module: give input_shape")
        from pytest_graphbudget.case import ModelCase

        case = ModelCase(built, (torch.randn(*shape_of(options)),), name=name)
    return case


def shape_of(options: dict[str, Any]) -> tuple[int, ...]:
    """``input_shape`` read as a zoo model's is: [0, 3, 16, 16] had profiled an empty batch at
    0 FLOPs and passed, and [1, 3, 16.5, 16] failed as "internal error ... this is a bug"."""
    from pytest_graphbudget.zoo.base import LoadOptions

    return LoadOptions(input_shape=options["input_shape"]).input_shape or ()


ZOO_ONLY = ("seq_len", "batch", "meta", "trust_pickle")
"""Options of a model the zoo builds (or loads from a file), which a factory's model never sees."""


def factory_problems(table: dict[str, Any], where: str, lines: dict[str, int]) -> list[str]:
    """A problem for each key of a ``factory`` table that its model cannot take: the factory
    builds its own model and inputs, so a ``batch`` or a second ``model`` would be dropped
    and the budget would check the factory's figures under a label that says otherwise.
    ``batch`` stays for ``decode = true``, where it is the decode step's."""
    if "factory" not in table:
        return []
    spec = table["factory"]
    problems = []
    if "model" in table:
        problems.append(
            f"model in {where}: give model or factory, not both; factory = {spec!r} builds "
            f"the model, so model = {table['model']!r} would never be checked"
        )
    for key in ZOO_ONLY:
        if key in table and not (key == "batch" and table.get("decode") is True):
            inherited = "" if key in lines else " (set in [defaults])"
            problems.append(
                f"{key} in {where}{inherited} ignored: factory = {spec!r} builds its own model "
                f"and inputs, and {key} is for a model the zoo builds or loads; remove {key} "
                "from the table, or build it into the factory"
            )
    return problems


def table_factory(spec: str, name: str, options: dict[str, Any]) -> Any:
    """``load_factory`` for budget table ``name``, with an ``input_shape`` that the factory's
    own inputs would override refused (it is for a factory that returns a bare module)."""
    case = load_factory(spec, name, options)
    shape = shape_of(options) if options.get("input_shape") is not None else None
    first = next((t for t in case.inputs if hasattr(t, "shape")), None)
    if shape is not None and (first is None or list(first.shape) != list(shape)):
        own = list(first.shape) if first is not None else "no tensor"
        raise GraphBudgetError(
            f"input_shape in budget table {name} ignored: factory {spec!r} returned its own "
            f"inputs ({own}), not a bare module; remove input_shape from the table"
        )
    return case
