"""The verifier runtime (`marketplace verifier serve`): the separate service the spec names,
exposing ``POST /v1/verify`` to the internal scheduler (docs/verifier.md, "Verifier runtime").

``POST /v1/verify`` with ``Authorization: Bearer <MARKETPLACE_SCHEDULER_SECRET>`` and
``{checkPolicyId, deliveryRef}`` runs that one policy synchronously as a Ray task on the cluster
(one CPU reserved, spread over the nodes, like the pool's actors) and answers
``{passes, evidenceHash, evidence}``. Nothing is stored and nothing is signed: queued jobs with
attestations are ``POST /v1/verifier/jobs`` on the API. Errors are the API's
``{"error", "message"}``: 401 without the secret, 400 for a bad body or a ``deliveryRef`` the
policy cannot read, 409 ``policy_unavailable``, 413 for a body over 16 KiB, 429 once the
caller's address has spent its failed-secret budget, 503 (with ``Retry-After``) when the check
hit a transient failure or Ray is unavailable, 504 when it ran out of time, and JSON 404 / 405
for other paths and methods.

The failed-secret budget is the API's failed-authentication limit (:mod:`marketplace.http.
ratelimit`): the same Redis key per client address, so the API, this runtime and every replica
of either spend one budget between them (the scheduler secret opens both).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import redis.asyncio as aioredis
from aiohttp import web
from pydantic import Field, ValidationError

from marketplace.auth import bearer_token, is_scheduler_token
from marketplace.config import Settings, load_settings
from marketplace.errors import (
    InvalidRequest,
    MarketplaceError,
    PayloadTooLarge,
    ServiceUnavailable,
    Unauthorized,
)
from marketplace.http.middlewares import (
    domain_error_response,
    error_response,
    http_error_response,
)
from marketplace.http.ratelimit import RateLimiter
from marketplace.logs import configure_logging, use_json_logs
from marketplace.redis_client import Redis
from marketplace.types import JsonObject, RequestModel, ResponseModel
from marketplace.verifier.errors import PolicyUnavailable
from marketplace.verifier.policies import available_policies, parse_delivery_ref
from marketplace.verifier.policy import InvalidDeliveryRef, PolicyId, PolicySettings

log = logging.getLogger(__name__)
VERIFY_PATH = "/v1/verify"
MAX_BODY_BYTES = 16_384
# Retry-After of a 503: a transient policy failure or Ray being away is seldom over at once.
RETRY_AFTER_SECONDS = 5
# The limiter makes one short Redis call per request: a few connections are plenty, and a
# request waits for a free one rather than failing.
REDIS_MAX_CONNECTIONS = 8
REDIS_POOL_WAIT_SECONDS = 5.0
SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)
# Absent when rate limits are off (MARKETPLACE_RATE_LIMIT_ENABLED=false).
AUTH_LIMITER: web.AppKey[RateLimiter] = web.AppKey("auth_limiter", RateLimiter)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class VerifyRequest(RequestModel):
    checkPolicyId: PolicyId
    deliveryRef: str = Field(min_length=1, max_length=2048)


class VerifyResponse(ResponseModel):
    passes: bool
    evidenceHash: str
    evidence: JsonObject


class VerifyTimeout(MarketplaceError):
    code = "verify_timeout"
    status = 504
    default_message = "the check did not finish in time"


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every answer is the API's ``{"error", "message"}`` JSON, aiohttp's own 404 and 405
    included; the rendering is the API's (:mod:`marketplace.http.middlewares`). The API's
    middleware also does metrics, access log and hooks this runtime does not have, so only its
    error half is reused."""
    try:
        return await handler(request)
    except MarketplaceError as exc:
        return domain_error_response(request, exc, None)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return http_error_response(exc, None)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled error in the verifier runtime")
        return error_response(MarketplaceError(), None)


def _authorized(request: web.Request, settings: Settings) -> bool:
    secret = settings.scheduler_secret
    try:
        token = bearer_token(request.headers.get("Authorization"))
    except Unauthorized:
        return False  # another scheme: not the secret
    if token is None or secret is None:
        return False
    return is_scheduler_token(token, secret.get_secret_value())  # constant time


async def authenticate(request: web.Request, settings: Settings) -> None:
    """The scheduler secret, or 401; 429 once the address's failed-secret budget is spent.

    The budget is checked before the secret is looked at, so a locked-out address gets 429 even
    with the right secret: otherwise guessing would go on at full speed and the answer would
    tell a guesser when it hit. Unlike the API, a request without any credentials counts as a
    failure too: this runtime has no public route and one caller, which always sends the secret.
    """
    limiter = request.app.get(AUTH_LIMITER)
    if limiter is None:  # rate limits are off
        if not _authorized(request, settings):
            raise Unauthorized("the scheduler secret is required")
        return
    attempt = await limiter.before_credentials(request)  # raises RateLimited (429)
    if _authorized(request, settings):
        # Gives back the attempt counted in advance while the address has failures on record.
        await limiter.credentials_accepted(request, attempt)
        return
    await limiter.credentials_failed(request, attempt)
    raise Unauthorized("the scheduler secret is required")


async def _read_body(request: web.Request) -> bytes:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"at most {MAX_BODY_BYTES} bytes")
    try:
        raw = await request.content.read(MAX_BODY_BYTES + 1)
    except web.RequestPayloadError:
        # Corrupt compressed data or broken chunked framing; see marketplace.http.routing.
        request.content.feed_eof()
        raise InvalidRequest("request body could not be decoded") from None
    if len(raw) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"at most {MAX_BODY_BYTES} bytes")
    return raw


