"""The moderation counter commands as plain objects (no Ray) on the suite's PostgreSQL: the
threshold, idempotent replays, the window, lifts, and one writer per user even when two
processes write at once."""

from __future__ import annotations

import asyncio
import json
import pickle
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from marketplace.actors.keyed_shard import ShardActor
from marketplace.actors.runtime import stable_shard
from marketplace.actors.settings import ActorSettings
from marketplace.config import Settings
from marketplace.moderation.counter import (
    LiftedSuspension,
    LiftSuspension,
    MessageContext,
    OffenseRecorded,
    RecordOffense,
    RefusedWhileSuspended,
)
from marketplace.moderation.errors import OffensiveContent, SendingSuspended
from marketplace.shards import ShardContext, ShardFamily
from tests.conftest import Servers, make_settings
from tests.support.db import open_pool

SUSPEND_AFTER = 3
WINDOW = timedelta(hours=1)
DURATION = timedelta(hours=2)
BODY_WORDS = "you absolute badword-canary"  # never passed to the command: only its term is


@pytest.fixture
def settings(servers: Servers) -> Settings:
    return make_settings(
        servers,
        moderation_suspend_after=SUSPEND_AFTER,
        moderation_window_seconds=int(WINDOW.total_seconds()),
        moderation_suspend_seconds=int(DURATION.total_seconds()),
        user_shards=1,
    )


@pytest.fixture
async def pool(servers: Servers, clean_state: None) -> AsyncIterator[asyncpg.Pool]:
    async with open_pool(servers, max_size=6, reset=False) as pool:
        yield pool


@pytest.fixture
def ctx(pool: asyncpg.Pool, settings: Settings) -> ShardContext:
    return ShardContext(pool, settings, None, 0)


async def new_user(pool: asyncpg.Pool, *, admin: bool = False) -> uuid.UUID:
    user_id = uuid.uuid4()
    await pool.execute(
        "INSERT INTO users (user_id, moderation_admin) VALUES ($1, $2)", user_id, admin
    )
    return user_id


def offense(
    user_id: uuid.UUID, context: MessageContext = "direct", term: str = "badword-canary"
) -> RecordOffense:
    return RecordOffense(
        user_id=user_id, offense_id=uuid.uuid4(), term=term, source="shipped", context=context
    )


async def audit_rows(pool: asyncpg.Pool, user_id: uuid.UUID) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT actor_user_id, action, reason, details FROM moderation_audit "
        "WHERE subject_user_id = $1 ORDER BY seq",
        user_id,
    )


async def event_rows(pool: asyncpg.Pool, user_id: uuid.UUID) -> list[tuple[str, dict[str, Any]]]:
    rows = await pool.fetch(
        "SELECT type, payload FROM events WHERE subject = $1 ORDER BY id", f"user:{user_id}"
    )
    return [(row["type"], row["payload"]) for row in rows]


async def offense_count(pool: asyncpg.Pool, user_id: uuid.UUID) -> int:
    return int(
        await pool.fetchval("SELECT count(*) FROM moderation_offenses WHERE user_id = $1", user_id)
    )


async def test_the_threshold_offense_starts_the_suspension(
    ctx: ShardContext, pool: asyncpg.Pool
) -> None:
    user = await new_user(pool)
    outcomes = [await offense(user, context).apply(ctx) for context in ("direct", "project_chat")]
    assert all(isinstance(o, OffenseRecorded) and o.suspension_id is None for o in outcomes)
    assert await pool.fetchval("SELECT count(*) FROM moderation_suspensions") == 0

    third = await offense(user).apply(ctx)
    assert isinstance(third, OffenseRecorded) and not third.replayed
    assert third.suspension_id is not None and third.suspended_until is not None
    assert third.suspended_until - third.created_at == DURATION
    stored = await pool.fetchrow(
        "SELECT user_id, offense_id, starts_at, ends_at, lifted_at FROM moderation_suspensions"
    )
    assert stored is not None
    assert (stored["user_id"], stored["offense_id"]) == (user, third.offense_id)
    assert (stored["starts_at"], stored["ends_at"]) == (third.created_at, third.suspended_until)
    assert stored["lifted_at"] is None

    audit = await audit_rows(pool, user)
    assert [row["action"] for row in audit] == ["offense"] * 3 + ["suspension"]
    assert all(row["actor_user_id"] is None for row in audit)  # the system
    assert [row["details"]["windowTotal"] for row in audit[:3]] == [1, 2, 3]
    assert audit[1]["details"]["context"] == "project_chat"
    suspension = audit[3]["details"]
    assert suspension["offenseId"] == str(third.offense_id)
    assert suspension["suspensionId"] == str(third.suspension_id)
    assert suspension["term"] == "badword-canary" and suspension["context"] == "direct"
    # The body never reaches the command, so no entry can hold it.
    assert "absolute" not in json.dumps([dict(row["details"]) for row in audit])

    events = await event_rows(pool, user)
    assert [kind for kind, _ in events] == ["moderation.offense"] * 3 + ["moderation.suspended"]
    assert [payload["windowTotal"] for _, payload in events[:3]] == [1, 2, 3]
    assert events[3][1]["suspensionId"] == str(third.suspension_id)
    assert datetime.fromisoformat(events[3][1]["suspendedUntil"]) == third.suspended_until

    # While suspended nothing more is recorded (a send that slipped past the guard).
    refused = await offense(user).apply(ctx)
    assert refused == RefusedWhileSuspended(third.suspended_until)
    assert await offense_count(pool, user) == 3
    assert len(await audit_rows(pool, user)) == 4


