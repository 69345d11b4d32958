"""``--graph-budget-base REF`` and ``graph-budget check --base REF``: the base's figures.

A committed baseline goes stale and conflicts on merge; the pull request's real base does not.
The base is ``git merge-base REF HEAD``, checked out in a temporary ``git worktree add
--detach`` (removed afterwards, even on error) and profiled there by the same Python, with this
process's ``pytest_graphbudget`` (the environment, ``PYTHONPATH`` included, is inherited) and
the base's own models, tests and budget files. The base run writes a baseline file, with
``--update``, which then is the baseline of HEAD's run: every baseline rule (tolerance,
renames, new models, stale entries) applies unchanged. Both runs share HEAD's profile cache,
whose keys hold the code's content, never its path: a model unchanged since the base is
profiled once. A base that cannot be profiled is one line (``BaseError``), never a green run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_graphbudget.errors import GraphBudgetError

QUIET = ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_OUTPUT")
IMPORTS_ENV = "GRAPH_BUDGET_BASE_IMPORTS"
"""Set in the base run: its checkout's project root, the checkout, the checkout that asked,
and the file where it writes the project's modules it imported from elsewhere
(``stray_imports``)."""
SHALLOW_HINT = "shallow clone? use actions/checkout with fetch-depth: 0"


class BaseError(GraphBudgetError):
    """The base cannot be profiled: the run is an error, in one line."""


@dataclass
class Base:
    """The base's figures as a baseline file, and how reports name it (``main@1a2b3c4``)."""

    label: str
    baseline: Path
    errors: dict[str, str] = field(default_factory=dict)
    """Models the base run could not profile, by id, with why: ``REPORT`` beside ``out``."""


def git(top: Path, *args: str) -> subprocess.CompletedProcess:
    """``git -C top args``, its output captured as text; never raises on a failure."""
    try:
        return subprocess.run(
            ["git", "-C", str(top), *args], capture_output=True, text=True, check=False
        )
    except OSError as exc:  # no git on the PATH
        return subprocess.CompletedProcess(args, 127, "", str(exc))


