"""Queue declarations: explicit registry, module-level handlers, settings precedence."""

from __future__ import annotations

import pytest

from marketplace.capabilities import resolve
from marketplace.config import Settings
from marketplace.jobs import JobContext
from marketplace.jobs.model import Backoff
from marketplace.jobs.registry import JobRegistry, QueueSpec
from marketplace.jobs.worker import WorkerConfig
from marketplace.verifier.execution import attempt_timeout, pool_size


async def handle(ctx: JobContext) -> None:
    return None


MAIL_QUEUE = QueueSpec("mail", handle)
VERIFY_QUEUE = QueueSpec("verify", handle)


def test_registry_lists_queues_in_declaration_order_and_refuses_duplicates() -> None:
    registry = JobRegistry([QueueSpec("b", handle), QueueSpec("a", handle)])
    assert registry.names() == ["b", "a"]
    assert registry.get("a").handler is handle
    assert "a" in registry and "c" not in registry
    with pytest.raises(ValueError, match="registered twice"):
        registry.add(QueueSpec("a", handle))
    with pytest.raises(KeyError, match="no handler registered for queue 'c'"):
        registry.get("c")


def test_handlers_must_be_importable_by_the_worker_process() -> None:
    async def local(ctx: JobContext) -> None:
        return None

    with pytest.raises(ValueError, match="module-level"):
        QueueSpec("q", local)
    with pytest.raises(ValueError, match="module-level"):
        QueueSpec("q", lambda ctx: local(ctx))


def test_queue_spec_checks_its_name() -> None:
    with pytest.raises(ValueError, match="queue name"):
        QueueSpec("Bad Name", handle)


def test_worker_count_precedence() -> None:
    settings = Settings(jobs_workers_per_queue=3, jobs_workers={"mail": 5})
    assert QueueSpec("other", handle).worker_count(settings) == 3
    assert QueueSpec("own", handle, workers=1).worker_count(settings) == 1
    assert QueueSpec("mail", handle, workers=1).worker_count(settings) == 5
    # A queue sized by a setting of its own: its accessor wins over `workers`, not over
    # jobs_workers.
    sized = Settings(verifier_pool_size=7, jobs_workers={"mail": 5})
    assert QueueSpec("own", handle, workers=1, workers_from=pool_size).worker_count(sized) == 7
    assert QueueSpec("mail", handle, workers_from=pool_size).worker_count(sized) == 5
    timed = QueueSpec("own", handle, timeout_seconds=9.0, timeout_from=attempt_timeout)
    assert timed.effective_timeout(sized) == sized.verifier_job_timeout_seconds


def test_jobs_workers_setting_is_bounded() -> None:
    with pytest.raises(ValueError, match="between 0 and 64"):
        Settings(jobs_workers={"mail": 65})


def test_worker_config_from_settings_and_queue() -> None:
    settings = Settings(
        jobs_concurrency=7,
        jobs_lease_seconds=12,
        jobs_poll_interval_ms=250,
        jobs_timeout_seconds=40,
        jobs_backoff_base_seconds=0.5,
        jobs_backoff_cap_seconds=9,
        jobs_completed_retention_hours=2,
    )
    config = WorkerConfig.from_settings(settings, QueueSpec("q", handle))
    assert config.concurrency == 7
    assert config.timeout_seconds == 40
    assert config.poll_interval_seconds == 0.25
    assert config.heartbeat_seconds == 4
    assert config.backoff == Backoff(0.5, 9)
    assert config.completed_retention_seconds == 7200
    own = WorkerConfig.from_settings(
        settings, QueueSpec("q", handle, concurrency=2, timeout_seconds=3)
    )
    assert (own.concurrency, own.timeout_seconds) == (2, 3)


def test_the_service_registry_holds_the_queues_the_capabilities_declare() -> None:
    from marketplace.capabilities import CAPABILITIES, Capability
    from marketplace.http.job_queue import declared_queues

    declared = [ref for cap in CAPABILITIES for ref in cap.queues]
    assert declared_queues().names() == [resolve(ref).name for ref in declared]
    mail = Capability(name="mail", summary="", queues=(f"{__name__}:MAIL_QUEUE",))
    verifier = Capability(name="verifier", summary="", queues=(f"{__name__}:VERIFY_QUEUE",))
    assert declared_queues((mail, verifier)).names() == ["mail", "verify"]
    with pytest.raises(ValueError, match="registered twice"):
        declared_queues((mail, mail))


def test_worker_actor_options() -> None:
    from marketplace.actors.job_worker import JobWorkerActor, worker_spec

    spec = worker_spec("mail", 2)
    options = spec.ray_options("ns")
    assert spec.cls is JobWorkerActor
    assert options["name"] == "job-worker-mail-2"
    assert options["namespace"] == "ns"
    assert options["get_if_exists"] is True
    assert options["scheduling_strategy"] == "SPREAD"
    assert options["max_restarts"] == -1
    assert options["lifetime"] == "detached"
    # status() and wake() are safe to repeat after a restart.
    assert options["max_task_retries"] == -1
    assert options["num_cpus"] == 0
