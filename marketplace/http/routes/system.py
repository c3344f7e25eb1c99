"""System endpoints: health, readiness, root info, OpenAPI document, docs page, metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import Field

from marketplace import __version__
from marketplace.errors import ServiceUnavailable
from marketplace.http import keys
from marketplace.http.openapi import build_openapi
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.metrics import DB_POOL_IDLE, DB_POOL_MAX, DB_POOL_SIZE
from marketplace.types import ResponseModel

routes = RouteTable(tag="system")

API_TITLE = "Project Marketplace API"
API_DESCRIPTION = (
    "HTTP/JSON API of the project marketplace: project read models indexed from the chain, "
    "creation claims, off-chain records, identity and legal assent."
)
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
    """Round-trips Postgres, Redis and every project shard actor (a Ray call each)."""
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


async def openapi_document(app: web.Application) -> AsyncIterator[None]:
    """Built once at start-up, from the routes the app really registered."""
    app[_OPENAPI_DOCUMENT] = build_openapi(
        app[keys.ROUTES], title=API_TITLE, description=API_DESCRIPTION
    )
    yield


@routes.get(
    "/v1/openapi.json",
    name="getOpenApi",
    summary="Machine-readable OpenAPI 3.1 document",
    auth=AuthMode.NONE,
    response=OpenApiDocument,
    rate_limited=False,
)
async def get_openapi(call: Call[None, None, None]) -> web.StreamResponse:
    return web.json_response(call.app[_OPENAPI_DOCUMENT])


DOCS_PAGE = resources.files("marketplace.http").joinpath("static/docs.html").read_text()


@routes.get(
    "/v1/docs",
    name="getDocs",
    summary="Human-readable API documentation (HTML)",
    auth=AuthMode.NONE,
    response=None,
    rate_limited=False,
    response_content_type="text/html",
)
async def get_docs(call: Call[None, None, None]) -> web.StreamResponse:
    return web.Response(text=DOCS_PAGE, content_type="text/html")


@routes.get(
    "/metrics",
    name="getMetrics",
    summary="Prometheus metrics of this frontend",
    auth=AuthMode.NONE,
    response=None,
    rate_limited=False,
    response_content_type="text/plain",
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
