"""pytest plugin: every fenced block of the Markdown files named on the command line is a test.

``make docs-test`` runs ``pytest -p docs_plugin README.md docs/...`` (``tests/docs`` on
``PYTHONPATH``); ``make docs`` adds ``--docs-update``, which rewrites shown output that no
longer matches instead of failing. Each document gets one scratch git repository, and its
blocks run there in order (``--dist loadfile`` keeps a document on one worker):

- ``python``: run in the document's module (``docs_shell.Project.python``); a
  ``print(...)  # VALUE`` line's comment must be what it printed (``docs_python``);
- ``sh``/``bash``/``shell``: each command run, exit 0 expected (``<!-- docs: exit N -->``);
- ``console``: each ``$ command`` run, and the lines shown after it compared with its output;
- ``yaml``: actionlint, and the flags of its ``graph-budget`` and ``pytest`` commands;
- ``toml``: parsed;
- any other block must say what it is: ``output``/``excerpt`` (generated), ``file``,
  ``usage`` or ``skip`` with a reason (``docs_markdown`` lists the directives).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from docs_checks import lint_yaml, usage_flags
from docs_markdown import Block, blocks, replace_block
from docs_output import diff, regenerate
from docs_python import recording, with_results
from docs_shell import BIN, Project, commands, console

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

SHELLS = {"sh", "bash", "shell"}
PROGRESS = re.compile(r"^graph-budget: ", re.M)
# Whole tables that other commands write (make zoo, make corpus, make golden), not examples.
GENERATED = {"corpus.md", "zoo.md", "compat.md"}


class DocsFailure(Exception):
    """A block that does not do what its document says: the message is the whole report."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--docs-update",
        action="store_true",
        help="rewrite the output that Markdown blocks show where it no longer matches (make docs)",
    )


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path.suffix == ".md" and file_path.name not in GENERATED:
        return MarkdownFile.from_parent(parent, path=file_path)
    return None


class MarkdownFile(pytest.File):
    project: Project | None = None

    def collect(self):
        for block in blocks(self.path):
            yield BlockItem.from_parent(self, name=block.name, block=block)

    def scratch(self) -> Project:
        if self.project is None:
            self.project = Project(self.path.stem)
            self.session.config.add_cleanup(self.project.remove)
        return self.project


class BlockItem(pytest.Item):
    def __init__(self, *, block: Block, **kwargs):
        super().__init__(**kwargs)
        self.block = block
        self.env: dict[str, str] = {}

    def reportinfo(self):
        return self.path, self.block.line - 1, f"{self.path.name}:{self.block.line}"

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, DocsFailure):
            return f"{self.path.name}:{self.block.line}: {excinfo.value}"
        # A Python block's error from the document's line on, not pytest's frames above it.
        excinfo.traceback = excinfo.traceback.cut(path=self.path)
        return super().repr_failure(excinfo, style or "short")

    @property
    def update(self) -> bool:
        return bool(self.config.getoption("--docs-update"))

    def runtest(self) -> None:
        block = self.block
        skip = block.directive("skip")
        if skip is not None:
            # Reported at the block, as pytest reports a skip marker at its test.
            raise pytest.skip.Exception(skip.argument or "no reason given", _use_item_location=True)
        project = self.parent.scratch()
        for directive in block.directives:
            if directive.verb == "env":
                name, _, value = directive.argument.partition("=")
                self.env[name] = os.path.expandvars(value.replace("$DOCS_BIN", str(BIN)))
        for directive in block.directives:
            if directive.verb == "write":
                path = directive.argument.removeprefix(">>").strip()
                project.write(path, directive.text, append=directive.argument.startswith(">>"))
            elif directive.verb == "run":
                self.command(directive.argument, 0)
            elif directive.verb == "python":
                project.python(directive.text, f"{self.path.name}:{block.line} (hidden)")
        self.run_block(project)

    def run_block(self, project: Project) -> None:
        block, lang = self.block, self.block.lang
        written = block.directive("file") or block.directive("append")
        generated = block.directive("output") or block.directive("excerpt")
        if written is not None:
            project.write(written.argument, block.text, append=written.verb == "append")
        elif generated is not None:
            _, printed = self.command(generated.argument, None, block.text)
            self.compare(block.text, regenerate(block.text, printed, generated.verb == "excerpt"))
        elif block.directive("usage") is not None:
            self.fail_if(usage_flags(block.text))
        elif lang == "python":
            self.run_python(project)
        elif lang in SHELLS:
            lines = commands(block.text)
            for index, command in enumerate(lines):
                self.command(command, self.expected_exit() if index == len(lines) - 1 else 0)
        elif lang == "console":
            self.run_console()
        elif lang == "yaml":
            self.fail_if(lint_yaml(block.text, f"{self.path.name}:{block.line}", project.path))
        elif lang == "toml":
            tomllib.loads(block.text)
        else:
            raise DocsFailure(
                "a block that is neither run nor generated: mark it with <!-- docs: output "
                '$ COMMAND -->, file PATH, usage, or skip "why" (see tests/docs/docs_markdown.py)'
            )

    def run_python(self, project: Project) -> None:
        """Run the block; each ``print(...)  # VALUE`` line must have printed VALUE."""
        block, filename = self.block, str(self.path)
        with recording(project.module.__dict__, filename) as record:
            project.python(block.text, filename, block.line)
        regenerated, problems = with_results(block.text, block.line, record)
        self.fail_if(problems)
        self.compare(block.text, regenerated)

    def expected_exit(self) -> int:
        found = self.block.directive("exit")
        return int(found.argument) if found else 0

    def command(self, command: str, expected: int | None, shown: str = "") -> tuple[int, str]:
        """Run ``command``; its stderr is left out when the output shown has none of the
        tool's ``graph-budget: ...`` lines (stdout carries the result)."""
        stderr = not shown or PROGRESS.search(shown) is not None
        code, printed = self.parent.scratch().run(command, self.env, stderr)
        if expected is not None and code != expected:
            raise DocsFailure(f"$ {command}\nexited {code}, not {expected}:\n{printed[-4000:]}")
        return code, printed

    def run_console(self) -> None:
        pairs = console(self.block.text)
        text = []
        for index, (command, shown) in enumerate(pairs):
            last = index == len(pairs) - 1
            expected = self.expected_exit() if last else 0
            _, printed = self.command(command, expected, "\n".join(shown))
            text.append(f"$ {command}\n")
            if shown:
                text.append(regenerate("\n".join(shown) + "\n", printed))
        self.compare(self.block.text, "".join(text))

    def compare(self, shown: str, regenerated: str) -> None:
        if regenerated == shown:
            return
        if self.update:
            replace_block(self.block, regenerated)
            sys.stderr.write(f"\nupdated {self.path.name}:{self.block.line}\n")
            return
        raise DocsFailure(
            "the output shown differs from what the tool prints now; run `make docs` to "
            "regenerate it, or fix the tool\n" + diff(shown, regenerated, self.path.name)
        )

    def fail_if(self, problems: list[str]) -> None:
        if problems:
            raise DocsFailure("\n".join(problems))
