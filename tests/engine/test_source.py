"""Reading a model's source (``engine/source.py``): a file parsed once while it stays the same,
and read again when it changes, as a notebook's ``%autoreload`` or an edited module does."""

from __future__ import annotations

import os

from pytest_graphbudget.engine import source


def test_a_file_changed_on_disk_is_read_again(tmp_path):
    """``enclosing_class`` keyed its parse by the file's size and time, but read the lines
    from ``linecache``, which keeps a file's old lines until asked to check: the class of a
    line was the old file's."""
    path = tmp_path / "model.py"
    path.write_text("class Old:\n    x = 1\n")
    assert source.enclosing_class(str(path), 2).name == "Old"
    path.write_text("class Renamed:\n    x = 1\n    y = 2\n")
    os.utime(path, ns=(1, 1))  # a time of its own, whatever the clock's resolution
    assert source.enclosing_class(str(path), 2).name == "Renamed"
    assert set(source.definitions(str(path))) == set()
