"""The moderation counter actor's commands: record an offense, lift a suspension.

Both are user-family shard commands (:class:`~marketplace.shards.UserCommand`), so each user's
moderation state has one writer: the user shard that owns the user id runs them one at a time
per user. Each runs in ONE transaction that also takes the user's advisory lock
(:func:`~marketplace.storage.repositories.moderation.lock_user`), writes its audit entries and
appends its events.

Fault contract: PostgreSQL is the source of truth; the shard keeps no moderation state of its
own (the window count is one indexed query inside the transaction), so a restarted shard has
nothing to rebuild. A caller whose shard died mid-call repeats the SAME command:
:class:`RecordOffense` carries an offense id chosen by the frontend, and a repeat finds that
offense stored and answers what the first run decided (:attr:`OffenseRecorded.replayed`), so a
retried offense is counted once and can start at most one suspension (also enforced by
``moderation_suspensions.offense_id UNIQUE``). :class:`LiftSuspension` repeated finds nothing
active and answers an empty tuple, like a lift of a user who was never suspended.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from marketplace.events.types import (
    ModerationOffensePayload,
    ModerationSuspendedPayload,
    ModerationSuspensionLiftedPayload,
    NewEvent,
    user_subject,
)
from marketplace.moderation.errors import iso_utc
from marketplace.moderation.offenses import SuspensionPolicy, suspension_after, window_total
from marketplace.shards import ShardContext, UserCommand
from marketplace.storage.pool import Connection
from marketplace.storage.repositories import events as events_repo
from marketplace.storage.repositories import moderation as repo
from marketplace.storage.repositories import moderation_audit as audit

MessageContext = Literal["project_chat", "direct"]


@dataclass(frozen=True)
class OffenseRecorded:
    """The offense is stored; ``suspension_id``/``suspended_until`` are set when it started a
    suspension (it reached the threshold). ``replayed``: it had been stored by an earlier run of
    the same command (whose answer was lost), and nothing was written this time."""

    offense_id: uuid.UUID
    created_at: datetime
    suspension_id: uuid.UUID | None
    suspended_until: datetime | None
    replayed: bool


@dataclass(frozen=True)
class RefusedWhileSuspended:
    """Nothing was recorded: the account's sending was already suspended until ``until`` (a
    send that passed the suspension check before the suspension started)."""

    until: datetime


OffenseOutcome = OffenseRecorded | RefusedWhileSuspended


@dataclass(frozen=True)
class RecordOffense(UserCommand):
    """Record one offense of ``user_id`` (a send the term filter refused) and suspend the
    account when it reaches the threshold of the deployment's :class:`SuspensionPolicy`.

    ``term`` is the matched term as its list writes it (``source``: ``shipped``/``custom``);
    the body is never passed here, so it cannot be stored or logged by accident.
    """

    offense_id: uuid.UUID
    term: str
    source: str
    context: MessageContext

    async def apply(self, ctx: ShardContext) -> OffenseOutcome:
        policy = SuspensionPolicy.from_settings(ctx.settings)
        async with ctx.pool.acquire() as conn, conn.transaction():
            at = await repo.lock_user(conn, self.user_id)
            stored = await repo.get_offense(conn, self.offense_id)
            if stored is not None:
                return self._replayed(stored)
            state = await repo.suspension_state(conn, self.user_id, at)
            if state.active_until is not None:
                return RefusedWhileSuspended(state.active_until)
            inserted = await repo.insert_offense(
                conn,
                offense_id=self.offense_id,
                user_id=self.user_id,
                term=self.term,
                context=self.context,
                created_at=at,
            )
            if not inserted:  # only under the lock of another user: an id reused by mistake
                raise RuntimeError(f"offense {self.offense_id} exists for another user")
            since = state.counting_since
            times = await repo.offense_times(conn, self.user_id, at - policy.window)
            counted = window_total(times, at, policy.window, since)
            until = suspension_after(times, at, policy, since)
            return await self._write(conn, policy, at, counted, until)

    async def _write(
        self,
        conn: Connection,
        policy: SuspensionPolicy,
        at: datetime,
        counted: int,
        until: datetime | None,
    ) -> OffenseRecorded:
        offense_id = str(self.offense_id)
        await audit.record(
            conn,
            subject_user_id=self.user_id,
            actor_user_id=None,
            action="offense",
            reason="the term filter refused a message",
            details={
                "offenseId": offense_id,
                "term": self.term,
                "termSource": self.source,
                "context": self.context,
                "windowTotal": counted,
            },
        )
        events = [
            NewEvent(
                user_subject(self.user_id),
                ModerationOffensePayload(
                    offenseId=offense_id,
                    userId=str(self.user_id),
                    context=self.context,
                    windowTotal=counted,
                ),
            )
        ]
        suspension_id = None
        if until is not None:
            suspension_id = await repo.insert_suspension(
                conn, user_id=self.user_id, offense_id=self.offense_id, starts_at=at, ends_at=until
            )
            window_seconds = int(policy.window.total_seconds())
            await audit.record(
                conn,
                subject_user_id=self.user_id,
                actor_user_id=None,
                action="suspension",
                reason=f"{counted} offenses within {window_seconds} s",
                details={
                    "suspensionId": str(suspension_id),
                    "offenseId": offense_id,
                    "term": self.term,
                    "context": self.context,
                    "windowTotal": counted,
                    "suspendAfter": policy.suspend_after,
                    "windowSeconds": window_seconds,
                    "suspendedUntil": iso_utc(until),
                },
            )
            events.append(
                NewEvent(
                    user_subject(self.user_id),
                    ModerationSuspendedPayload(
                        suspensionId=str(suspension_id),
                        userId=str(self.user_id),
                        suspendedUntil=iso_utc(until),
                    ),
                )
            )
        await events_repo.append(conn, events)
        return OffenseRecorded(self.offense_id, at, suspension_id, until, replayed=False)

    def _replayed(self, row: repo.OffenseRow) -> OffenseRecorded:
        if row.user_id != self.user_id:
            raise RuntimeError(f"offense {self.offense_id} exists for another user")
        return OffenseRecorded(
            self.offense_id,
            row.created_at,
            row.suspension_id,
            row.suspension_ends_at,
            replayed=True,
        )


@dataclass(frozen=True)
class LiftedSuspension:
    suspension_id: uuid.UUID
    ends_at: datetime
    lifted_at: datetime


@dataclass(frozen=True)
class LiftSuspension(UserCommand):
    """A moderation admin (``admin_user_id``) lifts the active suspension of ``user_id``.

    Writes ``lifted_at``/``lifted_by_user_id``, one ``suspension_lifted`` audit entry (actor:
    the admin) and one ``moderation.suspension_lifted`` event per lifted suspension, in one
    transaction. No active suspension: nothing is written and the answer is empty. The lift
    time is also where the next suspension's count starts: offenses before it never count again.
    """

    admin_user_id: uuid.UUID
    reason: str | None = None

    async def apply(self, ctx: ShardContext) -> tuple[LiftedSuspension, ...]:
        async with ctx.pool.acquire() as conn, conn.transaction():
            at = await repo.lock_user(conn, self.user_id)
            rows = await repo.lift_active(conn, self.user_id, self.admin_user_id, at)
            if not rows:
                return ()
            lifted = tuple(LiftedSuspension(row.id, row.ends_at, row.lifted_at) for row in rows)
            for suspension in lifted:
                await audit.record(
                    conn,
                    subject_user_id=self.user_id,
                    actor_user_id=self.admin_user_id,
                    action="suspension_lifted",
                    reason=self.reason,
                    details={
                        "suspensionId": str(suspension.suspension_id),
                        "suspendedUntil": iso_utc(suspension.ends_at),
                    },
                )
            await events_repo.append(
                conn,
                [
                    NewEvent(
                        user_subject(self.user_id),
                        ModerationSuspensionLiftedPayload(
                            suspensionId=str(s.suspension_id),
                            userId=str(self.user_id),
                            liftedByUserId=str(self.admin_user_id),
                        ),
                    )
                    for s in lifted
                ],
            )
        return lifted
