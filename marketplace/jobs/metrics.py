"""Job metrics across processes.

Workers run in Ray actor processes that Prometheus does not scrape, so the figures reach the
frontend's ``/metrics`` two ways (docs/jobs.md, "Metrics"):

- queue depth is read from Postgres by the frontend at scrape time (cached for
  ``jobs_metrics_cache_seconds``): it is a fact about the table, not about any worker;
- attempts, outcomes and the latency histograms are events seen by workers. Each worker adds
  them up in memory and flushes the increments about once a second into one Redis hash
  (``HINCRBY``/``HINCRBYFLOAT``, so concurrent workers add up), which the frontend mirrors.

Both are cluster-wide figures: every frontend exports the same values, so dashboards aggregate
them with ``max`` (not ``sum``) across frontend instances. Losing Redis loses at most the
increments of the last second; jobs never wait for metrics.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import asyncpg
import redis.asyncio as aioredis

from marketplace.aio import AtMostEvery, FlushLoop, within
from marketplace.storage.repositories import jobs as repo

log = logging.getLogger(__name__)

METRICS_KEY = "marketplace:jobs:metrics"
# queued -> running: seconds from becoming due to being claimed.
WAIT_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
)  # fmt: skip
# running -> done: seconds of one attempt, by its outcome.
RUN_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900,
)  # fmt: skip
# completed: done. retried: failed, another attempt is scheduled. failed: failed for good
# (permanent error, last attempt failed, or last attempt's lease expired). lease_lost: this
# worker lost the lease and its result was discarded (another worker owns the job now).
# unrecorded: the failure could not be written (Postgres unreachable); the lease will expire and
# the job be claimed again.
OUTCOMES = ("completed", "retried", "failed", "lease_lost", "unrecorded")
STATUSES = ("queued", "running", "failed")
FLUSH_SECONDS = 1.0


def bucket_label(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def _bucket_for(value: float, buckets: tuple[float, ...]) -> str:
    for bound in buckets:
        if value <= bound:
            return bucket_label(bound)
    return "+Inf"


class JobMetricsRecorder:
    """Worker side: accumulate increments, flush them to the Redis hash in one round trip."""

    def __init__(self, redis: aioredis.Redis | None) -> None:
        self._redis = redis
        self._ints: defaultdict[str, int] = defaultdict(int)
        self._floats: defaultdict[str, float] = defaultdict(float)
        self._loop = FlushLoop(self.flush, FLUSH_SECONDS, name="job-metrics", log=log)

    def claimed(self, queue: str, waited_seconds: float) -> None:
        self._ints[f"attempts|{queue}"] += 1
        self._ints[f"wait|{queue}|{_bucket_for(waited_seconds, WAIT_BUCKETS)}"] += 1
        self._floats[f"wait_sum|{queue}"] += max(0.0, waited_seconds)

    def finished(self, queue: str, outcome: str, run_seconds: float) -> None:
        self._ints[f"outcome|{queue}|{outcome}"] += 1
        self._ints[f"run|{queue}|{outcome}|{_bucket_for(run_seconds, RUN_BUCKETS)}"] += 1
        self._floats[f"run_sum|{queue}|{outcome}"] += run_seconds

    def reaped(self, queue: str, count: int) -> None:
        self._ints[f"outcome|{queue}|failed"] += count

    def start(self) -> None:
        if self._redis is not None:
            self._loop.start()

    async def close(self) -> None:
        await self._loop.stop()
        await self.flush()

    async def flush(self) -> None:
        if self._redis is None or not (self._ints or self._floats):
            return
        ints, self._ints = self._ints, defaultdict(int)
        floats, self._floats = self._floats, defaultdict(float)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for name, count in ints.items():
                    pipe.hincrby(METRICS_KEY, name, count)
                for name, amount in floats.items():
                    pipe.hincrbyfloat(METRICS_KEY, name, amount)
                await pipe.execute()
        except Exception:
            # Keep the increments for the next flush: counters only ever add up.
            for name, count in ints.items():
                self._ints[name] += count
            for name, amount in floats.items():
                self._floats[name] += amount
            log.debug("job metrics flush failed", exc_info=True)


@dataclass
class HistogramData:
    # Non-cumulative counts by bucket label ("0.5", "+Inf").
    counts: dict[str, float] = field(default_factory=dict)
    sum: float = 0.0

    def cumulative(self, buckets: tuple[float, ...]) -> list[tuple[str, float]]:
        running = 0.0
        result = []
        for bound in (*buckets, math.inf):
            label = bucket_label(bound)
            running += self.counts.get(label, 0.0)
            result.append((label, running))
        return result


@dataclass
class JobMetricsSnapshot:
    # (queue, status) -> jobs
    depth: dict[tuple[str, str], float] = field(default_factory=dict)
    due: dict[str, float] = field(default_factory=dict)
    oldest_due_seconds: dict[str, float] = field(default_factory=dict)
    attempts: dict[str, float] = field(default_factory=dict)
    # (queue, outcome) -> count
    outcomes: dict[tuple[str, str], float] = field(default_factory=dict)
    wait: dict[str, HistogramData] = field(default_factory=dict)
    # (queue, outcome) -> histogram
    run: dict[tuple[str, str], HistogramData] = field(default_factory=dict)


def parse_hash(fields: dict[str, str], snapshot: JobMetricsSnapshot) -> None:
    """Fold the Redis hash written by :class:`JobMetricsRecorder` into ``snapshot``."""
    for name, raw in fields.items():
        try:
            value = float(raw)
        except ValueError:
            continue
        parts = name.split("|")
        kind = parts[0]
        if kind == "attempts" and len(parts) == 2:
            snapshot.attempts[parts[1]] = value
        elif kind == "outcome" and len(parts) == 3:
            snapshot.outcomes[(parts[1], parts[2])] = value
        elif kind == "wait" and len(parts) == 3:
            snapshot.wait.setdefault(parts[1], HistogramData()).counts[parts[2]] = value
        elif kind == "wait_sum" and len(parts) == 2:
            snapshot.wait.setdefault(parts[1], HistogramData()).sum = value
        elif kind == "run" and len(parts) == 4:
            key = (parts[1], parts[2])
            snapshot.run.setdefault(key, HistogramData()).counts[parts[3]] = value
        elif kind == "run_sum" and len(parts) == 3:
            snapshot.run.setdefault((parts[1], parts[2]), HistogramData()).sum = value


async def read_snapshot(
    pool: asyncpg.Pool, redis: aioredis.Redis | None, queues: Iterable[str]
) -> JobMetricsSnapshot:
    """Depth from Postgres, event counters from Redis. Registered queues appear with zeros, so
    an empty queue is a 0 rather than a missing series."""
    snapshot = JobMetricsSnapshot()
    for queue in queues:
        for status in STATUSES:
            snapshot.depth[(queue, status)] = 0.0
        snapshot.due[queue] = 0.0
        snapshot.oldest_due_seconds[queue] = 0.0
    for row in await repo.depth(pool):
        queue = row.queue
        snapshot.depth[(queue, row.status)] = float(row.jobs)
        if row.status == "queued":
            snapshot.due[queue] = float(row.due)
            snapshot.oldest_due_seconds[queue] = float(row.oldest_due_seconds)
    if redis is not None:
        try:
            fields = await redis.hgetall(METRICS_KEY)
        except Exception:
            log.debug("job metrics unavailable in Redis", exc_info=True)
        else:
            parse_hash({_text(k): _text(v) for k, v in fields.items()}, snapshot)
    return snapshot


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class CachedSnapshot:
    """The frontend's view, refreshed at most every ``max_age`` seconds however often
    Prometheus (or several Prometheus servers) scrape."""

    def __init__(self, max_age: float, *, read_timeout: float) -> None:
        self._latest = AtMostEvery(max_age, JobMetricsSnapshot())
        self.read_timeout = read_timeout

    async def refresh(
        self, pool: asyncpg.Pool, redis: aioredis.Redis | None, queues: Iterable[str]
    ) -> JobMetricsSnapshot:
        """The current figures; ``TimeoutError`` when they take longer than ``read_timeout``
        (the caller keeps exporting the last ones)."""
        return await self._latest.get(
            lambda: within(self.read_timeout, read_snapshot(pool, redis, queues))
        )
