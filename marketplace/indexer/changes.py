"""Which change events one indexer transaction writes (pure functions; docs/events.md).

The indexer compares the read-model rows as they were before its upsert with the snapshots it
writes: a project it did not have is ``project.created``; one whose fields (or milestones)
differ is ``project.changed`` listing exactly those fields with their new values; a snapshot
identical to the stored row (a touched project whose change the read model does not show, or a
replayed batch) is no event. Rollbacks give ``chain.reorg`` and then a ``project.removed`` per
deleted project.

On-chain bids ride on ``project.changed``: a bid that appeared or changed is listed under the
event's ``bids`` with its changed fields (the bids read's names and formats); a project whose
bids changed but whose snapshot did not gets a ``project.changed`` with empty ``changes`` and
``milestones``, after its ``project.created`` when it is new.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import JsonValue

from marketplace.events.types import (
    BidChanges,
    ChainReorgPayload,
    MilestoneChanges,
    NewEvent,
    ProjectChangedPayload,
    ProjectCreatedPayload,
    ProjectRemovedPayload,
    chain_subject,
)
from marketplace.projects.bids import bid_changes
from marketplace.storage.read_model_rows import MilestoneRow, ProjectCreation, ProjectRow

# The payload models are built with ``model_construct``: their values come from the read-model
# rows (typed) and the mappers here, and validating every one cost a backfill about a second
# for 10,000 projects (bench/README.md, "Indexer backfill", issue 28). They are the same models,
# so producer and consumers still share one contract (tests/unit/indexer checks that each kind
# validates).
from marketplace.storage.repositories.bids import BidRow

# Compared and reported fields: every snapshot column the upsert may change.
PROJECT_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(ProjectRow)
    if f.name not in ("project_address", "created_at")
)
MILESTONE_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(MilestoneRow)
    if f.name not in ("project_address", "milestone_index")
)
# Integers the read API writes as decimal strings (USDC amounts, Unix seconds).
_DECIMAL_STRING_FIELDS = frozenset(
    {
        "bid_bond_usdc",
        "challenge_payout_usdc",
        "payout_usdc",
        "challenge_submission_deadline",
        "challenge_owner_response_deadline",
        "dispute_opened_at",
        "dispute_verdict_submitted_at",
    }
)

Snapshot = tuple[ProjectRow, list[MilestoneRow], ProjectCreation]


def api_name(column: str) -> str:
    """The read API's name of a read-model column (``bid_bond_usdc`` -> ``bidBondUSDC``)."""
    head, *rest = column.split("_")
    name = head + "".join(part.capitalize() for part in rest)
    return name[: -len("Usdc")] + "USDC" if name.endswith("Usdc") else name


def api_value(column: str, value: Any) -> JsonValue:
    """A column value in the read API's JSON format."""
    if value is None:
        return None
    if column in _DECIMAL_STRING_FIELDS:
        return str(int(value))
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, list | tuple):
        return list(value)
    return value


def _changes(
    before: Mapping[str, Any] | None, after: object, fields: Iterable[str]
) -> dict[str, JsonValue]:
    changed: dict[str, JsonValue] = {}
    for column in fields:
        new = getattr(after, column)
        if before is None or before[column] != new:
            changed[api_name(column)] = api_value(column, new)
    return changed


