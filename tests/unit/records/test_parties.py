"""The records' project facts as a plain object: who is owner or worker, which milestone is
disputed (visibility itself is SQL: tests/unit/projects/test_visibility_sql.py)."""

from __future__ import annotations

from typing import Any

import pytest

from marketplace.records.access import ProjectParties, require_linked
from marketplace.records.errors import WalletNotLinked
from marketplace.storage.repositories.projects import ProjectPartiesRow

OWNER = "0x" + "11" * 20
WORKER = "0x" + "22" * 20
OTHER = "0x" + "33" * 20


def parties(**values: Any) -> ProjectParties:
    row: dict[str, Any] = {
        "project_address": "0x" + "aa" * 20,
        "owner_address": OWNER,
        "status": "dispute",
        "project_mode": "standard",
        "bidding_access": "invite_only",
        "selected_builder_address": WORKER,
        "allowlist": [OTHER],
        "challenge_submission_count": None,
        "dispute_phase": "challenged",
        "dispute_milestone_index": 2,
        "dispute_opened_at": 1_700_000_000,
        "milestone_count": 3,
    }
    row.update(values)
    return ProjectParties.from_row(ProjectPartiesRow(**row))


def test_from_row_maps_columns() -> None:
    project = parties(allowlist=None)
    assert project.owner == OWNER and project.worker == WORKER
    assert project.mode == "standard" and project.bidding_access == "invite_only"
    assert project.allowlist == frozenset()  # NULL allowlist reads as empty
    assert parties().allowlist == frozenset({OTHER})


def test_role_of() -> None:
    project = parties()
    assert project.role_of(OWNER) == "owner"
    assert project.role_of(WORKER) == "worker"
    assert project.role_of(OTHER) is None  # allowlisted is not a party
    assert parties(selected_builder_address=None).role_of(WORKER) is None
    # A wallet that is both: owner wins (it cannot bid on its own project anyway).
    assert parties(selected_builder_address=OWNER).role_of(OWNER) == "owner"


@pytest.mark.parametrize(
    ("status", "phase", "expected"),
    [
        ("dispute", "challenged", 2),
        ("dispute", "verifier_verdict", 2),
        ("dispute", None, None),  # status dispute but no phase indexed
        ("building", "challenged", None),  # a phase without the dispute status
        ("complete", None, None),
    ],
)
def test_active_dispute_milestone(status: str, phase: str | None, expected: int | None) -> None:
    assert parties(status=status, dispute_phase=phase).active_dispute_milestone == expected


def test_require_linked() -> None:
    require_linked(frozenset({OWNER}), OWNER, "submitterAddress")
    with pytest.raises(WalletNotLinked, match="submitterAddress"):
        require_linked(frozenset({OWNER}), WORKER, "submitterAddress")
