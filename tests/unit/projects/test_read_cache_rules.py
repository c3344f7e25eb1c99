"""The read cache's rules that need no server: which events it consumes, and that a cached
response expires no later than the first moment its `effectiveStatus` could differ."""

from __future__ import annotations

import pytest

from marketplace.events.types import EventType
from marketplace.http.read_cache import CONSUMED_TYPES, next_change
from marketplace.projects.read_models import CHALLENGE_FALLBACK_SECONDS, effective_status
from tests.unit.projects.cases import CASES, Case


def test_the_cache_consumes_event_types_that_exist() -> None:
    # A misspelt type would never invalidate anything.
    assert {str(t) for t in EventType} >= CONSUMED_TYPES
    assert "chain.reorg" in CONSUMED_TYPES and "project.changed" in CONSUMED_TYPES


def _deadlines(case: Case) -> list[int | None]:
    return [case.sub, case.resp, case.resp + CHALLENGE_FALLBACK_SECONDS if case.resp else None]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.999])
def test_the_effective_status_is_constant_until_the_entry_expires(
    case: Case, fraction: float
) -> None:
    # A response built at wall time `filled` (the handler's `now` is its whole second) is served
    # until next_change: every whole second in between must derive the same status.
    filled = case.now + fraction
    shown = effective_status(case.row, int(filled))
    until = next_change(_deadlines(case), filled)
    last = int(until) - 1 if until is not None else int(filled) + 30 * 86_400
    for second in {int(filled), int(filled) + 1, last - 1, last}:
        if int(filled) <= second <= last:
            assert effective_status(case.row, second) == shown, (second, until)
    if until is not None:
        assert until > filled
