"""Event types and payloads: the contract between producers and consumers (docs/events.md).

A leaf module (pydantic and the standard library only), so repositories can name the types they
write without importing the relay or the consumer. Adding a payload field is compatible (payload
models keep unknown fields); renaming or retyping one makes a new event type.

Payload field names and value formats follow the read API: camelCase names, lower-case
addresses and hashes, USDC amounts and Unix seconds as decimal strings, times in ISO 8601.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class EventType(enum.StrEnum):
    PROJECT_CREATED = "project.created"
    PROJECT_CHANGED = "project.changed"
    PROJECT_REMOVED = "project.removed"
    CHAIN_REORG = "chain.reorg"
    PROJECT_CLAIMED = "project.claimed"
    PROJECT_METADATA_UPDATED = "project.metadata_updated"
    BID_DRAFT_CREATED = "bid_draft.created"
    BID_DRAFT_UPDATED = "bid_draft.updated"
    CHALLENGE_SUBMISSION_CREATED = "challenge_submission.created"
    CHALLENGE_SUBMISSION_UPDATED = "challenge_submission.updated"
    DISPUTE_EVIDENCE_SUBMITTED = "dispute_evidence.submitted"
    CHAT_MESSAGE = "chat.message"
    DM_MESSAGE = "dm.message"
    MESSAGE_REPORTED = "message.reported"
    REPORT_UPDATED = "report.updated"
    MODERATION_OFFENSE = "moderation.offense"
    MODERATION_SUSPENDED = "moderation.suspended"
    MODERATION_SUSPENSION_LIFTED = "moderation.suspension_lifted"
    CATEGORY_TAGS_CHANGED = "category_tags.changed"
    VERIFIER_JOB_COMPLETED = "verifier_job.completed"


@dataclass(frozen=True)
class NewEvent:
    """An event as a producer writes it; the database assigns ``id`` and ``created_at``.

    ``payload`` must be JSON-serialisable (plain str/int/bool/None/list/dict values).
    """

    type: EventType
    subject: str
    payload: dict[str, Any]


def chain_subject(chain_id: int) -> str:
    """Subject of chain-wide events (``chain.reorg``)."""
    return f"chain:{chain_id}"


def user_subject(user_id: object) -> str:
    """Subject of the events about one account (moderation): ``user:<uuid>``."""
    return f"user:{user_id}"


# --- payloads ------------------------------------------------------------------------------------


class Payload(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class ProjectCreatedPayload(Payload):
    block: int
    ownerAddress: str
    status: str
    projectMode: str
    biddingAccess: str
    configHash: str
    milestoneCount: int
    createdBlock: int
    createdLogIndex: int


class MilestoneChanges(Payload):
    milestoneIndex: int
    changes: dict[str, Any]


class ProjectChangedPayload(Payload):
    block: int
    # Project fields whose value changed, with the new value (read-API names and formats).
    changes: dict[str, Any]
    # Per milestone whose fields changed (or that appeared), those fields with new values.
    milestones: list[MilestoneChanges]


class ProjectRemovedPayload(Payload):
    reason: Literal["reorg", "registry_changed"]
    # The newest block that still matched the chain (reorg only).
    forkBlock: int | None = None


class ChainReorgPayload(Payload):
    chainId: int
    forkBlock: int
    depth: int
    previousSyncedBlock: int
    headBlock: int
    removedProjects: list[str]
    resnapshotProjects: list[str]


class ProjectClaimedPayload(Payload):
    ownerAddress: str
    userId: str
    claimMode: str
    configHash: str
    txHash: str


class ProjectMetadataUpdatedPayload(Payload):
    userId: str
    # The metadata fields the edit set (title always; description/imageUrl when sent, null
    # when cleared).
    changes: dict[str, Any]


class BidDraftPayload(Payload):
    draftId: str
    projectAddress: str
    bidderAddress: str
    draftHash: str
    userId: str


class ChallengeSubmissionPayload(Payload):
    submissionId: str
    projectAddress: str
    submitterAddress: str
    submissionHash: str
    userId: str


class DisputeEvidenceSubmittedPayload(Payload):
    evidenceId: str
    projectAddress: str
    milestoneIndex: int
    submitterAddress: str
    submitterRole: str
    evidenceHash: str
    userId: str


class ChatMessagePayload(Payload):
    # The body is not in the event: the outbox and the stream outlive a moderator's removal, so
    # consumers read the message (and its current bodyStatus) by id when they need the text.
    messageId: str
    projectAddress: str
    senderUserId: str
    senderWalletAddress: str


class DmMessagePayload(Payload):
    messageId: str
    threadId: str
    senderUserId: str
    recipientUserId: str


class MessageReportedPayload(Payload):
    reportId: str
    messageId: str
    reporterUserId: str
    # The author of the reported message (the audit subject).
    authorUserId: str


class ReportUpdatedPayload(Payload):
    reportId: str
    messageId: str
    reporterUserId: str
    authorUserId: str
    status: str
    previousStatus: str
    # The message's bodyStatus after the transition.
    bodyStatus: str


class ModerationOffensePayload(Payload):
    offenseId: str
    userId: str
    context: str
    # Offenses counted in the window, this one included.
    windowTotal: int


class ModerationSuspendedPayload(Payload):
    suspensionId: str
    userId: str
    suspendedUntil: str


class ModerationSuspensionLiftedPayload(Payload):
    suspensionId: str
    userId: str
    liftedByUserId: str


class CategoryTagsChangedPayload(Payload):
    projectAddress: str
    milestoneIndex: int
    ownerWalletAddress: str
    revision: int
    revisionId: str
    categories: list[str]
    # The tag set this revision replaced (empty for revision 1).
    previousCategories: list[str]
    userId: str


class VerifierJobCompletedPayload(Payload):
    jobId: str
    projectAddress: str
    milestoneIndex: int
    policy: str
    passes: bool
    evidenceHash: str


# --- events as consumers receive them -----------------------------------------------------------


class Event(BaseModel):
    """A committed event. ``id`` increases in commit order; consumers remember the last one they
    applied and dedupe by it."""

    model_config = ConfigDict(frozen=True)

    id: int
    type: str
    subject: str
    createdAt: datetime


class UnknownEvent(Event):
    """A type this code does not know yet (written by newer producers)."""

    payload: dict[str, Any]


class ProjectCreated(Event):
    type: Literal["project.created"]
    payload: ProjectCreatedPayload


class ProjectChanged(Event):
    type: Literal["project.changed"]
    payload: ProjectChangedPayload


class ProjectRemoved(Event):
    type: Literal["project.removed"]
    payload: ProjectRemovedPayload


class ChainReorg(Event):
    type: Literal["chain.reorg"]
    payload: ChainReorgPayload


class ProjectClaimed(Event):
    type: Literal["project.claimed"]
    payload: ProjectClaimedPayload


class ProjectMetadataUpdated(Event):
    type: Literal["project.metadata_updated"]
    payload: ProjectMetadataUpdatedPayload


class BidDraftCreated(Event):
    type: Literal["bid_draft.created"]
    payload: BidDraftPayload


class BidDraftUpdated(Event):
    type: Literal["bid_draft.updated"]
    payload: BidDraftPayload


class ChallengeSubmissionCreated(Event):
    type: Literal["challenge_submission.created"]
    payload: ChallengeSubmissionPayload


class ChallengeSubmissionUpdated(Event):
    type: Literal["challenge_submission.updated"]
    payload: ChallengeSubmissionPayload


class DisputeEvidenceSubmitted(Event):
    type: Literal["dispute_evidence.submitted"]
    payload: DisputeEvidenceSubmittedPayload


class ChatMessage(Event):
    type: Literal["chat.message"]
    payload: ChatMessagePayload


class DmMessage(Event):
    type: Literal["dm.message"]
    payload: DmMessagePayload


class MessageReported(Event):
    type: Literal["message.reported"]
    payload: MessageReportedPayload


class ReportUpdated(Event):
    type: Literal["report.updated"]
    payload: ReportUpdatedPayload


class ModerationOffense(Event):
    type: Literal["moderation.offense"]
    payload: ModerationOffensePayload


class ModerationSuspended(Event):
    type: Literal["moderation.suspended"]
    payload: ModerationSuspendedPayload


class ModerationSuspensionLifted(Event):
    type: Literal["moderation.suspension_lifted"]
    payload: ModerationSuspensionLiftedPayload


class CategoryTagsChanged(Event):
    type: Literal["category_tags.changed"]
    payload: CategoryTagsChangedPayload


class VerifierJobCompleted(Event):
    type: Literal["verifier_job.completed"]
    payload: VerifierJobCompletedPayload


EVENT_MODELS: dict[str, type[Event]] = {
    EventType.PROJECT_CREATED: ProjectCreated,
    EventType.PROJECT_CHANGED: ProjectChanged,
    EventType.PROJECT_REMOVED: ProjectRemoved,
    EventType.CHAIN_REORG: ChainReorg,
    EventType.PROJECT_CLAIMED: ProjectClaimed,
    EventType.PROJECT_METADATA_UPDATED: ProjectMetadataUpdated,
    EventType.BID_DRAFT_CREATED: BidDraftCreated,
    EventType.BID_DRAFT_UPDATED: BidDraftUpdated,
    EventType.CHALLENGE_SUBMISSION_CREATED: ChallengeSubmissionCreated,
    EventType.CHALLENGE_SUBMISSION_UPDATED: ChallengeSubmissionUpdated,
    EventType.DISPUTE_EVIDENCE_SUBMITTED: DisputeEvidenceSubmitted,
    EventType.CHAT_MESSAGE: ChatMessage,
    EventType.DM_MESSAGE: DmMessage,
    EventType.MESSAGE_REPORTED: MessageReported,
    EventType.REPORT_UPDATED: ReportUpdated,
    EventType.MODERATION_OFFENSE: ModerationOffense,
    EventType.MODERATION_SUSPENDED: ModerationSuspended,
    EventType.MODERATION_SUSPENSION_LIFTED: ModerationSuspensionLifted,
    EventType.CATEGORY_TAGS_CHANGED: CategoryTagsChanged,
    EventType.VERIFIER_JOB_COMPLETED: VerifierJobCompleted,
}


def parse_event(
    id: int, type: str, subject: str, created_at: datetime, payload: dict[str, Any]
) -> Event:
    """The typed event for a stored or streamed one (``UnknownEvent`` for an unknown type)."""
    model = EVENT_MODELS.get(type, UnknownEvent)
    return model.model_validate(
        {"id": id, "type": type, "subject": subject, "createdAt": created_at, "payload": payload}
    )
