"""``pytest_graphbudget/compat/``: the torch floor said once and kept everywhere, the line a
torch below it gets, and the ops newer than the floor against the torch that runs the test.

The floor itself is proven by ``make compat`` (every minor release from it passes the golden
figures and the core tests, benchmarks/COMPAT_RESULTS.md) and refused one release below it by
``tests/test_below_floor.py``; here, that every place naming it names the same release.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from pytest_graphbudget import compat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import compat as matrix  # noqa: E402  (benchmarks/compat.py: make compat's rows)

FLOOR = "{}.{}".format(*compat.TORCH_FLOOR)


def test_the_floor_is_one_release_everywhere():
    pyproject = (ROOT / "pyproject.toml").read_text()
    (claimed,) = re.findall(r'"torch>=([\d.]+)"', pyproject)
    assert claimed == FLOOR, "pyproject.toml's torch>= and compat.TORCH_FLOOR differ"
    assert next(iter(matrix.TORCH)) == matrix.TORCH_FLOOR_ROW == FLOOR
    assert compat.parse(matrix.BELOW_FLOOR) < compat.TORCH_FLOOR
    makefile = (ROOT / "Makefile").read_text()
    assert f"benchmarks/compat.py --torch {FLOOR} " in makefile  # make compat-ci
    assert f"**torch {FLOOR} and newer**" in (ROOT / "docs" / "compat.md").read_text()


def test_the_pinned_row_is_the_pair_constraints_txt_pins():
    pins = (ROOT / "constraints.txt").read_text()
    torch, vision = matrix.TORCH[matrix.PINNED_TORCH]
    assert f"\ntorch=={torch}\n" in pins and f"\ntorchvision=={vision}\n" in pins


def test_every_python_of_the_matrix_is_in_the_classifiers():
    pyproject = (ROOT / "pyproject.toml").read_text()
    for python in matrix.PYTHONS:
        assert f'"Programming Language :: Python :: {python}"' in pyproject, python


@pytest.mark.parametrize(
    "version, line",
    [
        ("2.3.1", f"pytest-graphbudget needs torch>={FLOOR}; this is 2.3.1"),
        ("1.13.1+cu117", f"pytest-graphbudget needs torch>={FLOOR}; this is 1.13.1+cu117"),
        (f"{FLOOR}.0", None),
        (f"{FLOOR}.1+cu121", None),
        ("2.15.0", None),
        ("2.16.0.dev20261201+cpu", None),
        ("3.0.0", None),
    ],
)
def test_a_torch_below_the_floor_gets_one_line(version, line):
    assert compat.floor_message(version) == line


def test_the_installed_torch_passes_the_floor():
    compat.check_torch()  # raises TorchTooOld below it
    assert compat.torch_version() >= compat.TORCH_FLOOR


def test_newer_ops_are_real_ops_from_their_release_on():
    """Each op of NEWER_OPS exists on this torch exactly when its release says it should, and
    the registry has its entry exactly then (no graph on an older torch can hold it)."""
    torch = pytest.importorskip("torch")
    from pytest_graphbudget.costs import REGISTRY

    for name, release in compat.NEWER_OPS.items():
        assert compat.TORCH_FLOOR < release, f"{name} is older than the floor: drop it"
        exists = hasattr(torch.ops.aten, name)
        assert exists == (compat.torch_version() >= release), (name, release)
        assert (name in REGISTRY) == exists, name


def test_the_onednn_this_torch_bundles_is_read_from_its_build():
    """PyTorch's x86 wheels bundle oneDNN (2.4 3.4.2, 2.5 and 2.6 3.5.3, 2.7 to 2.10 3.7.1,
    2.11 3.10.2, 2.14 3.12.0, as each wheel's ``torch.__config__.show()`` says): the LSTM's
    memory rules follow it, so a build it could not be read from must say None, not a guess."""
    pytest.importorskip("torch")
    import platform

    from pytest_graphbudget.compat import kernels

    version = kernels.onednn_version()
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the bundled oneDNN is checked on x86 wheels")
    assert version is not None and version >= (3, 4)
    before = compat.torch_version() < (2, 11)
    assert kernels.onednn_rnn_books_twice() == before
    assert kernels.onednn_brgemm_accumulates() == (not before)


def test_make_fx_keywords_keep_only_what_this_torch_takes():
    pytest.importorskip("torch")
    kept = compat.make_fx_keywords(tracing_mode="real", no_such_keyword=1)
    assert kept == {"tracing_mode": "real"}


def test_torchs_version_is_read_without_importing_it_as_torch_says_it():
    """A warm run that the profile cache answers imports no torch: its reports must say the
    version an imported torch says (``2.14.1+cu130``, not the wheel's ``2.14.1``)."""
    import torch

    assert compat.torch_build() == (torch.__version__, torch.version.git_version)


def test_the_cache_keys_a_fresh_process_alike_before_and_after_torch_is_imported():
    """The settings a key names only where they differ from ``default_switches()``, read in a
    process where nothing has changed them, on the torch that runs this test: a key made before
    torch is imported (a warm run) must be the one made after (the cold run that wrote it)."""
    import subprocess

    script = (
        "import json, sys\n"
        "from pytest_graphbudget.run import cache\n"
        "before = cache.name_key('resnet18', {}, 'generic')\n"
        "assert 'torch' not in sys.modules\n"
        "import torch\n"
        "print(json.dumps([before, cache.name_key('resnet18', {}, 'generic'),\n"
        "                  cache.torch_switches(torch)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    before, after, switches = json.loads(done.stdout)
    from pytest_graphbudget.run.cache import default_switches

    defaults = default_switches()
    assert {k: v for k, v in switches.items() if v is not None} == {
        k: v for k, v in defaults.items() if switches.get(k) is not None
    }
    assert before == after
