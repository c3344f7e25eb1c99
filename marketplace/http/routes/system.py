"""System endpoints: health, readiness, root info, OpenAPI document, docs page, metrics."""

from __future__ import annotations

import asyncio
import functools
import gzip
import hashlib
import ipaddress
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Literal

import asyncpg
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import Field
from redis.exceptions import RedisError
from swagger_ui_bundle import swagger_ui_path

from marketplace import __version__
from marketplace.aio import within
from marketplace.config.settings import parse_networks
from marketplace.errors import Forbidden, MarketplaceError, NotFound, ServiceUnavailable
from marketplace.http import keys, openapi
from marketplace.http.openapi import build_openapi, error_code_table, implementation_status
from marketplace.http.routes.indexer_status import chain_configured, current_freshness
from marketplace.http.routing import ROUTES, AuthMode, Call, Route, RouteTable
from marketplace.indexer.health import StaleReason
from marketplace.metric_sources import SOURCE_READ_TIMEOUT_SECONDS
from marketplace.metrics import DB_POOL_IDLE, DB_POOL_MAX, DB_POOL_SIZE, READY
from marketplace.storage.pool import ServerState, observe_server, probe_server
from marketplace.types import ResponseModel

log = logging.getLogger(__name__)

routes = RouteTable(tag="system")

API_TITLE = "Project Marketplace API"
_OPENAPI_DOCUMENT: web.AppKey[openapi.OpenApiDocument] = web.AppKey("openapi_document")
_METRICS_ALLOW: web.AppKey[list[Any]] = web.AppKey("metrics_allow", list)


class HealthStatus(ResponseModel):
    """Liveness of this frontend process."""

    status: str


class ReadinessStatus(ResponseModel):
    """Readiness: every dependency a mutation needs answered.

    `status` is `degraded` while the chain indexer is stale (a dead chain RPC shows within one
    poll interval): reads and off-chain writes still work, so the answer stays 200 (failing it
    would take every frontend out of rotation for a shared outside dependency).
    """

    status: Literal["ready", "degraded"]
    postgres: str
    redis: str
    projectShards: int = Field(ge=0, description="shard actors that answered a ping")
    indexer: Literal["ok", "stale", "disabled", "unknown"] = Field(
        description="chain indexer freshness (see GET /v1/internal/indexer/status)"
    )
    indexerStaleReason: StaleReason | None = None
    verifierSandbox: str | None = Field(
        default=None,
        description="`ok` when the verifier's policy executors can run the worker's code in "
        "their sandbox; otherwise why not (the test policies npm-test, cargo-test and "
        "forge-test are then not offered, never run unsandboxed). Absent until an executor "
        "has reported, and on apps that start none.",
    )


class NotReady(ServiceUnavailable):
    """503 naming the dependencies that did not answer (by role, never by address)."""

    def __init__(self, checks: dict[str, str]) -> None:
        failing = ", ".join(f"{name} {value}" for name, value in checks.items() if value != "ok")
        super().__init__(f"not ready: {failing}")
        self.extra["checks"] = checks


class Readiness:
    """One round of dependency checks per interval, however often readiness is asked.

    Concurrent callers share the round in progress; its outcome, ready or not, is the answer
    until it is older than ``readiness_cache_ms``.
    """

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._checked_at = -1e9
        self._outcome: ReadinessStatus | NotReady | None = None

    async def get(self, app: web.Application) -> ReadinessStatus:
        ttl = app[keys.SETTINGS].readiness_cache_ms / 1000
        async with self._lock:
            if self._outcome is None or time.monotonic() - self._checked_at >= ttl:
                self._outcome = await check_dependencies(app)
                self._checked_at = time.monotonic()
                READY.set(0 if isinstance(self._outcome, NotReady) else 1)
            outcome = self._outcome
        if isinstance(outcome, NotReady):
            raise NotReady(outcome.extra["checks"])
        return outcome


READINESS: web.AppKey[Readiness] = web.AppKey("readiness", Readiness)


# Readiness rounds a scrape started and stopped waiting for (asyncio keeps only weak references).
_ROUNDS: set[asyncio.Future[ReadinessStatus]] = set()


def _round_done(done: asyncio.Future[ReadinessStatus]) -> None:
    _ROUNDS.discard(done)
    if not done.cancelled():
        done.exception()  # its outcome is in the gauge; retrieved, asyncio does not log it


async def refresh_readiness(app: web.Application) -> None:
    """A scrape runs a readiness round too (shared with the probes', at most one per
    ``readiness_cache_ms``), so ``marketplace_ready`` is current where nothing probes. A round
    slower than a metrics source may be goes on without the scrape and sets the gauge when done.
    """
    round_ = asyncio.ensure_future(app[READINESS].get(app))
    _ROUNDS.add(round_)
    round_.add_done_callback(_round_done)
    try:
        await within(SOURCE_READ_TIMEOUT_SECONDS, asyncio.shield(round_))
    except (NotReady, TimeoutError):
        pass  # not ready: the gauge says so; too slow: the round sets it when done
    except Exception:
        log.warning("readiness check for metrics failed", exc_info=True)


