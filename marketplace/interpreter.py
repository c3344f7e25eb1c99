"""Interpreter limits every process of ours runs with.

Importing ``eth_account`` imports ``py_ecc``, which raises Python's recursion limit to 100000 for
the whole process. With that limit, recursive C code such as ``json.loads`` on a deeply nested
document overflows the C stack and the process dies with a segfault instead of raising
``RecursionError``. Every entry point (the app factory, each actor) calls
:func:`pin_recursion_limit` after its imports; py_ecc raises the limit only once, at its import,
so importing it here first and restoring the limit afterwards makes the restoration stick.
"""

from __future__ import annotations

import gc
import sys

# CPython's default; recursion in our own code never comes near it.
RECURSION_LIMIT = 1000


def pin_recursion_limit() -> None:
    import py_ecc  # noqa: F401  (imported for its side effect, which we then undo)

    sys.setrecursionlimit(RECURSION_LIMIT)


def freeze_start_up_heap() -> None:
    """Move every object alive now to the collector's permanent generation.

    Called once a long-lived process has started (``marketplace serve`` after the app's start-up,
    each actor at the end of its ``__init__``): the modules, models, schemas and routes loaded by
    then (hundreds of thousands of objects: Ray, web3, pydantic) live as long as the process, yet
    every full collection walked all of them, a pause taken by whichever request was running
    (bench/README.md, "Messaging", has the p99 with and without).
    Not for a process that builds many apps (tests): what is frozen is never collected.
    """
    gc.freeze()
