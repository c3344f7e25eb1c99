"""The job model and its pure rules: states, allowed transitions, retry backoff.

Everything here is plain Python without I/O, so the rules are unit-tested on their own; the SQL
in ``marketplace/storage/repositories/jobs.py`` enforces the same transitions with its ``WHERE``
clauses (a transition whose precondition no longer holds updates no row).
"""

from __future__ import annotations

import enum
import random
import re
import traceback
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict

# Queue names end up in actor names, metric labels and the Redis metrics hash (where `|`
# separates fields), so they are kept to a small safe alphabet; the table checks the same.
QUEUE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
DEFAULT_MAX_ATTEMPTS = 5
MAX_ERROR_CHARS = 4000


class JobStatus(enum.StrEnum):
    """A job's state; the ``jobs.status`` column holds these values as text."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class AttemptPhase(enum.Enum):
    """Where one attempt is, as its worker sees it: ``RUNNING`` (the handler runs; its lease is
    renewed) -> ``COMPLETING`` (the completion is being written; the heartbeat leaves it alone)
    -> ``COMPLETED``; or ``FINISHING`` (the attempt failed or is handed back, and the worker is
    recording it). A completion that fails returns the attempt to ``RUNNING``."""

    RUNNING = "running"
    COMPLETING = "completing"
    COMPLETED = "completed"
    FINISHING = "finishing"


class JobPayload(BaseModel):
    """Base of every queue's payload model (``QueueSpec[P]``): the JSON object stored in
    ``jobs.payload``, validated when it is enqueued and again when a worker claims it. Field
    names in the JSON are the aliases (camelCase, as stored before payloads were typed); Python
    code uses the field names. A field the model does not know is refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def to_json(self) -> dict[str, object]:
        # A value of the wrong type (a model built with model_construct) is an error here, not
        # a warning: what is stored must validate when a worker claims it.
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, warnings="error")


P = TypeVar("P", bound=JobPayload)


# (from, to) pairs a job may take. A running job returns to queued when an attempt fails with
# attempts left; a running job whose lease expired is claimed again (running -> running with a
# new owner) or, when no attempt is left, failed by the reaper.
TRANSITIONS: frozenset[tuple[JobStatus, JobStatus]] = frozenset(
    {
        (JobStatus.QUEUED, JobStatus.RUNNING),
        (JobStatus.RUNNING, JobStatus.RUNNING),
        (JobStatus.RUNNING, JobStatus.COMPLETED),
        (JobStatus.RUNNING, JobStatus.QUEUED),
        (JobStatus.RUNNING, JobStatus.FAILED),
    }
)


def allowed(source: JobStatus, target: JobStatus) -> bool:
    return (source, target) in TRANSITIONS


def check_queue_name(name: str) -> str:
    if not QUEUE_NAME.fullmatch(name):
        raise ValueError(
            f"queue name {name!r} must match {QUEUE_NAME.pattern} (it names actors and metrics)"
        )
    return name


class PermanentJobError(Exception):
    """Raised by a handler for a failure no retry can fix (bad payload, deleted subject): the
    job goes straight to ``failed`` with this error, whatever attempts are left."""


class LeaseLost(Exception):
    """This worker no longer holds the job's lease (it expired and another worker claimed the
    job, or the job finished elsewhere): nothing this worker does for the job may commit."""


class InvalidPayload(PermanentJobError):
    """The claimed job's payload does not validate against its queue's model: no attempt could
    succeed, so the job fails at once (its ``error_message`` says which fields)."""


@dataclass(frozen=True)
class Job(Generic[P]):
    """One claimed attempt of a job, as the handler sees it."""

    id: int
    queue: str
    payload: P
    # The number of this attempt (1 on the first run).
    attempt: int
    max_attempts: int
    created_at: datetime
    # When the job became due (enqueue time, requested delay or backoff).
    due_at: datetime
    idempotency_key: str | None = None

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter (AWS Architecture Blog, "Exponential Backoff And
    Jitter"): the delay after attempt ``n`` is uniform in ``[0, min(cap, base * 2**(n-1))]``.
    Full jitter spreads the retries of jobs that failed together (a dependency outage) instead
    of sending them back in synchronised waves."""

    base_seconds: float
    cap_seconds: float

    def __post_init__(self) -> None:
        if self.base_seconds <= 0 or self.cap_seconds <= 0:
            raise ValueError("backoff base and cap must be positive")

    def ceiling(self, attempt: int) -> float:
        """Upper bound of the delay after the ``attempt``-th failed attempt (1-based)."""
        if attempt < 1:
            raise ValueError("attempts are counted from 1")
        # Cap the exponent first: 2**attempt overflows a float long before attempts run out.
        exponent = min(attempt - 1, 62)
        return min(self.cap_seconds, self.base_seconds * 2.0**exponent)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        return (rng or random).uniform(0.0, self.ceiling(attempt))


@dataclass(frozen=True)
class Retry:
    delay_seconds: float


@dataclass(frozen=True)
class Fail:
    reason: str  # "permanent" or "exhausted"


@dataclass(frozen=True)
class JobFailure:
    """A failed attempt as the queue records it, handed to the queue's ``on_failure`` hook
    inside the transaction that records it (so a domain row that mirrors the job's outcome
    changes with it). ``status`` is the job's state afterwards: ``QUEUED`` (another attempt
    follows) or ``FAILED`` (final)."""

    job_id: int
    attempt: int
    status: JobStatus
    # API-safe: the exception's type and message, never a traceback.
    error_message: str

    @property
    def final(self) -> bool:
        return self.status is JobStatus.FAILED


def after_failure(
    attempt: int,
    max_attempts: int,
    *,
    permanent: bool,
    backoff: Backoff,
    rng: random.Random | None = None,
) -> Retry | Fail:
    """What a failed attempt (the ``attempt``-th of ``max_attempts``) leads to: another attempt
    after a backoff, or ``failed``."""
    if permanent:
        return Fail("permanent")
    if attempt >= max_attempts:
        return Fail("exhausted")
    return Retry(backoff.delay(attempt, rng))


def error_message(exc: BaseException, limit: int = MAX_ERROR_CHARS) -> str:
    """``error_message`` text, the failure as an API may show it: the exception's type and
    message, without frames, cut to ``limit`` characters."""
    message = str(exc)
    head = f"{type(exc).__qualname__}: {message}" if message else type(exc).__qualname__
    return head if len(head) <= limit else head[: limit - 1] + "…"


def describe_error(exc: BaseException, limit: int = MAX_ERROR_CHARS) -> str:
    """``last_error`` text, for operators: the exception line first (what an operator scans
    for), then the innermost frames, cut to ``limit`` characters."""
    frames = traceback.format_tb(exc.__traceback__)[-5:]
    text = error_message(exc, limit) + ("\n" + "".join(frames).rstrip() if frames else "")
    return text if len(text) <= limit else text[: limit - 1] + "…"