async def test_a_repeated_command_answers_the_first_outcome_and_writes_nothing(
    ctx: ShardContext, pool: asyncpg.Pool
) -> None:
    user = await new_user(pool)
    first = offense(user)
    recorded = await first.apply(ctx)
    again = await first.apply(ctx)
    assert isinstance(recorded, OffenseRecorded) and isinstance(again, OffenseRecorded)
    assert again.replayed and not recorded.replayed
    assert (again.offense_id, again.created_at, again.suspension_id) == (
        recorded.offense_id,
        recorded.created_at,
        None,
    )
    await offense(user).apply(ctx)
    threshold = offense(user)
    started = await threshold.apply(ctx)
    assert isinstance(started, OffenseRecorded) and started.suspension_id is not None
    # The repeat of the offense that suspended: its suspension, not "already suspended".
    repeated = await threshold.apply(ctx)
    assert repeated == OffenseRecorded(
        threshold.offense_id,
        started.created_at,
        started.suspension_id,
        started.suspended_until,
        replayed=True,
    )
    assert await offense_count(pool, user) == 3
    assert await pool.fetchval("SELECT count(*) FROM moderation_suspensions") == 1
    assert len(await audit_rows(pool, user)) == 4
    assert len(await event_rows(pool, user)) == 4


async def test_offenses_older_than_the_window_do_not_count(
    ctx: ShardContext, pool: asyncpg.Pool
) -> None:
    user = await new_user(pool)
    # Two offenses from before the window (as if recorded then), one just inside it.
    for age in (WINDOW + timedelta(minutes=5), WINDOW + timedelta(seconds=1)):
        await pool.execute(
            "INSERT INTO moderation_offenses (id, user_id, term, context, created_at) "
            "VALUES ($1, $2, 'badword-canary', 'direct', clock_timestamp() - $3::interval)",
            uuid.uuid4(),
            user,
            age,
        )
    await pool.execute(
        "INSERT INTO moderation_offenses (id, user_id, term, context, created_at) "
        "VALUES ($1, $2, 'badword-canary', 'direct', clock_timestamp() - interval '10 minutes')",
        uuid.uuid4(),
        user,
    )
    second = await offense(user).apply(ctx)
    assert isinstance(second, OffenseRecorded) and second.suspension_id is None
    _, payload = (await event_rows(pool, user))[-1]
    assert payload["windowTotal"] == 2  # the one inside the window and this one
    third = await offense(user).apply(ctx)
    assert isinstance(third, OffenseRecorded) and third.suspension_id is not None


async def test_a_lift_ends_the_suspension_and_restarts_the_count(
    ctx: ShardContext, pool: asyncpg.Pool
) -> None:
    user, admin = await new_user(pool), await new_user(pool, admin=True)
    for _ in range(SUSPEND_AFTER):
        last = await offense(user).apply(ctx)
    assert isinstance(last, OffenseRecorded) and last.suspension_id is not None

    lifted = await LiftSuspension(user_id=user, admin_user_id=admin).apply(ctx)
    assert len(lifted) == 1 and isinstance(lifted[0], LiftedSuspension)
    assert lifted[0].suspension_id == last.suspension_id
    row = await pool.fetchrow(
        "SELECT lifted_at, lifted_by_user_id FROM moderation_suspensions WHERE id = $1",
        last.suspension_id,
    )
    assert row is not None
    assert (row["lifted_at"], row["lifted_by_user_id"]) == (lifted[0].lifted_at, admin)
    audit = await audit_rows(pool, user)
    assert audit[-1]["action"] == "suspension_lifted"
    assert audit[-1]["actor_user_id"] == admin
    assert audit[-1]["details"]["suspensionId"] == str(last.suspension_id)
    kind, payload = (await event_rows(pool, user))[-1]
    assert kind == "moderation.suspension_lifted"
    assert payload == {
        "suspensionId": str(last.suspension_id),
        "userId": str(user),
        "liftedByUserId": str(admin),
    }

    # Nothing active any more: a second lift writes nothing.
    entries = len(audit)
    assert await LiftSuspension(user_id=user, admin_user_id=admin).apply(ctx) == ()
    assert len(await audit_rows(pool, user)) == entries

    # The three offenses behind the lift are all within the window, but no longer count.
    for expected in range(1, SUSPEND_AFTER):
        outcome = await offense(user).apply(ctx)
        assert isinstance(outcome, OffenseRecorded) and outcome.suspension_id is None
        assert (await event_rows(pool, user))[-1][1]["windowTotal"] == expected
    again = await offense(user).apply(ctx)
    assert isinstance(again, OffenseRecorded) and again.suspension_id is not None


