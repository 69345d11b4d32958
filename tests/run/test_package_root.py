"""What "this package" means to the cache and the fingerprint, now that ``cache.py`` and
``codewalk.py`` live one level down, in ``run/`` (issue 23).

The cache key hashes the package's own files so that an edited formula invalidates every cached
profile; the fingerprint treats the package's files as library code (their bytes are in that
key already) and never walks them. Both must take the package root, not ``run/``: a change to
``costs/`` must change the key, and a formula's file must count as the package's own.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import pytest_graphbudget
from pytest_graphbudget.costs import contraction
from pytest_graphbudget.run import cache, codewalk

PACKAGE = Path(pytest_graphbudget.__file__).resolve().parent


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """A copy of this package's files, which ``cache`` hashes instead of the real ones."""
    copy = tmp_path / "pytest_graphbudget"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "__file__", str(copy / "run" / "cache.py"))
    cache._package_digest.cache_clear()
    yield copy
    cache._package_digest.cache_clear()  # monkeypatch restores __file__; drop the copy's digest


def test_an_edit_to_a_formula_module_changes_the_cache_key(package_copy):
    before = cache._package_digest()
    key_before = cache.name_key("resnet18", {}, "generic")
    formula = package_copy / "costs" / "contraction.py"
    formula.write_text(formula.read_text() + "\n# an edited formula\n")
    cache._package_digest.cache_clear()
    assert cache._package_digest() != before
    assert cache.name_key("resnet18", {}, "generic") != key_before


def test_the_package_digest_covers_every_subpackage_not_only_run(package_copy):
    # An edit to a file at the top of the package and one in engine/ each change the digest.
    for edited in ("errors.py", "engine/assemble.py"):
        cache._package_digest.cache_clear()
        before = cache._package_digest()
        path = package_copy / edited
        path.write_text(path.read_text() + "\n# edited\n")
        cache._package_digest.cache_clear()
        assert cache._package_digest() != before, edited


def test_the_package_files_are_library_code_to_the_fingerprint(tmp_path):
    # A formula module and the package's __init__ are ours (never walked); a project's file is not.
    assert codewalk.is_library_file(contraction.__file__)
    assert codewalk.is_library_file(pytest_graphbudget.__file__)
    project_file = tmp_path / "models.py"
    project_file.write_text("X = 1\n")
    assert not codewalk.is_library_file(str(project_file))
