"""Request context (id, access log, metrics) and the single place errors become JSON."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable

import asyncpg
from aiohttp import web
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from marketplace.errors import (
    InvalidRequest,
    MarketplaceError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
)
from marketplace.http import keys
from marketplace.logs import request_id_var
from marketplace.metrics import HTTP_IN_FLIGHT, HTTP_LATENCY, HTTP_REQUESTS

log = logging.getLogger("marketplace.http")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
REQUEST_ID_HEADER = "x-request-id"

# Failures of our own dependencies: the client did nothing wrong and may retry.
_DEPENDENCY_ERRORS = (
    asyncpg.PostgresConnectionError,
    asyncpg.TooManyConnectionsError,
    asyncpg.CannotConnectNowError,
    RedisConnectionError,
    RedisTimeoutError,
    ConnectionRefusedError,
)


def route_template(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def error_response(error: MarketplaceError, request_id: str | None) -> web.Response:
    headers = dict(error.headers())
    if request_id:
        headers[REQUEST_ID_HEADER] = request_id
    return web.Response(
        body=json.dumps(error.body()).encode(),
        status=error.status,
        headers=headers,
        content_type="application/json",
    )


def _from_http_exception(exc: web.HTTPException) -> MarketplaceError:
    if isinstance(exc, web.HTTPNotFound):
        return NotFound("no such route")
    if isinstance(exc, web.HTTPMethodNotAllowed):
        error: MarketplaceError = MethodNotAllowed(
            f"method not allowed; allowed: {', '.join(sorted(exc.allowed_methods))}"
        )
        return error
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return PayloadTooLarge(f"request body too large ({exc.text})")
    if 400 <= exc.status < 500:
        return InvalidRequest(exc.reason)
    return ServiceUnavailable(exc.reason)


@web.middleware
async def request_context(request: web.Request, handler: Handler) -> web.StreamResponse:
    incoming = request.headers.get(REQUEST_ID_HEADER, "")
    request_id = incoming if _REQUEST_ID_RE.match(incoming) else uuid.uuid4().hex
    token = request_id_var.set(request_id)
    request[keys.REQUEST_ID] = request_id
    started = time.perf_counter()
    HTTP_IN_FLIGHT.inc()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        response.headers[REQUEST_ID_HEADER] = request_id
        return response
    finally:
        HTTP_IN_FLIGHT.dec()
        elapsed = time.perf_counter() - started
        template = route_template(request)
        HTTP_REQUESTS.labels(request.method, template, str(status)).inc()
        HTTP_LATENCY.labels(request.method, template).observe(elapsed)
        log.info(
            "request",
            extra={
                "method": request.method,
                "route": template,
                "path": request.path,
                "status": status,
                "duration_ms": round(elapsed * 1000, 2),
            },
        )
        for hook in request.app[keys.AFTER_REQUEST_HOOKS]:
            try:
                hook(request, status)
            except Exception:
                log.exception("after-request hook failed")
        request_id_var.reset(token)


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    request_id = request.get(keys.REQUEST_ID)
    try:
        return await handler(request)
    except MarketplaceError as exc:
        if exc.status >= 500:
            log.warning("request failed: %s", exc.message, extra={"error": exc.code})
        return error_response(exc, request_id)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(_from_http_exception(exc), request_id)
    except _DEPENDENCY_ERRORS as exc:
        log.warning("dependency unavailable: %r", exc)
        return error_response(ServiceUnavailable(), request_id)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled error")
        error = MarketplaceError(f"internal error (request id {request_id})")
        return error_response(error, request_id)
