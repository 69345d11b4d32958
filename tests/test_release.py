"""A release: the version's one source, CHANGELOG.md, and the release workflow's build job.

``.github/workflows/release.yml`` builds on a tag; its build job's steps run here, the way the
runner runs them (bash, from a copy of the repository), all but the install of the pinned build
tools, which ``.venv`` already has (the dev extra): the tag check, the release notes from
CHANGELOG.md (``.github/scripts/changelog_section.py``), ``python -m build`` and
``twine check --strict``. Then the sdist and the wheel are opened and their files checked.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from datetime import date
from pathlib import Path

import pytest

import pytest_graphbudget

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
CHANGELOG = ROOT / "CHANGELOG.md"
NOTES_SCRIPT = ROOT / ".github" / "scripts" / "changelog_section.py"
RELEASE = ROOT / ".github" / "workflows" / "release.yml"
VERSION = pytest_graphbudget.__version__
# What the build needs, and the release job reads: a checkout holds more, the build uses no more.
SOURCES = (
    "pytest_graphbudget",
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "CHANGELOG.md",
    "MANIFEST.in",
    "constraints.txt",
    ".github/scripts",
)
# Keep a Changelog 1.1.0's kinds of change.
KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
SECTION = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\S+))?$")


def _toml(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads(path.read_text())


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


# ---------------------------------------------------------------------------------------------
# The version, in pytest_graphbudget/__init__.py alone


def test_the_version_is_one_literal_in_the_package():
    tree = ast.parse((ROOT / "pytest_graphbudget" / "__init__.py").read_text())
    (value,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["__version__"]
    ]
    # A literal: setuptools reads it without importing the package, and reading it imports
    # nothing (no torch).
    assert isinstance(value, ast.Constant) and value.value == VERSION
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), VERSION
    project = _toml(ROOT / "pyproject.toml")
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "pytest_graphbudget.__version__"}


def test_the_cli_and_the_reports_say_the_package_version(capsys):
    from pytest_graphbudget import cli
    from pytest_graphbudget.gate import environment
    from pytest_graphbudget.reports import json_report

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"graph-budget {VERSION}"
    assert json_report.tool_version() == VERSION
    assert environment.current()["pytest-graphbudget"] == VERSION


def test_the_documented_pins_name_this_version():
    """docs/ci.md pins the action at a tag and the plugin at a release: this one."""
    pins = re.compile(r"graph-budget@v(\d[\w.]*)|pytest-graphbudget==(\d[\w.]*\d)")
    documents = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    documents.append(ROOT / ".github" / "actions" / "graph-budget" / "action.yml")
    found = {
        f"{path.relative_to(ROOT)}: {match.group()}": match.group(1) or match.group(2)
        for path in documents
        for match in pins.finditer(path.read_text())
    }
    assert any(where.startswith("docs/ci.md: ") for where in found), found
    stale = sorted(where for where, version in found.items() if version != VERSION)
    assert not stale, f"name {VERSION}, the version in pytest_graphbudget/__init__.py: {stale}"


# ---------------------------------------------------------------------------------------------
# CHANGELOG.md: Keep a Changelog 1.1.0, with a section for this version


def test_the_changelog_keeps_the_format_and_has_this_version():
    text = CHANGELOG.read_text()
    assert text.startswith("# Changelog\n")
    assert "https://keepachangelog.com/en/1.1.0/" in text and "https://semver.org/" in text
    sections = [SECTION.match(line) for line in text.splitlines() if line.startswith("## ")]
    assert all(sections), [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[0]["version"] == "Unreleased" and sections[0]["date"] is None
    released = sections[1:]
    versions = [s["version"] for s in released]
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", v) for v in versions), versions
    assert versions == sorted(versions, key=_key, reverse=True) and len(set(versions)) == len(
        versions
    ), f"newest first, once each: {versions}"
    dates = [date.fromisoformat(s["date"] or "missing") for s in released]
    assert dates == sorted(dates, reverse=True), dates
    assert VERSION in versions, f"CHANGELOG.md has no '## [{VERSION}] - YYYY-MM-DD' section"
    for body in re.split(r"^## .*$", text, flags=re.MULTILINE)[1:]:
        kinds = re.findall(r"^### (.+)$", body, flags=re.MULTILINE)
        assert set(kinds) <= KINDS and len(kinds) == len(set(kinds)), kinds


def notes(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(NOTES_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_notes_script_prints_one_section_and_refuses_a_missing_one(tmp_path):
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text(
        "# Changelog\n\n## [Unreleased]\n\n## [1.1.0] - 2026-02-01\n\n### Fixed\n\n- b\n\n"
        "## [1.0.0] - 2026-01-01\n\n### Added\n\n- a\n\n"
        "[unreleased]: https://example.org/compare/v1.1.0...HEAD\n"
    )
    done = notes("1.1.0", "--changelog", str(changelog))
    assert (done.returncode, done.stdout) == (0, "### Fixed\n\n- b\n")
    # The tag's form, and the last section, which ends at the link references.
    done = notes("v1.0.0", "--changelog", str(changelog))
    assert (done.returncode, done.stdout) == (0, "### Added\n\n- a\n")
    for version, said in (("2.0.0", "has no section"), ("Unreleased", "has an empty section")):
        done = notes(version, "--changelog", str(changelog))
        assert (done.returncode, done.stdout) == (2, "")
        assert len(done.stderr.splitlines()) == 1 and said in done.stderr, done.stderr
    done = notes(VERSION)  # the repository's own
    assert done.returncode == 0 and "### Added" in done.stdout, done.stderr


# ---------------------------------------------------------------------------------------------
# The release workflow's build job, run here


def build_steps() -> dict[str, str]:
    """The build job's ``run:`` scripts by step id."""
    job = yaml.safe_load(RELEASE.read_text())["jobs"]["build"]
    return {step["id"]: step["run"] for step in job["steps"] if "run" in step}


