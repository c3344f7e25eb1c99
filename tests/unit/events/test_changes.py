"""Which events an indexer transaction writes: pure functions, literal rows."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from marketplace.events.types import (
    EVENT_MODELS,
    PAYLOAD_MODELS,
    BidDraftUpdatedPayload,
    ChainReorg,
    EventType,
    NewEvent,
    ProjectChanged,
    ProjectCreated,
    ProjectRemoved,
    ProjectRemovedPayload,
    UnknownEvent,
    parse_event,
)
from marketplace.indexer.changes import (
    Snapshot,
    api_name,
    registry_reset_events,
    reorg_events,
    snapshot_events,
)
from marketplace.storage.read_model_rows import MilestoneRow, ProjectCreation, ProjectRow

ADDRESS = "0x" + "ab" * 20
OWNER = "0x" + "01" * 20
CREATED = datetime(2025, 3, 1, tzinfo=UTC)


def project(**changes: Any) -> ProjectRow:
    row = ProjectRow(
        project_address=ADDRESS,
        owner_address=OWNER,
        status="draft",
        project_mode="standard",
        bidding_access="open",
        config_hash="0x" + "cd" * 32,
        selected_builder_address=None,
        milestone_count=1,
        bid_bond_usdc=10,
        challenge_payout_usdc=None,
        challenge_submission_count=None,
        challenge_submission_window_seconds=None,
        challenge_owner_response_window_seconds=None,
        challenge_submission_deadline=None,
        challenge_owner_response_deadline=None,
        challenge_selection_phase=False,
        dispute_phase=None,
        dispute_reason=None,
        dispute_raised_by=None,
        dispute_milestone_index=None,
        dispute_opened_at=None,
        dispute_verdict_submitted_at=None,
        dispute_owner_evidence_hash=None,
        dispute_worker_evidence_hash=None,
        allowlist=[],
        created_at=CREATED,
    )
    return dataclasses.replace(row, **changes)


def milestone(**changes: Any) -> MilestoneRow:
    row = MilestoneRow(
        project_address=ADDRESS,
        milestone_index=0,
        status="pending",
        payout_usdc=None,
        deadline_at=None,
        submitted_at=None,
        approved_at=None,
        resolved_at=None,
        delivery_ref_hash=None,
        latest_evidence_hash=None,
        attested_on_chain=False,
    )
    return dataclasses.replace(row, **changes)


CREATION = ProjectCreation(ADDRESS, OWNER, "0x" + "cd" * 32, 120, 3)


def stored(row: Any) -> dict[str, Any]:
    """A row as asyncpg returns it: numeric columns come back as Decimal."""
    values = dataclasses.asdict(row)
    for key in ("bid_bond_usdc", "payout_usdc", "challenge_payout_usdc"):
        if values.get(key) is not None:
            values[key] = Decimal(values[key])
    return values


def typed(events: list[NewEvent]) -> list[Any]:
    """The events as a consumer parses them from the outbox's JSON."""
    return [
        parse_event(i + 1, str(e.type), e.subject, CREATED, json.loads(e.payload_json()))
        for i, e in enumerate(events)
    ]


@pytest.mark.parametrize(
    ("column", "name"),
    [
        ("bid_bond_usdc", "bidBondUSDC"),
        ("payout_usdc", "payoutUSDC"),
        ("challenge_submission_deadline", "challengeSubmissionDeadline"),
        ("selected_builder_address", "selectedBuilderAddress"),
        ("allowlist", "allowlist"),
    ],
)
def test_payload_names_are_the_read_api_names(column: str, name: str) -> None:
    assert api_name(column) == name


def test_a_project_the_read_model_did_not_have_is_created() -> None:
    snapshot = (project(), [milestone()], CREATION)
    events = typed(snapshot_events({}, {}, [snapshot], {ADDRESS}, block=130))
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, ProjectCreated)
    assert event.subject == ADDRESS
    assert event.payload.block == 130
    assert event.payload.createdBlock == 120
    assert event.payload.createdLogIndex == 3
    assert event.payload.ownerAddress == OWNER
    assert event.payload.status == "draft"


def test_an_identical_snapshot_is_no_event() -> None:
    before = {ADDRESS: stored(project())}
    before_ms = {(ADDRESS, 0): stored(milestone())}
    snapshot = (project(), [milestone()], CREATION)
    assert snapshot_events(before, before_ms, [snapshot], {ADDRESS}, block=131) == []


def test_a_snapshot_the_upsert_did_not_write_is_no_event() -> None:
    snapshot: Snapshot = (project(status="bidding"), [], CREATION)
    before = {ADDRESS: stored(project())}
    assert snapshot_events(before, {}, [snapshot], set(), block=131) == []
    assert snapshot_events({}, {}, [snapshot], set(), block=131) == []


