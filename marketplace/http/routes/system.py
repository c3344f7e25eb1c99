"""System endpoints: health, readiness, root info, OpenAPI document, docs page, metrics."""

from __future__ import annotations

import asyncio
import functools
import gzip
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import Field
from swagger_ui_bundle import swagger_ui_path

from marketplace import __version__
from marketplace.errors import NotFound, ServiceUnavailable
from marketplace.http import keys
from marketplace.http.openapi import build_openapi, error_code_table, implementation_status
from marketplace.http.routing import AuthMode, Call, Route, RouteTable
from marketplace.metrics import DB_POOL_IDLE, DB_POOL_MAX, DB_POOL_SIZE
from marketplace.types import ResponseModel

routes = RouteTable(tag="system")

API_TITLE = "Project Marketplace API"
_OPENAPI_DOCUMENT: web.AppKey[dict[str, Any]] = web.AppKey("openapi_document", dict)


class HealthStatus(ResponseModel):
    """Liveness of this frontend process."""

    status: str


class ReadinessStatus(ResponseModel):
    """Readiness: every dependency a mutation needs answered."""

    status: str
    postgres: str
    redis: str
    projectShards: int = Field(ge=0, description="shard actors that answered a ping")


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


@routes.get(
    "/v1/health",
    name="getHealth",
    summary="Liveness check",
    auth=AuthMode.NONE,
    response=HealthStatus,
    rate_limited=False,
    description=(
        'Liveness of this frontend process: 200 `{"status": "ok"}` as long as it serves '
        "requests; it touches no dependency (use `/v1/health/ready` for those)."
    ),
)
async def get_health(call: Call[None, None, None]) -> HealthStatus:
    return HealthStatus(status="ok")


@routes.get(
    "/v1/health/ready",
    name="getReadiness",
    summary="Readiness check: Postgres, Redis and the project shard actors answer",
    auth=AuthMode.NONE,
    response=ReadinessStatus,
    errors=(ServiceUnavailable,),
    rate_limited=False,
)
async def get_readiness(call: Call[None, None, None]) -> ReadinessStatus:
    """Round-trips Postgres, Redis and every project shard actor (a Ray call each). 503
    `service_unavailable` with `Retry-After` when one does not answer within the actor call
    timeout; take the frontend out of a load balancer then."""
    limit = call.settings.actor_call_timeout_seconds
    try:
        async with asyncio.timeout(limit):
            await call.pool.fetchval("SELECT 1")
            await call.redis.ping()
            shards = await call.app[keys.PROJECT_SHARDS].ping_all()
    except TimeoutError as exc:
        raise ServiceUnavailable(f"a dependency did not answer within {limit:g} s") from exc
    return ReadinessStatus(status="ready", postgres="ok", redis="ok", projectShards=len(shards))


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
    # The UI's static assets: served by path, outside the route table (not API operations).
    app.router.add_get(DOCS_STATIC_PREFIX + "/{bundle}/{name}", get_docs_asset, name="getDocsAsset")


async def openapi_document(app: web.Application) -> AsyncIterator[None]:
    """Built once at start-up, from the routes the app really registered."""
    routes = app[keys.ROUTES]
    app[_OPENAPI_DOCUMENT] = build_openapi(
        routes, title=API_TITLE, description=api_description(routes)
    )
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
    description=(
        "Prometheus text format: requests, latency and in-flight requests by route template, "
        "database pool use, actor call latency and the indexer's figures. Meant for the "
        "scraper on the internal network; it is outside `/v1/`."
    ),
)
async def get_metrics(call: Call[None, None, None]) -> web.StreamResponse:
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