async def test_after_a_suspension_ends_its_offenses_do_not_count_again(
    ctx: ShardContext, pool: asyncpg.Pool
) -> None:
    user = await new_user(pool)
    for _ in range(SUSPEND_AFTER):
        last = await offense(user).apply(ctx)
    assert isinstance(last, OffenseRecorded) and last.suspension_id is not None
    # Ten minutes later (still within the window) the suspension has ended.
    await pool.execute(
        "UPDATE moderation_offenses SET created_at = created_at - interval '10 minutes'"
    )
    await pool.execute(
        "UPDATE moderation_suspensions SET starts_at = starts_at - interval '10 minutes', "
        "ends_at = clock_timestamp() - interval '1 second'"
    )
    outcome = await offense(user).apply(ctx)
    assert isinstance(outcome, OffenseRecorded) and outcome.suspension_id is None
    assert (await event_rows(pool, user))[-1][1]["windowTotal"] == 1


async def test_one_user_has_one_writer_even_from_two_processes(
    servers: Servers, settings: Settings, pool: asyncpg.Pool
) -> None:
    """Two shard objects (as the old and the restarted process of one shard would be), each
    with its own pool, record a burst for one user: the advisory lock alone keeps the count
    exact, so exactly the threshold is recorded and the rest is refused."""
    user = await new_user(pool)
    data = ActorSettings.of(settings, database_url=servers.database_url)
    shards = [ShardActor(data, ShardFamily.USER, 0) for _ in range(2)]
    try:
        commands = [offense(user) for _ in range(12)]
        outcomes = await asyncio.gather(
            *(shards[i % 2].execute(command) for i, command in enumerate(commands))
        )
    finally:
        for shard in shards:
            await shard.close()
    recorded = [o for o in outcomes if isinstance(o, OffenseRecorded)]
    assert len(recorded) == SUSPEND_AFTER
    assert sum(o.suspension_id is not None for o in recorded) == 1
    assert all(isinstance(o, RefusedWhileSuspended) for o in outcomes if o not in recorded)
    assert await offense_count(pool, user) == SUSPEND_AFTER
    starts = await pool.fetchval("SELECT starts_at FROM moderation_suspensions")
    latest = await pool.fetchval("SELECT max(created_at) FROM moderation_offenses")
    assert starts == latest  # the suspension starts at the threshold offense, not later


def test_commands_outcomes_and_errors_cross_the_ray_boundary() -> None:
    user = uuid.uuid4()
    assert stable_shard(str(user), 4) == stable_shard(str(user).upper(), 4)
    command = offense(user, "project_chat")
    restored = pickle.loads(pickle.dumps(command))
    assert restored == command and restored.key == str(user)
    assert type(restored).family is ShardFamily.USER
    lift = LiftSuspension(user_id=user, admin_user_id=uuid.uuid4())
    assert pickle.loads(pickle.dumps(lift)) == lift
    now = datetime.now(UTC)
    for result in (
        OffenseRecorded(uuid.uuid4(), now, uuid.uuid4(), now + DURATION, replayed=True),
        RefusedWhileSuspended(now),
        (LiftedSuspension(uuid.uuid4(), now, now),),
    ):
        assert pickle.loads(pickle.dumps(result)) == result
    until = datetime(2025, 3, 2, 12, 0, 0, 123456, tzinfo=UTC)
    suspended = pickle.loads(pickle.dumps(SendingSuspended(until)))
    assert suspended.body() == {
        "error": "sending_suspended",
        "message": SendingSuspended.default_message,
        "until": "2025-03-02T12:00:00.123456Z",
    }
    assert suspended.status == 403
    offensive = OffensiveContent()
    assert (offensive.status, offensive.body()["error"]) == (422, "offensive_content")
    assert "badword" not in offensive.message and BODY_WORDS not in offensive.message
