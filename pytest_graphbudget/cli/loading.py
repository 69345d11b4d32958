"""Building and profiling the model a command names, and the ``--hardware`` it runs on.

Torch and the zoo are imported here only inside the functions, so that importing the command
line stays cheap (``graph-budget hardware`` and ``--help`` never import torch).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.cli.console import Console, stdout_to_stderr
from pytest_graphbudget.errors import GraphBudgetError

if TYPE_CHECKING:
    from pytest_graphbudget.case import ModelCase
    from pytest_graphbudget.engine.profile import Profile


def hardware(args: argparse.Namespace) -> Any:
    """The ``--hardware`` profile (built-in, or from ``--hardware-file``); checked early.
    Without the flag, the project's ``[tool.graph_budget] hardware``, as pytest uses it: a
    figure from the CLI and one from the budget run must be on the same roofline."""
    from pytest_graphbudget import hardware as hw
    from pytest_graphbudget.run import settings

    name = args.hardware  # "" is a name too, and an unknown one: never the default
    if name is None:
        name = settings.for_directory(Path.cwd())[1].hardware
    return hw.get(name, user_hardware(getattr(args, "hardware_file", None)))


def user_hardware(path: str | None) -> dict[str, Any]:
    """The project's profiles (``[tool.graph_budget.hardware_profiles]``, in the project
    pytest would run here) and the ``[hardware.<name>]`` tables of ``--hardware-file``, which
    win."""
    from pytest_graphbudget.run import settings

    profiles = settings.for_directory(Path.cwd())[1].hardware_profiles
    given = file_hardware(path)  # names match in any case: the file's ``MyHop`` wins ``myhop``
    mine = {name.lower() for name in given}
    found = {**{n: hw for n, hw in profiles.items() if n.lower() not in mine}, **given}
    if given:  # an alias of the file's that a project profile has (or is named) too
        from pytest_graphbudget.hardware import check_names

        try:
            check_names(found)
        except GraphBudgetError as exc:
            raise GraphBudgetError(f"{path} and the project's profiles: {exc}") from None
    return found


def file_hardware(path: str | None) -> dict[str, Any]:
    """The profiles of ``--hardware-file`` alone (``{}`` without one); an error in them
    names the file, as one in pyproject.toml does."""
    from pytest_graphbudget import hardware as hw

    if not path:
        return {}
    data = read_toml(path)
    refuse_stray_keys(path, data)
    tables = data.get("hardware")
    if not isinstance(tables, dict) or not tables:
        raise GraphBudgetError(f"{path}: no [hardware.<name>] tables")
    try:
        return hw.from_tables(tables)
    except GraphBudgetError as exc:
        raise GraphBudgetError(f"{path}: {exc}") from None


def refuse_stray_keys(path: str, data: dict[str, Any]) -> None:
    """A hardware file holds ``[hardware.<name>]`` tables alone: a profile's key at the top
    or a misspelt table would be dropped without a word."""
    from pytest_graphbudget.errors import closest

    for key in sorted(data.keys() - {"hardware"}):
        where = "table" if isinstance(data[key], dict) else "key"
        raise GraphBudgetError(
            f"{path}: unknown top-level {where} {key!r}{closest(key, ['hardware'])}; a hardware "
            "file holds [hardware.<name>] tables, each with all of its profile's keys"
        )


def read_toml(path: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise GraphBudgetError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:  # TOML is UTF-8; tomllib decodes the bytes itself
        raise GraphBudgetError(f"{path}: not valid TOML (not UTF-8 text)") from None
    except tomllib.TOMLDecodeError as exc:
        raise GraphBudgetError(f"{path}: not valid TOML ({exc})") from None


def zoo_options(args: argparse.Namespace) -> dict[str, Any]:
    """The model options of ``args`` as ``zoo.resolve`` takes them."""
    shape = tuple(args.input_shape) if getattr(args, "input_shape", None) else None
    timed = getattr(args, "measure", False) or getattr(args, "measure_runs", None)
    return {
        "seq_len": getattr(args, "seq_len", None),
        "batch": getattr(args, "batch", None),
        "input_shape": shape,
        # Timed runs need real weights, even where the zoo would build on meta by itself.
        "meta": True if getattr(args, "meta", False) else (False if timed else None),
        "trust_pickle": getattr(args, "trust_pickle", False),
    }


FACTORY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
"""``package.module:callable``: a model the user's own code builds (as ``factory =`` in TOML)."""


