"""A durable job queue on Postgres, worked by Ray actors (docs/jobs.md)."""

from marketplace.jobs.model import Job, JobStatus, LeaseLost, PermanentJobError
from marketplace.jobs.producer import Enqueued, enqueue, enqueue_many
from marketplace.jobs.registry import JobContext, JobHandler, JobRegistry, QueueSpec

__all__ = [
    "Enqueued",
    "Job",
    "JobContext",
    "JobHandler",
    "JobRegistry",
    "JobStatus",
    "LeaseLost",
    "PermanentJobError",
    "QueueSpec",
    "enqueue",
    "enqueue_many",
]
