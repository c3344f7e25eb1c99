"""Remembering who signed in: the users of verified session tokens, written in batches.

A user is the ``sub`` of a verified session token, and the ``users`` row keeps what the newest
token said: the e-mail flag, the verified address (the ``email`` claim while ``email_verified``
is true) and the token's ``iat``. Authentication only calls :meth:`SessionRecorder.record`, which
is in-memory: requests never wait for this write. A background task writes the pending records
with one statement per batch (see ``RECORD_SESSIONS`` in the users repository) every
``interval_ms``, as soon as ``max_rows`` are waiting, and once more on shutdown.

Coalescing. At most one record per user waits: a token at least as new (``iat``) replaces the
pending one, an older one is dropped. The recorder also remembers (bounded, least recently seen
dropped first) what it last wrote per user, so the token a session sends with every request is
written once, not once per flush interval. The statement itself keeps only a token at least as
new as the stored one, so several frontends may write in any order.

Who needs the row synchronously, and why this is still correct:

* **Foreign keys to ``users``** (wallet links and their challenges, usernames, agent keys, legal
  acceptances, create-intents, project claims, off-chain records written by shard actors): only
  requests with an unsafe method write them, and the router calls :meth:`ensure` for the caller
  before such a request's guards and handler run. ``ensure`` returns at once when nothing of the
  user is pending (the row was written before: the only way a user id gets here is through a
  recorded session, or an agent key whose row references it); otherwise it writes the pending
  batch now. A flush that failed keeps its records pending, so ``ensure`` retries them and fails
  the request (503) rather than let a foreign key fail.
* **Rows referencing another user** (a message's recipient, a block, a mute, a report): that
  user's row exists once their session was written, at once if they ever made an unsafe request
  and otherwise within the flush interval of the frontend that saw them. Handlers that take
  another user's id must answer a missing row as an unknown user, not let the foreign key fail.
* **The verified-email guard** reads ``Principal.email_verified``, which comes from the token of
  the request itself, not from the row.
* **Permission flags** (``moderation_admin``, ``verifier_admin``) are set by operators, never by
  this recorder, and a missing row reads as "no flags".
* **Agent keys act with the stored e-mail flag** (the newest session's). The key resolver calls
  :meth:`ensure` for the key's user, so a session seen by this process a moment before counts at
  once; one seen by another frontend counts within that frontend's flush interval. That lag is
  well inside what tokens already allow: a session token keeps its own flag until it expires.

Users are never deleted, which the "nothing pending means the row exists" reasoning relies on.
Records still pending when the process dies are lost; the user's next request records them again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from marketplace.aio import FlushLoop
from marketplace.metrics import (
    SESSION_RECORD_BATCH_SIZE,
    SESSION_RECORDS_DROPPED,
    SESSION_RECORDS_PENDING,
    SESSIONS_RECORDED,
)
from marketplace.storage.repositories import users as repo

log = logging.getLogger(__name__)

# Failures that are worth retrying later; anything else is a bug and is raised.
_TRANSIENT = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


@dataclass(frozen=True)
class SessionRecord:
    user_id: uuid.UUID
    email_verified: bool
    # Only ever set together with email_verified (record() drops it otherwise).
    email: str | None
    issued_at: int

    def row(self) -> repo.SessionRow:
        return (self.user_id, self.email_verified, self.email, self.issued_at)


class SessionRecorder:
    """The batched writer of session users, one per frontend process (see the module docstring).

    ``pool`` is looked up at write time: the pool is created when the app starts, after setup.
    """

    def __init__(
        self,
        pool: Callable[[], asyncpg.Pool],
        *,
        interval_ms: int,
        max_rows: int,
        max_pending: int | None = None,
        max_remembered: int = 50_000,
    ) -> None:
        self._pool = pool
        self.interval = interval_ms / 1000
        self.max_rows = max_rows
        self.max_pending = max_pending or max(10_000, 20 * max_rows)
        self.max_remembered = max_remembered
        self._pending: OrderedDict[uuid.UUID, SessionRecord] = OrderedDict()
        # The batch being written right now, by user: ensure() must wait for it.
        self._writing: dict[uuid.UUID, SessionRecord] = {}
        self._written: OrderedDict[uuid.UUID, SessionRecord] = OrderedDict()
        self._lock = asyncio.Lock()
        self._loop = FlushLoop(self.flush, self.interval, name="session-recorder", log=log)
        self.dropped = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def record(
        self, user_id: uuid.UUID, *, email_verified: bool, email: str | None, issued_at: int
    ) -> None:
        """Remember what a verified session token says; no I/O."""
        record = SessionRecord(
            user_id, email_verified, email if email_verified else None, issued_at
        )
        known = (
            self._pending.get(user_id) or self._writing.get(user_id) or self._written.get(user_id)
        )
        if known is not None and (record == known or record.issued_at < known.issued_at):
            if user_id in self._written:
                self._written.move_to_end(user_id)
            return
        self._pending[user_id] = record
        self._pending.move_to_end(user_id)
        self._trim()
        SESSION_RECORDS_PENDING.set(len(self._pending))
        if len(self._pending) >= self.max_rows:
            self._loop.wake()

    def _trim(self) -> None:
        # Only while Postgres is unreachable for long: a dropped user is recorded again by their
        # next request, and ensure() finds that fresh record pending.
        excess = len(self._pending) - self.max_pending
        if excess > 0:
            for _ in range(excess):
                self._pending.popitem(last=False)
            self.dropped += excess
            SESSION_RECORDS_DROPPED.inc(excess)
            log.warning(
                "session recorder queue full; dropped oldest records", extra={"rows": excess}
            )

    async def ensure(self, user_id: uuid.UUID) -> bool:
        """Make the user's recorded session durable before the caller depends on the row.

        Returns False at once when nothing of the user is pending or being written (no I/O);
        otherwise waits for the batch in flight and, if the user's record is still pending,
        writes one batch led by it (one statement, whatever the queue's length), raising if
        Postgres refuses; returns True.
        """
        if user_id not in self._pending and user_id not in self._writing:
            return False
        async with self._lock:
            if user_id in self._pending:
                self._pending.move_to_end(user_id, last=False)
                await self._write_batch(retry_later=False)
        return True

    async def flush(self) -> int:
        """Write everything pending now; return the number of records written."""
        async with self._lock:
            return await self._write_pending(retry_later=True)

    async def _write_pending(self, *, retry_later: bool) -> int:
        """Write the pending records in batches of ``max_rows``; the caller holds the lock."""
        written = 0
        while self._pending:
            count = await self._write_batch(retry_later=retry_later)
            if not count:
                break
            written += count
        return written

    async def _write_batch(self, *, retry_later: bool) -> int:
        """Write the oldest ``max_rows`` pending records with one statement; 0 if that failed
        and ``retry_later`` (the records stay pending). The caller holds the lock."""
        size = min(self.max_rows, len(self._pending))
        batch = [self._pending.popitem(last=False)[1] for _ in range(size)]
        self._writing = {record.user_id: record for record in batch}
        try:
            await repo.record_sessions(self._pool(), [record.row() for record in batch])
        except _TRANSIENT as exc:
            self._restore(batch)
            if not retry_later:
                raise
            log.warning("session record flush failed; will retry: %r", exc)
            return 0
        except BaseException:
            # Cancelled mid-write (shutdown): keep the records for the final flush.
            self._restore(batch)
            raise
        finally:
            self._writing = {}
            SESSION_RECORDS_PENDING.set(len(self._pending))
        for record in batch:
            self._written[record.user_id] = record
            self._written.move_to_end(record.user_id)
        while len(self._written) > self.max_remembered:
            self._written.popitem(last=False)
        SESSIONS_RECORDED.inc(len(batch))
        SESSION_RECORD_BATCH_SIZE.observe(len(batch))
        return len(batch)

    def _restore(self, batch: list[SessionRecord]) -> None:
        # Back in front of the queue, unless a newer token of the same user arrived meanwhile.
        for record in reversed(batch):
            newer = self._pending.get(record.user_id)
            if newer is None or newer.issued_at < record.issued_at:
                self._pending[record.user_id] = record
                self._pending.move_to_end(record.user_id, last=False)
        self._trim()

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        """Stop the background task and write what is still pending."""
        await self._loop.stop()
        async with self._lock:
            try:
                await self._write_pending(retry_later=False)
            except _TRANSIENT:
                log.exception(
                    "session records lost at shutdown", extra={"rows": len(self._pending)}
                )
