"""The docs plugin can fail: a broken example, changed output and a flag the tool lacks each
fail their block, ``--docs-update`` rewrites the output, and timings never fail a block.

``make test`` runs these (they are quick: shell and Python blocks with no model); ``make
docs-test`` runs the plugin over README.md and docs/.
"""

from __future__ import annotations

import textwrap

import pytest
from docs_output import normalize, regenerate

pytest_plugins = ["pytester"]
FENCE = "```"


def write_doc(pytester: pytest.Pytester, text: str) -> None:
    pytester.makefile(".md", doc=textwrap.dedent(text).replace("~~~", FENCE))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "docs_plugin", "-p", "no:cacheprovider", "-rs", *args)


def test_a_broken_python_block_fails_and_a_skip_says_why(pytester):
    write_doc(
        pytester,
        """
        ~~~python
        total = 2 + 2
        ~~~

        ~~~python
        assert total == 5, "the docs say five"
        ~~~

        <!-- docs: skip "needs the network" -->
        ~~~sh
        pip install pytest-graphbudget
        ~~~
        """,
    )
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*the docs say five*", "SKIPPED [1] doc.md:10: needs the network"])


def test_a_shell_block_fails_on_a_command_that_fails(pytester):
    write_doc(pytester, "~~~sh\ntrue\nfalse  # the second command\n~~~\n")
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*$ false  # the second command", "exited 1, not 0:"])


def test_changed_output_fails_then_make_docs_rewrites_it(pytester):
    write_doc(
        pytester,
        """
        <!-- docs: write greeting.txt
        hello
        -->
        ~~~console
        $ cat greeting.txt
        goodbye
        ~~~
        """,
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*run `make docs`*", "-goodbye", "+hello"])
    run(pytester, "--docs-update").assert_outcomes(passed=1)
    assert f"$ cat greeting.txt\nhello\n{FENCE}" in (pytester.path / "doc.md").read_text()
    run(pytester).assert_outcomes(passed=1)


def test_timings_differ_and_the_block_still_passes(pytester):
    write_doc(
        pytester,
        """
        ~~~console
        $ echo "profiled resnet18 in 0.2s (fx trace)"; echo "1 passed in 12.31s"
        profiled resnet18 in 2.8s (fx trace)
        1 passed in 3.81s
        ~~~
        """,
    )
    run(pytester).assert_outcomes(passed=1)


def test_examples_print_as_in_a_terminal_when_the_docs_run_on_ci(pytester, monkeypatch):
    """On the project's CI machine (``CI`` set) pytest prints whole failure messages in its
    summary and our reports react to GitHub's variables; the docs show a user's terminal."""
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-x")
    write_doc(
        pytester,
        """
        ~~~console
        $ echo "CI=${CI-unset} ${GITHUB_ACTIONS-unset} ${PYTEST_ADDOPTS-unset}"
        CI=unset unset unset
        ~~~

        ~~~python
        import os
        print(os.environ.get("CI", "-"), os.environ.get("GITHUB_ACTIONS", "-"))  # - -
        ~~~
        """,
    )
    run(pytester).assert_outcomes(passed=2)


def test_a_generated_block_with_elided_lines(pytester):
    write_doc(
        pytester,
        """
        <!-- docs: output $ seq 1 20 -->
        ~~~
        1
        ...
        7
        8
        ...
        ~~~
        """,
    )
    run(pytester).assert_outcomes(passed=1)
    text = (pytester.path / "doc.md").read_text().replace("7\n8", "7\n9")
    (pytester.path / "doc.md").write_text(text)
    run(pytester).stdout.fnmatch_lines(["*run `make docs`*", " 7", "+8", " 9"])


def test_an_unmarked_output_block_and_an_unknown_flag_fail(pytester):
    write_doc(
        pytester,
        """
        ~~~
        some output nobody generates
        ~~~

        <!-- docs: usage -->
        ~~~
        graph-budget profile MODEL [--depth N] [--deepth N]
        ~~~

        ~~~yaml
        - run: graph-budget check --strictt budgets/
        ~~~
        """,
    )
    result = run(pytester)
    result.stdout.fnmatch_lines(
        [
            "*neither run nor generated*",
            "*graph-budget profile has no option --deepth",
        ]
    )
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] + outcomes.get("skipped", 0) == 3, outcomes
    if not outcomes.get("skipped"):  # actionlint installed: the flag is checked after it
        result.stdout.fnmatch_lines(["*graph-budget check --strictt budgets/: *--strictt*"])


