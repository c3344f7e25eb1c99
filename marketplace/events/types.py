"""Event types and payloads: the contract between producers and consumers (docs/events.md).

A leaf module (pydantic and the standard library only), so repositories can name the events they
write without importing the relay or the consumer. Each event type has one payload model, which
names its type (``Payload.event_type``): producers write ``NewEvent(subject, SomePayload(...))``
and nothing else, consumers get the same model back from :func:`parse_event`. Adding a payload
field is compatible (payload models keep unknown fields); renaming or retyping one makes a new
event type.

Payload field names and value formats follow the read API: camelCase names, lower-case
addresses and hashes, USDC amounts and Unix seconds as decimal strings, times in ISO 8601.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, JsonValue


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
    MESSAGE_REMOVED = "message.removed"
    MODERATION_OFFENSE = "moderation.offense"
    MODERATION_SUSPENDED = "moderation.suspended"
    MODERATION_SUSPENSION_LIFTED = "moderation.suspension_lifted"
    CATEGORY_TAGS_CHANGED = "category_tags.changed"
    VERIFIER_JOB_COMPLETED = "verifier_job.completed"


def chain_subject(chain_id: int) -> str:
    """Subject of chain-wide events (``chain.reorg``)."""
    return f"chain:{chain_id}"


def user_subject(user_id: object) -> str:
    """Subject of the events about one account (moderation, reports): ``user:<uuid>``."""
    return f"user:{user_id}"


def thread_subject(thread_id: object) -> str:
    """Subject of a direct message's event: ``thread:<uuid>``."""
    return f"thread:{thread_id}"


# --- payloads ------------------------------------------------------------------------------------


class PayloadPart(BaseModel):
    """A payload or a part of one: frozen, and keeps fields added by newer producers."""

    model_config = ConfigDict(extra="allow", frozen=True)


class Payload(PayloadPart):
    """The payload of one event type, which the concrete model names."""

    event_type: ClassVar[EventType]


class ProjectCreatedPayload(Payload):
    event_type = EventType.PROJECT_CREATED

    block: int
    ownerAddress: str
    status: str
    projectMode: str
    biddingAccess: str
    configHash: str
    milestoneCount: int
    createdBlock: int
    createdLogIndex: int


class MilestoneChanges(PayloadPart):
    milestoneIndex: int
    changes: dict[str, JsonValue]


class BidChanges(PayloadPart):
    bidderAddress: str
    changes: dict[str, JsonValue]


class ProjectChangedPayload(Payload):
    event_type = EventType.PROJECT_CHANGED

    block: int
    # Project fields whose value changed, with the new value (read-API names and formats).
    changes: dict[str, JsonValue]
    # Per milestone whose fields changed (or that appeared), those fields with new values.
    milestones: list[MilestoneChanges]
    # Per on-chain bid that changed (or appeared), its changed fields with new values
    # (GET /v1/projects/{address}/bids names and formats; `{"status": null}`: a reorg removed it).
    bids: list[BidChanges] = []


class ProjectRemovedPayload(Payload):
    event_type = EventType.PROJECT_REMOVED

    reason: Literal["reorg", "registry_changed"]
    # The newest block that still matched the chain (reorg only; left out of the JSON otherwise).
    forkBlock: int | None = None


class ChainReorgPayload(Payload):
    event_type = EventType.CHAIN_REORG

    chainId: int
    forkBlock: int
    depth: int
    previousSyncedBlock: int
    headBlock: int
    removedProjects: list[str]
    resnapshotProjects: list[str]


class ProjectClaimedPayload(Payload):
    event_type = EventType.PROJECT_CLAIMED

    ownerAddress: str
    userId: str
    claimMode: str
    configHash: str
    txHash: str


class ProjectMetadataUpdatedPayload(Payload):
    event_type = EventType.PROJECT_METADATA_UPDATED

    userId: str
    # The metadata fields the edit set (title always; description/imageUrl when sent, null
    # when cleared; milestonePolicies when sent, [] when cleared).
    changes: dict[str, JsonValue]


