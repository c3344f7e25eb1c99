"""One active instance among all processes, woken by outbox commits.

The event relay and the notifications consumer follow the outbox the same way: each runs in
every frontend, exactly one is active (a session-level advisory lock held on a dedicated
connection, released when that connection closes, so a dead frontend's lock goes with it), the
others stand by and try again now and then; the active one works whenever a commit NOTIFYs
one of its ``wake_channels`` (``events.WAKE_CHANNEL``: a positioner that positioned events; the
relay also ``events.RELAY_WAKE_CHANNEL``: a producer that found it asleep) or its poll interval
passes; a failure closes the connection (and the lock) and the loop
starts over after a backoff. Subclasses say which lock, what one
round of work is, and what to do between rounds.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import os
import socket
from typing import Any

import asyncpg

from marketplace.aio import raise_if_cancelling, wait_event
from marketplace.storage.pool import connect
from marketplace.storage.repositories import events as events_repo

MAX_BACKOFF_SECONDS = 10.0


class OutboxLeader(abc.ABC):
    """Subclasses implement :meth:`try_lock` and :meth:`work` (and may add :meth:`between`)."""

    # Names the role in logs and in pg_stat_activity ("marketplace <role> <host>:<pid>").
    role: str = "outbox follower"
    # What wakes it (LISTEN): positioners' NOTIFYs; the relay adds the producers' channel.
    wake_channels: tuple[str, ...] = (events_repo.WAKE_CHANNEL,)

    def __init__(
        self, dsn: str, *, poll_interval: float, standby_interval: float, log: logging.Logger
    ) -> None:
        self.dsn = dsn
        self.poll_interval = poll_interval
        self.standby_interval = standby_interval
        self.log = log
        self.active = False
        self.activations = 0  # times this instance became the active one

    @classmethod
    def application_name(cls) -> str:
        return f"marketplace {cls.role} {socket.gethostname()}:{os.getpid()}"

    @abc.abstractmethod
    async def try_lock(self, conn: asyncpg.Connection) -> bool:
        """Take the role's session-level lock on ``conn`` if nobody holds it."""

    @abc.abstractmethod
    async def work(self, conn: asyncpg.Connection) -> bool:
        """One round of work; True to go again at once (more is waiting)."""

    async def between(self, conn: asyncpg.Connection) -> None:  # noqa: B027 - an optional hook
        """Called after a round that left nothing waiting, before waiting for a wake-up."""

    async def wait_for_work(self, conn: asyncpg.Connection, wake: asyncio.Event) -> None:
        """Wait for a NOTIFY (``wake``) or the poll interval (the relay waits its own way)."""
        with contextlib.suppress(TimeoutError):
            await wait_event(wake, self.poll_interval)

    @staticmethod
    async def after_batch(read: int, batch_size: int, gather_seconds: float) -> bool:
        """What :meth:`work` answers after reading ``read`` events in batches of ``batch_size``:
        a full batch goes again at once; after a partial one, events gather ``gather_seconds``
        first. Every producing commit wakes the leader, so under a steady stream of commits
        this makes batches grow instead of costing a round per commit, while an event that finds
        the leader idle still goes at once."""
        if read >= batch_size:
            return True
        if read:
            await asyncio.sleep(gather_seconds)
        return False

    async def run(self) -> None:
        """Until cancelled; failures are logged and retried with backoff."""
        backoff = self.poll_interval
        while True:
            activations = self.activations
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A library may have turned our cancellation into its own error (redis-py does).
                raise_if_cancelling()
                if self.activations != activations:  # it ran as the active one meanwhile
                    backoff = self.poll_interval
                self.log.warning("%s failed; retrying in %.1fs", self.role, backoff, exc_info=True)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    async def _session(self) -> None:
        conn = await connect(self.dsn, application_name=self.application_name())
        try:
            # Standby until the active one's connection is gone (each try is one round trip).
            while True:
                if await self.try_lock(conn):
                    break
                await asyncio.sleep(self.standby_interval)
            self.active = True
            self.activations += 1
            self.log.info("%s active", self.role)
            wake = asyncio.Event()

            def on_notify(*_: Any) -> None:
                wake.set()

            for channel in self.wake_channels:
                await conn.add_listener(channel, on_notify)
            while True:
                # Cleared before the round: a commit notified during it still wakes the wait.
                wake.clear()
                if await self.work(conn):
                    continue
                await self.between(conn)
                await self.wait_for_work(conn, wake)
        finally:
            self.active = False
            await _close(conn)


async def _close(conn: asyncpg.Connection) -> None:
    """Close, releasing the lock; never wait long on a dead server."""
    try:
        await asyncio.wait_for(conn.close(), 2)
    except Exception:
        conn.terminate()
