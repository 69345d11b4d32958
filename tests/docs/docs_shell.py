"""A document's scratch project: a new git repository where its blocks write files and run.

``graph-budget`` commands run in this process through ``cli.main`` (no second torch import);
anything else a shell would do (pipes, redirections, globs, ``pytest``, ``git``) runs in
``bash`` with this virtual environment's ``bin`` first on ``PATH``. Python blocks run here too,
in one module per document, so that a later block sees what an earlier one defined.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
TIMEOUT = 600

# What `make` exports (no network: models from configurations), a terminal 80 columns wide,
# and git commits that come out the same on every run.
ENV = {
    "YOLO_OFFLINE": "1",
    "YOLO_AUTOINSTALL": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "COLUMNS": "80",
    "GIT_AUTHOR_NAME": "Docs",
    "GIT_AUTHOR_EMAIL": "docs@example.com",
    "GIT_COMMITTER_NAME": "Docs",
    "GIT_COMMITTER_EMAIL": "docs@example.com",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "DOCS_TOOLS": str(HERE),  # tests/docs/, for the helpers that directives call
    "DOCS_BIN": str(BIN),
    "DOCS_ROOT": str(ROOT),  # the repository, for its examples/
}
# What makes tools print as they do on CI, not in a user's terminal: pytest prints whole
# failure messages in its summary when CI or BUILD_NUMBER is set (as on the project's CI
# machine), our reports react to GitHub's variables, and pytest reads its own.
UNSET = ("CI", "BUILD_NUMBER", "FORCE_COLOR", "NO_COLOR", "PY_COLORS")
UNSET_PREFIXES = ("GITHUB_", "PYTEST_")


def scrubbed(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` without what would make the examples print differently on CI."""
    return {
        key: value
        for key, value in environ.items()
        if key not in UNSET and not key.startswith(UNSET_PREFIXES)
    }


SHELL_SYNTAX = re.compile(r"[|&;<>`*?\[]|\$\(|^\w+=")


class Project:
    """A scratch git repository for one document, with the document's Python namespace."""

    def __init__(self, name: str):
        self.path = Path(tempfile.mkdtemp(prefix=f"docs-{name}-"))
        self.module = types.ModuleType("docs_" + re.sub(r"\W", "_", name))
        self.module.__file__ = str(self.path / f"{name}.py")
        path = f"{BIN}{os.pathsep}{os.environ['PATH']}"
        self.env = {**scrubbed(dict(os.environ)), **ENV, "PATH": path}
        self.shell("git init -q -b main . && git commit -q --allow-empty -m 'the project'")

    def remove(self) -> None:
        sys.modules.pop(self.module.__name__, None)
        shutil.rmtree(self.path, ignore_errors=True)

    def write(self, relative: str, text: str, append: bool = False) -> None:
        path = self.path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a" if append else "w", encoding="utf-8") as handle:
            handle.write(text)

    def run(self, command: str, env: dict[str, str] | None = None, stderr: bool = True):
        """(exit code, what the command printed): stdout and stderr as one terminal shows
        them, or stdout alone (``stderr=False``: docs that leave out the progress lines)."""
        words = None if SHELL_SYNTAX.search(command) else shlex.split(command, comments=True)
        if words and words[0] == "graph-budget":
            return self._in_process(words[1:], env or {}, stderr)
        return self.shell(command, env, stderr)

    def shell(self, command: str, env: dict[str, str] | None = None, stderr: bool = True):
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.path,
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if stderr else subprocess.PIPE,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        return done.returncode, done.stdout

    def _in_process(self, argv: list[str], env: dict[str, str], stderr: bool):
        from pytest_graphbudget import cli

        out, err = io.StringIO(), io.StringIO()
        with self._inside(env), contextlib.redirect_stdout(out):
            with contextlib.redirect_stderr(out if stderr else err):
                try:
                    code = cli.main(argv)
                except SystemExit as exc:  # argparse refusing a flag
                    code = exc.code if isinstance(exc.code, int) else 2
        return code, out.getvalue()

    def python(self, code: str, filename: str, line: int = 0) -> None:
        """Run ``code`` in the document's module, from the project's directory; ``line``:
        where the code starts in ``filename``, so that a traceback quotes the document."""
        sys.modules[self.module.__name__] = self.module
        with self._inside({}):
            exec(compile("\n" * line + code, filename, "exec"), self.module.__dict__)

    @contextlib.contextmanager
    def _inside(self, env: dict[str, str]):
        """In the project: its directory current and first on ``sys.path``, the environment
        set; the project's own modules forgotten afterwards (the next document may have a
        package of the same name)."""
        saved_env, saved_cwd = dict(os.environ), os.getcwd()
        os.environ.clear()
        os.environ.update({**scrubbed(saved_env), **ENV, **env})
        os.chdir(self.path)
        sys.path.insert(0, str(self.path))
        try:
            yield
        finally:
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
            with contextlib.suppress(ValueError):
                sys.path.remove(str(self.path))
            for name, module in list(sys.modules.items()):
                if str(getattr(module, "__file__", None) or "").startswith(str(self.path)):
                    del sys.modules[name]


def commands(text: str) -> list[str]:
    """A shell block's commands: one a line, ``\\`` continuations joined, comments and blank
    lines left out."""
    found, current = [], ""
    for line in text.splitlines():
        current += line
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip() and not current.lstrip().startswith("#"):
            found.append(current.strip())
        current = ""
    return found


def console(text: str) -> list[tuple[str, list[str]]]:
    """A console block as (command, the lines shown after it) pairs."""
    found: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            found.append((line[2:], []))
        elif found:
            found[-1][1].append(line)
    return found
