"""The fenced code blocks of a Markdown file, with the ``<!-- docs: ... -->`` comments above them.

A directive is an HTML comment just above a block (blank lines between are fine), so it is
invisible where the Markdown is rendered. One comment holds one directive; stack several:

    <!-- docs: skip "needs the network" -->    not run; the reason shows as the test's skip
    <!-- docs: file tests/test_models.py -->   the block is that file's text: written, not run
    <!-- docs: append tests/test_models.py --> the block is added to the end of that file
    <!-- docs: exit 1 -->                      the block's last command exits 1 (else 0)
    <!-- docs: output $ COMMAND -->           the block is COMMAND's output (stdout and stderr)
    <!-- docs: excerpt $ COMMAND -->          the block is a run of lines of COMMAND's output
    <!-- docs: usage -->                       a synopsis: its flags must be the command's
    <!-- docs: run $ COMMAND -->              a hidden shell command, run before the block
    <!-- docs: env NAME=VALUE -->              set for the block's commands ($DOCS_BIN: .venv/bin)
    <!-- docs: write PATH                      a hidden file, written before the block
    ...its text...                             (write >> PATH: added to the end of PATH)
    -->
    <!-- docs: python                          hidden Python, run before the block in the
    ...code...                                 document's namespace
    -->

A Python block's ``print(...)  # VALUE`` line must print VALUE (``docs_python``), and
``docs_excerpt.py`` prints the tool's JSON and XML files cut the way a block shows them (for
``output $ python "$DOCS_TOOLS/docs_excerpt.py" ...``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<lang>[\w+-]*)\s*$")
COMMENT = re.compile(r"<!--\s*docs:\s*(?P<body>.*?)\s*-->", re.S)
VERBS = {
    "skip",
    "file",
    "append",
    "exit",
    "output",
    "excerpt",
    "usage",
    "run",
    "write",
    "python",
    "env",
}


@dataclass(frozen=True)
class Directive:
    verb: str
    argument: str = ""  # the rest of the first line: a path, a reason, a command
    text: str = ""  # the lines after the first, for write and python


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    indent: str
    text: str  # the block's lines, indentation removed, ending with a newline
    directives: list[Directive] = field(default_factory=list)

    def directive(self, verb: str) -> Directive | None:
        return next((d for d in self.directives if d.verb == verb), None)

    @property
    def name(self) -> str:
        return f"{self.line}-{self.lang or 'plain'}"


def parse_directive(body: str) -> Directive:
    first, _, rest = body.partition("\n")
    verb, _, argument = first.strip().partition(" ")
    if verb not in VERBS:
        raise ValueError(f"unknown docs directive {verb!r}; one of {', '.join(sorted(VERBS))}")
    argument = argument.strip()
    if verb == "skip" and argument.startswith('"'):
        argument = shlex.split(argument)[0]
    if verb in {"output", "excerpt", "run"}:
        if not argument.startswith("$ "):
            raise ValueError(f"docs: {verb} takes '$ COMMAND', got {argument!r}")
        argument = argument[2:]
    return Directive(verb, argument, rest.rstrip() + "\n" if rest.strip() else "")


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` in order, each with the directives written above it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    pending: list[Directive] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if "<!--" in line and "docs:" in line:
            end = index
            while "-->" not in lines[end]:
                end += 1
            comment = "\n".join(lines[index : end + 1])
            pending.extend(parse_directive(m.group("body")) for m in COMMENT.finditer(comment))
            index = end + 1
            continue
        opening = FENCE.match(line)
        if opening:
            indent, fence = opening.group("indent"), opening.group("fence")
            close = index + 1
            while close < len(lines) and lines[close].strip() != fence:
                close += 1
            body = [text[len(indent) :] for text in lines[index + 1 : close]]
            text = "\n".join(body) + "\n" if body else ""
            found.append(Block(path, index + 1, opening.group("lang"), indent, text, list(pending)))
            pending = []
            index = close + 1
            continue
        if line.strip():
            pending = []  # a directive belongs to the block right below it
        index += 1
    return found


def replace_block(block: Block, new_text: str) -> None:
    """Rewrite ``block``'s text in its file, found by its old text nearest its line."""
    lines = block.path.read_text(encoding="utf-8").splitlines(keepends=True)
    old = [block.indent + text if text else "" for text in block.text.splitlines()]
    candidates = []
    for index, line in enumerate(lines):
        if FENCE.match(line.rstrip("\n")) and index + 1 + len(old) <= len(lines):
            body = [x.rstrip("\n") for x in lines[index + 1 : index + 1 + len(old)]]
            if [x.rstrip() for x in body] == [x.rstrip() for x in old]:
                candidates.append(index)
    if not candidates:
        raise LookupError(f"{block.path}:{block.line}: the block changed while it ran")
    start = min(candidates, key=lambda i: abs(i + 1 - block.line)) + 1
    new = [(block.indent + text if text else "") + "\n" for text in new_text.splitlines()]
    lines[start : start + len(old)] = new
    block.path.write_text("".join(lines), encoding="utf-8")
    block.text = new_text
