"""Who may see an event on the live stream: one audience rule per streamed event type.

A rule answers, from the CURRENT state, the set of user ids allowed to see one event. The stream
hub calls it once per event and frontend when the event is fanned out, and once per event a
reconnecting client replays, so authorization is re-checked for every event: a worker deselected
a minute ago no longer receives the project's events, whatever they received before.

Only registered types are streamed; every other event stays internal. Adding a type to the
stream is one function here (docs/stream.md, "Adding an event type"): decorate an ``async def
rule(conn, event) -> set[uuid.UUID]`` with ``@audience("<type>")``, keeping its SQL in a
repository. The stream capability's ``consumes`` lists the same types (a test keeps them equal).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from marketplace.events.types import (
    ChatMessage,
    DmMessage,
    Event,
    EventType,
    MessageRemoved,
    ReportUpdated,
)
from marketplace.storage.pool import Conn
from marketplace.storage.repositories import stream_audience as repo

AudienceRule = Callable[[Conn, Event], Awaitable[set[uuid.UUID]]]

RULES: dict[str, AudienceRule] = {}


def audience(event_type: str) -> Callable[[AudienceRule], AudienceRule]:
    """Register ``rule`` as the audience of ``event_type`` (one rule per type)."""

    def register(rule: AudienceRule) -> AudienceRule:
        if event_type in RULES:
            raise ValueError(f"{event_type!r} already has an audience rule")
        RULES[event_type] = rule
        return rule

    return register


def streamed_types() -> frozenset[str]:
    return frozenset(RULES)


async def audience_of(conn: Conn, event: Event) -> set[uuid.UUID]:
    """The users who may see ``event`` now (empty for a type that is not streamed)."""
    rule = RULES.get(event.type)
    return await rule(conn, event) if rule is not None else set()


# --- the rules ----------------------------------------------------------------------------------


@audience(EventType.PROJECT_CHANGED)
async def project_parties(conn: Conn, event: Event) -> set[uuid.UUID]:
    """The project's owner and its selected worker: users with an active wallet link to either
    wallet now (the subject is the project address)."""
    return await repo.project_party_users(conn, event.subject)


@audience(EventType.CHAT_MESSAGE)
async def chat_parties(conn: Conn, event: Event) -> set[uuid.UUID]:
    """The project's owner and selected worker, as for ``project.changed``."""
    if not isinstance(event, ChatMessage):  # a payload its model refused: show it to nobody
        return set()
    return await repo.project_party_users(conn, event.payload.projectAddress)


@audience(EventType.DM_MESSAGE)
async def dm_participants(conn: Conn, event: Event) -> set[uuid.UUID]:
    """The thread's two participants, except a recipient who blocks the sender now."""
    if not isinstance(event, DmMessage):
        return set()
    return await _dm_pair(conn, event.payload.senderUserId, event.payload.recipientUserId)


async def _dm_pair(conn: Conn, sender_id: str, recipient_id: str) -> set[uuid.UUID]:
    try:
        sender, recipient = uuid.UUID(sender_id), uuid.UUID(recipient_id)
    except ValueError:  # a payload no producer writes: show it to nobody rather than raise
        return set()
    if await repo.blocks(conn, recipient, sender):
        return {sender}
    return {sender, recipient}


@audience(EventType.MESSAGE_REMOVED)
async def removed_message_audience(conn: Conn, event: Event) -> set[uuid.UUID]:
    """The audience of the message's own event, now: the project's owner and selected worker
    for a chat message (as ``chat.message``), the thread's two participants except a recipient
    who blocks the sender for a direct one (as ``dm.message``)."""
    if not isinstance(event, MessageRemoved):
        return set()
    payload = event.payload
    if payload.kind == "direct" and payload.recipientUserId is not None:
        return await _dm_pair(conn, payload.senderUserId, payload.recipientUserId)
    if payload.kind == "project_chat" and payload.projectAddress is not None:
        return await repo.project_party_users(conn, payload.projectAddress)
    return set()


@audience(EventType.REPORT_UPDATED)
async def reporter(conn: Conn, event: Event) -> set[uuid.UUID]:
    """The user who reported the message (not its author: who reported it is not theirs to
    know)."""
    if not isinstance(event, ReportUpdated):
        return set()
    return {uuid.UUID(event.payload.reporterUserId)}
