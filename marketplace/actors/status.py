"""What the actors answer about themselves: one frozen dataclass per answer, imported by the
actor that builds it and by every caller that reads it (frontends, the CLI, tests).

A leaf module (no import of the actors or of any domain package), so a caller can type an answer
without importing the actor class. Ray pickles these by reference to this module: a field added
here is known to both sides at once, and a field renamed shows to mypy at every reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class IndexedBatch:
    """The last batch the indexer committed (``BatchResult`` of marketplace/indexer/engine.py)."""

    from_block: int
    to_block: int
    head: int
    events: int
    projects: int
    reorg: bool


@dataclass(frozen=True)
class IndexerStatus:
    """``ChainIndexer.status``: this process's view of its loop (progress itself is in Postgres,
    freshness in Redis: marketplace/indexer/health.py)."""

    pid: int
    started_at: float  # wall-clock start of this actor process
    running: bool  # the loop task is alive (it ends only on ``stop``)
    subscribed: bool  # a ``newHeads`` subscription is open
    batches: int  # batches committed by this process
    errors: int  # failed polls (and failed starts) of this process
    last_error: str | None
    last_batch: IndexedBatch | None


@dataclass(frozen=True)
class JobWorkerStatus:
    """``JobWorkerActor.status``: one worker actor of one queue."""

    queue: str
    index: int
    owner: str  # the lease owner id of this process
    pid: int
    started_at: float
    running: bool  # the worker loop runs (false while it cannot start, e.g. no database)
    listening: bool  # LISTEN connection up: new jobs wake it at once
    stopping: bool = False
    active: tuple[int, ...] = ()  # ids of the jobs it runs now
    counts: dict[str, int] = field(default_factory=dict)  # outcomes since the process started
    last_error: str | None = None


@dataclass(frozen=True)
class ShardPing:
    """``ShardActor.ping``: the shard reached its database."""

    shard: int
    pid: int


@dataclass(frozen=True)
class LimiterStatus:
    """``NotificationLimiterActor.status``."""

    pid: int
    keys: int  # (recipient, event type) windows held in memory
    rebuilt_keys: int  # windows loaded from the delivery rows since the process started
    started_at: float
