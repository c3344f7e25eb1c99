"""The retention sweep: raw evidence and execution logs of verifier jobs are deleted once
``retentionExpiresAt`` (completion + ``MARKETPLACE_VERIFIER_RETENTION_DAYS``) has passed, and
the attempts' log of a failed job as many days after it failed; the summary (result, evidence,
attestation) stays. Idempotent, so every frontend may run it."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from marketplace.storage.repositories import verifier_jobs as repo

log = logging.getLogger(__name__)

SWEEP_INTERVAL_SECONDS = 600.0
SWEEP_BATCH = 1000


async def sweep(pool: asyncpg.Pool, retention_days: int) -> int:
    """Delete every expired raw evidence now; returns how many jobs were swept."""
    total = 0
    while True:
        swept = await repo.sweep_expired(pool, retention_days, SWEEP_BATCH)
        total += swept
        if swept < SWEEP_BATCH:
            return total


async def sweep_forever(
    pool: asyncpg.Pool, retention_days: int, interval: float = SWEEP_INTERVAL_SECONDS
) -> None:
    while True:
        try:
            swept = await sweep(pool, retention_days)
            if swept:
                log.info("verifier raw evidence past retention deleted", extra={"jobs": swept})
        except Exception:
            log.warning("verifier retention sweep failed; retrying later", exc_info=True)
        await asyncio.sleep(interval)
