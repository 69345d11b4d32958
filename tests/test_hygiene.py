"""Repository hygiene: no dead code in the package, no references to documents it lacks.

A name defined in ``pytest_graphbudget`` that nothing reads is a second spelling waiting to drift
(``render.FORMATS`` next to ``cli.FORMATS``) or a field that looks measured but is never shown
(``NodeCost.out_bytes``). The check is a small vulture: it parses every Python file of the
repository with ``ast`` and lists the package's module-level names, dataclass fields and methods
that no file loads, imports, or names in a string (``getattr``, entry points in pyproject.toml).

A reference to a document the repository does not hold (a design note, a spec, a brief that lived
next to it while it was written) sends a reader nowhere; so do Markdown links to a missing file or
heading.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "pytest_graphbudget"
SKIPPED_DIRS = {"venv", "build", "dist", "node_modules", "__pycache__", "out"}  # and .hidden
# Methods pytest calls on collectors and items by name, and IPython's rich display
# (``_repr_html_``): no code in the repository calls them.
FRAMEWORK_CALLED = {"collect", "runtest", "reportinfo", "repr_failure", "_repr_html_"}
WORD = re.compile(r"[A-Za-z_]\w*")


def _walk(root: Path) -> list[Path]:
    """The repository's files, without descending into virtual environments, caches and Git."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d for d in dirs if d not in SKIPPED_DIRS and (d == ".github" or not d.startswith("."))
        )
        found.extend(Path(folder) / f for f in sorted(files))
    return found


def _python_files(root: Path) -> list[Path]:
    return [p for p in _walk(root) if p.suffix == ".py"]


def _module_of(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def _definitions(path: Path, root: Path, tree: ast.Module) -> dict[tuple[str, str], str]:
    """(module, name or Class.member) -> ``file:line``, for what the package defines."""
    module, found = _module_of(path, root), {}
    where = str(path.relative_to(root))
    for node in tree.body:
        names: list[str] = []
        if isinstance(node, ast.ClassDef) or (
            isinstance(node, ast.FunctionDef) and not node.decorator_list  # registered ones
        ):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        found.update({(module, n): f"{where}:{node.lineno}" for n in names})
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                member = None
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    member = item.target.id
                elif isinstance(item, ast.FunctionDef) and not item.decorator_list:
                    member = item.name
                if member:
                    found[(module, f"{node.name}.{member}")] = f"{where}:{item.lineno}"
    return found


def dead_names(root: Path = ROOT) -> list[str]:
    """``file:line: name`` for each package definition nothing in the repository reads."""
    defined: dict[tuple[str, str], str] = {}
    loaded: dict[str, set[str]] = {}  # module -> bare names it loads
    attributes: set[str] = set()  # attribute names loaded anywhere, keyword argument names
    imported: set[tuple[str, str]] = set()
    words = set(WORD.findall((root / "pyproject.toml").read_text()))  # entry points
    for path in _python_files(root):
        tree = ast.parse(path.read_text(), filename=str(path))
        module = _module_of(path, root)
        if module.split(".")[0] == PACKAGE:
            defined.update(_definitions(path, root, tree))
        names = loaded.setdefault(module, set())
        # Docstrings and other bare strings name things without using them.
        prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
                attributes.add(node.attr)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.update((node.module, a.name) for a in node.names)
            elif isinstance(node, ast.keyword) and node.arg:
                attributes.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) in prose:
                    continue
                words.update(WORD.findall(node.value))
    dead = []
    for (module, name), where in sorted(defined.items()):
        member = name.partition(".")[2]
        short = member or name
        if short.startswith(("__", "pytest_")) or short in FRAMEWORK_CALLED:
            continue  # dunders and pluggy hooks are called by name
        used = short in attributes or short in words
        if not member:
            used = used or name in loaded.get(module, ()) or (module, name) in imported
        if not used:
            dead.append(f"{where}: {name}")
    return dead


def test_the_package_has_no_dead_code():
    dead = dead_names()
    assert not dead, (
        "defined but never read anywhere in the repository (delete it, or add a framework-called "
        "method name to FRAMEWORK_CALLED in tests/test_hygiene.py):\n  " + "\n  ".join(dead)
    )


