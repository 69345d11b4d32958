"""Project settings: the ``[tool.graph_budget]`` table of ``pyproject.toml``, read and checked.

The plugin and the command line read it through ``load``, so both reject the same mistakes:
every bad value and every unknown key (with the closest valid one) is a one-line problem, and
none of them is ever ignored, since a setting that is silently dropped (a misspelt
``tolerance``, a ``budgets`` path that the run never collects) turns a gate green unchecked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError, closest, toml_error
from pytest_graphbudget.gate.budgets import DEFAULT_TOLERANCE, Budget, build
from pytest_graphbudget.run.cache import DIRECTORY
from pytest_graphbudget.run.config_files import TABLE, misspelt_tables, settings_above
from pytest_graphbudget.run.config_files import tomllib as _tomllib
from pytest_graphbudget.units import shown

DEFAULT_BASELINE = "budgets/baseline.toml"
DEFAULT_CACHE_DIR = DIRECTORY

KEYS = {
    "hardware": "a hardware profile's name, such as 'generic' or 'a100'",
    "execution": "how models run, which latency_max judges: 'eager' or 'compiled'",
    "tolerance": "a fraction or a percentage, such as 0.01 or '1%'",
    "baseline": "the baseline file's path, relative to the project's root",
    "budgets": "a path or a list of paths, relative to the project's root",
    "cache_dir": "a directory's path, relative to the project's root",
    "strict": "true or false",
    "enabled": "true or false",
    "measure_runs": "the timed runs of a latency_measured_max budget, such as 20",
    "measure_device": "where a latency_measured_max budget runs: cpu, cuda or cuda:N",
    "hardware_profiles": "tables of hardware profiles, "
    "such as [tool.graph_budget.hardware_profiles.my-npu]",
}
"""Every key ``[tool.graph_budget]`` takes, with the form of its value (for error messages)."""

INI = {
    "hardware": "string",
    "execution": "string",
    "measure_device": "string",
    "tolerance": "string",
    "baseline": "string",
    "budgets": "linelist",
    "cache_dir": "string",
    "strict": "bool",
    "enabled": "bool",
}
"""The flat settings that are also pytest ini options (``graph_budget_<key>``, in
``[tool.pytest.ini_options]``, ``pytest.ini`` or ``-o``), with their pytest types. They show in
``pytest --help``; ``[tool.graph_budget]`` wins where both give a key."""
TRUE, FALSE = ("y", "yes", "t", "true", "on", "1"), ("n", "no", "f", "false", "off", "0")


def ini_name(key: str) -> str:
    return f"graph_budget_{key}"


def unknown_ini(keys: dict[str, str]) -> list[str]:
    """A problem for each ini option named like ours (``graph_budget_baselin``) that is none
    of them, ``keys`` mapping each option given to where it was: pytest only warns of it, and
    the run would go on without the setting (no baseline, the default tolerance)."""
    known, problems = [ini_name(key) for key in INI], []
    for key, where in keys.items():
        folded = str(key).lower().replace("-", "_")
        if folded.startswith("graph_budget") and key not in known:
            table_only = folded.removeprefix("graph_budget_")
            why = closest(str(key), known) or f"; the ini options are {', '.join(known)}"
            if table_only in set(KEYS) - set(INI):  # measure_runs, hardware_profiles
                why = f": {table_only} is a key of {TABLE} only, not an ini option"
            problems.append(f"{where}: unknown ini option {key!r}{why}")
    return problems


class SettingsError(GraphBudgetError):
    """``[tool.graph_budget]`` has problems: ``problems`` holds one line for each."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


@dataclass
class Settings:
    """The checked ``[tool.graph_budget]`` table, with its defaults filled in."""

    hardware: str = "generic"
    tolerance: float = DEFAULT_TOLERANCE
    baseline: str = DEFAULT_BASELINE
    baseline_from: str = ""
    """Where ``baseline`` was set ("" for the default path): a configured baseline that does
    not exist is an error, a missing default one a run without regression checks."""
    budgets: list[str] = field(default_factory=list)
    cache_dir: str = DEFAULT_CACHE_DIR
    strict: bool = False
    enabled: bool = False
    """Check budgets on every pytest run, as ``--graph-budget`` does."""
    hardware_profiles: dict[str, Any] = field(default_factory=dict)
    defaults: Budget = field(default_factory=Budget)
    """The budget every model starts from: ``hardware`` and ``tolerance`` over the built-ins."""


