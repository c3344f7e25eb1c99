"""Agent API keys: issue, resolve, rotate, revoke, and the batched usage log.

Key format: ``<prefix><body><check>``, e.g. ``mkt_live_`` + 43 base62 characters encoding 32
random bytes from :mod:`secrets` + 6 base62 characters of the CRC-32 of everything before them.
The fixed prefix lets secret scanners recognise leaked keys; the checksum lets the resolver
refuse a mistyped or made-up key without touching the database. Only the SHA-256 of the whole key
is stored (a 256-bit random secret needs no slow hash); the resolver looks the hash up by primary
key. There is no positive cache: every request does that one indexed lookup, so a revocation or
an expired rotation grace period takes effect on every frontend at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import secrets
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg

from marketplace.aio import FlushLoop
from marketplace.auth import Principal, PrincipalKind, ResolvedApiKey
from marketplace.errors import Conflict, Forbidden, NotFound
from marketplace.identity.session_recorder import SessionRecorder
from marketplace.pagination import BIGINT_MAX, CursorKind, keyset_page
from marketplace.storage.pool import Connection
from marketplace.storage.repositories import api_keys as repo

log = logging.getLogger(__name__)

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
SECRET_BYTES = 32
BODY_CHARS = 43  # 62**43 > 2**256
CHECK_CHARS = 6  # 62**6 > 2**32
DISPLAY_BODY_CHARS = 4
_KEY_RE = re.compile(
    rf"^(?P<prefix>[a-z][a-z0-9_]*_)(?P<body>[0-9A-Za-z]{{{BODY_CHARS}}})"
    rf"(?P<check>[0-9A-Za-z]{{{CHECK_CHARS}}})$"
)
# Longest key any prefix allowed by the settings pattern could produce; longer input is refused
# before the regex runs.
MAX_KEY_LENGTH = 128


class ApiKeyNotFound(NotFound):
    code = "api_key_not_found"
    default_message = "no such API key"


class ApiKeyRevoked(Conflict):
    code = "api_key_revoked"
    default_message = "this API key is revoked"


class ApiKeyLimitReached(Conflict):
    code = "api_key_limit_reached"
    default_message = "too many active API keys; revoke one first"


# --- key format -----------------------------------------------------------------------------


def _base62(value: int, width: int) -> str:
    chars = []
    for _ in range(width):
        value, digit = divmod(value, 62)
        chars.append(_ALPHABET[digit])
    if value:
        raise ValueError("value does not fit the width")
    return "".join(reversed(chars))


def _checksum(text: str) -> str:
    return _base62(zlib.crc32(text.encode()), CHECK_CHARS)


def generate_key(prefix: str) -> str:
    body = _base62(int.from_bytes(secrets.token_bytes(SECRET_BYTES), "big"), BODY_CHARS)
    return f"{prefix}{body}{_checksum(prefix + body)}"


def is_well_formed(key: str) -> bool:
    """Shape and checksum only: no database, constant work per key."""
    if len(key) > MAX_KEY_LENGTH:
        return False
    match = _KEY_RE.match(key)
    if match is None:
        return False
    return secrets.compare_digest(match["check"], _checksum(match["prefix"] + match["body"]))


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def display_parts(key: str) -> tuple[str, str]:
    """(keyPrefix, keyLast4) kept for display: the prefix plus a few characters, the last 4."""
    match = _KEY_RE.match(key)
    assert match is not None
    return match["prefix"] + match["body"][:DISPLAY_BODY_CHARS], key[-4:]


# --- resolving (spec section 5) -------------------------------------------------------------


class DatabaseApiKeyResolver:
    """The :class:`marketplace.auth.ApiKeyResolver` backed by ``api_key_secrets``.

    ``pool`` is looked up at call time (the pool is created when the app starts, after setup).
    A key acts with its user's stored e-mail flag; when this process still holds a newer session
    of that user, it is written first and the key read again, so it counts at once.
    """

    def __init__(self, pool: Callable[[], asyncpg.Pool], sessions: SessionRecorder) -> None:
        self._pool = pool
        self._sessions = sessions

    async def resolve(self, secret: str) -> ResolvedApiKey | None:
        if not is_well_formed(secret):
            return None
        key_hash = hash_key(secret)
        row = await repo.resolve_secret_hash(self._pool(), key_hash)
        if row is not None and await self._sessions.ensure(row.user_id):
            row = await repo.resolve_secret_hash(self._pool(), key_hash)
        if row is None:
            return None
        return ResolvedApiKey(
            key_id=row.key_id, user_id=row.user_id, email_verified=row.email_verified
        )


# --- operations -----------------------------------------------------------------------------


def _owned(row: repo.ApiKeyRow | None, user_id: uuid.UUID) -> repo.ApiKeyRow:
    # Someone else's key answers exactly like a key that does not exist: a key id must not be
    # confirmable by anyone but its owner.
    if row is None or row.user_id != user_id:
        raise ApiKeyNotFound()
    return row


async def create_key(
    pool: asyncpg.Pool, *, user_id: uuid.UUID, name: str, prefix: str, max_active: int
) -> tuple[repo.ApiKeyRow, str]:
    secret = generate_key(prefix)
    key_prefix, last4 = display_parts(secret)
    row = await repo.create_key(
        pool,
        key_id=uuid.uuid4(),
        user_id=user_id,
        name=name,
        key_prefix=key_prefix,
        key_last4=last4,
        secret_hash=hash_key(secret),
        max_active=max_active,
    )
    if row is None:
        raise ApiKeyLimitReached(f"at most {max_active} active API keys per user")
    return row, secret


async def get_owned_key(
    conn: asyncpg.Pool | Connection, key_id: uuid.UUID, user_id: uuid.UUID
) -> repo.ApiKeyRow:
    return _owned(await repo.get_key(conn, key_id), user_id)


@dataclass(frozen=True)
class Rotation:
    row: repo.ApiKeyRow
    secret: str
    grace_expires_at: datetime | None


def authorize_rotation(principal: Principal, key_id: uuid.UUID) -> None:
    """Spec rule 5.4: an agent key may rotate only itself; a session may rotate any own key."""
    if principal.kind is PrincipalKind.AGENT_KEY and principal.api_key_id != key_id:
        raise Forbidden("an agent API key can only rotate itself")


async def rotate_key(
    pool: asyncpg.Pool,
    *,
    principal: Principal,
    key_id: uuid.UUID,
    grace_seconds: int,
    prefix: str,
) -> Rotation:
    authorize_rotation(principal, key_id)
    secret = generate_key(prefix)
    key_prefix, last4 = display_parts(secret)
    async with pool.acquire() as conn, conn.transaction():
        current = _owned(await repo.lock_key(conn, key_id), principal.user_id)
        if current.revoked_at is not None:
            raise ApiKeyRevoked()
        row, valid_until = await repo.rotate_secret(
            conn,
            key_id,
            grace_seconds=grace_seconds,
            secret_hash=hash_key(secret),
            key_prefix=key_prefix,
            key_last4=last4,
        )
    return Rotation(row, secret, valid_until if grace_seconds > 0 else None)


async def revoke_key(
    pool: asyncpg.Pool, *, user_id: uuid.UUID, key_id: uuid.UUID
) -> repo.ApiKeyRow:
    """Idempotent: revoking a revoked key returns it with its original ``revokedAt``."""
    await get_owned_key(pool, key_id, user_id)
    row = await repo.revoke_key(pool, key_id)
    assert row is not None
    return row


# --- usage audit ----------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The position (occurred_at in microseconds since the epoch, usage_id) of a page's last row.
# Bounded by the last representable datetime, so decoding can never overflow.
_MAX_MICROS = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
USAGE_CURSOR = CursorKind("u1", (_MAX_MICROS, BIGINT_MAX))


def _usage_position(row: repo.UsageEntryRow) -> tuple[int, int]:
    return (row.occurred_at - _EPOCH) // timedelta(microseconds=1), row.usage_id


async def usage_page(
    pool: asyncpg.Pool, key_id: uuid.UUID, *, limit: int, cursor: str | None
) -> tuple[list[repo.UsageEntryRow], str | None]:
    position = USAGE_CURSOR.position(cursor)
    before = None
    if position is not None:
        micros, usage_id = position
        before = (_EPOCH + timedelta(microseconds=micros), usage_id)
    rows = await repo.usage_page(pool, key_id, before=before, limit=limit + 1)
    return keyset_page(rows, limit, USAGE_CURSOR, _usage_position)


class UsageRecorder:
    """In-process buffer of agent-key requests, written in batches off the request path.

    :meth:`add` only appends (no I/O). A background task writes the buffer with one statement
    every ``interval_ms`` or as soon as ``max_rows`` are waiting, and once more on shutdown. If
    Postgres is unavailable the batch is put back and retried; the buffer is bounded
    (``max_buffer`` rows, oldest dropped first and counted in :attr:`dropped`) so an outage
    cannot exhaust memory. Rows not yet flushed when the process dies are lost: the log is an
    audit aid, not a billing record.
    """

    def __init__(
        self,
        pool: Callable[[], asyncpg.Pool],
        *,
        interval_ms: int,
        max_rows: int,
        max_buffer: int | None = None,
    ) -> None:
        self._pool = pool
        self.interval = interval_ms / 1000
        self.max_rows = max_rows
        self.max_buffer = max_buffer or max(10_000, 20 * max_rows)
        self._buffer: list[repo.UsageRow] = []
        self._lock = asyncio.Lock()
        self._loop = FlushLoop(self.flush, self.interval, name="api-key-usage", log=log)
        self.dropped = 0

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def add(self, row: repo.UsageRow) -> None:
        self._buffer.append(row)
        self._trim()
        if len(self._buffer) >= self.max_rows:
            self._loop.wake()

    def _trim(self) -> None:
        excess = len(self._buffer) - self.max_buffer
        if excess > 0:
            del self._buffer[:excess]
            self.dropped += excess
            log.warning("api key usage buffer full; dropped oldest rows", extra={"rows": excess})

    async def flush(self) -> int:
        """Write everything buffered now; return the number of rows written."""
        async with self._lock:
            if not self._buffer:
                return 0
            batch, self._buffer = self._buffer, []
            try:
                await repo.insert_usage_batch(self._pool(), batch)
            except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError) as exc:
                log.warning("api key usage flush failed; will retry: %r", exc)
                self._buffer[:0] = batch
                self._trim()
                return 0
            except BaseException:
                # Cancelled mid-write (shutdown): keep the rows for the final flush.
                self._buffer[:0] = batch
                raise
            return len(batch)

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        await self.flush()