def run_step(script: str, cwd: Path, tag: str) -> subprocess.CompletedProcess:
    """A step as the runner runs it (``bash -e``), ``python`` and ``twine`` from this venv."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    path = f"{Path(sys.executable).parent}{os.pathsep}{clean.get('PATH', '')}"
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env={**clean, "PATH": path, "GITHUB_REF_NAME": tag},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Path:
    """A copy of the repository after the build job's steps (the install aside) ran in it."""
    pytest.importorskip("build", reason="the dev extra installs build: `make setup`")
    pytest.importorskip("twine", reason="the dev extra installs twine: `make setup`")
    repo = tmp_path_factory.mktemp("release") / "repo"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    steps = build_steps()
    # A new step is run here too, or said here to need the network.
    assert list(steps) == ["tools", "version", "notes", "build", "check"], list(steps)
    assert "-c constraints.txt" in steps["tools"]  # the pinned build, twine and setuptools
    for step_id in ("version", "notes", "build", "check"):
        done = run_step(steps[step_id], repo, f"v{VERSION}")
        assert done.returncode == 0, f"{step_id}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return repo


def test_the_tag_must_be_the_package_version(tmp_path):
    script = build_steps()["version"]
    done = run_step(script, ROOT, "v0.0.0-other")
    assert done.returncode == 1
    assert "::error" in done.stdout and "v0.0.0-other" in done.stdout, done.stdout
    assert f"v{VERSION}" in done.stdout, done.stdout
    # The runner's Python has the build tools and nothing else: the version still reads, from
    # the package alone (-S: no site-packages, so no torch, no pytest).
    done = subprocess.run(
        [sys.executable, "-S", "-c", "import pytest_graphbudget as p; print(p.__version__)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, VERSION), done.stderr


def test_the_release_notes_are_the_changelog_section(released):
    expected = notes(VERSION).stdout
    assert expected.strip() and (released / "release-notes.md").read_text() == expected


def test_the_wheel_holds_the_package_its_data_and_the_license(released):
    (wheel,) = (released / "dist").glob("*.whl")
    assert wheel.name == f"pytest_graphbudget-{VERSION}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    package = ROOT / "pytest_graphbudget"
    data = [*package.glob("zoo/configs/*.json"), *package.glob("reports/assets/*")]
    modules = [p for p in package.rglob("*.py") if "__pycache__" not in p.parts]
    assert data and modules
    missing = sorted(
        str(p.relative_to(ROOT)) for p in data + modules if str(p.relative_to(ROOT)) not in names
    )
    assert not missing, f"not in the wheel: {missing}"
    info = f"pytest_graphbudget-{VERSION}.dist-info"
    assert f"{info}/licenses/LICENSE" in names
    assert not [n for n in names if n.split("/")[0] not in {"pytest_graphbudget", info}], names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert f"\nVersion: {VERSION}\n" in metadata and "\nLicense-Expression: MIT\n" in metadata
    assert "\nClassifier: License ::" not in metadata  # PEP 639: the expression alone
    assert "\nDescription-Content-Type: text/markdown\n" in metadata


def test_the_sdist_holds_the_license_readme_changelog_and_pyproject(released):
    (sdist,) = (released / "dist").glob("*.tar.gz")
    assert sdist.name == f"pytest_graphbudget-{VERSION}.tar.gz"
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
    top = f"pytest_graphbudget-{VERSION}"
    for name in ("LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "PKG-INFO"):
        assert f"{top}/{name}" in names, name
    assert f"{top}/pytest_graphbudget/zoo/configs/gpt2.json" in names


def test_make_dist_builds_as_the_release_does():
    """``make dist`` runs the workflow's build and check commands, with .venv's tools."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^dist:.*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
    assert recipe, "the Makefile has no dist target"
    commands = recipe.group(1).replace("$(BIN)/", "")
    steps = build_steps()
    assert steps["build"].strip() in commands and steps["check"].strip() in commands, commands
