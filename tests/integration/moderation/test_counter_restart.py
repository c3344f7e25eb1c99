"""The moderation counter actor (a user shard) killed during a burst of offending sends: every
send still ends as 422 or 403 (no 503 leaks out), no offense is lost or counted twice, and each
account's suspension starts exactly at the threshold offense.

Some of the calls are in flight inside the shard at the kill for sure: the test holds one
user's advisory lock from its own connection, so that user's offense transactions wait inside
the shard when it dies (and the dead process's waiting transaction is still queued for the lock
when the retried commands arrive at its successor)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
import ray

from marketplace.actors.runtime import stable_shard
from marketplace.config import Settings
from marketplace.http import keys
from marketplace.http.moderation_gate import screen_message
from marketplace.moderation.counter import MessageContext
from marketplace.moderation.errors import OffensiveContent, SendingSuspended
from marketplace.storage.repositories.moderation import USER_LOCK_CLASS
from tests.conftest import Servers, make_settings
from tests.support.waiting import eventually

USER_SHARDS = 2
VICTIM = 0
SUSPEND_AFTER = 5
USERS = 6
SENDS_PER_USER = 8
SPACING_S = 0.01
KILL_AT_S = 0.2


@pytest.fixture(scope="module")
def namespace(ray_cluster: None) -> Iterator[str]:
    namespace = f"moderation-restart-{uuid.uuid4().hex[:8]}"
    yield namespace
    for index in range(USER_SHARDS):
        with contextlib.suppress(ValueError):
            ray.kill(ray.get_actor(f"user-shard-{index}", namespace=namespace), no_restart=True)


@pytest.fixture
def settings(servers: Servers, namespace: str) -> Settings:
    return make_settings(
        servers,
        ray_namespace=namespace,
        user_shards=USER_SHARDS,
        moderation_suspend_after=SUSPEND_AFTER,
    )


def users_on_shard(index: int, count: int) -> list[uuid.UUID]:
    users: list[uuid.UUID] = []
    while len(users) < count:
        user = uuid.uuid4()
        if stable_shard(str(user), USER_SHARDS) == index:
            users.append(user)
    return users


def unavailable_calls(text: str, actor: str) -> float:
    """Shard calls that died with the shard (one command alone, or a batch of them)."""
    pattern = (
        r"marketplace_actor_call_duration_seconds_count\{"
        rf'actor="{actor}",method="execute(?:_batch)?",outcome="unavailable"\}} ([0-9.e+]+)'
    )
    return sum(float(count) for count in re.findall(pattern, text))


async def test_killing_the_counter_actor_loses_and_doubles_no_offense(
    client: Any, servers: Servers
) -> None:
    app = client.app
    users = users_on_shard(VICTIM, USERS)
    db = await asyncpg.connect(servers.database_url)
    try:
        await db.executemany("INSERT INTO users (user_id) VALUES ($1)", [(u,) for u in users])
        shards = app[keys.USER_SHARDS]
        pid_before = (await shards.ping(str(users[0]))).pid
        victim_name = shards.family.actor_name(VICTIM)
        victim = ray.get_actor(victim_name, namespace=app[keys.SETTINGS].ray_namespace)
        unavailable_before = unavailable_calls(
            await (await client.get("/metrics")).text(), victim_name
        )

        # The first user's offenses will wait inside the shard for this lock.
        blocked = users[0]
        await db.execute(
            "SELECT pg_advisory_lock($1, hashtext($2::text))", USER_LOCK_CLASS, str(blocked)
        )

        async def offend(delay: float, user: uuid.UUID, n: int) -> tuple[uuid.UUID, str]:
            await asyncio.sleep(delay)
            context: MessageContext = "direct" if n % 2 else "project_chat"
            try:
                await screen_message(app, user, f"message {n}: badword-canary", context)
            except OffensiveContent:
                return user, "offensive"
            except SendingSuspended:
                return user, "suspended"
            return user, "passed"

        # Round robin over the users, so every user's sends straddle the kill.
        tasks = [
            asyncio.create_task(offend((k * USERS + u) * SPACING_S, user, k))
            for k in range(SENDS_PER_USER)
            for u, user in enumerate(users)
        ]
        await asyncio.sleep(KILL_AT_S)

        async def waiting() -> int:
            return int(
                await db.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                    "AND classid = $1::oid",
                    USER_LOCK_CLASS,
                )
            )

        # On a busy machine the first send may reach the shard later than KILL_AT_S.
        await eventually(
            waiting, within=15.0, what="the blocked user's offense to wait inside the shard"
        )
        ray.kill(victim, no_restart=False)
        await asyncio.sleep(0.5)
        await db.execute(
            "SELECT pg_advisory_unlock($1, hashtext($2::text))", USER_LOCK_CLASS, str(blocked)
        )
        results = await asyncio.wait_for(asyncio.gather(*tasks), 60)

        assert (await shards.ping(str(users[0]))).pid != pid_before
        metrics = await (await client.get("/metrics")).text()
        # Calls really died with the shard and were sent again (every one ended in an answer).
        assert unavailable_calls(metrics, victim_name) > unavailable_before

        for user in users:
            outcomes = [outcome for who, outcome in results if who == user]
            assert sorted(set(outcomes)) == ["offensive", "suspended"], (user, outcomes)
            offensive = outcomes.count("offensive")
            rows = await db.fetch(
                "SELECT id, created_at FROM moderation_offenses WHERE user_id = $1 "
                "ORDER BY created_at",
                user,
            )
            # Exactly one stored offense per 422: none lost, none recorded twice.
            assert len(rows) == offensive == SUSPEND_AFTER, (user, outcomes)
            suspensions = await db.fetch(
                "SELECT offense_id, starts_at FROM moderation_suspensions WHERE user_id = $1",
                user,
            )
            assert len(suspensions) == 1
            # Started by the threshold offense (the last one recorded), at its time.
            assert suspensions[0]["offense_id"] == rows[-1]["id"]
            assert suspensions[0]["starts_at"] == rows[-1]["created_at"]
            actions = await db.fetch(
                "SELECT action, count(*) AS n FROM moderation_audit WHERE subject_user_id = $1 "
                "GROUP BY action",
                user,
            )
            assert {row["action"]: row["n"] for row in actions} == {
                "offense": SUSPEND_AFTER,
                "suspension": 1,
            }
            events = await db.fetch(
                "SELECT type, count(*) AS n FROM events WHERE subject = $1 GROUP BY type",
                f"user:{user}",
            )
            assert {row["type"]: row["n"] for row in events} == {
                "moderation.offense": SUSPEND_AFTER,
                "moderation.suspended": 1,
            }
    finally:
        await db.close()


async def test_a_counter_actor_gone_for_good_is_created_again(
    client: Any, servers: Servers
) -> None:
    """An actor killed without restart (an operator's `ray.kill`) leaves the frontend holding a
    dead handle: the resent command asks for the actor by name again, which creates it."""
    app = client.app
    (user,) = users_on_shard(VICTIM, 1)
    db = await asyncpg.connect(servers.database_url)
    try:
        await db.execute("INSERT INTO users (user_id) VALUES ($1)", user)
        with pytest.raises(OffensiveContent):
            await screen_message(app, user, "badword-canary", "direct")
        shards = app[keys.USER_SHARDS]
        pid_before = (await shards.ping(str(user))).pid
        ray.kill(
            ray.get_actor(
                shards.family.actor_name(VICTIM), namespace=app[keys.SETTINGS].ray_namespace
            ),
            no_restart=True,
        )
        with pytest.raises(OffensiveContent):
            await screen_message(app, user, "badword-canary", "project_chat")
        assert (await shards.ping(str(user))).pid != pid_before
        contexts = await db.fetch(
            "SELECT context FROM moderation_offenses WHERE user_id = $1 ORDER BY seq", user
        )
        assert [row["context"] for row in contexts] == ["direct", "project_chat"]
    finally:
        await db.close()