def test_regenerate_keeps_what_matches_and_masks_what_varies():
    printed = "a\nb 1.0s\nc 3\nd 4\ne\n"
    assert regenerate("a\n...\nd 4\n...\n", printed) == "a\n...\nd 4\n...\n"
    assert regenerate("a\n...\nd 4\n...\n", printed.replace("4", "5")) == "a\n...\nd 5\n...\n"
    assert regenerate("c 3\nd 4\n", printed, floating=True) == "c 3\nd 4\n"
    assert regenerate("b 1.0s ...\n", "b 1.0s and more\n") == "b 1.0s ...\n"
    assert normalize("trace fx in 2.72s, torch 2.14.1+cu130") == "trace fx in <time>, torch 2.14.1"
    assert normalize("est. latency 3.70ms") == "est. latency 3.70ms"  # computed, not timed
    banner = "==================== 2 failed, 3 passed in 3.81s ===================="
    assert normalize(banner) == normalize("=================== 2 failed, 3 passed in 12.02s ===")


def test_regenerate_keeps_a_tables_alignment_unless_a_value_in_it_varies():
    """A column that widened is drift (the shown table would read misaligned); a column whose
    width follows a timing is not."""
    shown = "layer    MACs\n-----    ----\nfc       10\n"
    widened = "layer         MACs\n-----         ----\nfc            10\n"
    assert regenerate(shown, widened) == widened
    assert regenerate(shown, shown.replace("    ", "     ")) != shown
    timed = "layer  seconds\nfc     1.5\n"
    assert regenerate(timed, "layer   seconds\nfc      12.5\n") == timed


def test_a_print_lines_comment_is_what_it_printed(pytester):
    write_doc(
        pytester,
        """
        ~~~python
        macs = 4 * (64 * 256 + 256 * 64)  # a comment on another line is prose
        print(macs, sorted("ba"))  # 131073 ['a', 'b']
        print("ran in 0.2s")  # ran in 3.1s
        ~~~
        """,
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*run `make docs`*", "-print(macs, *  # 131073 *", "+print(macs, *  # 131072 *"]
    )
    run(pytester, "--docs-update").assert_outcomes(passed=1)
    text = (pytester.path / "doc.md").read_text()
    assert "print(macs, sorted(\"ba\"))  # 131072 ['a', 'b']\n" in text
    assert 'print("ran in 0.2s")  # ran in 3.1s\n' in text  # a timing is masked, kept as shown
    run(pytester).assert_outcomes(passed=1)


def test_a_print_comment_that_cannot_be_checked_fails(pytester):
    write_doc(
        pytester,
        """
        ~~~python
        def never():
            print("unseen")  # unseen


        print("one\\ntwo")  # one two
        ~~~
        """,
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ['*line 3: print("unseen")  # unseen', "printed nothing", "line 6: prints 2 lines*"]
    )


def test_github_ci_runs_the_docs_examples():
    """ci.yml has a job whose steps run ``make docs-test`` (make test does not run them)."""
    yaml = pytest.importorskip("yaml")
    from docs_shell import ROOT

    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]
    runs = {name: [s.get("run", "") for s in job["steps"]] for name, job in jobs.items()}
    assert any("make docs-test" in run for steps in runs.values() for run in steps), runs
