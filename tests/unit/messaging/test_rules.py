"""The messaging rules as plain functions: chat senders and readers, the report workflow and
what it does to a message's bodyStatus, the ordered pair, and the row -> model mappers."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from marketplace.messaging import rules
from marketplace.messaging.errors import InvalidTransition, WorkerNotSelected
from marketplace.messaging.models import (
    BodyStatus,
    ChatMessageRecord,
    DirectMessageRecord,
    ReportStatus,
)
from marketplace.records.access import ProjectParties
from marketplace.records.errors import NotProjectParty
from marketplace.storage.repositories.messages import MessageRow
from marketplace.storage.repositories.projects import ProjectPartiesRow

OWNER = "0x" + "11" * 20
WORKER = "0x" + "22" * 20
OTHER = "0x" + "33" * 20


def project(worker: str | None = WORKER) -> ProjectParties:
    row: dict[str, Any] = {
        "project_address": "0x" + "aa" * 20,
        "owner_address": OWNER,
        "status": "building" if worker else "bidding",
        "project_mode": "standard",
        "bidding_access": "open",
        "selected_builder_address": worker,
        "allowlist": [],
        "challenge_submission_count": None,
        "dispute_phase": None,
        "dispute_milestone_index": None,
        "dispute_opened_at": None,
        "milestone_count": 3,
    }
    return ProjectParties.from_row(ProjectPartiesRow(**row))


def test_chat_senders() -> None:
    rules.require_chat_sender(project(), OWNER)
    rules.require_chat_sender(project(), WORKER)
    with pytest.raises(NotProjectParty):
        rules.require_chat_sender(project(), OTHER)
    with pytest.raises(WorkerNotSelected):
        rules.require_chat_sender(project(worker=None), OWNER)
    with pytest.raises(NotProjectParty):
        rules.require_chat_sender(project(worker=None), OTHER)


def test_chat_readers() -> None:
    assert rules.is_chat_party(project(), {OTHER, WORKER})
    assert rules.is_chat_party(project(), {OWNER})
    assert not rules.is_chat_party(project(), {OTHER})
    assert not rules.is_chat_party(project(), set())
    # Before selection the owner reads the (empty) chat; nobody else does.
    assert rules.is_chat_party(project(worker=None), {OWNER})
    assert not rules.is_chat_party(project(worker=None), {WORKER})


ALLOWED = {
    (ReportStatus.OPEN, ReportStatus.REVIEWING),
    (ReportStatus.OPEN, ReportStatus.ACTIONED),
    (ReportStatus.OPEN, ReportStatus.DISMISSED),
    (ReportStatus.REVIEWING, ReportStatus.ACTIONED),
    (ReportStatus.REVIEWING, ReportStatus.DISMISSED),
}


@pytest.mark.parametrize(("current", "wanted"), list(itertools.product(ReportStatus, repeat=2)))
def test_transitions(current: ReportStatus, wanted: ReportStatus) -> None:
    if (current, wanted) in ALLOWED:
        rules.check_transition(current, wanted)
    else:
        with pytest.raises(InvalidTransition) as raised:
            rules.check_transition(current, wanted)
        assert raised.value.status == 409 and raised.value.code == "invalid_transition"


def test_body_status_through_the_workflow() -> None:
    after = rules.body_status_after
    reported, removed, visible = BodyStatus.REPORTED, BodyStatus.REMOVED, BodyStatus.VISIBLE
    assert after(ReportStatus.REVIEWING, reported, other_pending_reports=0) is reported
    assert after(ReportStatus.ACTIONED, reported, other_pending_reports=3) is removed
    assert after(ReportStatus.DISMISSED, reported, other_pending_reports=0) is visible
    assert after(ReportStatus.DISMISSED, reported, other_pending_reports=1) is reported
    # Removed stays removed whatever happens to other reports.
    assert after(ReportStatus.DISMISSED, removed, other_pending_reports=0) is removed
    assert after(ReportStatus.REVIEWING, removed, other_pending_reports=0) is removed
    assert rules.body_status_on_report(visible) is reported
    assert rules.body_status_on_report(reported) is reported
    assert rules.body_status_on_report(removed) is removed


def test_ordered_pair_is_byte_order() -> None:
    for _ in range(200):
        a, b = uuid.uuid4(), uuid.uuid4()
        low, high = rules.ordered_pair(a, b)
        assert {low, high} == {a, b}
        assert low.bytes < high.bytes  # PostgreSQL compares uuids byte-wise
        assert rules.ordered_pair(b, a) == (low, high)


def message_row(kind: str, status: str) -> MessageRow:
    return MessageRow(
        id=uuid.uuid4(),
        seq=1,
        kind=kind,
        project_address="0x" + "ab" * 20 if kind == "project_chat" else None,
        thread_id=uuid.uuid4() if kind == "direct" else None,
        sender_user_id=uuid.uuid4(),
        sender_wallet_address=OWNER if kind == "project_chat" else None,
        recipient_user_id=uuid.uuid4() if kind == "direct" else None,
        body="the text",
        body_status=status,
        created_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
    )


@pytest.mark.parametrize("model", [ChatMessageRecord, DirectMessageRecord])
def test_removed_bodies_are_hidden_except_from_moderators(model: Any) -> None:
    kind = "project_chat" if model is ChatMessageRecord else "direct"
    for status in ("visible", "reported"):
        assert model.from_row(message_row(kind, status)).body == "the text"
    removed = message_row(kind, "removed")
    shown = model.from_row(removed).model_dump(mode="json")
    assert shown["body"] is None and shown["bodyStatus"] == "removed"
    assert model.from_row(removed, moderator=True).body == "the text"
    # Each kind carries only its own fields.
    other = {"threadId", "recipientUserId"} if kind == "project_chat" else {"projectAddress"}
    assert not other & set(shown)


def test_chat_addresses_are_checksummed() -> None:
    record = ChatMessageRecord.from_row(message_row("project_chat", "visible"))
    assert record.projectAddress.lower() == "0x" + "ab" * 20
    assert record.projectAddress != "0x" + "ab" * 20