def test_a_change_lists_exactly_the_changed_fields_with_new_values() -> None:
    deadline = datetime(2025, 4, 1, tzinfo=UTC)
    before = {ADDRESS: stored(project())}
    before_ms = {(ADDRESS, 0): stored(milestone())}
    after = project(
        status="building",
        selected_builder_address="0x" + "02" * 20,
        bid_bond_usdc=10,  # unchanged (Decimal in the database, int in the snapshot)
        allowlist=["0x" + "03" * 20],
        milestone_count=2,
    )
    milestones = [
        milestone(payout_usdc=300, deadline_at=deadline),
        milestone(milestone_index=1, payout_usdc=700),
    ]
    events = typed(
        snapshot_events(before, before_ms, [(after, milestones, CREATION)], {ADDRESS}, block=140)
    )
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, ProjectChanged)
    assert event.payload.block == 140
    assert event.payload.changes == {
        "status": "building",
        "selectedBuilderAddress": "0x" + "02" * 20,
        "allowlist": ["0x" + "03" * 20],
        "milestoneCount": 2,
    }
    by_index = {m.milestoneIndex: m.changes for m in event.payload.milestones}
    assert by_index[0] == {"payoutUSDC": "300", "deadlineAt": deadline.isoformat()}
    # A milestone the read model did not have reports every field.
    assert by_index[1]["payoutUSDC"] == "700"
    assert by_index[1]["status"] == "pending"
    assert set(by_index) == {0, 1}


def test_unix_seconds_are_decimal_strings_as_in_the_read_api() -> None:
    before = {ADDRESS: stored(project(project_mode="challenge"))}
    after = project(project_mode="challenge", challenge_submission_deadline=1_700_000_000)
    (event,) = snapshot_events(before, {}, [(after, [], CREATION)], {ADDRESS}, block=1)
    assert json.loads(event.payload_json())["changes"] == {
        "challengeSubmissionDeadline": "1700000000"
    }


def test_a_reorg_is_announced_before_its_removals() -> None:
    removed = {"0x" + "0f" * 20, "0x" + "0e" * 20}
    events = typed(
        reorg_events(
            chain_id=31337,
            fork_block=100,
            synced_block=104,
            head_block=105,
            removed=removed,
            resnapshot=[ADDRESS],
        )
    )
    assert isinstance(events[0], ChainReorg)
    assert events[0].subject == "chain:31337"
    assert events[0].payload.forkBlock == 100
    assert events[0].payload.depth == 4
    assert events[0].payload.removedProjects == sorted(removed)
    assert events[0].payload.resnapshotProjects == [ADDRESS]
    assert [type(e) for e in events[1:]] == [ProjectRemoved, ProjectRemoved]
    assert [e.subject for e in events[1:]] == sorted(removed)
    assert all(e.payload.reason == "reorg" and e.payload.forkBlock == 100 for e in events[1:])


def test_a_registry_reset_removes_every_project() -> None:
    (new,) = registry_reset_events({ADDRESS})
    # A field left at its default is not written: the JSON is the documented one, no null.
    assert new.payload_json() == '{"reason":"registry_changed"}'
    (event,) = typed([new])
    assert isinstance(event, ProjectRemoved)
    assert event.payload.reason == "registry_changed"
    assert event.payload.forkBlock is None


def test_unknown_types_and_added_fields_still_parse() -> None:
    event = parse_event(7, "message.sent", "u1", CREATED, {"text": "hi"})
    assert isinstance(event, UnknownEvent)
    assert event.payload == {"text": "hi"}
    newer = parse_event(
        8,
        "project.removed",
        ADDRESS,
        CREATED,
        {"reason": "reorg", "forkBlock": 1, "addedLater": True},
    )
    assert isinstance(newer, ProjectRemoved)
    assert newer.payload.model_extra == {"addedLater": True}


def test_every_event_type_has_a_payload_model() -> None:
    assert set(EVENT_MODELS) == set(EventType)


def test_docs_list_every_event_type() -> None:
    text = (Path(__file__).resolve().parents[3] / "docs" / "events.md").read_text()
    documented = re.findall(r"^\| `([a-z_.]+)` \|", text, re.M)
    assert sorted(documented) == sorted(EventType)


def _documented_fields() -> dict[str, set[str]]:
    """Per event type, the names docs/events.md's table puts in backticks in its payload column
    ("as `<type>`" borrows that type's)."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "events.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z_.]+)` \|.*\| ([^|]*) \|$", text, re.M))
    fields: dict[str, set[str]] = {}
    for name, column in rows.items():
        borrowed = re.fullmatch(r"as `([a-z_.]+)`", column.strip())
        fields[name] = set(re.findall(r"`([A-Za-z]+)`", rows[borrowed[1]] if borrowed else column))
    return fields


def test_each_type_has_its_own_payload_model_with_the_documented_field_names() -> None:
    assert set(PAYLOAD_MODELS) == set(EventType)
    documented = _documented_fields()
    for name, model in PAYLOAD_MODELS.items():
        assert model.event_type == name
        assert set(model.model_fields) <= documented[name], name
        assert EVENT_MODELS[name].model_fields["payload"].annotation is model
    # Two types never share a model, so a producer's model alone says which type it writes.
    assert len(set(PAYLOAD_MODELS.values())) == len(PAYLOAD_MODELS)


def test_a_new_event_takes_its_type_from_its_payload_model() -> None:
    removal = NewEvent(ADDRESS, ProjectRemovedPayload(reason="reorg", forkBlock=7))
    assert removal.type == EventType.PROJECT_REMOVED
    assert json.loads(removal.payload_json()) == {"reason": "reorg", "forkBlock": 7}
    draft = BidDraftUpdatedPayload(
        draftId="d", projectAddress=ADDRESS, bidderAddress=OWNER, draftHash="0x", userId="u"
    )
    assert NewEvent(ADDRESS, draft).type == EventType.BID_DRAFT_UPDATED
