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
from typing import Any

# Queue names end up in actor names, metric labels and the Redis metrics hash (where `|`
# separates fields), so they are kept to a small safe alphabet; the table checks the same.
QUEUE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
DEFAULT_MAX_ATTEMPTS = 5
MAX_ERROR_CHARS = 4000


class JobStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


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


@dataclass(frozen=True)
class Job:
    """One claimed attempt of a job, as the handler sees it."""

    id: int
    queue: str
    payload: dict[str, Any]
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


def after_failure(
    job: Job, *, permanent: bool, backoff: Backoff, rng: random.Random | None = None
) -> Retry | Fail:
    """What a failed attempt leads to: another attempt after a backoff, or ``failed``."""
    if permanent:
        return Fail("permanent")
    if job.is_last_attempt:
        return Fail("exhausted")
    return Retry(backoff.delay(job.attempt, rng))


def describe_error(exc: BaseException, limit: int = MAX_ERROR_CHARS) -> str:
    """``last_error`` text: the exception line first (what an operator scans for), then the
    innermost frames, cut to ``limit`` characters."""
    message = str(exc)
    head = f"{type(exc).__qualname__}: {message}" if message else type(exc).__qualname__
    frames = traceback.format_tb(exc.__traceback__)[-5:]
    text = head + ("\n" + "".join(frames).rstrip() if frames else "")
    return text if len(text) <= limit else text[: limit - 1] + "…"