def merge_base(root: Path, ref: str, flag: str = "--graph-budget-base") -> tuple[Path, str, str]:
    """The repository's top, the merge base of ``ref`` and HEAD and its short sha; a
    ``BaseError`` saying why there is none."""
    found = git(root, "rev-parse", "--show-toplevel")
    if found.returncode != 0:
        raise BaseError(f"{flag} {ref}: {root} is not in a git repository")
    top = Path(found.stdout.strip())
    if git(top, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").returncode != 0:
        raise BaseError(f"{flag} {ref}: unknown revision (fetched? {SHALLOW_HINT})")
    base = git(top, "merge-base", ref, "HEAD")
    if base.returncode != 0 or not base.stdout.strip():
        raise BaseError(f"{flag} {ref}: no merge base with HEAD ({SHALLOW_HINT})")
    sha = base.stdout.strip()
    short = git(top, "rev-parse", "--short", sha).stdout.strip() or sha[:7]
    return top, sha, short


@contextlib.contextmanager
def worktree(top: Path, sha: str, ref: str, flag: str) -> Iterator[Path]:
    """``sha`` checked out in a temporary detached worktree, removed on the way out."""
    scratch = Path(tempfile.mkdtemp(prefix="graph-budget-base-"))
    where = scratch / "base"
    added = git(top, "worktree", "add", "--detach", str(where), sha)
    try:
        if added.returncode != 0:
            raise BaseError(f"{flag} {ref}: git worktree add failed: {last(added)}")
        yield where
    finally:
        if added.returncode == 0:
            git(top, "worktree", "remove", "--force", str(where))
        shutil.rmtree(scratch, ignore_errors=True)
        git(top, "worktree", "prune")


def profile_base(
    ref: str,
    root: Path,
    here: Path,
    command: Sequence[str],
    out: Path,
    ok: Sequence[int] = (0, 1),
    flag: str = "--graph-budget-base",
) -> Base:
    """Run ``python command`` (a run that rewrites the baseline) at the merge base of ``ref``
    and HEAD, in the directory matching ``here``, and copy the baseline it wrote to ``out``.
    ``root`` is the project's root (where its settings are); ``ok``: the base run's exit
    codes that mean it ran (a budget failing at the base is still its figures); ``flag``:
    the option that asked, as the errors name it."""
    from pytest_graphbudget.run import settings as project

    top, sha, short = merge_base(root, ref, flag)
    if not (
        root.resolve().is_relative_to(top.resolve())
        and here.resolve().is_relative_to(top.resolve())
    ):
        raise BaseError(f"{flag} {ref}: run it inside the repository {top}")
    # a sha (the action's ``base: auto``) is named by the merge base's short sha alone
    label = short if re.fullmatch(r"[0-9a-f]{7,40}", ref) else f"{ref}@{short}"
    with worktree(top, sha, ref, flag) as tree:
        base_root = tree / root.resolve().relative_to(top.resolve())
        base_here = tree / here.resolve().relative_to(top.resolve())
        if not base_here.is_dir():
            raise BaseError(f"{flag} {ref}: {base_here.name} does not exist at {label}")
        try:
            conf = project.for_directory(base_root)[1]
        except project.SettingsError as exc:
            raise BaseError(f"{flag} {ref}: at {label}: {exc.problems[0]}") from None
        written = base_root / conf.baseline
        written.unlink(missing_ok=True)  # the base's own figures only, never a stale file's
        # the base run reports nothing: no job summary, no annotations of its own
        env = {k: v for k, v in os.environ.items() if k not in QUIET}
        env["PYTHONPATH"] = base_pythonpath(top.resolve(), tree)
        strays = out.parent / "strays.json"
        env[IMPORTS_ENV] = os.pathsep.join(map(str, (base_root, tree, top, strays)))
        ran = subprocess.run(
            [sys.executable, *command],
            cwd=base_here,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if ran.returncode not in ok:
            why = f"exit code {ran.returncode}: {last(ran)}"
            raise BaseError(f"{flag} {ref}: the run at {label} failed ({why})")
        stray = json.loads(strays.read_text()) if strays.is_file() else []
        if stray:  # its figures would be this checkout's: compared with itself, all green
            raise BaseError(
                f"{flag} {ref}: the run at {label} imported {stray[0]}, not the copy in its "
                "own checkout (an installed package, or an editable install's own finder?): "
                "make the project importable from its checkout instead (pytest's pythonpath "
                "setting, or PYTHONPATH=src for a src layout)"
            )
        out.parent.mkdir(parents=True, exist_ok=True)
        if written.is_file():
            shutil.copyfile(written, out)
        elif ran.returncode == 1:  # it failed before writing anything: a crash, not figures
            raise BaseError(f"{flag} {ref}: the run at {label} failed ({last(ran)})")
        else:  # nothing profiled at the base: every model of HEAD is new
            out.write_text("", encoding="utf-8")
    return Base(label, out, base_errors(out.parent / REPORT))


REPORT = "base.json"
"""The base run's JSON report, beside its baseline: the callers ask for it there."""


def base_errors(path: Path) -> dict[str, str]:
    """The models of the base run's JSON report (``REPORT``) that could not be profiled."""
    try:
        models = json.loads(path.read_text(encoding="utf-8"))["models"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {m["id"]: m.get("error") or "" for m in models if m.get("verdict") == "error"}


def base_pythonpath(top: Path, tree: Path) -> str:
    """``PYTHONPATH`` for the base run: each entry of this process's path inside the
    repository (``src`` of an editable install, an absolute ``PYTHONPATH``), moved to the
    base's checkout and put first, then the inherited ``PYTHONPATH``. Without it the base
    imported this checkout's code and compared it with itself. Environments inside the
    repository (``.venv``) stay as they are."""
    skip = [Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()]
    moved: list[str] = []
    for entry in sys.path:
        path = Path(entry or ".").resolve()
        if not path.is_relative_to(top) or any(path.is_relative_to(p) for p in skip):
            continue
        there = tree / path.relative_to(top)
        if there.is_dir() and str(there) not in moved:
            moved.append(str(there))
    rest = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join([*moved, *([rest] if rest else [])])


def stray_imports(root: Path, tree: Path, head: Path) -> list[str]:
    """The project's modules that this base run imported from elsewhere, each ``"name from
    path"``: any module read from ``head`` (the checkout that asked: an editable install's
    finder maps it there), and a package or module at ``root`` or in ``root/src``
    (namespace packages too) read from outside ``tree`` (the base's checkout: an installed
    copy). Environments inside the repository (``.venv``) are not the project's."""
    skip = [Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()]
    names = set()
    for folder in (root, root / "src"):
        for path in folder.iterdir() if folder.is_dir() else ():
            if path.suffix == ".py" and path.stem not in ("conftest", "__main__", "setup"):
                names.add(path.stem)
            elif (path / "__init__.py").is_file() or (
                folder.name == "src" and path.is_dir() and any(path.rglob("*.py"))
            ):
                names.add(path.name)  # a package; under src/, a namespace package's part too
    found = []
    for name, module in sorted(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or name == "__main__":
            continue
        where = Path(file).resolve()
        if any(where.is_relative_to(p) for p in skip) or where.is_relative_to(tree):
            continue
        if where.is_relative_to(head) or name.partition(".")[0] in names:
            found.append(f"{name} from {file}")
    return found


def report_stray_imports() -> None:
    """In a base run (``IMPORTS_ENV`` set), once its models are imported: write
    ``stray_imports`` to the file the run that asked reads."""
    if os.environ.get(IMPORTS_ENV):
        root, tree, head, out = os.environ[IMPORTS_ENV].split(os.pathsep)
        found = stray_imports(Path(root), Path(tree).resolve(), Path(head).resolve())
        Path(out).write_text(json.dumps(found), encoding="utf-8")


def last(ran: subprocess.CompletedProcess) -> str:
    """The last line a failed command printed, for its one-line error."""
    lines = [line.strip() for line in f"{ran.stdout}\n{ran.stderr}".splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def checker_baseline(
    committed: Path, root: Path, configured_in: str, base: Base | None, flag: str
) -> dict[str, Any]:
    """The ``Checker``'s baseline keywords: the committed file (``configured_in``: where its
    path was set), or with a ``base`` the base's figures, the title naming the base and saying
    whether the committed file was ignored (``flag``: the option that asked for the base)."""
    from pytest_graphbudget.gate.check import relative

    if base is None:
        return {
            "baseline_path": committed,
            "baseline_name": relative(str(committed), root),
            "baseline_from": configured_in,
        }
    ignored = " (baseline file ignored)" if committed.is_file() else ""
    return {
        "baseline_path": base.baseline,
        "baseline_name": base.label,
        "baseline_from": flag,
        "compared_with": f"{base.label}{ignored}",
        "base_errors": base.errors,
    }