async def verify(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    await authenticate(request, settings)
    raw = await _read_body(request)
    try:
        body = VerifyRequest.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise InvalidRequest(f"invalid request: {where}: {first['msg']}") from None
    if body.checkPolicyId not in await asyncio.to_thread(available_policies, settings):
        raise PolicyUnavailable(f"{body.checkPolicyId.value} is not available")
    try:
        parse_delivery_ref(body.checkPolicyId, body.deliveryRef, settings)
    except InvalidDeliveryRef as exc:
        raise InvalidRequest(f"invalid request: deliveryRef: {exc}") from None
    # Not at the top: the CLI imports this module for its arguments, before `verifier serve`
    # has prepared Ray's environment (which must come before Ray is imported).
    from ray.exceptions import GetTimeoutError, RayError, RayTaskError

    from marketplace.actors.verifier_task import PolicyTaskResult, run_policy_task
    from marketplace.verifier.policy import TransientPolicyError

    # On the executors' nodes when the deployment names them: never beside the secrets.
    task: Any = (
        run_policy_task.options(resources={settings.verifier_executor_resource: 1})
        if settings.verifier_executor_resource
        else run_policy_task
    )
    ref = task.remote(
        PolicySettings.from_settings(settings), body.checkPolicyId.value, body.deliveryRef
    )
    try:
        result: PolicyTaskResult = await asyncio.wait_for(
            ref, settings.verifier_job_timeout_seconds
        )
    except TimeoutError:
        raise VerifyTimeout() from None
    except RayTaskError as exc:
        cause = exc.cause if hasattr(exc, "cause") else None
        if isinstance(cause, TransientPolicyError):
            raise ServiceUnavailable(str(cause), retry_after=RETRY_AFTER_SECONDS) from None
        log.warning("verify task failed", exc_info=True)
        raise ServiceUnavailable(
            "the check failed to run", retry_after=RETRY_AFTER_SECONDS
        ) from None
    except (RayError, GetTimeoutError):
        raise ServiceUnavailable("Ray is unavailable", retry_after=RETRY_AFTER_SECONDS) from None
    response = VerifyResponse(
        passes=result.passes,
        evidenceHash=result.evidence_hash,
        # JSON: the policy's evidence, which evidence_hash checked is canonical JSON.
        evidence=cast(JsonObject, dict(result.evidence)),
    )
    return web.json_response(json.loads(response.model_dump_json()))


async def _auth_limiter(app: web.Application) -> AsyncIterator[None]:
    """The API's failed-authentication limiter on the API's Redis: one budget per address
    across the API, this runtime and their replicas. Redis must answer at start (as for
    ``marketplace serve``: a wrong URL shows at once); an outage later is absorbed by the
    limiter, which then counts per process (marketplace.gcra)."""
    settings = app[SETTINGS]
    if not settings.rate_limit_enabled:
        yield
        return
    pool = aioredis.BlockingConnectionPool.from_url(
        settings.redis_url,
        decode_responses=True,
        max_connections=REDIS_MAX_CONNECTIONS,
        timeout=REDIS_POOL_WAIT_SECONDS,
    )
    client = Redis.from_pool(pool)
    try:
        await client.ping()
        app[AUTH_LIMITER] = RateLimiter(client, settings)
        yield
    finally:
        await client.aclose()


def create_runtime_app(settings: Settings) -> web.Application:
    """The runtime's app. Unless rate limits are off, ``settings.redis_url`` must be set: the
    failed-secret budget lives there (docs/verifier.md, "Verifier runtime")."""
    if settings.rate_limit_enabled and not settings.redis_url:
        raise ValueError("the verifier runtime needs redis_url for its failed-secret budget")
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[json_errors])
    app[SETTINGS] = settings
    app.cleanup_ctx.append(_auth_limiter)
    app.router.add_post(VERIFY_PATH, verify)
    return app


def _connect_ray(settings: Settings) -> None:
    from marketplace.actors.runtime import ActorRuntime

    ActorRuntime(settings, database_url=settings.database_url).connect()


def cmd_serve(args: argparse.Namespace) -> int:
    overrides: dict[str, str | int] = {}
    if args.host:
        overrides["host"] = args.host
    if args.port:
        overrides["port"] = args.port
    settings = load_settings(**overrides)
    configure_logging(
        settings.log_level, use_json_logs(settings.log_format, settings.log_json, interactive=False)
    )
    missing = []
    if settings.scheduler_secret is None:
        missing.append("MARKETPLACE_SCHEDULER_SECRET (its callers' bearer token)")
    if settings.rate_limit_enabled and not settings.redis_url:
        missing.append("MARKETPLACE_REDIS_URL (where failed secrets are counted)")
    if missing:
        print(f"the verifier runtime needs {' and '.join(missing)}", file=sys.stderr)
        return 2
    if not settings.ray_address:
        from marketplace.actors.ray_env import prepare_local_ray_environment

        prepare_local_ray_environment()
    from marketplace.http.server import serve

    _connect_ray(settings)
    app = create_runtime_app(settings)

    def ready() -> None:
        log.info(
            "verifier runtime serving",
            extra={"url": f"http://{settings.listen_address}{VERIFY_PATH}"},
        )

    # The API's server: errors of aiohttp's own HTTP parser (an oversize header, a malformed
    # request line) are JSON here too, and SIGTERM shuts down gracefully.
    asyncio.run(serve(app, settings.host, settings.port, on_ready=ready))
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    """``marketplace verifier``'s arguments (declared in :mod:`marketplace.cli_commands`)."""
    actions = parser.add_subparsers(dest="verifier_command", required=True)
    serve = actions.add_parser("serve", help="serve POST /v1/verify (scheduler secret)")
    serve.add_argument("--host", help="listen address (default: MARKETPLACE_HOST)")
    serve.add_argument("--port", type=int, help="listen port (default: MARKETPLACE_PORT)")
    serve.set_defaults(func=cmd_serve)
