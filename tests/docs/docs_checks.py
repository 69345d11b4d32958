"""Checks of blocks that are not run: workflow YAML and command synopses.

A YAML block is linted with actionlint as ``tests/test_workflows.py`` lints the repository's
workflows (a list of steps is linted inside a small workflow), and every ``graph-budget`` or
``pytest --graph-budget...`` command in its ``run:`` scripts has its flags checked against the
tool's own parser and pytest's options. A synopsis (``graph-budget profile MODEL [--top N]``)
names only flags the command has.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

from docs_shell import ROOT, commands

EXPRESSION = re.compile(r"\$\{\{.*?\}\}", re.S)
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
OPERATORS = {"&&", "||", "|", ";", ">", ">>", "2>&1"}


def workflows_module():
    """``tests/test_workflows.py``, whose actionlint runner this reuses."""
    if "test_workflows" in sys.modules:
        return sys.modules["test_workflows"]
    spec = importlib.util.spec_from_file_location(
        "test_workflows", ROOT / "tests" / "test_workflows.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["test_workflows"] = module
    spec.loader.exec_module(module)
    return module


def as_workflow(text: str) -> tuple[str, list[dict]]:
    """The block as a whole workflow for actionlint, and its steps."""
    import yaml

    data = yaml.safe_load(text)
    if isinstance(data, list):  # steps to paste into a job
        workflow = {"on": "pull_request", "jobs": {"job": {"runs-on": "ubuntu-latest"}}}
        workflow["jobs"]["job"]["steps"] = data
        return yaml.safe_dump(workflow, sort_keys=False, width=1000), data
    steps = [s for job in (data.get("jobs") or {}).values() for s in job.get("steps", [])]
    return text, steps


def lint_yaml(text: str, where: str, scratch: Path) -> list[str]:
    """actionlint's findings and the flags of the ``run:`` commands that no parser knows."""
    module = workflows_module()
    workflow, steps = as_workflow(text)
    found = module.actionlint([(where, workflow)], scratch)
    problems = [f"{where}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]" for f in found]
    for step in steps:
        for command in commands(EXPRESSION.sub("X", step.get("run", ""))):
            problems.extend(command_flags(command))
    return problems


def command_flags(command: str) -> list[str]:
    """What is wrong with the flags of a ``graph-budget`` or ``pytest`` command line."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    problems = []
    for start, word in enumerate(words):
        argv = _until_operator(words[start + 1 :])
        if word == "graph-budget":
            problems.extend(_graph_budget(argv, command))
        elif word == "pytest":
            known = pytest_options()
            for arg in argv:
                flag = arg.split("=", 1)[0]
                if flag.startswith("--graph-budget") and flag not in known:
                    problems.append(f"{command}: pytest has no option {flag}")
    return problems


def _until_operator(words: list[str]) -> list[str]:
    out = []
    for word in words:
        if word in OPERATORS:
            break
        out.append(word)
    return out


def _graph_budget(argv: list[str], command: str) -> list[str]:
    import contextlib
    import io

    from pytest_graphbudget import cli

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.build_parser().parse_args(argv)
        except SystemExit as exc:
            if exc.code:
                return [f"{command}: {stderr.getvalue().strip().splitlines()[-1]}"]
    return []


@functools.lru_cache(maxsize=1)
def pytest_options() -> frozenset[str]:
    """Every ``--graph-budget...`` option pytest has with this package installed."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return frozenset(re.findall(r"(--graph-budget[\w-]*)", done.stdout))


def command_options(name: str) -> set[str]:
    """The option strings of ``graph-budget NAME``."""
    import argparse

    from pytest_graphbudget import cli

    parser = cli.build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(subparsers.choices[name]._option_string_actions)


def usage_flags(text: str) -> list[str]:
    """The flags of a synopsis block that its command does not have."""
    problems = []
    for line in text.splitlines():
        match = re.match(r"\s*graph-budget (\w+)", line)
        if match:
            name = match.group(1)
        unknown = sorted(set(FLAG.findall(line)) - command_options(name))
        problems.extend(f"graph-budget {name} has no option {flag}" for flag in unknown)
    return problems
