"""Stream tickets: a short-lived, single-use credential that opens ``GET /v1/stream`` without
headers, for a browser's native ``EventSource`` (it cannot send ``Authorization`` or
``x-agent-api-key``; docs/stream.md, "From a browser").

``POST /v1/stream/tickets`` (a session or an agent key) issues one: 32 random bytes, URL-safe
base64 (43 characters), bound to the principal that asked: its user, whether a session or a key
authenticated it, its e-mail flag, the session's expiry and the agent key's id, so the stream
opened with it ends when that session expires or that key is revoked, as a stream opened with
the headers does. ``GET /v1/stream?ticket=...`` redeems it: the stream opens as that principal.

Stored in Redis, not PostgreSQL: a ticket lives a minute (``stream_ticket_ttl_seconds``), so
``SET ... EX`` expires it without a sweeper, and ``GETDEL`` reads and deletes it in one atomic
step, so two redemptions racing on two frontends cannot both win. Every frontend shares the
Redis, so a ticket issued by one is redeemed by any other. Losing Redis loses the outstanding
tickets, which costs a client one more ``POST`` (the stream needs Redis for its slots anyway).
The key is the SHA-256 of the ticket, so what Redis holds (a dump, ``MONITOR``) cannot be
redeemed.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
import uuid
from dataclasses import dataclass

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict

from marketplace.auth import Principal, PrincipalKind
from marketplace.errors import Unauthorized

KEY_PREFIX = "marketplace:stream:ticket:"
TICKET_BYTES = 32
# Longer than any ticket (43 characters) and shorter than anything worth hashing.
TICKET_MAX_LENGTH = 64
INVALID_TICKET = "invalid, used or expired stream ticket; ask for a new one"


class _Stored(BaseModel):
    """What Redis keeps under a ticket: the principal it was issued to."""

    model_config = ConfigDict(frozen=True)

    userId: uuid.UUID
    kind: PrincipalKind
    emailVerified: bool
    apiKeyId: uuid.UUID | None = None
    sessionExpiresAt: float | None = None


@dataclass(frozen=True)
class IssuedTicket:
    ticket: str
    expires_at: float  # Unix seconds


def ticket_key(ticket: str) -> str:
    return KEY_PREFIX + hashlib.sha256(ticket.encode()).hexdigest()


class StreamTickets:
    def __init__(self, redis: aioredis.Redis, *, ttl_seconds: int) -> None:
        self.redis = redis
        self.ttl_seconds = ttl_seconds

    async def issue(self, principal: Principal) -> IssuedTicket:
        """A new ticket for ``principal``, valid ``ttl_seconds`` (never past the session's own
        expiry: a ticket cannot outlive what it was issued for)."""
        ticket = base64.urlsafe_b64encode(secrets.token_bytes(TICKET_BYTES)).rstrip(b"=").decode()
        now = time.time()
        expires_at = now + self.ttl_seconds
        if principal.session_expires_at is not None:
            expires_at = min(expires_at, principal.session_expires_at)
        stored = _Stored(
            userId=principal.user_id,
            kind=principal.kind,
            emailVerified=principal.email_verified,
            apiKeyId=principal.api_key_id,
            sessionExpiresAt=principal.session_expires_at,
        )
        lifetime_ms = max(1, int((expires_at - now) * 1000))
        await self.redis.set(ticket_key(ticket), stored.model_dump_json(), px=lifetime_ms)
        return IssuedTicket(ticket, expires_at)

    async def redeem(self, ticket: str) -> Principal:
        """The principal of ``ticket``, which is spent by this call; 401 ``unauthorized`` for a
        ticket that was used, has expired or was never issued."""
        if not ticket or len(ticket) > TICKET_MAX_LENGTH:
            raise Unauthorized(INVALID_TICKET)
        raw = await self.redis.getdel(ticket_key(ticket))
        if raw is None:
            raise Unauthorized(INVALID_TICKET)
        stored = _Stored.model_validate_json(raw)
        if stored.sessionExpiresAt is not None and stored.sessionExpiresAt <= time.time():
            raise Unauthorized(INVALID_TICKET)
        return Principal(
            user_id=stored.userId,
            kind=stored.kind,
            email_verified=stored.emailVerified,
            api_key_id=stored.apiKeyId,
            session_expires_at=stored.sessionExpiresAt,
        )