def is_factory(name: str) -> bool:
    """Whether ``name`` names a callable of the user's code rather than a zoo model or file.

    ``timm:resnet50`` and ``diffusers:UNet2DConditionModel`` read as ``module:callable`` too:
    a name the zoo claims by its prefix is the zoo's."""
    return bool(FACTORY.fullmatch(name)) and not Path(name).exists() and not zoo_prefixed(name)


def zoo_prefixed(name: str) -> bool:
    """Whether a zoo family that claims names by a prefix (``timm:``, ``diffusers:``) takes
    ``name``. Only those loaders are asked: their ``can_load`` reads the prefix and imports
    nothing, where asking every loader (``zoo.find_loader``) imports torchvision and
    huggingface_hub and lists every family for a name none takes, seconds before the user's
    factory is even imported."""
    from pytest_graphbudget.zoo.diffusers import DiffusersLoader
    from pytest_graphbudget.zoo.timm import TimmLoader

    return any(loader.can_load(name) for loader in (TimmLoader(), DiffusersLoader()))


@contextlib.contextmanager
def project_code() -> Iterator[None]:
    """The current directory, the project's root and its ``pythonpath`` entries first on
    ``sys.path`` while a model is loaded, as ``graph-budget check`` imports factories: the
    user's package imports, and a pickled model of the user's classes unpickles."""
    from pytest_graphbudget.run.import_paths import import_paths, importable
    from pytest_graphbudget.run.settings import discover

    here = Path.cwd()
    project = discover(here)
    with importable([str(here.resolve()), *import_paths(project.root, project.ini)]):
        yield


def factory_case(spec: str, args: argparse.Namespace) -> ModelCase:
    """The model ``package.module:callable`` returns: a ``ModelCase``, a ``(model, inputs)``
    pair, or a bare model fed ``torch.randn(--input-shape)``."""
    from pytest_graphbudget.case import rss_bytes
    from pytest_graphbudget.gate.factories import load_factory

    zoo_only = [f for f in ("seq_len", "batch", "meta") if getattr(args, f, None)]
    if zoo_only:
        flag = "--" + zoo_only[0].replace("_", "-")
        raise GraphBudgetError(
            f"{flag} applies to zoo models and files; {spec} builds its own model and inputs"
        )
    shape = getattr(args, "input_shape", None)
    start = time.perf_counter()
    case = load_factory(spec, spec, {"input_shape": tuple(shape)} if shape else {})
    case.load_seconds, case.load_rss_bytes = time.perf_counter() - start, rss_bytes()
    first = next((t for t in case.inputs if hasattr(t, "shape")), None)
    if shape and (first is None or list(first.shape) != list(shape)):
        raise GraphBudgetError(
            f"--input-shape {','.join(map(str, shape))}: {spec} returned its own inputs "
            f"({list(first.shape) if first is not None else 'no tensor'}); drop the flag, or "
            "return a bare model"
        )
    case.name = case.name or spec
    return case


def load_case(name: str, args: argparse.Namespace, console: Console) -> ModelCase:
    from pytest_graphbudget import zoo
    from pytest_graphbudget.compat import check_torch

    check_torch()  # one line for a torch below the floor, before the model is built
    console.progress(f"loading {name} ...")
    try:
        with stdout_to_stderr(), project_code():
            file, colon, attr = name.rpartition(":")
            if colon and file.endswith(".py") and FACTORY.fullmatch(f"m:{attr}"):
                from pytest_graphbudget.gate.factories import file_hint

                raise GraphBudgetError(f"{name}: {file_hint(file, attr)}")
            if not colon and name.endswith(".py") and Path(name).is_file():  # which name in it?
                from pytest_graphbudget.gate.factories import file_hint

                where = file_hint(name, "NAME")
                raise GraphBudgetError(f"{name}: which function or class builds the model? {where}")
            if is_factory(name):
                case = factory_case(name, args)
            else:
                case = zoo.resolve(name, **zoo_options(args))
    except GraphBudgetError:
        raise
    except Exception as exc:  # a file or configuration the loaders choke on is bad input
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        if _out_of_memory(exc):
            raise GraphBudgetError(_too_large(name, args, reason)) from exc
        raise GraphBudgetError(
            f"{name}: could not load the model ({type(exc).__name__}: {reason})"
        ) from exc
    if case.note:
        console.note(case.note)
    return case


