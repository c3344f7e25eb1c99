"""Every row of the effective-status table (docs/read-models.md), both sides of each boundary."""

from __future__ import annotations

import pytest

from marketplace.projects.read_models import CHALLENGE_FALLBACK_SECONDS, effective_status
from tests.unit.projects.cases import CASES, FALLBACK, RESP, SUB, Case


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_effective_status(case: Case) -> None:
    assert effective_status(case.row, case.now) == case.expected


def test_fallback_window_is_five_days() -> None:
    assert CHALLENGE_FALLBACK_SECONDS == FALLBACK == 5 * 24 * 3600


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (SUB, "bidding"),
        (SUB + 1, "building"),
        (RESP, "building"),
        (RESP + 1, "dispute"),
        (RESP + FALLBACK, "dispute"),
        (RESP + FALLBACK + 1, "failed"),
    ],
)
def test_one_challenge_walks_through_its_phases(now: int, expected: str) -> None:
    row = Case("walk", "challenge", "bidding", now, 3, expected).row
    assert effective_status(row, now) == expected


def test_every_table_row_is_covered_on_both_sides() -> None:
    rules = {case.rule for case in CASES}
    assert {"1", "2", "3", "4", "5", "6", "std"} <= rules
    outcomes = {(case.status, case.expected) for case in CASES if case.mode == "challenge"}
    assert {
        ("bidding", "bidding"),
        ("bidding", "failed"),
        ("bidding", "building"),
        ("bidding", "dispute"),
        ("building", "building"),
        ("building", "dispute"),
        ("building", "failed"),
    } <= outcomes
