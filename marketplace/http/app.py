"""The aiohttp application factory.

Each shared resource is one context generator, so cleanup runs exactly for what started:
Postgres pool, then Redis, then Ray; then each capability's own contexts, in the order of the
explicit list in :mod:`marketplace.http.capabilities`, which also supplies the routes, the guards
and the job queues.
They run as one ``cleanup_ctx`` entry (:func:`_in_order`): when one fails to start, those
already started are stopped at once. aiohttp would leave them running until someone called the
app's cleanup, which nobody does after a failed startup (a test client's server, for one): the
event relay kept relaying, holding the relay lock, in the test process of a CI run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

import redis.asyncio as aioredis
from aiohttp import web

from marketplace.actors.keyed_shard import ShardRouter
from marketplace.actors.runtime import ActorRuntime
from marketplace.aio import cancel_and_wait
from marketplace.auth import NoApiKeys, SessionVerifier
from marketplace.config import Settings
from marketplace.http import keys
from marketplace.http.capabilities import CAPABILITIES, AppContext, declared_queues, ordered_guards
from marketplace.http.cors import install_cors
from marketplace.http.middlewares import request_context
from marketplace.http.ratelimit import RATE_LIMITER, RateLimiter
from marketplace.http.routing import GUARD_HOOKS, ROUTES, Route, RouteTable, make_endpoint
from marketplace.interpreter import pin_recursion_limit
from marketplace.logs import AccessLog
from marketplace.outbox.relay import EventRelay, RelayConfig
from marketplace.redis_client import Redis
from marketplace.shards import ShardFamily
from marketplace.storage.pool import create_pool

log = logging.getLogger(__name__)

ACCESS_LOG_FLUSH_SECONDS = 0.2


async def _access_log(app: web.Application) -> AsyncIterator[None]:
    access_log = app[keys.ACCESS_LOG]

    async def flush_forever() -> None:
        while True:
            await asyncio.sleep(ACCESS_LOG_FLUSH_SECONDS)
            access_log.flush()

    task = asyncio.create_task(flush_forever())
    yield
    await cancel_and_wait(task)
    access_log.flush()


async def _postgres(app: web.Application) -> AsyncIterator[None]:
    settings = app[keys.SETTINGS]
    app[keys.PG_POOL] = await create_pool(
        settings.database_url,
        min_size=settings.db_pool_min_size,
        max_size=settings.db_pool_max_size,
    )
    yield
    await app[keys.PG_POOL].close()


# Commands wait up to REDIS_POOL_WAIT_SECONDS for a free connection instead of failing at once:
# redis-py's default pool refuses the 101st concurrent command (MaxConnectionsError, a 503 here),
# which a burst of clients reaches at once: 500 event streams reconnecting after a frontend
# restart got 182 such 503s in bench/stream_fanout.py --opening 500.
REDIS_MAX_CONNECTIONS = 100
REDIS_POOL_WAIT_SECONDS = 5.0


async def _redis(app: web.Application) -> AsyncIterator[None]:
    pool = aioredis.BlockingConnectionPool.from_url(
        app[keys.SETTINGS].redis_url,
        decode_responses=True,
        max_connections=REDIS_MAX_CONNECTIONS,
        timeout=REDIS_POOL_WAIT_SECONDS,
    )
    client = Redis.from_pool(pool)
    await client.ping()
    app[keys.REDIS] = client
    app[RATE_LIMITER] = RateLimiter(client, app[keys.SETTINGS])
    yield
    await client.aclose()


async def _ray(app: web.Application) -> AsyncIterator[None]:
    runtime = ActorRuntime(app[keys.SETTINGS], database_url=app[keys.SETTINGS].database_url)
    try:
        await runtime.connect_async()
        app[keys.ACTORS] = runtime
        app[keys.PROJECT_SHARDS] = ShardRouter(runtime, ShardFamily.PROJECT)
        # Ready means the write path runs: serve once the shards' processes started (a start
        # slower than its budget is logged, and readiness says so, rather than holding reads
        # back for ever).
        await app[keys.PROJECT_SHARDS].wait_started()
    except BaseException:
        # Interrupted while connecting or while the shards start (Ctrl-C as `up` starts): a
        # connect goes on in its thread. Wait for it and stop what it started, rather than leave
        # a private Ray runtime to whoever cleans up after this process.
        runtime.shutdown()
        raise
    # User shards start on first use: until moderation writes, none is needed.
    app[keys.USER_SHARDS] = ShardRouter(runtime, ShardFamily.USER)
    # A lost Ray runtime degrades actor-backed routes to 503 while this reconnects; reads from
    # Postgres never wait for it.
    supervisor = asyncio.create_task(runtime.supervise())
    yield
    await cancel_and_wait(supervisor)
    runtime.shutdown()
    log.info("ray runtime stopped")


async def _event_relay(app: web.Application) -> AsyncIterator[None]:
    """The change-event relay (docs/events.md): active in one frontend, standby in the others."""
    settings = app[keys.SETTINGS]
    if not settings.events_relay_enabled:
        yield
        return
    relay = EventRelay(settings.database_url, app[keys.REDIS], RelayConfig.from_settings(settings))
    task = asyncio.create_task(relay.run(), name="event-relay")
    yield
    await cancel_and_wait(task)


def create_app(settings: Settings, extra_routes: Sequence[RouteTable] = ()) -> web.Application:
    """Build the app. ``settings.database_url`` and ``redis_url`` must be set by now.

    Capabilities come from the one explicit list in :mod:`marketplace.http.capabilities`;
    ``extra_routes`` adds route tables beyond them (tests use it).
    """
    if not settings.database_url or not settings.redis_url:
        raise ValueError("create_app needs database_url and redis_url")
    app = web.Application(middlewares=[request_context], client_max_size=settings.max_body_bytes)
    app[keys.SETTINGS] = settings
    app[keys.SESSION_VERIFIER] = SessionVerifier(settings)
    app[keys.API_KEY_RESOLVER] = NoApiKeys()
    app[GUARD_HOOKS] = []
    app[keys.AFTER_REQUEST_HOOKS] = []
    app[keys.METRICS_REFRESHERS] = []
    app[keys.ACCESS_LOG] = AccessLog(
        enabled=logging.getLogger("marketplace.access").isEnabledFor(logging.INFO)
        and logging.getLogger().isEnabledFor(logging.INFO),
        json_lines=settings.log_json,
    )
    contexts: list[AppContext] = [_access_log, _postgres, _redis, _ray, _event_relay]

    app[keys.JOB_REGISTRY] = declared_queues(CAPABILITIES)
    routes: list[Route] = []
    for capability in CAPABILITIES:
        for setup in capability.setup:
            setup(app)
        contexts.extend(capability.contexts)
        for table in capability.routes:
            routes.extend(table.routes)
    app[GUARD_HOOKS] = ordered_guards(CAPABILITIES)
    for table in extra_routes:
        routes.extend(table.routes)
    for route in routes:
        app.router.add_route(route.method, route.path, make_endpoint(route), name=route.name)
    app[ROUTES] = routes
    # Browsers on other origins (docs/security.md); nothing when no origin is listed.
    install_cors(app, settings.cors_origin_list)
    app.cleanup_ctx.append(_in_order(contexts, settings.context_stop_seconds))
    pin_recursion_limit()
    return app


def _in_order(contexts: Sequence[AppContext], stop_seconds: float) -> AppContext:
    """The contexts as one: started in order, stopped in reverse; if one fails to start, the
    started ones are stopped before the failure propagates. Each is stopped as on a normal
    shutdown (its code after ``yield`` runs): the failure is not thrown into them."""

    async def run(app: web.Application) -> AsyncIterator[None]:
        started: list[tuple[str, contextlib.AbstractAsyncContextManager[object]]] = []
        try:
            for context in contexts:
                # As aiohttp takes them: an async context manager, or an async generator.
                made: object = context(app)
                if not isinstance(made, contextlib.AbstractAsyncContextManager):
                    made = contextlib.asynccontextmanager(context)(app)
                await made.__aenter__()
                started.append((f"{context.__module__}.{context.__qualname__}", made))
        except BaseException:
            await _stop_all(started, stop_seconds)
            raise
        try:
            yield
        finally:
            await _stop_all(started, stop_seconds)

    return run


async def _stop_all(
    started: list[tuple[str, contextlib.AbstractAsyncContextManager[object]]],
    stop_seconds: float,
) -> None:
    failures: list[BaseException] = []
    for name, context in reversed(started):
        try:
            async with asyncio.timeout(stop_seconds):
                await context.__aexit__(None, None, None)
        except TimeoutError:
            log.error("app context %s did not stop within %.0f s", name, stop_seconds)
        except (Exception, asyncio.CancelledError) as exc:
            failures.append(exc)
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise BaseExceptionGroup("several app contexts failed to stop", failures)
