"""Who gets what: from an outbox event to the notification it calls for, if any
(docs/notifications.md, "Who gets what").

- ``bid_draft.created`` -> ``bid_draft``: the user actively linked to the project's owner
  wallet;
- ``dispute_evidence.submitted`` -> ``dispute_evidence``: the other party (evidence of the
  owner: the user linked to the selected worker wallet; of the worker: the owner's);
- ``chat.message`` -> ``project_chat_message``: the other party (sent from the owner wallet:
  the selected worker's user; from the selected worker wallet: the owner's);
- ``dm.message`` -> ``direct_message``: ``recipientUserId``.

Recipients are resolved when the consumer reads the event, from the state at that moment
(active wallet links, the selected worker). No notification (and no delivery row) when:

- the event is of another type (``bid_draft.updated`` included: only a draft's creation mails);
- the project is unknown (removed by a reorg) or has no selected worker where one is needed;
- the recipient wallet has no active wallet link now (nobody to tell);
- the chat sender's wallet is no longer a party (the worker was deselected since);
- the recipient is the acting user (one user linked to both sides).

The payload's ``userId`` / ``senderUserId`` is the acting user: the one a recipient may have
muted or blocked (docs/notifications.md, suppression).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from marketplace.events.types import (
    BidDraftCreated,
    ChatMessage,
    DisputeEvidenceSubmitted,
    DmMessage,
    Event,
    EventType,
)
from marketplace.notifications.email import strip_bidi
from marketplace.notifications.links import project_chat_link, project_link, thread_link
from marketplace.notifications.models import NotificationEventType
from marketplace.storage.pool import Conn
from marketplace.storage.repositories import notification_deliveries as repo

# The outbox types the pipeline reads (its capability's `consumes`).
CONSUMED_TYPES: tuple[str, ...] = (
    EventType.BID_DRAFT_CREATED,
    EventType.DISPUTE_EVIDENCE_SUBMITTED,
    EventType.CHAT_MESSAGE,
    EventType.DM_MESSAGE,
)
SUBJECT_MAX = 300


@dataclass(frozen=True)
class Notification:
    """One delivery an event calls for, before suppression and the rate limit."""

    event_id: int
    event_type: NotificationEventType
    recipient_user_id: uuid.UUID
    # The acting user (bidder, evidence submitter, message sender).
    sender_user_id: uuid.UUID | None
    subject: str
    # The API path of what the e-mail links to (links.link_url makes the URL the e-mail shows).
    link_path: str
    # The chat or direct message whose current text previews in the e-mail (None: no preview).
    preview_message_id: uuid.UUID | None = None


def _subject(text: str) -> str:
    return text if len(text) <= SUBJECT_MAX else text[: SUBJECT_MAX - 1] + "…"


def _project_name(address: str, title: str | None) -> str:
    # A name a user chose goes into the subject without bidirectional-text controls: a
    # right-to-left override in a title would otherwise reorder the rest of the subject.
    title = strip_bidi(title) if title else None
    return f"“{title}”" if title and title.strip() else f"project {address.lower()}"


def _user_name(name: str | None) -> str:
    name = strip_bidi(name) if name else None
    return name if name and name.strip() else "a marketplace user"


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class _Lookups:
    """What a batch of events needs from the database, read in one statement per kind."""

    parties: dict[str, repo.ProjectParties]
    usernames: dict[uuid.UUID, str]


async def resolve_many(conn: Conn, events: Sequence[Event]) -> list[Notification]:
    """The notifications ``events`` call for, in event order (usually one per event, none for an
    event without a recipient). The projects' parties and the senders' usernames of the whole
    batch are read in one statement each: the consumer reads hundreds of events a batch under
    load, and a query per event made it the frontend's largest cost per chat message
    (bench/messaging.py)."""
    addresses = [
        event.payload.projectAddress
        for event in events
        if isinstance(event, BidDraftCreated | DisputeEvidenceSubmitted | ChatMessage)
    ]
    senders = [
        sender
        for event in events
        if isinstance(event, DmMessage) and (sender := _uuid(event.payload.senderUserId))
    ]
    lookups = _Lookups(
        await repo.project_parties_many(conn, addresses), await repo.usernames(conn, senders)
    )
    notifications = []
    for event in events:
        notification = _notification(event, lookups)
        if (
            notification is not None
            and notification.recipient_user_id != notification.sender_user_id
        ):
            notifications.append(notification)
    return notifications


def _notification(event: Event, lookups: _Lookups) -> Notification | None:
    if isinstance(event, BidDraftCreated):
        return _bid_draft(event, lookups)
    if isinstance(event, DisputeEvidenceSubmitted):
        return _dispute_evidence(event, lookups)
    if isinstance(event, ChatMessage):
        return _chat_message(event, lookups)
    if isinstance(event, DmMessage):
        return _direct_message(event, lookups)
    return None


def _parties(lookups: _Lookups, project_address: str) -> repo.ProjectParties | None:
    return lookups.parties.get(project_address.lower())


def _bid_draft(event: BidDraftCreated, lookups: _Lookups) -> Notification | None:
    payload = event.payload
    parties = _parties(lookups, payload.projectAddress)
    if parties is None or parties.owner_user_id is None:
        return None
    return Notification(
        event_id=event.id,
        event_type=NotificationEventType.BID_DRAFT,
        recipient_user_id=parties.owner_user_id,
        sender_user_id=_uuid(payload.userId),
        subject=_subject(
            f"New bid draft on {_project_name(payload.projectAddress, parties.title)}"
        ),
        link_path=project_link(payload.projectAddress),
    )


def _dispute_evidence(event: DisputeEvidenceSubmitted, lookups: _Lookups) -> Notification | None:
    payload = event.payload
    parties = _parties(lookups, payload.projectAddress)
    if parties is None:
        return None
    if payload.submitterRole == "owner":
        recipient = parties.worker_user_id
    elif payload.submitterRole == "worker":
        recipient = parties.owner_user_id
    else:
        return None
    if recipient is None:
        return None
    project = _project_name(payload.projectAddress, parties.title)
    return Notification(
        event_id=event.id,
        event_type=NotificationEventType.DISPUTE_EVIDENCE,
        recipient_user_id=recipient,
        sender_user_id=_uuid(payload.userId),
        subject=_subject(
            f"Dispute evidence submitted on {project}, milestone {payload.milestoneIndex}"
        ),
        link_path=project_link(payload.projectAddress),
    )


def _chat_message(event: ChatMessage, lookups: _Lookups) -> Notification | None:
    payload = event.payload
    parties = _parties(lookups, payload.projectAddress)
    if parties is None or parties.selected_builder_address is None:
        return None
    sender_wallet = payload.senderWalletAddress.lower()
    if sender_wallet == parties.owner_address:
        recipient = parties.worker_user_id
    elif sender_wallet == parties.selected_builder_address:
        recipient = parties.owner_user_id
    else:
        return None
    if recipient is None:
        return None
    project = _project_name(payload.projectAddress, parties.title)
    return Notification(
        event_id=event.id,
        event_type=NotificationEventType.PROJECT_CHAT_MESSAGE,
        recipient_user_id=recipient,
        sender_user_id=_uuid(payload.senderUserId),
        subject=_subject(f"New message in the chat of {project}"),
        link_path=project_chat_link(payload.projectAddress),
        preview_message_id=_uuid(payload.messageId),
    )


def _direct_message(event: DmMessage, lookups: _Lookups) -> Notification | None:
    payload = event.payload
    recipient = _uuid(payload.recipientUserId)
    sender = _uuid(payload.senderUserId)
    if recipient is None:
        return None
    name = lookups.usernames.get(sender) if sender is not None else None
    return Notification(
        event_id=event.id,
        event_type=NotificationEventType.DIRECT_MESSAGE,
        recipient_user_id=recipient,
        sender_user_id=sender,
        subject=_subject(f"New direct message from {_user_name(name)}"),
        link_path=thread_link(payload.threadId),
        preview_message_id=_uuid(payload.messageId),
    )