async def _answered(check: Awaitable[Any], limit: float) -> bool:
    try:
        await asyncio.wait_for(check, limit)
    except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError, RedisError):
        return False
    except MarketplaceError:  # an actor call that failed or timed out
        return False
    return True


async def _postgres_state(app: web.Application, limit: float) -> str:
    pool = app[keys.PG_POOL]
    # The server's own answer first: during a smart shutdown pooled connections still work.
    dsn = app[keys.SETTINGS].database_url
    state = await probe_server(dsn)
    if state is not None:
        observe_server(dsn, state)  # let go at once of what this process holds open to it
        if state.refuses:
            return state.value
    if await _answered(pool.fetchval("SELECT 1"), limit):
        return "ok"
    return ServerState.UNREACHABLE.value if state is ServerState.UNREACHABLE else "unavailable"


async def check_dependencies(app: web.Application) -> ReadinessStatus | NotReady:
    limit = app[keys.SETTINGS].actor_call_timeout_seconds
    answers: list[Any] = []

    async def ping_shards() -> None:
        answers.extend(await app[keys.PROJECT_SHARDS].ping_all())

    postgres, redis_ok, shards_ok = await asyncio.gather(
        _postgres_state(app, limit),
        _answered(app[keys.REDIS].ping(), limit),
        _answered(ping_shards(), limit),
    )
    checks: dict[str, str] = {
        "postgres": postgres,
        "redis": "ok" if redis_ok else "unavailable",
        "projectShards": "ok" if shards_ok else "unavailable",
    }
    if any(value != "ok" for value in checks.values()):
        log.warning("not ready", extra={"checks": checks})
        return NotReady(checks)
    indexer, reason = await _indexer_state(app, limit)
    return ReadinessStatus(
        status="degraded" if indexer == "stale" else "ready",
        postgres="ok",
        redis="ok",
        projectShards=len(answers),
        indexer=indexer,
        indexerStaleReason=reason,
        verifierSandbox=_sandbox_state(app),
    )


def _sandbox_state(app: web.Application) -> str | None:
    reports = app.get(keys.VERIFIER_POLICIES)
    if reports is None or reports.latest is None:
        return None
    return reports.latest.sandbox_unavailable or "ok"


async def _indexer_state(
    app: web.Application, limit: float
) -> tuple[Literal["ok", "stale", "disabled", "unknown"], StaleReason | None]:
    if not chain_configured(app[keys.SETTINGS]):
        return "disabled", None
    try:
        state = await asyncio.wait_for(current_freshness(app), limit)
    except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return "unknown", None
    return ("stale", state.reason) if state.stale else ("ok", None)


class RootInfo(ResponseModel):
    """What this service is and how to authenticate."""

    name: str
    version: str
    auth: str
    note: str


class OpenApiDocument(ResponseModel):
    """The OpenAPI 3.1 document of this API."""

    model_config = {"extra": "allow"}
    openapi: str


class RayConnectionLost(ServiceUnavailable):
    """503 from liveness: this frontend has been without a working Ray connection for longer than
    ``MARKETPLACE_RAY_RECONNECT_GRACE_SECONDS`` and should be restarted."""


@routes.get(
    "/v1/health",
    name="getHealth",
    summary="Liveness check",
    auth=AuthMode.NONE,
    response=HealthStatus,
    errors=(ServiceUnavailable,),
    rate_limited=False,
    description=(
        'Liveness of this frontend process: 200 `{"status": "ok"}` as long as it serves '
        "requests; it touches no dependency (use `/v1/health/ready` for those). One exception: "
        "503 `service_unavailable` with `Retry-After` once this frontend's connection to the "
        "Ray cluster has been failing, without rejoining, for longer than "
        "`MARKETPLACE_RAY_RECONNECT_GRACE_SECONDS` (a frontend whose own Ray node gave up on "
        "a lost head cannot rejoin by itself: restart it)."
    ),
)
async def get_health(call: Call[None, None, None]) -> HealthStatus:
    runtime = call.app.get(keys.ACTORS)
    if runtime is not None:
        lost_for = runtime.lost_for()
        if lost_for > call.app[keys.SETTINGS].ray_reconnect_grace_seconds:
            raise RayConnectionLost(
                f"no working Ray connection for {lost_for:.0f} s; restart this frontend",
                retry_after=10,
            )
    return HealthStatus(status="ok")