def test_the_dead_code_check_sees_an_unused_function(tmp_path):
    """The check itself: a package function nobody calls is reported, one that is called is not."""
    package = tmp_path / PACKAGE
    package.mkdir()
    (tmp_path / "pyproject.toml").write_text('[project.scripts]\nx = "pytest_graphbudget.a:main"\n')
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(
        '"""orphan is named in this docstring, which is no use of it."""\n'
        "import dataclasses\n\n"
        "@dataclasses.dataclass\nclass Row:\n    read: int = 0\n    written_only: int = 0\n\n"
        "def main():\n    r = Row()\n    r.written_only = 1\n    return helper() + r.read\n\n"
        "def helper():\n    return 1\n\n"
        "def orphan():\n    return 2\n"
    )
    assert dead_names(tmp_path) == [
        "pytest_graphbudget/a.py:7: Row.written_only",
        "pytest_graphbudget/a.py:17: orphan",
    ]


# Documents that lived outside the repository while it was written; a reader has none of them.
OUTSIDE = re.compile(
    r"\bSPEC\b|\bsource documents?\b|\bseeds?/|\bseed \d{3}\b|\bSTYLE\.md|/work/"
    r"""|\.\.["']?\s*/\s*["']?shared"""  # ../shared, ".." / "shared"
)
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
# A document by path (docs/cli.md) or by an upper-case name (README.md, CONTRIBUTING.md).
MD_PATH = re.compile(r"(?<![\w/.-])((?:docs|benchmarks)/[\w.-]+\.md|[A-Z][A-Z_]+\.md)\b")
TEXT_SUFFIXES = {".md", ".py", ".toml", ".yml", ".yaml", ".js", ".txt", ".cfg", ".ini"}


def _text_files(root: Path) -> list[Path]:
    return [p for p in _walk(root) if p.suffix in TEXT_SUFFIXES or p.name == "Makefile"]


