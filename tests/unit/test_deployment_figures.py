"""Deployment-wide metrics: the snapshot read from Postgres/Redis rows and the families /metrics
exports from it; the outcome label of a shard command."""

from __future__ import annotations

import asyncio
import math

from prometheus_client import CollectorRegistry, generate_latest

from marketplace.actors.keyed_shard import command_outcome
from marketplace.deployment_figures import (
    ACTOR_KINDS,
    DeploymentSnapshot,
    postgres_figures,
    restart_figures,
)
from marketplace.errors import NotFound, ServiceUnavailable
from marketplace.http.deployment_figures import DeploymentMetricsCollector
from marketplace.storage.repositories.deployment_figures import SnapshotRow
from marketplace.verifier.policy import PolicyId

ROW = SnapshotRow(
    verifier_jobs=[["github-ref", "queued", 3], ["npm-test", "completed", 2]],
    verifier_results=[["npm-test", True, 1], ["npm-test", False, 1]],
    deliveries=[["sent", 7], ["rate_limited", 2]],
    offenses_recorded=9,
    offenses_window=4,
    suspensions_active=1,
    newest_event_id=120,
    leaderboard_cursor=120,
    notification_cursor=100,
)


def exported(snapshot: DeploymentSnapshot) -> str:
    collector = DeploymentMetricsCollector()
    collector.snapshot = snapshot
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_postgres_row_to_snapshot_fills_every_label() -> None:
    figures = postgres_figures(ROW)
    verifier_jobs = figures["verifier_jobs"]
    assert isinstance(verifier_jobs, dict)
    assert len(verifier_jobs) == len(PolicyId) * 4
    assert verifier_jobs[("github-ref", "queued")] == 3
    assert verifier_jobs[("npm-test", "completed")] == 2
    assert verifier_jobs[("figma-ref", "failed")] == 0
    results = figures["verifier_results"]
    assert isinstance(results, dict)
    assert results[("npm-test", "true")] == 1 and results[("npm-test", "false")] == 1
    assert results[("github-ref", "true")] == 0
    assert figures["deliveries"] == {
        "queued": 0,
        "sent": 7,
        "failed": 0,
        "rate_limited": 2,
        "suppressed": 0,
    }
    assert figures["leaderboard_lag_events"] == 0
    assert figures["notification_lag_events"] == 20
    assert figures["offenses_recorded"] == 9
    assert figures["offenses_window"] == 4
    assert figures["suspensions_active"] == 1


def test_a_cursor_ahead_of_a_swept_outbox_is_no_negative_lag() -> None:
    figures = postgres_figures(ROW._replace(newest_event_id=0))
    assert figures["notification_lag_events"] == 0


def test_restart_hash_to_counts() -> None:
    restarts = restart_figures({"project-shard": "3", "indexer": "1", "junk": "x"})
    assert restarts == {**dict.fromkeys(ACTOR_KINDS, 0.0), "project-shard": 3, "indexer": 1}


def test_snapshot_to_metric_families() -> None:
    snapshot = DeploymentSnapshot(
        **postgres_figures(ROW),  # type: ignore[arg-type]
        indexer_stale=1.0,
        indexer_last_success_age_seconds=12.5,
        actor_restarts=restart_figures({"user-shard": "2"}),
    )
    text = exported(snapshot)
    for line in (
        'marketplace_verifier_jobs{policy="github-ref",status="queued"} 3.0',
        'marketplace_verifier_jobs{policy="cargo-test",status="running"} 0.0',
        'marketplace_verifier_results{passes="false",policy="npm-test"} 1.0',
        'marketplace_notification_deliveries{status="rate_limited"} 2.0',
        'marketplace_notification_deliveries{status="suppressed"} 0.0',
        'marketplace_actor_restarts_total{kind="user-shard"} 2.0',
        'marketplace_actor_restarts_total{kind="indexer"} 0.0',
        "marketplace_moderation_offenses_recorded 9.0",
        "marketplace_moderation_offenses_window 4.0",
        "marketplace_moderation_suspensions_active 1.0",
        "marketplace_leaderboard_consumer_lag_events 0.0",
        "marketplace_notification_consumer_lag_events 20.0",
        "marketplace_indexer_stale 1.0",
        "marketplace_indexer_last_success_age_seconds 12.5",
        "# TYPE marketplace_actor_restarts_total counter",
        "# TYPE marketplace_verifier_jobs gauge",
    ):
        assert line in text.splitlines(), line


def test_never_synced_indexer_is_infinitely_old() -> None:
    text = exported(DeploymentSnapshot())
    assert "marketplace_indexer_last_success_age_seconds +Inf" in text.splitlines()
    assert math.isinf(DeploymentSnapshot().indexer_last_success_age_seconds)


def test_no_snapshot_exports_nothing() -> None:
    assert "marketplace_verifier_jobs" not in exported_none()


def exported_none() -> str:
    registry = CollectorRegistry()
    registry.register(DeploymentMetricsCollector())
    return generate_latest(registry).decode()


async def test_shard_command_outcomes() -> None:
    loop = asyncio.get_running_loop()

    def settled(result: object = None, error: BaseException | None = None) -> asyncio.Future[None]:
        future: asyncio.Future[None] = loop.create_future()
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
        return future

    assert command_outcome(settled()) == "ok"
    assert command_outcome(settled(error=NotFound())) == "domain_error"
    assert command_outcome(settled(error=ServiceUnavailable())) == "unavailable"
    assert command_outcome(settled(error=RuntimeError())) == "error"
    cancelled: asyncio.Future[None] = loop.create_future()
    cancelled.cancel()
    assert command_outcome(cancelled) == "error"
