"""The garbage collector kept off the heap while a model is traced.

CPython 3.12 starts with objects of its own in the collector's permanent generation; only a
count above them is a caller's ``gc.freeze()``, which tracing (``heap_frozen``) must leave as
it is.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator

INTERPRETER_FROZEN = gc.get_freeze_count() if sys.version_info[:2] == (3, 12) else 0
"""Objects CPython 3.12 keeps in the permanent generation from its start (375 on 3.12.1, 0 on
3.10, 3.11 and 3.13), counted when this module is first imported: with the engine, before a
test or a caller's code is likely to freeze the heap."""


def caller_froze_heap() -> bool:
    """Whether something froze objects (``gc.freeze``) that a profile must leave frozen."""
    return gc.get_freeze_count() > INTERPRETER_FROZEN


@contextlib.contextmanager
def heap_frozen() -> Iterator[None]:
    """Keep the objects that exist already out of the collector's way while tracing.

    Export and the cost pass allocate hundreds of thousands of short-lived objects; every full
    collection they trigger would walk the whole heap besides (torch, sympy, the model, a test
    session: a million objects, about 0.1 s a walk, a third of a cold export of YOLOv8n in
    collections). ``gc.freeze`` sets that heap aside: young objects are still collected, and
    ``gc.unfreeze`` returns the rest to the oldest generation (cyclic garbage among them waits
    until then). Nothing is done when the collector is off or the caller froze objects."""
    if not gc.isenabled() or caller_froze_heap():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
