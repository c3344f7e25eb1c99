"""A Ctrl-C that lands in a finalizer is not lost on `marketplace up`: Python drops the
KeyboardInterrupt raised there ("Exception ignored in ..."), so `up` delivers it again."""

from __future__ import annotations

import sys
import time

import pytest

from marketplace_devstack.embedded.supervisor import _redeliver_interrupts


class InterruptedFinalizer:
    def __del__(self) -> None:
        # What the SIGINT handler does when the signal comes while this runs.
        raise KeyboardInterrupt


def finalize_then_wait(seconds: float) -> None:
    InterruptedFinalizer()  # collected at once: its __del__ raises
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_ctrl_c_swallowed_by_a_finalizer_comes_again() -> None:
    seen: list[object] = []
    previous = sys.unraisablehook
    sys.unraisablehook = _redeliver_interrupts(seen.append)
    try:
        with pytest.raises(KeyboardInterrupt):
            finalize_then_wait(5)
    finally:
        sys.unraisablehook = previous
    assert seen == []  # handled, not reported


def test_other_unraisable_errors_go_to_the_previous_hook() -> None:
    seen: list[object] = []
    hook = _redeliver_interrupts(seen.append)

    class Unraisable:
        exc_value = ValueError("boom")

    hook(Unraisable())
    assert len(seen) == 1
