"""Queue declarations: explicit registry, module-level handlers, settings precedence."""

from __future__ import annotations

import pytest

from marketplace.config import Settings
from marketplace.jobs import InvalidPayload, JobContext, JobFailure, JobPayload
from marketplace.jobs.model import Backoff
from marketplace.jobs.registry import JobRegistry, QueueSpec
from marketplace.jobs.worker import WorkerConfig
from marketplace.verifier.execution import attempt_timeout, pool_size


class Payload(JobPayload):
    count: int = 0


class Other(JobPayload):
    count: int = 0


async def handle(ctx: JobContext[Payload]) -> None:
    return None


async def hook(conn: object, failures: object) -> None:
    return None


MAIL_QUEUE = QueueSpec("mail", Payload, handle)
VERIFY_QUEUE = QueueSpec("verify", Payload, handle)


def test_registry_lists_queues_in_declaration_order_and_refuses_duplicates() -> None:
    registry = JobRegistry([QueueSpec("b", Payload, handle), QueueSpec("a", Payload, handle)])
    assert registry.names() == ["b", "a"]
    assert registry.get("a").handler is handle
    assert "a" in registry and "c" not in registry
    with pytest.raises(ValueError, match="registered twice"):
        registry.add(QueueSpec("a", Payload, handle))
    with pytest.raises(KeyError, match="no handler registered for queue 'c'"):
        registry.get("c")


def test_handlers_must_be_importable_by_the_worker_process() -> None:
    async def local(ctx: JobContext[Payload]) -> None:
        return None

    async def local_hook(conn: object, failures: object) -> None:
        return None

    with pytest.raises(ValueError, match="the handler must be a module-level"):
        QueueSpec("q", Payload, local)
    with pytest.raises(ValueError, match="the handler must be a module-level"):
        QueueSpec("q", Payload, lambda ctx: local(ctx))
    with pytest.raises(ValueError, match="the failure hook must be a module-level"):
        QueueSpec("q", Payload, handle, on_failure=local_hook)
    QueueSpec("q", Payload, handle, on_failure=hook)


def test_queue_spec_checks_its_name() -> None:
    with pytest.raises(ValueError, match="queue name"):
        QueueSpec("Bad Name", Payload, handle)


def test_worker_count_precedence() -> None:
    settings = Settings(jobs_workers_per_queue=3, jobs_workers={"mail": 5})
    assert QueueSpec("other", Payload, handle).worker_count(settings) == 3
    assert QueueSpec("own", Payload, handle, workers=1).worker_count(settings) == 1
    assert QueueSpec("mail", Payload, handle, workers=1).worker_count(settings) == 5
    # A queue sized by a setting of its own: its accessor wins over `workers`, not over
    # jobs_workers.
    sized = Settings(verifier_pool_size=7, jobs_workers={"mail": 5})
    assert (
        QueueSpec("own", Payload, handle, workers=1, workers_from=pool_size).worker_count(sized)
        == 7
    )
    assert QueueSpec("mail", Payload, handle, workers_from=pool_size).worker_count(sized) == 5
    timed = QueueSpec("own", Payload, handle, timeout_seconds=9.0, timeout_from=attempt_timeout)
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
    config = WorkerConfig.from_settings(settings, QueueSpec("q", Payload, handle))
    assert config.concurrency == 7
    assert config.timeout_seconds == 40
    assert config.poll_interval_seconds == 0.25
    assert config.heartbeat_seconds == 4
    assert config.backoff == Backoff(0.5, 9)
    assert config.completed_retention_seconds == 7200
    own = WorkerConfig.from_settings(
        settings, QueueSpec("q", Payload, handle, concurrency=2, timeout_seconds=3)
    )
    assert (own.concurrency, own.timeout_seconds) == (2, 3)


def test_the_service_registry_holds_the_queues_the_capabilities_declare() -> None:
    from marketplace.http.capabilities import CAPABILITIES, Capability, declared_queues

    declared = [queue for cap in CAPABILITIES for queue in cap.queues]
    assert declared_queues().names() == [queue.name for queue in declared]
    mail = Capability(name="mail", summary="", queues=(MAIL_QUEUE,))
    verifier = Capability(name="verifier", summary="", queues=(VERIFY_QUEUE,))
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


def test_payloads_are_encoded_and_decoded_by_the_queues_model() -> None:
    spec = QueueSpec("q", Payload, handle)
    assert spec.encode(Payload(count=3)) == {"count": 3}
    assert spec.decode({"count": 3}) == Payload(count=3)
    with pytest.raises(TypeError, match="must be a Payload, not Other"):
        spec.encode(Other())  # type: ignore[arg-type]
    with pytest.raises(InvalidPayload, match=r"not a valid Payload: count: .*; extra: "):
        spec.decode({"count": "many", "extra": 1})
    with pytest.raises(InvalidPayload, match=r"\(payload\): "):
        spec.decode(["not", "an", "object"])


def test_a_failure_is_final_only_when_the_job_failed() -> None:
    from marketplace.jobs import JobStatus

    assert JobFailure(1, 2, JobStatus.FAILED, "x").final
    assert not JobFailure(1, 2, JobStatus.QUEUED, "x").final