def _out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or "can't allocate memory" in str(exc)


def _too_large(name: str, args: argparse.Namespace, reason: str) -> str:
    """An allocation that failed while the model and its inputs were built: the inputs' size
    when ``--input-shape`` gave it (``--meta`` had been told the model failed to load)."""
    import math

    from pytest_graphbudget.units import format_bytes

    wanted = re.search(r"allocate (\d+) bytes", reason)
    tried = f" ({format_bytes(int(wanted.group(1)))})" if wanted else ""
    shape = getattr(args, "input_shape", None)
    inputs = (
        f"; --input-shape {','.join(map(str, shape))} is {format_bytes(4 * math.prod(shape))} "
        "in float32"
        if shape
        else ""
    )
    return (
        f"{name}: out of memory while building the model and its inputs{tried}{inputs}; "
        "profile a smaller shape (FLOPs and activations scale with the batch)"
    )


def variant(args: argparse.Namespace) -> dict[str, Any]:
    """``--mode``, ``--optimizer``, ``--dtype`` and ``--execution`` as ``profile_model``'s
    keywords (those that differ from its defaults)."""
    from pytest_graphbudget.modes.request import Variant, checked

    given = {key: getattr(args, key, None) for key in ("mode", "optimizer", "dtype", "parallel")}
    for key in ("optimizer", "parallel"):
        if given[key] and given["mode"] != "train":  # before any model is built
            raise GraphBudgetError(f"--{key} needs --mode train: an eval forward has no {key}")
    given["parallel"] = checked("parallel", given["parallel"], "the command line")
    found = Variant(**{**given, "mode": given["mode"] or "eval"}).options()
    how = execution(args)
    return {**found, "execution": how} if how != "eager" else found


def execution(args: argparse.Namespace) -> str:
    """``--execution`` (checked), else the project's ``[tool.graph_budget] execution``, as
    pytest uses it, else eager."""
    from pytest_graphbudget.modes.request import check_execution
    from pytest_graphbudget.run import settings

    given = getattr(args, "execution", None)
    if given is None:
        if not hasattr(args, "execution"):  # a command without the option
            return "eager"
        return settings.for_directory(Path.cwd())[1].defaults.execution
    return check_execution(given, "the command line")


def profile_case(
    case: ModelCase, hardware: Any, console: Console, how: dict[str, Any] | None = None
) -> Profile:
    """Profile ``case`` on ``hardware``; ``how`` holds ``profile_model``'s mode, optimizer
    and dtype keywords (``variant(args)``) and ``measure``, the runs to time: with them, one
    ``Request`` that one mode profiles."""
    from pytest_graphbudget.modes import dispatch

    runs = (how or {}).get("measure")
    timed = f" (then timing {runs} runs)" if runs else ""
    console.progress(f"profiling {case.name}{timed} ...")
    start = time.perf_counter()
    with stdout_to_stderr():
        prof = dispatch.profile(dispatch.request(case, hardware=hardware, **(how or {})))
    console.progress(
        f"profiled {prof.model} in {time.perf_counter() - start:.1f}s "
        f"({prof.trace.method} trace, {prof.trace.nodes} nodes, {len(prof.subgraphs)} subgraphs)"
    )
    unsupported = prof.coverage.unsupported_ops
    if unsupported:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(unsupported.items()))
        console.note(f"{prof.model}: no cost formula for {ops}; their FLOPs are not counted")
    from pytest_graphbudget.gate.budgets import UNREGISTERED
    from pytest_graphbudget.gate.ignored import PEAK_KEYS, missing_peak

    for where, size in prof.coverage.unregistered.items():
        console.note(f"{prof.model}: {where}: {size} params in {UNREGISTERED}")
    for note in prof.notes:  # what the profile assumed (its zoo option's note: said above)
        if note != case.note:
            console.note(f"{prof.model}: {note}")

    if note := missing_peak(prof, PEAK_KEYS):  # hardware.peak() and .kernel() fall back quietly
        console.note(note)
    return prof


def module_types(case: ModelCase) -> dict[str, str]:
    """Class name of every module path, for the per-layer table's type column."""
    from pytest_graphbudget.engine.walk import classes

    return classes(case.model)
