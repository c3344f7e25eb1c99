"""`GET /metrics`: the deployment-wide figures (docs/metrics.md) read from the real tables, and the
shard command counters of the frontend that ran the commands.

State is made through the real routes where there is one (offenses and the suspension through a
send checked like the real sends, which runs `RecordOffense` on a user shard) and through the
repositories otherwise (verifier jobs in each status, deliveries, consumer cursors).
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import asyncpg
import pytest

from marketplace.config import Settings
from marketplace.http import keys
from marketplace.http.routing import RouteTable
from marketplace.jobs import new_job, payload_json
from marketplace.notifications.models import DeliveryJobPayload
from marketplace.notifications.sending import NOTIFICATIONS_QUEUE
from marketplace.storage.repositories import events as events_repo
from marketplace.storage.repositories import jobs as jobs_repo
from marketplace.storage.repositories import leaderboard_boards
from marketplace.storage.repositories import notification_deliveries as deliveries_repo
from marketplace.storage.repositories import verifier_jobs as verifier_repo
from marketplace.verifier.execution import VERIFIER_QUEUE
from marketplace.verifier.models import VerifierJobPayload
from tests.api.moderation.conftest import (
    SUSPEND_AFTER,
    USER_SHARDS,
    offend,
    signed_in,
)
from tests.conftest import Servers, make_settings
from tests.support.apps import app_client


@pytest.fixture
def settings(servers: Servers, namespace: str) -> Settings:
    # Every scrape reads the tables again: the tests change them and read them back at once.
    return make_settings(
        servers,
        ray_namespace=namespace,
        moderation_suspend_after=SUSPEND_AFTER,
        user_shards=USER_SHARDS,
        jobs_metrics_cache_seconds=0,
    )


def samples(text: str) -> dict[str, float]:
    """``name{labels}`` -> value of every sample of a Prometheus text page."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            found[series] = float(value)
    return found


async def scrape(client: Any) -> dict[str, float]:
    resp = await client.get("/metrics")
    assert resp.status == 200, await resp.text()
    return samples(await resp.text())


DEPLOYMENT_PREFIXES = (
    "marketplace_verifier_",
    "marketplace_notification_deliveries",
    "marketplace_moderation_offenses_recorded",
    "marketplace_moderation_offenses_window",
    "marketplace_moderation_suspensions_active",
    "marketplace_leaderboard_consumer_lag_events",
    "marketplace_notification_consumer_lag_events",
    "marketplace_actor_restarts",
    "marketplace_indexer_stale",
    "marketplace_indexer_last_success_age_seconds",
)


def deployment_figures(page: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in page.items() if k.startswith(DEPLOYMENT_PREFIXES)}


async def test_empty_state_exports_zeros_for_every_label(client: Any) -> None:
    page = await scrape(client)
    assert page['marketplace_verifier_jobs{policy="forge-test",status="running"}'] == 0
    assert page['marketplace_verifier_results{passes="false",policy="npm-test"}'] == 0
    for status in ("queued", "sent", "failed", "rate_limited", "suppressed"):
        assert page[f'marketplace_notification_deliveries{{status="{status}"}}'] == 0
    for kind in ("project-shard", "user-shard", "indexer", "job-worker", "notification-limiter"):
        assert page[f'marketplace_actor_restarts_total{{kind="{kind}"}}'] == 0
    assert page["marketplace_moderation_offenses_recorded"] == 0
    assert page["marketplace_moderation_suspensions_active"] == 0
    assert page["marketplace_leaderboard_consumer_lag_events"] == 0
    assert page["marketplace_notification_consumer_lag_events"] == 0
    # No chain configured here: the status route calls that stale, and nothing ever synced.
    assert page["marketplace_indexer_stale"] == 1
    assert page["marketplace_indexer_last_success_age_seconds"] == float("inf")


async def test_offenses_suspension_and_shard_commands(client: Any, db: asyncpg.Connection) -> None:
    commands = (
        'marketplace_shard_commands_total{command="RecordOffense",family="user",outcome="ok"}'
    )
    latency = (
        'marketplace_shard_command_duration_seconds_count{command="RecordOffense",family="user"}'
    )
    before = await scrape(client)
    user = await signed_in(client)
    await offend(client, user, SUSPEND_AFTER)
    # An offense outside the window counts as recorded but not in the window.
    old = await signed_in(client)
    await db.execute(
        "INSERT INTO moderation_offenses (id, user_id, term, context, created_at) "
        "VALUES ($1, $2, 'badword-canary', 'direct', now() - interval '2 days')",
        uuid.uuid4(),
        old.user_id,
    )
    after = await scrape(client)
    assert after["marketplace_moderation_offenses_recorded"] == SUSPEND_AFTER + 1
    assert after["marketplace_moderation_offenses_window"] == SUSPEND_AFTER
    assert after["marketplace_moderation_suspensions_active"] == 1
    assert after[commands] - before.get(commands, 0) == SUSPEND_AFTER
    assert after[latency] - before.get(latency, 0) == SUSPEND_AFTER

    # A lifted suspension is no longer in force.
    await db.execute("UPDATE moderation_suspensions SET lifted_at = now()")
    assert (await scrape(client))["marketplace_moderation_suspensions_active"] == 0


