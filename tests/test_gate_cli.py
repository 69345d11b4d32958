"""``graph-budget`` on the inputs that used to crash or flood it (issue 9, "Crashes and floods").

Everything runs in-process (``cli.main([...])`` with capsys, pytester for budgets) on a tiny
model whose figures are derived by hand:

  Linear(8, 16) -> ReLU -> Linear(16, 4) at input 2x8
  Linear(8, 16):  MACs 2*8*16 = 256, FLOPs 2*256 + bias 2*16 = 544, params 8*16+16 = 144
  ReLU:           FLOPs 2*16 = 32
  Linear(16, 4):  MACs 2*16*4 = 128, FLOPs 2*128 + bias 2*4 = 264, params 16*4+4 = 68
  total:          MACs 384, FLOPs 840, params 212
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from pytest_graphbudget import cli

TINY = {"macs": 384, "flops": 840, "params": 212}


def tiny_module():
    from torch import nn

    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def save_exported(path: Path) -> Path:
    """``torch.export.save`` of the tiny model at input 2x8."""
    import torch

    program = torch.export.export(tiny_module().eval(), (torch.randn(2, 8),))
    torch.export.save(program, path)
    return path


def one_error_line(err: str) -> str:
    """The single ``graph-budget: error:`` line of a run, which must also be its last line."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("graph-budget: error:")]
    assert len(errors) == 1, err
    assert err.rstrip().splitlines()[-1] == errors[0], err
    return errors[0]


# ---------------------------------------------------------------------------------------------
# .pt2 files (torch.export.save) are profiled through their own graph


def test_profile_pt2_counts_by_hand(tmp_path, capsys):
    model = save_exported(tmp_path / "tiny.pt2")
    code = cli.main(["profile", str(model), "--format", "json", "-q"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert data["trace"]["method"] == "export"
    assert {k: data["totals"][k] for k in TINY} == TINY
    assert data["inputs"] == [{"name": "input", "shape": [2, 8], "dtype": "float32"}]
    assert data["coverage"]["unsupported_ops"] == {}


def test_profile_pt2_table_names_layer_types(tmp_path, capsys):
    model = save_exported(tmp_path / "tiny.pt2")
    assert cli.main(["profile", str(model), "-q"]) == 0
    out = capsys.readouterr().out
    assert "export trace" in out
    assert any(line.split()[:2] == ["0", "Linear"] for line in out.splitlines()), out


def test_pt2_other_shape_is_a_one_line_error(tmp_path, capsys):
    model = save_exported(tmp_path / "tiny.pt2")
    code = cli.main(["profile", str(model), "--input-shape", "4,8"])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2
    assert "exported at input shape [2, 8]" in line and "[4, 8]" in line


def test_pt2_that_is_not_an_archive(tmp_path, capsys):
    bad = tmp_path / "junk.pt2"
    bad.write_bytes(b"not a zip file")
    assert cli.main(["profile", str(bad)]) == 2
    assert "not a torch.export archive" in one_error_line(capsys.readouterr().err)


def test_pt2_budget_in_toml_is_checked(pytester):
    save_exported(pytester.path / "tiny.pt2")
    pytester.makefile(
        ".toml",
        **{
            "budgets/pt2": textwrap.dedent(
                """
                [models.fits]
                model = "tiny.pt2"
                macs_max = 384
                params_max = 212

                [models.over]
                model = "tiny.pt2"
                macs_max = 383
                """
            )
        },
    )
    result = pytester.runpytest("--graph-budget", "budgets/", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*MACs 384 exceeds macs_max 383*"])


def test_init_on_pt2_writes_a_budget_that_passes(pytester, capsys):
    save_exported(pytester.path / "tiny.pt2")
    assert cli.main(["init", "tiny.pt2", "-o", "budgets/models.toml", "-q"]) == 0
    written = (pytester.path / "budgets" / "models.toml").read_text()
    assert "input_shape = [2, 8]" in written
    result = pytester.runpytest("--graph-budget", "budgets/", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
