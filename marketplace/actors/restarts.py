"""Counting actor restarts where every frontend can read them (docs/metrics.md).

A restarted actor is a new process that nobody scrapes; what survives it is Ray's own count
(``NumRestarts`` in the GCS) and Redis. So each long-lived actor's constructor calls
:func:`note_restart`: when Ray says this instance is a reconstruction, it adds one to its kind in
the Redis hash that every frontend mirrors into ``marketplace_actor_restarts_total{kind}``.

Best effort, off the constructor's path: the GCS lookup and the Redis write run on a daemon
thread with short timeouts, and any failure is a logged warning. A restart must never fail or
wait because the metric could not be written; a lost increment only undercounts.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings

import ray
import redis

from marketplace.metric_sources import ACTOR_RESTARTS_KEY

log = logging.getLogger(__name__)
REDIS_TIMEOUT_SECONDS = 2.0
# The GCS lookup (it opens a GCS connection of its own) waits this long, so it does not compete
# with the actor's start and first calls for CPU on a busy node.
CHECK_DELAY_SECONDS = 2.0


def note_restart(kind: str, redis_url: str) -> threading.Thread | None:
    """Count this actor's start under ``kind`` if Ray restarted it. Returns the thread doing it
    (tests join it), or None outside a Ray actor (a class used as plain Python)."""
    if not in_ray_actor():
        return None
    thread = threading.Thread(
        target=_record, args=(kind, redis_url), name="actor-restart-metric", daemon=True
    )
    thread.start()
    return thread


def in_ray_actor() -> bool:
    """Whether this process is a Ray actor's (not a driver, not a class used as plain Python)."""
    try:
        return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
    except Exception:
        log.warning("ray actor check failed", exc_info=True)
        return False


def _record(kind: str, redis_url: str) -> None:
    time.sleep(CHECK_DELAY_SECONDS)
    try:
        with warnings.catch_warnings():
            # Ray 2.60's property reads its own deprecated ``actor_id`` (a warning per start).
            warnings.simplefilter("ignore", DeprecationWarning)
            reconstructed = ray.get_runtime_context().was_current_actor_reconstructed
        if not reconstructed:
            return
        if not redis_url:
            return
        client = redis.Redis.from_url(
            redis_url,
            socket_timeout=REDIS_TIMEOUT_SECONDS,
            socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
        )
        try:
            client.hincrby(ACTOR_RESTARTS_KEY, kind, 1)
        finally:
            client.close()
        log.warning("actor restarted by ray", extra={"kind": kind})
    except Exception:
        log.warning("actor restart not counted", extra={"kind": kind}, exc_info=True)
