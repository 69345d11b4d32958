"""Hand notes in a results file outlive the benchmark run that rewrites it.

A results file is one run's figures, then notes a person writes below them, from a line that
starts ``Notes (``: the machine's load, what changed, the worst models with their reasons. A
rerun rewrites the figures; the notes of the file it replaces are kept under them, for the
person who reran it to bring up to date (before, every rerun dropped them).
"""

from __future__ import annotations

from pathlib import Path

MARK = "\nNotes ("


def write_keeping_notes(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, followed by the notes of the file it replaces, if any."""
    old = path.read_text() if path.exists() else ""
    at = old.find(MARK)
    if at < 0:
        path.write_text(text)
        return
    path.write_text(text.rstrip("\n") + "\n" + old[at:])


def replace_section(path: Path, title: str, text: str) -> None:
    """Put ``text`` (a section that starts with the line ``title``) in place of the file's
    section of that title, keeping that section's own notes (from its ``Notes (`` line) under
    the new figures; appended when the file has no such section. A rerun of one section had
    dropped the notes written under it."""
    old = path.read_text() if path.exists() else ""
    start = old.find(title)
    if start < 0:
        path.write_text(old.rstrip("\n") + "\n\n" + text)
        return
    end = old.find("\n## ", start + len(title))
    section = old[start : end + 1] if end >= 0 else old[start:]
    at = section.find(MARK)
    if at >= 0:  # MARK starts with the blank line that parts the notes from the figures
        notes = section[at:].rstrip("\n") + ("\n\n" if end >= 0 else "\n")
        text = text.rstrip("\n") + "\n" + notes
    path.write_text(old[:start] + text + (old[end + 1 :] if end >= 0 else ""))


def save_results(path: Path, text: str, *, partial: bool, chosen: bool = False) -> None:
    """Write a run's table to its results file, unless the run measured only part of the set.

    A partial run (``--models``, ``--cases``, ``--steps``, ``--torch``) would otherwise replace
    the whole table with its few rows, and the full run's figures would be gone from the next
    commit unnoticed. It prints its table and leaves the file; ``chosen`` (an ``--output``
    given on the command line) writes it there all the same.
    """
    if partial and not chosen:
        print(text)
        print(f"a partial run: {path.name} left as it was (it holds the full run's figures)")
        return
    write_keeping_notes(path, text)
    print(f"wrote {path}")


def ratio(ours: int, truth: int) -> str:
    """An estimate against its measurement, as the results' tables write it: the relative
    difference, and in bytes where it is not zero."""
    bytes_off = f" ({ours - truth:+,} B)" if ours != truth else ""
    return f"{100 * (ours / truth - 1):+.2f}%{bytes_off}"


HALF_FLAGS = ("avx512_bf16", "avx512_fp16", "amx_bf16")
"""The CPU's 16-bit instructions that choose oneDNN's kernels: the half-precision peaks model
AVX-512 BF16 without AMX or FP16, whose kernels hold other buffers."""


def cpu_kernels() -> str:
    """The vector width the CPU's kernels ran at (``AVX512``, ``AVX2``) and its 16-bit
    instructions: oneDNN's convolutions hold other buffers on each, and the estimate models
    AVX-512 BF16's (``costs/workspace.py``), so a measured table says which it was (both an
    AMX Xeon and an AVX-512 EPYC read ``AVX512`` alone)."""
    import torch

    flags: set[str] = set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    half = [flag.upper() for flag in HALF_FLAGS if flag in flags]
    extra = f" with {', '.join(half)}" if half else ""
    return f"CPU kernels {torch.backends.cpu.get_cpu_capability()}{extra}"
