"""Print the notes of one version from CHANGELOG.md, for its GitHub release.

    python .github/scripts/changelog_section.py 0.1.0 [--changelog CHANGELOG.md]

The notes are the lines under ``## [0.1.0] - <date>`` (Keep a Changelog) up to the next
``## `` heading, without the heading itself (the release names the version). A version with
no section, or an empty one, exits 2 with one line on stderr, so that no release goes out
without its notes. Standard library only: the release workflow runs it before installing
anything.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?\s*$")
LINK_REFERENCE = re.compile(r"^\[[^\]]+\]: \S+\s*$")


def section(text: str, version: str) -> str | None:
    """The body of ``version``'s section, stripped; None when the changelog has none."""
    body: list[str] | None = None
    for line in text.splitlines():
        match = HEADING.match(line)
        if body is None:
            if match and match["version"] == version:
                body = []
        elif line.startswith("## ") or LINK_REFERENCE.match(line):
            break
        else:
            body.append(line)
    return None if body is None else "\n".join(body).strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="the version, without the tag's leading v: 0.1.0")
    parser.add_argument("--changelog", type=Path, default=ROOT / "CHANGELOG.md")
    args = parser.parse_args(argv)
    version = args.version.removeprefix("v")
    try:
        text = args.changelog.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"changelog_section: cannot read {args.changelog}: {exc.strerror}", file=sys.stderr)
        return 2
    notes = section(text, version)
    if not notes:
        said = "has no section" if notes is None else "has an empty section"
        print(
            f"changelog_section: {args.changelog.name} {said} for {version}: add "
            f"'## [{version}] - YYYY-MM-DD' with its changes before tagging v{version}",
            file=sys.stderr,
        )
        return 2
    print(notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