@routes.get(
    "/v1/health/ready",
    name="getReadiness",
    summary="Readiness check: Postgres, Redis and the project shard actors answer",
    auth=AuthMode.NONE,
    response=ReadinessStatus,
    errors=(ServiceUnavailable,),
    rate_limited=False,
    exclude_none=True,
)
async def get_readiness(call: Call[None, None, None]) -> ReadinessStatus:
    """Asks Postgres whether it accepts connections and round-trips it, Redis and every project
    shard actor (a Ray call each), and reads the chain indexer's freshness; the outcome is reused
    for `MARKETPLACE_READINESS_CACHE_MS`. 503 `service_unavailable` with `Retry-After`, naming
    in `checks` the dependencies that did not answer within the actor call timeout (take the
    frontend out of a load balancer then); a stale indexer makes the status `degraded`, still
    200."""
    return await call.app[READINESS].get(call.app)


@routes.get(
    "/v1/",
    name="getRootInfo",
    summary="Service information",
    auth=AuthMode.NONE,
    response=RootInfo,
    rate_limited=False,
    description=(
        "Name and version of the service, how to authenticate, and where the OpenAPI "
        "document and this reference live."
    ),
)
async def get_root(call: Call[None, None, None]) -> RootInfo:
    return RootInfo(
        name="marketplace",
        version=__version__,
        auth=(
            "Authorization: Bearer <session JWT> or x-agent-api-key: <key>; "
            "the scheduler uses Authorization: Bearer <scheduler secret>"
        ),
        note="OpenAPI document at /v1/openapi.json, human docs at /v1/docs",
    )


def api_description(routes: list[Route]) -> str:
    """The document's introduction (`info.description`), its lists made from ``routes``."""
    text = resources.files("marketplace.http").joinpath("static/api-description.md").read_text()
    return (
        text.replace("<!-- error-codes -->", error_code_table(routes))
        .replace("<!-- implementation-status -->", implementation_status(routes))
        .strip()
    )


def setup(app: web.Application) -> None:
    app[READINESS] = Readiness()
    app[keys.METRICS_REFRESHERS].append(refresh_readiness)
    app[_METRICS_ALLOW] = parse_networks(app[keys.SETTINGS].metrics_allow)
    # The UI's static assets: served by path, outside the route table (not API operations).
    app.router.add_get(DOCS_STATIC_PREFIX + "/{bundle}/{name}", get_docs_asset, name="getDocsAsset")


@functools.lru_cache(maxsize=8)
def _document_for(routes: tuple[Route, ...]) -> openapi.OpenApiDocument:
    # Building the document is most of an app's start-up CPU (~0.1 s: pydantic's JSON schema
    # generation); apps of one process with the same routes share it. Never mutated.
    return build_openapi(list(routes), title=API_TITLE, description=api_description(list(routes)))


async def openapi_document(app: web.Application) -> AsyncIterator[None]:
    """Built at start-up (once per process for a given route list), from the routes the app
    really registered."""
    routes: list[Route] = app[ROUTES]
    app[_OPENAPI_DOCUMENT] = _document_for(tuple(routes))
    yield


@routes.get(
    "/v1/openapi.json",
    name="getOpenApi",
    summary="Machine-readable OpenAPI 3.1 document",
    auth=AuthMode.NONE,
    response=OpenApiDocument,
    rate_limited=False,
    description=(
        "This document (OpenAPI 3.1), generated at start from the route declarations the "
        "server runs, so it lists exactly the operations served, with their rules, request and "
        "response schemas and error codes."
    ),
)
async def get_openapi(call: Call[None, None, None]) -> web.StreamResponse:
    return web.json_response(call.app[_OPENAPI_DOCUMENT])


# --- the docs page: Swagger UI from the swagger-ui-bundle-v2 wheel, served from memory ---------
# Asset URLs carry a version segment (the bundled Swagger UI's directory name, and a digest of
# our own files), so they can be cached for a year: an upgrade changes the URL, not the content
# behind it. The page itself is revalidated every time.

DOCS_STATIC_PREFIX = "/v1/docs/static"
_STATIC = resources.files("marketplace.http") / "static"
_OWN_FILES = ("docs.js", "docs.css")
_SWAGGER_FILES = (
    "swagger-ui-bundle.js",
    "swagger-ui-bundle.js.map",
    "swagger-ui.css",
    "swagger-ui.css.map",
    "favicon-16x16.png",
    "favicon-32x32.png",
)
SWAGGER_UI_BUNDLE = swagger_ui_path.name  # e.g. "swagger-ui-5.31.0"
OWN_BUNDLE = (
    "marketplace-"
    + hashlib.sha256(b"".join((_STATIC / name).read_bytes() for name in _OWN_FILES)).hexdigest()[
        :16
    ]
)
_BUNDLES: dict[str, tuple[Traversable, tuple[str, ...]]] = {
    SWAGGER_UI_BUNDLE: (swagger_ui_path, _SWAGGER_FILES),
    OWN_BUNDLE: (_STATIC, _OWN_FILES),
}
_CONTENT_TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".map": "application/json",
    ".png": "image/png",
}
ASSET_CACHE_CONTROL = "public, max-age=31536000, immutable"
DOCS_PAGE_CACHE_CONTROL = "no-cache"
# Everything the page needs comes from this origin; the policy makes a stray third-party fetch
# (a CDN font, the hosted validator) fail loudly instead of leaking the reader's visit.
DOCS_PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
DOCS_PAGE = (
    (_STATIC / "docs.html")
    .read_text()
    .replace("@SWAGGER@", f"{DOCS_STATIC_PREFIX}/{SWAGGER_UI_BUNDLE}")
    .replace("@OWN@", f"{DOCS_STATIC_PREFIX}/{OWN_BUNDLE}")
)


