"""Timing in rounds: what makes two calibrations of one machine agree.

The best of a few back-to-back runs is what the machine did in one short window; a machine's
speed drifts over seconds (another program's burst, the memory controller shared with a
neighbour, frequency scaling), so two calibrations a minute apart measured 20.8 and 30.2 GB/s
on one quiet machine (issue 36). Here every benchmark is timed in ``rounds``, each round visiting
every benchmark once in a rotated order, so each one's samples are spread over the whole
calibration rather than bunched in one window, and its time is the median of its rounds (each
round the best of ``samples`` back-to-back timings: a one-off preemption never counts).

The spread of a benchmark is how far its rounds stray from that median: half the
interquartile range over the median, printed as ``±X%``. A machine whose benchmarks stray more
than ``MAX_SPREAD`` was too noisy to trust.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Sequence
from typing import Any

MAX_SPREAD = 0.10
"""The most a calibration's kinds may stray between rounds (half their interquartile range,
over their median) before ``graph-budget hardware --calibrate`` refuses to write it: the
estimate's own hit band is ±10%."""


def spread(values: Sequence[float]) -> float:
    """Half the interquartile range of ``values`` over their median (0 for fewer than two)."""
    if len(values) < 2:
        return 0.0
    middle = statistics.median(values)
    if middle <= 0:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / 2 / middle


def rotated(keys: Sequence[Hashable], turn: int) -> list[Hashable]:
    """``keys`` starting at ``turn`` (modulo their count): round ``turn``'s order, so that no
    benchmark always runs first after a pause, or always right after the same other one."""
    if not keys:
        return []
    at = turn % len(keys)
    return [*keys[at:], *keys[:at]]


def interleaved(
    tasks: dict[Hashable, Callable[[], float]], rounds: int
) -> dict[Hashable, list[float]]:
    """Each task's result in each of ``rounds`` rounds, every round running every task once,
    in ``rotated`` order."""
    found: dict[Hashable, list[float]] = {key: [] for key in tasks}
    keys = list(tasks)
    for turn in range(rounds):
        for key in rotated(keys, turn):
            found[key].append(tasks[key]())
    return found


def best_of(call: Callable[[], Any], samples: int, clock: Callable[[], float]) -> float:
    """Seconds of the fastest of ``samples`` timed calls of ``call``."""
    best = float("inf")
    for _ in range(samples):
        start = clock()
        call()
        best = min(best, clock() - start)
    return best


def noisiest(spreads: dict[str, float]) -> tuple[str, float]:
    """The name that strayed most and its spread (``("", 0.0)`` when there is none)."""
    if not spreads:
        return "", 0.0
    name = max(spreads, key=lambda key: spreads[key])
    return name, spreads[name]
