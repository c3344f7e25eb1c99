"""Typed application keys: the shared resources of the aiohttp app, by type.

A leaf of ``marketplace.http``: it imports no other module of the package (a test checks), so
every HTTP module can import it without a cycle. Keys whose value type belongs to another HTTP
module live beside that type instead (``routing.ROUTES``, ``routing.GUARD_HOOKS``,
``ratelimit.RATE_LIMITER``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import asyncpg
import redis.asyncio as aioredis
from aiohttp import web

from marketplace.auth import ApiKeyResolver, SessionVerifier
from marketplace.config import Settings
from marketplace.identity.session_recorder import SessionRecorder
from marketplace.jobs.registry import JobRegistry
from marketplace.logs import AccessLog
from marketplace.verifier.execution import ExecutorReports
from marketplace.wordfilter.terms import TermFilter

if TYPE_CHECKING:
    from marketplace.actors.job_worker import JobWorkers
    from marketplace.actors.keyed_shard import ShardRouter
    from marketplace.actors.runtime import ActorRuntime

SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)
DATABASE_URL: web.AppKey[str] = web.AppKey("database_url", str)
REDIS_URL: web.AppKey[str] = web.AppKey("redis_url", str)
PG_POOL: web.AppKey[asyncpg.Pool] = web.AppKey("pg_pool", asyncpg.Pool)
REDIS: web.AppKey[aioredis.Redis] = web.AppKey("redis", aioredis.Redis)
ACTORS: web.AppKey[ActorRuntime] = web.AppKey("actors")
PROJECT_SHARDS: web.AppKey[ShardRouter] = web.AppKey("project_shards")
USER_SHARDS: web.AppKey[ShardRouter] = web.AppKey("user_shards")
# The offensive-term filter of this process, built once at startup (see moderation_gate).
TERM_FILTER: web.AppKey[TermFilter] = web.AppKey("term_filter", TermFilter)
# The queues whose workers this frontend starts (declared by capabilities; tests swap it).
JOB_REGISTRY: web.AppKey[JobRegistry] = web.AppKey("job_registry", JobRegistry)
JOB_WORKERS: web.AppKey[JobWorkers] = web.AppKey("job_workers")
SESSION_VERIFIER: web.AppKey[SessionVerifier] = web.AppKey("session_verifier", SessionVerifier)
API_KEY_RESOLVER: web.AppKey[ApiKeyResolver] = web.AppKey("api_key_resolver")
# Remembers the users of verified session tokens, off the request path (set by the identity
# capability; see marketplace.identity.session_recorder).
SESSION_RECORDER: web.AppKey[SessionRecorder] = web.AppKey("session_recorder", SessionRecorder)
# Called after every response with the request and the final status (e.g. the API-key usage
# audit). Hooks must not block: they run on the request path, so they only enqueue work.
AfterRequestHook = Callable[[web.Request, int], None]
AFTER_REQUEST_HOOKS: web.AppKey[list[AfterRequestHook]] = web.AppKey("after_request_hooks", list)

# Awaited before each /metrics scrape to mirror metrics that other processes (Ray actors) keep
# in shared storage into this process's registry.
MetricsRefresher = Callable[[web.Application], Awaitable[None]]
METRICS_REFRESHERS: web.AppKey[list[MetricsRefresher]] = web.AppKey("metrics_refreshers", list)

ACCESS_LOG: web.AppKey[AccessLog] = web.AppKey("access_log", AccessLog)

# Per-request storage.
REQUEST_ID: web.RequestKey[str] = web.RequestKey("request_id", str)
PRINCIPAL: web.RequestKey[Any] = web.RequestKey("principal")
# perf_counter() at which a streaming response was opened (see marketplace.http.streaming).
STREAM_OPENED_AT: web.RequestKey[float] = web.RequestKey("stream_opened_at", float)
STREAM_RESPONSE: web.RequestKey[web.StreamResponse] = web.RequestKey(
    "stream_response", web.StreamResponse
)
# What the verifier's policy executors report they can run (refreshed in the background); its
# `latest` is None while no executor has answered or when this app starts none (then this
# node's own probe decides).
VERIFIER_POLICIES: web.AppKey[ExecutorReports] = web.AppKey("verifier_policies", ExecutorReports)