def _anchors(markdown: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+\s+(.+?)\s*$", markdown.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def broken_references(root: Path = ROOT) -> list[str]:
    """``file:line: what`` for each mention of a document the repository does not hold."""
    here = Path(__file__).resolve()
    names = {p.name for p in _walk(root) if p.suffix == ".md"}
    found = []
    for path in _text_files(root):
        if path.resolve() == here:
            continue
        where = path.relative_to(root)
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for match in OUTSIDE.finditer(line):
                found.append(f"{where}:{number}: {match.group()!r} is not in the repository")
            for match in MD_PATH.finditer(line):
                name = match.group(1)
                if not ((root / name).exists() if "/" in name else name in names):
                    found.append(f"{where}:{number}: {name} does not exist")
            if path.suffix != ".md":
                continue
            for target in MD_LINK.findall(line):
                if target.startswith(("http://", "https://", "mailto:")):
                    continue
                file, _, anchor = target.partition("#")
                linked = (path.parent / file) if file else path
                if not linked.exists():
                    found.append(f"{where}:{number}: link to {file}, which does not exist")
                elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                    found.append(f"{where}:{number}: link to #{anchor}, no such heading")
    return found


def test_no_references_to_documents_outside_the_repository():
    broken = broken_references()
    assert not broken, (
        "references a reader cannot follow (describe the thing itself, or point at a file of "
        "the repository):\n  " + "\n  ".join(broken)
    )


def test_the_reference_check_sees_missing_documents(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A title\n\nSee [b](b.md) and [t](#a-title).\n")
    (tmp_path / "docs" / "b.md").write_text(
        "Back to [a](a.md#a-title), [nowhere](a.md#gone) and [c](c.md).\n"
        "As SPEC section 3 says; see docs/missing.md, CONTRIBUTING.md and docs/a.md.\n"
        'The schema: ROOT / ".." / "shared" / "junit.xsd".\n'
    )
    assert broken_references(tmp_path) == [
        "docs/b.md:1: link to #gone, no such heading",
        "docs/b.md:1: link to c.md, which does not exist",
        "docs/b.md:2: 'SPEC' is not in the repository",
        "docs/b.md:2: docs/missing.md does not exist",
        "docs/b.md:2: CONTRIBUTING.md does not exist",
        """docs/b.md:3: '.." / "shared' is not in the repository""",
    ]


# ---------------------------------------------------------------------------------------------
# Packaging: what the package imports is declared, package data is shipped, `dev` is for tests

# Development tools that are run, not imported: pytest-xdist (``-n``) and ruff (``make lint``).
TOOLS = {"import-linter", "pytest-xdist", "ruff", "uv"}  # uv: benchmarks/compat.py runs it


def _pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _dist_name(requirement: str) -> str:
    """PEP 503 normalised distribution name of a requirement string."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_distributions(folder: str) -> dict[str, str]:
    """Distribution -> ``file:line`` of a first import, for the third-party modules that the
    Python files under ``folder`` import (at any depth: the package imports lazily)."""
    import sys
    from importlib.metadata import packages_distributions

    owners = packages_distributions()
    found: dict[str, str] = {}
    for path in _python_files(ROOT / folder):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module]
            elif (  # pytest.importorskip("xmlschema")
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "importorskip"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                modules = [node.args[0].value]
            else:
                continue
            for module in (m.partition(".")[0] for m in modules):
                if module in sys.stdlib_module_names or module in NEWER_THAN_310:
                    continue  # the standard library, that of Python 3.11+ included
                if module in {PACKAGE, "_pytest", "tomli"}:  # tomli: tomllib on Python 3.10
                    continue
                if (path.parent / f"{module}.py").exists():  # a script beside it (benchmarks/)
                    continue
                if any((ROOT / "tests").rglob(f"{module}.py")):  # a test's measuring helper
                    continue
                for dist in owners.get(module, [module]):
                    found.setdefault(_dist_name(dist), f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_the_package_declares_every_distribution_it_imports():
    project = _pyproject()["project"]
    requirements = project["dependencies"] + sum(project["optional-dependencies"].values(), [])
    declared = {_dist_name(r) for r in requirements}
    missing = {d: at for d, at in _imported_distributions(PACKAGE).items() if d not in declared}
    assert not missing, (
        "imported but not declared in pyproject.toml (add to a dependency list): "
        + (", ".join(f"{d} ({at})" for d, at in sorted(missing.items())))
    )


def test_dev_holds_what_tests_import_and_bench_what_only_benchmarks_import():
    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    dev = {_dist_name(r) for r in extras["dev"]}
    bench = {_dist_name(r) for r in extras.get("bench", [])}
    runtime = {_dist_name(r) for r in project["dependencies"]}
    tests = set(_imported_distributions("tests")) | set(_imported_distributions(PACKAGE))
    benchmarks = set(_imported_distributions("benchmarks"))
    unused = sorted(dev - tests - TOOLS)
    assert not unused, f"in the dev extra but no test imports them, move to bench: {unused}"
    tested = sorted(bench & tests)
    assert not tested, f"tests import these, so declare them in dev, not bench: {tested}"
    stale = sorted(bench - benchmarks)
    assert not stale, f"in the bench extra but benchmarks/ does not import them: {stale}"
    undeclared = sorted(benchmarks - tests - runtime - bench)
    assert not undeclared, f"only benchmarks/ imports these, add them to bench: {undeclared}"


def test_package_data_patterns_match_files_and_cover_every_data_file():
    patterns = _pyproject()["tool"]["setuptools"]["package-data"]
    for package, globs in patterns.items():
        folder = ROOT.joinpath(*package.split("."))
        for pattern in globs:
            assert list(folder.glob(pattern)), f"package-data {package}: {pattern} matches nothing"
    shipped = {
        p
        for package, globs in patterns.items()
        for g in globs
        for p in ROOT.joinpath(*package.split(".")).glob(g)
    }
    data = {p for p in _walk(ROOT / PACKAGE) if p.suffix not in {".py", ".pyc"}}
    unshipped = sorted(str(p.relative_to(ROOT)) for p in data - shipped)
    assert not unshipped, f"add to [tool.setuptools.package-data], or no wheel ships: {unshipped}"


# ---------------------------------------------------------------------------------------------
# Python 3.10: requires-python claims it, so CI runs it and the code uses nothing newer unguarded

# Standard-library names that Python 3.11 or later added (a 3.10 run fails on them).
NEWER_THAN_310 = {
    "tomllib",
    "wsgiref.types",
    "typing.Self",
    "typing.LiteralString",
    "typing.Never",
    "typing.assert_never",
    "typing.assert_type",
    "typing.reveal_type",
    "typing.Required",
    "typing.NotRequired",
    "typing.TypeVarTuple",
    "typing.Unpack",
    "typing.dataclass_transform",
    "typing.override",
    "enum.StrEnum",
    "enum.verify",
    "datetime.UTC",
    "asyncio.TaskGroup",
    "asyncio.timeout",
    "contextlib.chdir",
    "hashlib.file_digest",
    "itertools.batched",
    "ExceptionGroup",
    "BaseExceptionGroup",
}
NEWER_BUILTINS = {"ExceptionGroup", "BaseExceptionGroup"}


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside ``try: ... except ModuleNotFoundError/ImportError/AttributeError`` or
    ``if sys.version_info ...`` / ``if TYPE_CHECKING``: the author handled older Pythons."""
    while node in parents:
        node, child = parents[node], node
        if isinstance(node, ast.Try) and child in node.body:
            caught = {ast.unparse(h.type) for h in node.handlers if h.type is not None}
            if caught & {"ModuleNotFoundError", "ImportError", "AttributeError"}:
                return True
        if isinstance(node, ast.If) and child in node.body:
            test = ast.unparse(node.test)
            if "version_info" in test or "TYPE_CHECKING" in test:
                return True
    return False


def newer_python_uses(root: Path = ROOT) -> list[str]:
    """``file:line: name`` for each unguarded use of a standard-library name newer than 3.10."""
    found: set[tuple[str, int, str]] = set()
    for path in _python_files(root):
        tree = ast.parse(path.read_text(), filename=str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                names = [f"{node.value.id}.{node.attr}"]
            elif isinstance(node, ast.Name) and node.id in NEWER_BUILTINS:
                names = [node.id]
            elif type(node).__name__ == "TryStar":  # except*
                names = ["ExceptionGroup"]
            for name in names:
                if name in NEWER_THAN_310 and not _guarded(node, parents):
                    found.add((str(path.relative_to(root)), node.lineno, name))
    return [f"{file}:{line}: {name}" for file, line, name in sorted(found)]


def test_no_unguarded_standard_library_newer_than_python_310():
    found = newer_python_uses()
    assert not found, (
        "requires-python says >=3.10 but these need 3.11+ (fall back, e.g. tomllib -> tomli, "
        "which pyproject.toml installs on 3.10):\n  " + "\n  ".join(found)
    )


def test_the_python_310_check_sees_tomllib_and_accepts_the_fallback(tmp_path):
    (tmp_path / "a.py").write_text(
        "import tomllib\n"
        "from typing import Self\n"
        "try:\n    import tomllib\nexcept ModuleNotFoundError:\n    import tomli as tomllib\n"
        "import sys\n"
        "if sys.version_info >= (3, 11):\n    from enum import StrEnum\n"
        "def f():\n    raise ExceptionGroup('x', [])\n"
    )
    assert newer_python_uses(tmp_path) == [
        "a.py:1: tomllib",
        "a.py:2: typing.Self",
        "a.py:11: ExceptionGroup",
    ]


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def test_ci_runs_every_python_the_package_claims():
    project = _pyproject()["project"]
    floor = re.fullmatch(r">=\s*(\d+\.\d+)", project["requires-python"]).group(1)
    prefix = "Programming Language :: Python :: "
    claimed = {c.removeprefix(prefix) for c in project["classifiers"] if c.startswith(prefix)}
    claimed = {floor} | {v for v in claimed if re.fullmatch(r"\d+\.\d+", v)}
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    matrix = re.search(r"^\s*python-version:\s*\[([^\]]*)\]", workflow, flags=re.MULTILINE)
    assert matrix, "ci.yml has no `python-version: [...]` matrix"
    tested = {v.strip().strip("\"'") for v in matrix.group(1).split(",")}
    untested = sorted(claimed - tested, key=_minor)
    assert not untested, f"pyproject.toml claims Python {untested}; add them to ci.yml's matrix"