def snapshot_events(
    before_projects: Mapping[str, Mapping[str, Any]],
    before_milestones: Mapping[tuple[str, int], Mapping[str, Any]],
    snapshots: Sequence[Snapshot],
    written: set[str],
    *,
    block: int,
) -> list[NewEvent]:
    """Events for the snapshots an upsert wrote (``written``), given the rows before it."""
    events = []
    for project, milestones, creation in sorted(snapshots, key=lambda s: s[0].project_address):
        address = project.project_address
        if address not in written:
            continue
        old = before_projects.get(address)
        if old is None:
            events.append(
                NewEvent(
                    address,
                    ProjectCreatedPayload.model_construct(
                        block=block,
                        ownerAddress=project.owner_address,
                        status=project.status,
                        projectMode=project.project_mode,
                        biddingAccess=project.bidding_access,
                        configHash=project.config_hash,
                        milestoneCount=project.milestone_count,
                        createdBlock=creation.block_number,
                        createdLogIndex=creation.log_index,
                    ),
                )
            )
            continue
        changes = _changes(old, project, PROJECT_FIELDS)
        milestone_changes = []
        for milestone in milestones:
            key = (address, milestone.milestone_index)
            changed = _changes(before_milestones.get(key), milestone, MILESTONE_FIELDS)
            if changed:
                milestone_changes.append(
                    MilestoneChanges.model_construct(
                        milestoneIndex=milestone.milestone_index, changes=changed
                    )
                )
        if changes or milestone_changes:
            events.append(
                NewEvent(
                    address,
                    ProjectChangedPayload.model_construct(
                        block=block, changes=changes, milestones=milestone_changes
                    ),
                )
            )
    return events


def bid_events(
    before: Mapping[tuple[str, str], BidRow],
    after: Mapping[tuple[str, str], BidRow],
) -> dict[str, list[BidChanges]]:
    """Per project, the bids that differ between ``before`` and ``after`` (by bidder)."""
    found: dict[str, list[BidChanges]] = {}
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        project, bidder = key
        found.setdefault(project, []).append(
            BidChanges.model_construct(bidderAddress=bidder, changes=bid_changes(old, new))
        )
    return found


def with_bid_events(
    events: Sequence[NewEvent], bids: Mapping[str, list[BidChanges]], *, block: int
) -> list[NewEvent]:
    """``events`` with the bid changes added: to the project's ``project.changed`` when there is
    one, else as a ``project.changed`` of their own (after the ``project.created`` of a new
    project, or appended)."""
    if not bids:
        return list(events)
    merged: list[NewEvent] = []
    pending = dict(bids)
    for event in events:
        payload = event.payload
        changes = pending.get(event.subject)
        if changes is not None and isinstance(payload, ProjectChangedPayload):
            del pending[event.subject]
            merged.append(
                NewEvent(
                    event.subject,
                    ProjectChangedPayload.model_construct(
                        block=payload.block,
                        changes=payload.changes,
                        milestones=payload.milestones,
                        bids=changes,
                    ),
                )
            )
            continue
        merged.append(event)
        if changes is not None and isinstance(payload, ProjectCreatedPayload):
            del pending[event.subject]
            merged.append(_bids_only(event.subject, changes, block))
    merged.extend(_bids_only(subject, pending[subject], block) for subject in sorted(pending))
    return merged


def _bids_only(subject: str, changes: list[BidChanges], block: int) -> NewEvent:
    return NewEvent(
        subject,
        ProjectChangedPayload.model_construct(block=block, changes={}, milestones=[], bids=changes),
    )


def reorg_events(
    *,
    chain_id: int,
    fork_block: int,
    synced_block: int,
    head_block: int,
    removed: set[str],
    resnapshot: Sequence[str],
) -> list[NewEvent]:
    """``chain.reorg`` first, so a consumer knows why the removals that follow happen."""
    removed_sorted = sorted(removed)
    events = [
        NewEvent(
            chain_subject(chain_id),
            ChainReorgPayload(
                chainId=chain_id,
                forkBlock=fork_block,
                depth=max(0, synced_block - fork_block),
                previousSyncedBlock=synced_block,
                headBlock=head_block,
                removedProjects=removed_sorted,
                resnapshotProjects=sorted(resnapshot),
            ),
        )
    ]
    events.extend(
        NewEvent(address, ProjectRemovedPayload(reason="reorg", forkBlock=fork_block))
        for address in removed_sorted
    )
    return events


def registry_reset_events(removed: set[str]) -> list[NewEvent]:
    return [
        NewEvent(address, ProjectRemovedPayload(reason="registry_changed"))
        for address in sorted(removed)
    ]
