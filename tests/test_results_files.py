"""A benchmark's results file keeps its hand notes across reruns, and a partial run
(``--models``, ``--torch``) does not replace the full run's table (``benchmarks/notes.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from notes import replace_section, save_results, write_keeping_notes  # noqa: E402  (benchmarks/notes.py)

FULL = "# Peak\n\n| model | eval |\n| --- | --- |\n| resnet50 | +0.00% |\n| vit | +0.01% |\n"
NOTES = "\nNotes (2026-12-01): the load was 0.3; vit's extra 64 B is the class token.\n"


def test_a_rerun_keeps_the_notes_under_its_new_figures(tmp_path):
    path = tmp_path / "PEAK_RESULTS.md"
    path.write_text(FULL + NOTES)
    write_keeping_notes(path, FULL.replace("+0.01%", "+0.02%"))
    assert path.read_text() == FULL.replace("+0.01%", "+0.02%") + NOTES


def test_a_partial_run_prints_its_rows_and_leaves_the_full_table(tmp_path, capsys):
    path = tmp_path / "PEAK_RESULTS.md"
    path.write_text(FULL + NOTES)
    partial = "# Peak\n\n| model | eval |\n| --- | --- |\n| vit | +0.02% |\n"
    save_results(path, partial, partial=True)
    assert path.read_text() == FULL + NOTES
    out = capsys.readouterr().out
    assert "| vit | +0.02% |" in out
    assert "partial run: PEAK_RESULTS.md left as it was" in out


def test_a_partial_run_writes_where_it_is_told(tmp_path):
    path = tmp_path / "elsewhere.md"
    save_results(path, "| vit | +0.02% |\n", partial=True, chosen=True)
    assert path.read_text() == "| vit | +0.02% |\n"


def test_a_full_run_replaces_the_table(tmp_path):
    path = tmp_path / "PEAK_RESULTS.md"
    path.write_text(FULL + NOTES)
    save_results(path, "# Peak\n\n| resnet50 | +0.10% |\n", partial=False)
    assert path.read_text() == "# Peak\n\n| resnet50 | +0.10% |\n" + NOTES


def test_a_rerun_of_one_section_keeps_that_sections_notes_and_the_others(tmp_path):
    """``train_step.py`` rewrites its section of RESULTS.md: the notes under it stay."""
    path = tmp_path / "RESULTS.md"
    step = "## Training step\n\n| resnet18 | 2.27x |\n"
    after = "## Latency\n\n| resnet18 | 0.9 |\n"
    path.write_text("# Results\n\n" + step + NOTES + "\n" + after)
    replace_section(path, "## Training step", step.replace("2.27x", "2.30x"))
    assert (
        path.read_text() == "# Results\n\n" + step.replace("2.27x", "2.30x") + NOTES + "\n" + after
    )
    path.write_text("# Results\n\n" + step + NOTES)  # the last section
    replace_section(path, "## Training step", step.replace("2.27x", "2.30x"))
    assert path.read_text() == "# Results\n\n" + step.replace("2.27x", "2.30x") + NOTES
    path.write_text("# Results\n")  # no such section yet: appended
    replace_section(path, "## Training step", step)
    assert path.read_text() == "# Results\n\n" + step
