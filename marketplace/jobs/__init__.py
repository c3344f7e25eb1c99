"""A durable job queue on Postgres, worked by Ray actors (docs/jobs.md)."""

from marketplace.jobs.model import (
    AttemptPhase,
    InvalidPayload,
    Job,
    JobFailure,
    JobPayload,
    JobStatus,
    LeaseLost,
    PermanentJobError,
)
from marketplace.jobs.producer import (
    Enqueued,
    enqueue,
    enqueue_many,
    new_job,
    new_jobs,
    payload_json,
)
from marketplace.jobs.registry import (
    FailureHook,
    JobContext,
    JobHandler,
    JobRegistry,
    QueueSpec,
)

__all__ = [
    "AttemptPhase",
    "Enqueued",
    "FailureHook",
    "InvalidPayload",
    "Job",
    "JobContext",
    "JobFailure",
    "JobHandler",
    "JobPayload",
    "JobRegistry",
    "JobStatus",
    "LeaseLost",
    "PermanentJobError",
    "QueueSpec",
    "enqueue",
    "enqueue_many",
    "new_job",
    "new_jobs",
    "payload_json",
]