# The on-chain disputeOpenedAt of each row's dispute: one verdict per dispute, so every job row
# judges a dispute of its own (as the create route writes them).
_disputes = itertools.count(1_700_000_000)


async def insert_verifier_row(db: asyncpg.Pool, user_id: uuid.UUID, policy: str) -> uuid.UUID:
    """A verifier job with its `verifier` queue job, as the create route writes them."""
    verifier_job_id = uuid.uuid4()
    await verifier_repo.insert(
        db,
        job=new_job(
            VERIFIER_QUEUE,
            VerifierJobPayload(verifier_job_id=verifier_job_id),
            max_attempts=1,
            idempotency_key=str(verifier_job_id),
        ),
        job_id=verifier_job_id,
        created_by=user_id,
        project_address="0x" + "ab" * 20,
        milestone_index=0,
        check_policy_id=policy,
        delivery_ref="ref",
        chain_id=31337,
        requested_nonce=None,
        requested_deadline=None,
        attestation_nonce=1,
        max_attempts=1,
        dispute_opened_at=next(_disputes),
    )
    return verifier_job_id


async def enqueue_verifier_job(db: asyncpg.Pool, user_id: uuid.UUID, policy: str) -> int:
    """The id of a new verifier job's queue job."""
    verifier_job_id = await insert_verifier_row(db, user_id, policy)
    queue_job_id: int = await db.fetchval(
        "SELECT job_id FROM verifier_jobs WHERE id = $1", verifier_job_id
    )
    return queue_job_id


async def complete_verifier_job(
    db: asyncpg.Pool, user_id: uuid.UUID, policy: str, passes: bool
) -> None:
    # Completed with its queue job in one transaction, as the worker's completion does.
    verifier_job_id = await insert_verifier_row(db, user_id, policy)
    async with db.acquire() as conn, conn.transaction():
        await conn.execute(
            "UPDATE jobs SET status = 'completed', attempt_count = 1, finished_at = now()"
            " WHERE id = (SELECT job_id FROM verifier_jobs WHERE id = $1)",
            verifier_job_id,
        )
        completed = await verifier_repo.complete(
            conn,
            verifier_job_id,
            retention_days=30,
            passes=passes,
            evidence_hash="0x" + "00" * 32,
            evidence={},
            attestation={"signature": "0x"},
            raw={},
            logs="",
        )
    assert completed


