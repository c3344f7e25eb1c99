"""Typed application keys: every shared resource of the aiohttp app, by type."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import asyncpg
import redis.asyncio as aioredis
from aiohttp import web

from marketplace.auth import ApiKeyResolver, SessionVerifier
from marketplace.config import Settings
from marketplace.jobs.registry import JobRegistry
from marketplace.logs import AccessLog

if TYPE_CHECKING:
    from marketplace.actors.job_worker import JobWorkers
    from marketplace.actors.project_shard import ProjectShards
    from marketplace.actors.runtime import ActorRuntime
    from marketplace.http.ratelimit import RateLimiter
    from marketplace.http.routing import Call, Route

SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)
DATABASE_URL: web.AppKey[str] = web.AppKey("database_url", str)
REDIS_URL: web.AppKey[str] = web.AppKey("redis_url", str)
PG_POOL: web.AppKey[asyncpg.Pool] = web.AppKey("pg_pool", asyncpg.Pool)
REDIS: web.AppKey[aioredis.Redis] = web.AppKey("redis", aioredis.Redis)
ACTORS: web.AppKey[ActorRuntime] = web.AppKey("actors")
PROJECT_SHARDS: web.AppKey[ProjectShards] = web.AppKey("project_shards")
# The queues whose workers this frontend starts (declared by capabilities; tests swap it).
JOB_REGISTRY: web.AppKey[JobRegistry] = web.AppKey("job_registry", JobRegistry)
JOB_WORKERS: web.AppKey[JobWorkers] = web.AppKey("job_workers")
SESSION_VERIFIER: web.AppKey[SessionVerifier] = web.AppKey("session_verifier", SessionVerifier)
API_KEY_RESOLVER: web.AppKey[ApiKeyResolver] = web.AppKey("api_key_resolver")
RATE_LIMITER: web.AppKey[RateLimiter] = web.AppKey("rate_limiter")
# Checks run, in order, after the verified-email check of every guarded mutation
# (spec section 5 rules 7-8); the app factory fills it from the capabilities' guards, in
# marketplace.capabilities.GUARD_ORDER.
GuardHook = Callable[["Call[Any, Any, Any]"], Awaitable[None]]
GUARD_HOOKS: web.AppKey[list[GuardHook]] = web.AppKey("guard_hooks", list)
# Called after every response with the request and the final status (e.g. the API-key usage
# audit). Hooks must not block: they run on the request path, so they only enqueue work.
AfterRequestHook = Callable[[web.Request, int], None]
AFTER_REQUEST_HOOKS: web.AppKey[list[AfterRequestHook]] = web.AppKey("after_request_hooks", list)

# Awaited before each /metrics scrape to mirror metrics that other processes (Ray actors) keep
# in shared storage into this process's registry.
MetricsRefresher = Callable[[web.Application], Awaitable[None]]
METRICS_REFRESHERS: web.AppKey[list[MetricsRefresher]] = web.AppKey("metrics_refreshers", list)

ACCESS_LOG: web.AppKey[AccessLog] = web.AppKey("access_log", AccessLog)

# Every route the app registered, in registration order (the OpenAPI document is built from it).
ROUTES: web.AppKey[list[Route]] = web.AppKey("routes", list)

# Per-request storage.
REQUEST_ID: web.RequestKey[str] = web.RequestKey("request_id", str)
PRINCIPAL: web.RequestKey[Any] = web.RequestKey("principal")
# perf_counter() at which a streaming response was opened (see marketplace.http.streaming).
STREAM_OPENED_AT: web.RequestKey[float] = web.RequestKey("stream_opened_at", float)
STREAM_RESPONSE: web.RequestKey[web.StreamResponse] = web.RequestKey(
    "stream_response", web.StreamResponse
)