@dataclass(frozen=True)
class _Asset:
    body: bytes
    gzipped: bytes | None
    content_type: str


@functools.cache
def _asset(bundle: str, name: str) -> _Asset | None:
    directory, names = _BUNDLES.get(bundle, (None, ()))
    if directory is None or name not in names:
        return None
    body = (directory / name).read_bytes()
    suffix = name[name.rfind(".") :]
    content_type = _CONTENT_TYPES[suffix]
    gzipped = gzip.compress(body, mtime=0) if suffix != ".png" else None
    return _Asset(body, gzipped, content_type)


async def get_docs_asset(request: web.Request) -> web.StreamResponse:
    """A static asset of the docs page (not an API operation, so not in the document)."""
    bundle, name = request.match_info["bundle"], request.match_info["name"]
    # The first request of each asset reads and compresses it off the event loop.
    asset = await asyncio.to_thread(_asset, bundle, name)
    if asset is None:
        raise NotFound("no such docs asset")
    headers = {
        "Cache-Control": ASSET_CACHE_CONTROL,
        "Vary": "Accept-Encoding",
        "X-Content-Type-Options": "nosniff",
    }
    body = asset.body
    if asset.gzipped is not None and "gzip" in request.headers.get("Accept-Encoding", ""):
        body, headers["Content-Encoding"] = asset.gzipped, "gzip"
    response = web.Response(body=body, headers=headers, content_type=asset.content_type)
    if asset.content_type.startswith("text/"):
        response.charset = "utf-8"
    return response


@routes.get(
    "/v1/docs",
    name="getDocs",
    summary="Human-readable API reference (HTML)",
    auth=AuthMode.NONE,
    response=None,
    rate_limited=False,
    response_content_type="text/html",
    description=(
        "Swagger UI over `/v1/openapi.json`, served from this server (no third-party "
        "requests). Its assets live under `/v1/docs/static/<version>/` and are cached for a "
        "year; the page itself is revalidated on every visit."
    ),
)
async def get_docs(call: Call[None, None, None]) -> web.StreamResponse:
    return web.Response(
        text=DOCS_PAGE,
        content_type="text/html",
        headers={
            "Cache-Control": DOCS_PAGE_CACHE_CONTROL,
            "Content-Security-Policy": DOCS_PAGE_CSP,
            "X-Content-Type-Options": "nosniff",
        },
    )


@routes.get(
    "/metrics",
    name="getMetrics",
    summary="Prometheus metrics of this frontend",
    auth=AuthMode.NONE,
    response=None,
    rate_limited=False,
    response_content_type="text/plain",
    errors=(Forbidden,),
    description=(
        "Prometheus text format: requests, latency and in-flight requests by route template, "
        "database pool use, actor call and shard command latency, and the deployment-wide "
        "figures read from PostgreSQL and Redis (job queues, verifier jobs, deliveries, "
        "moderation, consumer lag, the indexer, actor restarts: the same on every frontend). "
        "Meant for the scraper on the internal network; it is outside `/v1/`. Served only to "
        "the networks in `MARKETPLACE_METRICS_ALLOW` (everyone when it is empty), by peer "
        "address; 403 `forbidden` for others."
    ),
)
async def get_metrics(call: Call[None, None, None]) -> web.StreamResponse:
    allowed = call.app[_METRICS_ALLOW]
    if allowed and not _peer_in(call.request.remote, allowed):
        raise Forbidden("metrics are not served to this address")
    for refresh in call.app[keys.METRICS_REFRESHERS]:
        await refresh(call.app)
    pool = call.pool
    DB_POOL_SIZE.set(pool.get_size())
    DB_POOL_IDLE.set(pool.get_idle_size())
    DB_POOL_MAX.set(pool.get_max_size())
    response = web.Response(body=generate_latest())
    response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
    response.charset = "utf-8"
    return response


def _peer_in(remote: str | None, networks: list[Any]) -> bool:
    try:
        address = ipaddress.ip_address(remote or "")
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)