async def test_verifier_deliveries_and_consumer_lag(client: Any) -> None:
    # The app's pool: it has the JSON codec the repositories pass Python values through.
    db = client.app[keys.PG_POOL]
    user = await signed_in(client)
    # failed: claimed and failed for good (claimed first, so no other job is claimed instead).
    failed_job = await enqueue_verifier_job(db, user.user_id, "address-smoke")
    (claimed,) = await jobs_repo.claim(db, VERIFIER_QUEUE.name, "test-owner", 1, 30)
    assert claimed.id == failed_job
    assert await jobs_repo.fail(db, failed_job, "test-owner", 1, "boom", "boom") is not None
    # running: claimed and held.
    running_job = await enqueue_verifier_job(db, user.user_id, "github-ref")
    (claimed,) = await jobs_repo.claim(db, VERIFIER_QUEUE.name, "test-owner", 1, 30)
    assert claimed.id == running_job
    # queued, twice.
    await enqueue_verifier_job(db, user.user_id, "github-ref")
    await enqueue_verifier_job(db, user.user_id, "github-ref")
    # completed: two passing, one not.
    await complete_verifier_job(db, user.user_id, "github-ref", passes=True)
    await complete_verifier_job(db, user.user_id, "github-ref", passes=True)
    await complete_verifier_job(db, user.user_id, "address-smoke", passes=False)

    # Sent ones are written queued and then sent, as the sender does (sent_at comes with it).
    statuses = ["queued", "queued", "queued", "suppressed"]
    ids = [uuid.uuid4() for _ in statuses]
    await deliveries_repo.insert_deliveries(
        db,
        [
            deliveries_repo.NewDelivery(
                id=delivery_id,
                event_id=event_id,
                event_type="direct_message",
                recipient_user_id=user.user_id,
                status=status,
                reason="muted" if status == "suppressed" else None,
                subject="s",
                email=None if status == "suppressed" else "a@example.com",
                job_payload=None
                if status == "suppressed"
                else payload_json(NOTIFICATIONS_QUEUE, DeliveryJobPayload(delivery_id=delivery_id)),
            )
            for event_id, (delivery_id, status) in enumerate(
                zip(ids, statuses, strict=True), start=1
            )
        ],
        queue=NOTIFICATIONS_QUEUE.name,
        max_attempts=1,
    )
    await db.execute(
        "UPDATE notification_deliveries SET status = 'sent', sent_at = now() "
        "WHERE event_id IN (1, 2)"
    )

    # Five outbox events: the leaderboard consumer has read two, the notifications one none.
    for _ in range(5):
        await db.execute(
            "INSERT INTO events (type, subject, payload) VALUES ('test.event', 's', '{}')"
        )
    # Consumers' cursors are positions (docs/events.md): position what committed (the relay
    # would, within milliseconds) and take the newest.
    await events_repo.position_committed(db, wait=True)
    newest = await db.fetchval("SELECT last_position FROM event_positions")
    await leaderboard_boards.advance_consumer_cursor(db, newest - 3)

    page = await scrape(client)
    expected_jobs = {
        ("github-ref", "queued"): 2,
        ("github-ref", "running"): 1,
        ("github-ref", "completed"): 2,
        ("github-ref", "failed"): 0,
        ("address-smoke", "failed"): 1,
        ("address-smoke", "completed"): 1,
        ("address-smoke", "queued"): 0,
        ("forge-test", "queued"): 0,
    }
    for (policy, status), count in expected_jobs.items():
        assert page[f'marketplace_verifier_jobs{{policy="{policy}",status="{status}"}}'] == count
    assert page['marketplace_verifier_results{passes="true",policy="github-ref"}'] == 2
    assert page['marketplace_verifier_results{passes="false",policy="github-ref"}'] == 0
    assert page['marketplace_verifier_results{passes="false",policy="address-smoke"}'] == 1
    assert page['marketplace_notification_deliveries{status="sent"}'] == 2
    assert page['marketplace_notification_deliveries{status="queued"}'] == 1
    assert page['marketplace_notification_deliveries{status="suppressed"}'] == 1
    assert page['marketplace_notification_deliveries{status="failed"}'] == 0
    assert page["marketplace_leaderboard_consumer_lag_events"] == 3
    assert page["marketplace_notification_consumer_lag_events"] == newest
    # The queue's own depth agrees (marketplace/jobs/metrics.py, unchanged).
    assert page['marketplace_jobs{queue="verifier",status="queued"}'] == 2

    await deliveries_repo.advance_consumer_cursor(db, newest)
    assert (await scrape(client))["marketplace_notification_consumer_lag_events"] == 0


async def test_two_frontends_report_the_same_global_figures(
    aiohttp_client: Any, client: Any, settings: Settings, app_routes: list[RouteTable]
) -> None:
    user = await signed_in(client)
    await offend(client, user, 1)
    await enqueue_verifier_job(client.app[keys.PG_POOL], user.user_id, "npm-test")
    other = await app_client(aiohttp_client, settings, app_routes)
    first = deployment_figures(await scrape(client))
    second = deployment_figures(await scrape(other))
    assert first == second
    assert first["marketplace_moderation_offenses_recorded"] == 1
    assert first['marketplace_verifier_jobs{policy="npm-test",status="queued"}'] == 1


async def test_a_scrape_survives_postgres_failing(client: Any, db: asyncpg.Connection) -> None:
    user = await signed_in(client)
    await offend(client, user, 1)
    assert (await scrape(client))["marketplace_moderation_offenses_recorded"] == 1
    # The statement fails (the table is renamed away): the scrape answers with the last values.
    await db.execute("ALTER TABLE moderation_offenses RENAME TO moderation_offenses_away")
    try:
        page = await scrape(client)
    finally:
        await db.execute("ALTER TABLE moderation_offenses_away RENAME TO moderation_offenses")
    assert page["marketplace_moderation_offenses_recorded"] == 1
    assert page['marketplace_notification_deliveries{status="sent"}'] == 0
