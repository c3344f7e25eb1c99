"""The request middleware: client address, request id, metrics, access log, rate-limit headers,
and the one place errors become JSON."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from aiohttp import web
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from marketplace.config.settings import parse_networks
from marketplace.errors import (
    InvalidRequest,
    MarketplaceError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
)
from marketplace.http import keys
from marketplace.http.ratelimit import RATE_LIMIT_HEADERS, IPNetwork, forwarded_client
from marketplace.logs import request_id_var
from marketplace.metrics import (
    HTTP_IN_FLIGHT,
    HTTP_LATENCY,
    HTTP_REQUESTS,
    HTTP_STREAM_DURATION,
    HTTP_STREAMS_OPEN,
)

log = logging.getLogger("marketplace.http")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
REQUEST_ID_HEADER = "x-request-id"

# Failures of our own dependencies: the client did nothing wrong and may retry.
_DEPENDENCY_ERRORS = (
    asyncpg.PostgresConnectionError,
    asyncpg.TooManyConnectionsError,
    # 57P0x: the server is shutting down, crashed, or refuses connections for now.
    asyncpg.OperatorInterventionError,
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


_REQUEST_IDS = itertools.count(1)
# Generated ids: a random per-process prefix and a counter; unique across processes and much
# cheaper than a uuid4 per request.
_ID_PREFIX = secrets.token_hex(6)


def _new_request_id() -> str:
    return f"{_ID_PREFIX}{next(_REQUEST_IDS):010x}"


@functools.lru_cache(maxsize=16)
def trusted_networks(text: str) -> tuple[IPNetwork, ...]:
    """``MARKETPLACE_TRUSTED_PROXIES`` parsed (once per distinct value, not per request)."""
    return tuple(parse_networks(text))


def with_client_address(request: web.Request) -> web.Request:
    """The request with ``remote`` set to the client's address (``ratelimit.forwarded_client``)
    when it came through a trusted proxy; as it is otherwise."""
    proxies = request.app[keys.SETTINGS].trusted_proxies
    if not proxies:
        return request
    client = forwarded_client(request.remote, request.headers, trusted_networks(proxies))
    if client is None or client == request.remote:
        return request
    return request.clone(remote=client)


@web.middleware
async def request_context(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The only middleware: client address, request id, JSON errors, metrics, access log,
    rate-limit headers and after-request hooks (one layer instead of several: each aiohttp
    middleware layer costs a few microseconds)."""
    # From here on `request.remote` is the client's address, also behind a trusted proxy: the
    # rate limits, the failed-authentication budget, the access log and the handlers read it.
    request = with_client_address(request)
    incoming = request.headers.get(REQUEST_ID_HEADER, "")
    request_id = incoming if incoming and _REQUEST_ID_RE.match(incoming) else _new_request_id()
    token = request_id_var.set(request_id)
    request[keys.REQUEST_ID] = request_id
    request[_STARTED_AT] = time.perf_counter()
    HTTP_IN_FLIGHT.inc()
    status = 500
    try:
        response = await _json_errors(request, handler, request_id)
        status = response.status
        if not response.prepared:
            response.headers[REQUEST_ID_HEADER] = request_id
            limits = request.get(RATE_LIMIT_HEADERS)
            if limits is not None:
                response.headers.update(limits)
        return response
    finally:
        opened_at = request.get(keys.STREAM_OPENED_AT)
        if opened_at is None:
            HTTP_IN_FLIGHT.dec()
            account_request(request, status, event="request")
        else:
            # Accounted for as a request when it opened (marketplace.http.streaming).
            template = route_template(request)
            HTTP_STREAMS_OPEN.labels(template).dec()
            HTTP_STREAM_DURATION.labels(template).observe(time.perf_counter() - opened_at)
            request.app[keys.ACCESS_LOG].write(
                {
                    "level": "info",
                    "logger": "marketplace.access",
                    "msg": "stream closed",
                    "request_id": request_id,
                    "route": template,
                    "client": request.remote,
                    "duration_ms": round((time.perf_counter() - opened_at) * 1000, 2),
                }
            )
        request_id_var.reset(token)


_STARTED_AT: web.RequestKey[float] = web.RequestKey("started_at", float)


def request_started_at(request: web.Request) -> float:
    """When this middleware began the request (``time.perf_counter()``)."""
    return request[_STARTED_AT]


def account_request(request: web.Request, status: int, *, event: str) -> None:
    """Metrics, access-log line and after-request hooks of one request, once."""
    elapsed = time.perf_counter() - request[_STARTED_AT]
    template = route_template(request)
    _observe(request.method, template, status, elapsed)
    request.app[keys.ACCESS_LOG].write(
        {
            "level": "info",
            "logger": "marketplace.access",
            "msg": event,
            "request_id": request[keys.REQUEST_ID],
            "method": request.method,
            "route": template,
            "path": request.path,
            "client": request.remote,
            "status": status,
            "duration_ms": round(elapsed * 1000, 2),
        }
    )
    for hook in request.app[keys.AFTER_REQUEST_HOOKS]:
        try:
            hook(request, status)
        except Exception:
            log.exception("after-request hook failed")


async def _handle(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Exception:
        stream = request.get(keys.STREAM_RESPONSE)
        if stream is None:
            raise
        # The head is sent: no error body can follow. End the stream; the log has the cause.
        log.warning("stream ended by an error", exc_info=True)
        return stream


_counters: dict[tuple[str, str, int], Any] = {}
_histograms: dict[tuple[str, str], Any] = {}


def _observe(method: str, template: str, status: int, elapsed: float) -> None:
    # Label children cached: `labels()` takes a lock and builds a key on every call.
    counter = _counters.get((method, template, status))
    if counter is None:
        counter = _counters[(method, template, status)] = HTTP_REQUESTS.labels(
            method, template, str(status)
        )
    counter.inc()
    histogram = _histograms.get((method, template))
    if histogram is None:
        histogram = _histograms[(method, template)] = HTTP_LATENCY.labels(method, template)
    histogram.observe(elapsed)


def domain_error_response(
    request: web.Request, exc: MarketplaceError, request_id: str | None
) -> web.Response:
    """A domain error as the API answers it (the verifier runtime answers the same way)."""
    if exc.status >= 500:
        log.warning("request failed: %s", exc.message, extra={"error": exc.code})
    response = error_response(exc, request_id)
    if request.content.exception() is not None:
        # The body could not be decoded: this connection cannot carry another request.
        response.force_close()
    return response


def http_error_response(exc: web.HTTPException, request_id: str | None) -> web.Response:
    """aiohttp's own refusal (404, 405, 413...) as our JSON; a 405 keeps its ``Allow``."""
    response = error_response(_from_http_exception(exc), request_id)
    if "Allow" in exc.headers:
        # A 405 must say what is allowed (RFC 9110 15.5.6).
        response.headers["Allow"] = exc.headers["Allow"]
    return response


async def _json_errors(
    request: web.Request, handler: Handler, request_id: str
) -> web.StreamResponse:
    try:
        return await _handle(request, handler)
    except MarketplaceError as exc:
        return domain_error_response(request, exc, request_id)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return http_error_response(exc, request_id)
    except _DEPENDENCY_ERRORS as exc:
        log.warning("dependency unavailable: %r", exc)
        return error_response(ServiceUnavailable(), request_id)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled error")
        error = MarketplaceError(f"internal error (request id {request_id})")
        return error_response(error, request_id)