class BidDraftPayload(Payload):
    """``bid_draft.created`` and ``bid_draft.updated`` (one model per type below)."""

    draftId: str
    projectAddress: str
    bidderAddress: str
    draftHash: str
    userId: str


class BidDraftCreatedPayload(BidDraftPayload):
    event_type = EventType.BID_DRAFT_CREATED


class BidDraftUpdatedPayload(BidDraftPayload):
    event_type = EventType.BID_DRAFT_UPDATED


class ChallengeSubmissionPayload(Payload):
    """``challenge_submission.created`` and ``.updated`` (one model per type below)."""

    submissionId: str
    projectAddress: str
    submitterAddress: str
    submissionHash: str
    userId: str


class ChallengeSubmissionCreatedPayload(ChallengeSubmissionPayload):
    event_type = EventType.CHALLENGE_SUBMISSION_CREATED


class ChallengeSubmissionUpdatedPayload(ChallengeSubmissionPayload):
    event_type = EventType.CHALLENGE_SUBMISSION_UPDATED


class DisputeEvidenceSubmittedPayload(Payload):
    event_type = EventType.DISPUTE_EVIDENCE_SUBMITTED

    evidenceId: str
    projectAddress: str
    milestoneIndex: int
    submitterAddress: str
    submitterRole: str
    evidenceHash: str
    userId: str


class ChatMessagePayload(Payload):
    event_type = EventType.CHAT_MESSAGE

    # The body is not in the event: the outbox and the stream outlive a moderator's removal, so
    # consumers read the message (and its current bodyStatus) by id when they need the text.
    messageId: str
    projectAddress: str
    senderUserId: str
    senderWalletAddress: str


class DmMessagePayload(Payload):
    event_type = EventType.DM_MESSAGE

    messageId: str
    threadId: str
    senderUserId: str
    recipientUserId: str


class MessageReportedPayload(Payload):
    event_type = EventType.MESSAGE_REPORTED

    reportId: str
    messageId: str
    reporterUserId: str
    # The author of the reported message (the audit subject).
    authorUserId: str


class ReportUpdatedPayload(Payload):
    event_type = EventType.REPORT_UPDATED

    reportId: str
    messageId: str
    reporterUserId: str
    authorUserId: str
    status: str
    previousStatus: str
    # The message's bodyStatus after the transition.
    bodyStatus: str


class MessageRemovedPayload(Payload):
    event_type = EventType.MESSAGE_REMOVED

    # A moderation admin actioned a report of the message: its body is removed.
    messageId: str
    kind: Literal["project_chat", "direct"]
    senderUserId: str
    reportId: str
    # Chat messages only (left out of the JSON for a direct message).
    projectAddress: str | None = None
    # Direct messages only (left out of the JSON for a chat message).
    threadId: str | None = None
    recipientUserId: str | None = None


class ModerationOffensePayload(Payload):
    event_type = EventType.MODERATION_OFFENSE

    offenseId: str
    userId: str
    context: str
    # Offenses counted in the window, this one included.
    windowTotal: int


class ModerationSuspendedPayload(Payload):
    event_type = EventType.MODERATION_SUSPENDED

    suspensionId: str
    userId: str
    suspendedUntil: str


class ModerationSuspensionLiftedPayload(Payload):
    event_type = EventType.MODERATION_SUSPENSION_LIFTED

    suspensionId: str
    userId: str
    liftedByUserId: str


class CategoryTagsChangedPayload(Payload):
    event_type = EventType.CATEGORY_TAGS_CHANGED

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
    event_type = EventType.VERIFIER_JOB_COMPLETED

    jobId: str
    projectAddress: str
    milestoneIndex: int
    policy: str
    passes: bool
    evidenceHash: str


# --- events as producers write them ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event as a producer writes it: a subject and the payload model of its type (the type
    is the model's). The database assigns ``id`` and ``created_at``."""

    subject: str
    payload: Payload

    @property
    def type(self) -> EventType:
        return self.payload.event_type

    def payload_json(self) -> str:
        """The payload as written to the outbox: compact JSON of the fields the producer set (a
        field left at its default, like a ``registry_changed`` removal's ``forkBlock``, is not
        written)."""
        return self.payload.model_dump_json(exclude_unset=True)