@dataclass
class Project:
    """Where a run's settings come from, found as pytest finds them: its rootdir, its
    configuration file (``pyproject.toml``, ``pytest.ini``, ``tox.ini``, ``setup.cfg``; None
    when there is none) and that file's pytest options."""

    root: Path
    config: Path | None = None
    ini: dict[str, Any] = field(default_factory=dict)


def discover(invocation_dir: Path, args: Sequence[str] = ()) -> Project:
    """The project of a run started in ``invocation_dir`` with ``args`` (the paths given),
    by pytest's own rules: the rootdir and configuration file that ``pytest args`` would use
    there (https://docs.pytest.org/en/stable/reference/customize.html#finding-the-rootdir).

    ``graph-budget`` calls it so that it reads the settings, ids and baseline that ``pytest
    --graph-budget`` reads, wherever in a nested project it is started; it asks pytest's own
    function rather than copying its rules, which change between pytest versions.
    """
    import pytest

    from pytest_graphbudget.compat import pytest_inifile

    invocation_dir = Path(invocation_dir).resolve()
    given = {
        "inifile": None,
        "override_ini": None,
        "args": [str(invocation_dir / a) for a in args],
        "rootdir_cmd_arg": None,
        "invocation_dir": invocation_dir,
    }
    try:
        found = pytest_inifile(**given)
    except (Exception, pytest.fail.Exception) as exc:  # a configuration file pytest refuses
        misshapen(invocation_dir)  # ``tool = 0`` and the like: said in our words, if so
        reason = " ".join(str(getattr(exc, "msg", None) or exc).split())
        raise SettingsError([f"cannot read pytest's configuration: {reason}"]) from None
    root, config, options = found[0], found[1], found[2] or {}
    ini = {str(key): getattr(value, "value", value) for key, value in options.items()}
    return Project(Path(root), Path(config) if config else None, ini)


def misshapen(start: Path) -> None:
    """Raise the one-line ``SettingsError`` of the nearest ``pyproject.toml`` above ``start``
    whose ``tool``, ``tool.pytest`` or ``tool.pytest.ini_options`` is not a table: pytest
    fails on those with an ``AttributeError`` of its own."""
    for folder in (start, *start.parents):
        path = folder / "pyproject.toml"
        try:
            data = _tomllib().loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        subtable(data, ("tool", "pytest", "ini_options"), path)


def for_directory(start: Path, args: Sequence[str] = ()) -> tuple[Project, Settings]:
    """The project (``discover``) and its checked settings, for the command line."""
    project = discover(start, args)
    where = f"{project.config}" if project.config else "pytest's configuration"
    unknown = unknown_ini(dict.fromkeys(project.ini, where))
    try:
        settings = load(project.root, _ini_from_toml(project.ini), where, project.config)
    except SettingsError as exc:
        raise SettingsError(unknown + exc.problems) from None
    if unknown:
        raise SettingsError(unknown)
    return project, settings


def pyproject_of(root: Path, config: Path | None = None) -> Path:
    """The ``pyproject.toml`` holding ``[tool.graph_budget]``: pytest's configuration file
    when it is one, else the one in the rootdir."""
    if config is not None and Path(config).name == "pyproject.toml":
        return Path(config)
    return Path(root) / "pyproject.toml"


def load(
    root: Path,
    ini: dict[str, Any] | None = None,
    ini_where: str = "",
    config: Path | None = None,
) -> Settings:
    """The settings of the project whose rootdir is ``root`` (and configuration file
    ``config``; ``pyproject_of`` says which file is read): the defaults when it has no
    pyproject.toml or no ``[tool.graph_budget]``; raises ``SettingsError`` listing every
    problem, a misspelt ``[tool.graph-budget]`` included.

    ``ini``: the ``graph_budget_<key>`` ini options by key, as pytest read them (the plugin
    passes ``config.getini``'s); None reads them from the same pyproject.toml's
    ``[tool.pytest.ini_options]``. A key of ``[tool.graph_budget]`` wins.
    """
    path, data = read_pyproject(root, config)
    tool = subtable(data, ("tool",), path)
    misspelt = misspelt_tables(tool, path)
    table = tool.get("graph_budget", {})
    if ini is None:
        options = subtable(data, ("tool", "pytest", "ini_options"), path)
        ini = _ini_from_toml(options)
        ini_where = ini_where or f"[tool.pytest.ini_options] of {path}"
        misspelt += unknown_ini(dict.fromkeys(options, ini_where))
    try:
        settings = merged(table, ini, f"{TABLE} of {path}", ini_where or "pytest's configuration")
    except SettingsError as exc:
        raise SettingsError(misspelt + exc.problems) from None
    if not table and not any(ini.values()):
        misspelt += settings_above(Path(root), config)
    if misspelt:
        raise SettingsError(misspelt)
    return settings


