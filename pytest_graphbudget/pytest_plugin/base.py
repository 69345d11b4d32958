"""``--graph-budget-base REF`` under pytest: the base's figures as the run's baseline.

The controller profiles the base once, in ``pytest_configure`` (``run/base_ref.py``: a
pytest run with ``--graph-budget-update`` in a temporary worktree of the merge base), before
any xdist worker starts; each worker gets the baseline file it wrote through its
``workerinput``. The file is removed when the session ends. A base that cannot be profiled
is a usage error, one line: the run is never green without its comparison.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_graphbudget.pytest_plugin.state import _is_worker
from pytest_graphbudget.run.base_ref import Base

WORKER_KEY = "graph_budget_base"


@dataclass
class BaseRun(Base):
    """The base's baseline file and label; ``scratch``: the controller's folder to remove."""

    scratch: Path | None = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[WORKER_KEY] = [self.label, str(self.baseline), self.errors]

    @pytest.hookimpl
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def baseline_of(config: pytest.Config, settings: Any) -> dict[str, Any]:
    """The ``Checker``'s baseline: the file of the settings, or the base's under
    ``--graph-budget-base`` (then the title names the base, and says the file was ignored)."""
    from pytest_graphbudget.run.base_ref import checker_baseline

    committed = config.rootpath / settings.baseline
    base = base_run(config, settings)
    if base is not None:
        config.pluginmanager.register(base, "graph-budget-base")
    flag = "--graph-budget-base"
    return checker_baseline(committed, config.rootpath, settings.baseline_from, base, flag)


def base_run(config: pytest.Config, settings: Any) -> BaseRun | None:
    """The base profiled (on the controller) or handed over (on a worker); None without
    ``--graph-budget-base``."""
    from pytest_graphbudget.run.base_ref import REPORT, BaseError, profile_base

    ref = config.getoption("graph_budget_base")
    if not ref:
        return None
    if _is_worker(config):
        label, path, errors = config.workerinput[WORKER_KEY]
        return BaseRun(label, Path(path), errors)
    if config.getoption("graph_budget_update"):
        raise pytest.UsageError(
            "--graph-budget-base compares with the base and --graph-budget-update rewrites "
            "the baseline file: use one of them"
        )
    scratch = Path(tempfile.mkdtemp(prefix="graph-budget-base-"))
    here = config.invocation_params.dir
    try:
        # 5: nothing collected at the base, so every model of HEAD is new
        run = [*command(config, settings), f"--graph-budget-json={scratch / REPORT}"]
        base = profile_base(ref, config.rootpath, here, run, scratch / "b", ok=(0, 1, 5))
    except BaseError as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        raise pytest.UsageError(str(exc)) from None
    return BaseRun(base.label, base.baseline, base.errors, scratch)


def command(config: pytest.Config, settings: Any) -> list[str]:
    """The base's pytest run: the same paths, selection, hardware and tier as this run, writing
    the baseline, with this run's profile cache."""
    args = ["-m", "pytest", "--graph-budget", "--graph-budget-update", "-q"]
    args += ["-p", "no:cacheprovider"]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        args += ["-p", "pytest_graphbudget.pytest_plugin.plugin"]
    cache = config.getoption("graph_budget_cache_dir") or config.rootpath / settings.cache_dir
    # one token: a path given apart would count in pytest's rootdir search, and once the cache
    # exists the base run would find HEAD's project instead of its own
    args.append(f"--graph-budget-cache-dir={Path(cache).resolve()}")
    # after the project's addopts, so that a --graph-budget-base there is unset in the base run
    args.append("--graph-budget-base=")
    for flag in ("no_cache", "strict", "breaks"):  # what changes the figures or the verdicts
        if config.getoption(f"graph_budget_{flag}"):
            args.append(f"--graph-budget-{flag.replace('_', '-')}")
    if config.getoption("graph_budget_hardware"):
        args += ["--graph-budget-hardware", config.getoption("graph_budget_hardware")]
    if config.option.keyword:
        args += ["-k", config.option.keyword]
    if config.option.markexpr:
        args += ["-m", config.option.markexpr]
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        args += [a for a in config.args if not Path(a.split("::")[0]).is_absolute()]
    return args