# --- events as consumers receive them -----------------------------------------------------------


class Event(BaseModel):
    """A committed event. ``id`` is its position (docs/events.md): it increases in commit order;
    consumers remember the last one they applied and dedupe by it."""

    model_config = ConfigDict(frozen=True)

    id: int
    type: str
    subject: str
    createdAt: datetime


class UnknownEvent(Event):
    """A type this code does not know yet (written by newer producers), or a payload its type's
    model refuses; the payload as it was sent."""

    payload: dict[str, JsonValue]


class ProjectCreated(Event):
    payload: ProjectCreatedPayload


class ProjectChanged(Event):
    payload: ProjectChangedPayload


class ProjectRemoved(Event):
    payload: ProjectRemovedPayload


class ChainReorg(Event):
    payload: ChainReorgPayload


class ProjectClaimed(Event):
    payload: ProjectClaimedPayload


class ProjectMetadataUpdated(Event):
    payload: ProjectMetadataUpdatedPayload


class BidDraftCreated(Event):
    payload: BidDraftCreatedPayload


class BidDraftUpdated(Event):
    payload: BidDraftUpdatedPayload


class ChallengeSubmissionCreated(Event):
    payload: ChallengeSubmissionCreatedPayload


class ChallengeSubmissionUpdated(Event):
    payload: ChallengeSubmissionUpdatedPayload


class DisputeEvidenceSubmitted(Event):
    payload: DisputeEvidenceSubmittedPayload


class ChatMessage(Event):
    payload: ChatMessagePayload


class DmMessage(Event):
    payload: DmMessagePayload


class MessageReported(Event):
    payload: MessageReportedPayload


class ReportUpdated(Event):
    payload: ReportUpdatedPayload


class MessageRemoved(Event):
    payload: MessageRemovedPayload


class ModerationOffense(Event):
    payload: ModerationOffensePayload


class ModerationSuspended(Event):
    payload: ModerationSuspendedPayload


class ModerationSuspensionLifted(Event):
    payload: ModerationSuspensionLiftedPayload


class CategoryTagsChanged(Event):
    payload: CategoryTagsChangedPayload


class VerifierJobCompleted(Event):
    payload: VerifierJobCompletedPayload


def payload_model(event_model: type[Event]) -> type[Payload]:
    """The payload model of a typed event class."""
    annotation = event_model.model_fields["payload"].annotation
    if not (isinstance(annotation, type) and issubclass(annotation, Payload)):
        raise TypeError(f"{event_model.__name__}.payload is not a Payload model")
    return annotation


# The one mapping between type names and models: each event class's payload model names its type.
EVENT_MODELS: dict[str, type[Event]] = {
    payload_model(model).event_type: model
    for model in (
        ProjectCreated,
        ProjectChanged,
        ProjectRemoved,
        ChainReorg,
        ProjectClaimed,
        ProjectMetadataUpdated,
        BidDraftCreated,
        BidDraftUpdated,
        ChallengeSubmissionCreated,
        ChallengeSubmissionUpdated,
        DisputeEvidenceSubmitted,
        ChatMessage,
        DmMessage,
        MessageReported,
        ReportUpdated,
        MessageRemoved,
        ModerationOffense,
        ModerationSuspended,
        ModerationSuspensionLifted,
        CategoryTagsChanged,
        VerifierJobCompleted,
    )
}
PAYLOAD_MODELS: dict[str, type[Payload]] = {
    name: payload_model(model) for name, model in EVENT_MODELS.items()
}


def parse_event(id: int, type: str, subject: str, created_at: object, payload: object) -> Event:
    """The typed event for a stored or streamed one (``UnknownEvent`` for an unknown type);
    ``created_at`` a datetime or ISO 8601 text. Raises ``ValidationError`` for a payload its
    type's model refuses."""
    model = EVENT_MODELS.get(type, UnknownEvent)
    return model.model_validate(
        {"id": id, "type": type, "subject": subject, "createdAt": created_at, "payload": payload}
    )