def read_pyproject(root: Path, config: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """The ``pyproject.toml`` holding ``[tool.graph_budget]`` (``pyproject_of``) and its
    data, ``{}`` when there is none; raises ``SettingsError`` for a file it cannot read."""
    path = pyproject_of(root, config)
    data: dict[str, Any] = {}
    if path.is_file():
        try:
            data = _tomllib().loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError([f"cannot read {path}: {exc}"]) from None
        except _tomllib().TOMLDecodeError as exc:
            raise SettingsError([toml_error(path, exc)]) from None
    return path, data


def gate_enabled(root: Path, config: Path | None, ini_value: Any, ini_where: str = "") -> bool:
    """Whether ``enabled = true`` (or the ini option ``graph_budget_enabled``; the table
    wins) turns the gate on without ``--graph-budget``. Only this key is read here, so that
    a run without the gate reads nothing else; the rest is checked once the gate is on.
    Raises ``SettingsError`` for a value that is not true or false, and for a misspelt
    ``[tool.graph-budget]`` that sets ``enabled`` (the gate would stay off unsaid)."""
    try:
        path, data = read_pyproject(root, config)
        tool = subtable(data, ("tool",), path)
    except SettingsError:
        return False  # pytest itself reports a configuration file it cannot read
    setting = {k: v for k, v in tool.items() if isinstance(v, dict) and "enabled" in v}
    misspelt = misspelt_tables(setting, path)
    if misspelt:
        raise SettingsError(misspelt)
    table = tool.get("graph_budget", {})
    if isinstance(table, dict):  # enable = true, misspelt: the gate would stay off unsaid
        hints = {k: closest(k, list(KEYS)) for k in table if k not in KEYS}
        near = [
            f"unknown key {k!r} in {TABLE} of {path}{h}"
            for k, h in hints.items()
            if "'enabled'" in h
        ]
        if near:
            raise SettingsError(near)
    if isinstance(table, dict) and "enabled" in table:
        value, where = table["enabled"], f"{TABLE} of {path}"
    else:
        place = ini_where or "pytest's configuration"
        value, where = ini_value, f"{place} (ini option {ini_name('enabled')})"
    if value is None or isinstance(value, bool):
        return bool(value)
    raise SettingsError([f"{where}: enabled must be {KEYS['enabled']}, got {value!r}"])


def subtable(data: dict[str, Any], keys: tuple[str, ...], path: Path) -> dict[str, Any]:
    """``data[keys[0]][keys[1]]...``, ``{}`` where a key is missing; a value on the way that
    is not a table (``tool = 0``, ``[tool] pytest = "x"``) is a one-line ``SettingsError``,
    as pytest refuses them too (with a traceback)."""
    for depth, key in enumerate(keys):
        value = data.get(key, {})
        if not isinstance(value, dict):
            dotted = ".".join(keys[: depth + 1])
            raise SettingsError([f"{path}: {dotted} must be a table, got {shown(value)}"])
        data = value
    return data


def merged(table: Any, ini: dict[str, Any], where: str, ini_where: str) -> Settings:
    """``check`` of ``[tool.graph_budget]`` over the ini options it does not give; a bad ini
    option is one problem naming it, as a bad key of the table is, also where the table gives
    the key and wins (``-o graph_budget_tolerance=banana`` is never dropped unread)."""
    problems: list[str] = []
    fallback = {}
    if isinstance(table, dict):
        for key, value in ini.items():
            if value is None or value == "" or value == []:
                continue
            try:
                check(
                    {key: value, **_profiles_for(key, table, where)},
                    f"{ini_where} (ini option {ini_name(key)})",
                )
            except SettingsError as exc:
                problems += exc.problems
            else:
                if key not in table:
                    fallback[key] = value
    try:
        settings = check({**fallback, **table} if isinstance(table, dict) else table, where)
    except SettingsError as exc:
        problems += exc.problems
    if problems:
        raise SettingsError(problems)
    if "baseline" in fallback:
        settings.baseline_from = f"{ini_where} (ini option {ini_name('baseline')})"
    return settings


def _profiles_for(key: str, table: dict[str, Any], where: str) -> dict[str, Any]:
    """The table's own hardware profiles, for an ini ``graph_budget_hardware`` to name one of
    them (``{}`` for any other key, or when they are wrong: the table's check says so)."""
    profiles = table.get("hardware_profiles")
    if key != "hardware" or not isinstance(profiles, dict):
        return {}
    try:
        check({"hardware_profiles": profiles}, where)
    except SettingsError:
        return {}
    return {"hardware_profiles": profiles}


def _ini_from_toml(options: dict[str, Any]) -> dict[str, Any]:
    """The ``graph_budget_<key>`` options of ``[tool.pytest.ini_options]`` as pytest reads
    them: ``strict`` from a boolean word, ``budgets`` from lines."""
    found: dict[str, Any] = {}
    for key, kind in INI.items():
        value = options.get(ini_name(key))
        if isinstance(value, str) and kind == "bool" and value.strip().lower() in TRUE + FALSE:
            value = value.strip().lower() in TRUE
        elif isinstance(value, str) and kind == "linelist":
            value = [line.strip() for line in value.splitlines() if line.strip()]
        if value is not None:
            found[key] = value
    return found


def check(table: Any, where: str = f"{TABLE} of pyproject.toml") -> Settings:
    """``Settings`` from the raw table; raises ``SettingsError`` listing every problem."""
    if not isinstance(table, dict):
        raise SettingsError([f"{where}: must be a table, got {table!r}"])
    problems: list[str] = []
    settings = Settings()
    for key in table:
        if key not in KEYS:
            problems.append(f"{where}: unknown key {key!r}{closest(key, list(KEYS))}")
    profiles = table.get("hardware_profiles", {})
    settings.hardware_profiles = _hardware_profiles(profiles, where, problems)
    for key in ("baseline", "cache_dir"):
        if key in table:
            value = table[key]
            if isinstance(value, str) and value.strip():
                setattr(settings, key, value)
                if key == "baseline":
                    settings.baseline_from = where
            else:
                problems.append(f"{where}: {key} must be {KEYS[key]}, got {value!r}")
    if "budgets" in table:
        value = table["budgets"]
        paths = [value] if isinstance(value, str) else value
        if isinstance(paths, list) and all(isinstance(p, str) and p.strip() for p in paths):
            settings.budgets = list(paths)
        else:
            problems.append(f"{where}: budgets must be {KEYS['budgets']}, got {value!r}")
    for key in ("strict", "enabled"):
        if key not in table:
            continue
        if isinstance(table[key], bool):
            setattr(settings, key, table[key])
        else:
            problems.append(f"{where}: {key} must be {KEYS[key]}, got {table[key]!r}")
    defaults = build({}, where, hardware_profiles=settings.hardware_profiles)
    refused = _refused_names(profiles, settings.hardware_profiles)
    for key in ("hardware", "execution", "tolerance", "measure_runs", "measure_device"):
        if key == "hardware" and str(table.get(key, "")).casefold() in refused:
            continue  # its profile's own problem is said: not "unknown hardware" as well
        if key in table:
            try:
                defaults = build({key: table[key]}, where, defaults)
            except GraphBudgetError as exc:
                problems.append(str(exc))
    settings.defaults = defaults
    settings.hardware, settings.tolerance = defaults.hardware, defaults.tolerance
    if problems:
        raise SettingsError(problems)
    return settings


def _refused_names(tables: Any, found: dict[str, Any]) -> set[str]:
    """The names, folded, of the profiles written that ``_hardware_profiles`` refused."""
    written = tables if isinstance(tables, dict) else {}
    return {str(name).casefold() for name in written if str(name) not in found}


def _hardware_profiles(tables: Any, where: str, problems: list[str]) -> dict[str, Any]:
    """The user's hardware profiles that are well formed; a problem for each other one."""
    from pytest_graphbudget.hardware import check_names, from_table

    if not isinstance(tables, dict):
        problems.append(f"{where}: hardware_profiles must be {KEYS['hardware_profiles']}")
        return {}
    found = {}
    for name, table in tables.items():
        # A key as TOML would quote it, so a name holding a newline stays on the one line.
        key = name if re.fullmatch(r"[A-Za-z0-9_-]+", str(name)) else json.dumps(str(name))
        if not isinstance(table, dict):
            problems.append(f"{where}: hardware_profiles.{key} must be a table, got {table!r}")
            continue
        try:
            found[str(name)] = from_table(str(name), table)
        except GraphBudgetError as exc:
            problems.append(f"{where}: hardware_profiles.{key}: {exc}")
    try:  # two names alike in case, an alias taken twice: one profile unreachable
        check_names(found)
    except GraphBudgetError as exc:
        problems.append(f"{where}: hardware_profiles: {exc}")
    return found
