"""The ``cli/`` package's layout (issue 11): one module per command with its parser fragment and
handler (module and function sizes are tests/test_layout.py's), the table writers the command
line shares with ``reports/``, and ``compare`` reading its figures from ``figures.TABLE``."""

from __future__ import annotations

from pathlib import Path

from pytest_graphbudget import cli
from pytest_graphbudget.reports import tables


def test_every_command_is_one_module_with_its_parser_and_handler():
    names = [command.__name__.rpartition(".")[2].rstrip("_") for command in cli.COMMANDS]
    for command in cli.COMMANDS:
        assert callable(command.add_parser) and callable(command.run), command.__name__
    subparsers = next(
        a for a in cli.build_parser()._actions if a.__class__.__name__ == "_SubParsersAction"
    )
    assert list(subparsers.choices) == names  # the module is named after its command
    for name, command in zip(names, cli.COMMANDS, strict=True):
        assert subparsers.choices[name].get_default("func") is command.run


def test_docs_cli_has_every_command():
    """docs/cli.md: a row of the table of commands and a section of its own for each."""
    text = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    for command in cli.COMMANDS:
        name = command.__name__.rpartition(".")[2].rstrip("_")
        assert f"`graph-budget {name}" in text.split("## Conventions")[0], name
        assert f"\n## {name}\n" in text, name


def test_text_table_pads_names_left_and_figures_right():
    lines = tables.text_table(["model", "FLOPs"], [["a", "1.2k"], ["resnet18", 3]])
    assert lines == [
        "model     FLOPs",
        "--------  -----",
        "a          1.2k",
        "resnet18      3",
    ]


def test_markdown_table_escapes_pipes_and_marks_right_columns():
    lines = tables.markdown_table(["op", "FLOPs"], [["a|b", "7"]])
    assert lines == ["| op | FLOPs |", "| --- | ---: |", "| a\\|b | 7 |"]
    # The pull-request comment's spelling of the same rule, as reports/markdown.py writes it.
    assert tables.markdown_rule("lrrl", ":--", "--:") == "| :-- | --: | --: | :-- |"


def test_csv_text_writes_plain_values_with_newlines():
    assert tables.csv_text(["a", "b"], [[1, "x,y"]]) == 'a,b\n1,"x,y"\n'


def test_the_terminal_report_pads_with_the_shared_writer():
    """reports/terminal.py's rows are ``pad_line``'s: left-aligned, two spaces apart, no
    trailing blanks."""
    widths = tables.widths_of(["model", "verdict"], [["resnet18", "ok"]])
    assert widths == [8, 7]
    assert tables.pad_line(["resnet18", "ok"], widths, "ll") == "resnet18  ok"


def _saved_profile(path: Path, model: str, **totals: float) -> str:
    """A profile as ``graph-budget profile --format json`` saves it, figures given by hand."""
    import json

    from pytest_graphbudget.gate import figures

    values = {f.key: 0 for f in figures.TABLE} | totals
    data = {
        "schema": "graphbudget.profile/1",
        "model": model,
        "inputs": [{"name": "x", "shape": [2, 8], "dtype": "float32"}],
        "hardware": {"name": "generic"},
        "totals": values,
        "bottleneck": {"compute_bound": {"share": 0.0}, "memory_bound": {"share": 1.0}},
        "modules": {"fc": {"flops": values["flops"], "macs": values["macs"], "params": 0}},
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def test_compare_shows_every_figure_of_the_table_and_gates_the_marked_ones(tmp_path, capsys):
    """compare's rows and --max-growth's figures come from figures.TABLE: FLOPs 100 -> 120 is
    +20%, over a 10% limit; weights 10B -> 100B grow more but are not gated."""
    from pytest_graphbudget.gate import figures

    a = _saved_profile(tmp_path / "a.json", "a", flops=100, weights_bytes=10)
    b = _saved_profile(tmp_path / "b.json", "b", flops=120, weights_bytes=100)
    assert cli.main(["compare", a, b, "--max-growth", "10%"]) == 1
    out, err = capsys.readouterr()
    failures = [line for line in err.splitlines() if "FAILED" in line]
    assert failures == [
        "graph-budget: FAILED: FLOPs grew +20.0% (100 -> 120), more than --max-growth 10.0%"
    ]
    rows = [line.split("  ")[0] for line in out.splitlines()[5:]]
    assert rows[: len(figures.TABLE)] == [f.label for f in figures.TABLE]
    # Columns 21 wide ("FLOPs of contractions"), 9 ("0 FLOPs/B"), 9 and 14 ("change (B - A)").
    weights = "weights".ljust(21) + "  " + "10B".rjust(9) + "  " + "100B".rjust(9)
    assert weights + "  +90B (+900.0%)" in out.splitlines()
    gated = {f.key for f in cli.GROWTH_CHECKED}
    assert gated == {"flops", "macs", "params", "peak_memory_bytes"}
