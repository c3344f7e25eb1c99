"""The verifier runtime (`marketplace verifier serve`): the separate service the spec names,
exposing ``POST /v1/verify`` to the internal scheduler (docs/verifier.md, "Verifier runtime").

``POST /v1/verify`` with ``Authorization: Bearer <MARKETPLACE_SCHEDULER_SECRET>`` and
``{checkPolicyId, deliveryRef}`` runs that one policy synchronously as a Ray task on the cluster
(one CPU reserved, spread over the nodes, like the pool's actors) and answers
``{passes, evidenceHash, evidence}``. Nothing is stored and nothing is signed: queued jobs with
attestations are ``POST /v1/verifier/jobs`` on the API. Errors are the API's
``{"error", "message"}``: 401 without the secret, 400 for a bad body or a ``deliveryRef`` the
policy cannot read, 409 ``policy_unavailable``, 503 (with ``Retry-After``) when the check hit a
transient failure or Ray is unavailable, 504 when it ran out of time.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import logging
import sys
from typing import Any

from aiohttp import web
from pydantic import Field, ValidationError

from marketplace.config import Settings, load_settings
from marketplace.logs import configure_logging
from marketplace.types import RequestModel, ResponseModel
from marketplace.verifier.policies import available_policies, parse_delivery_ref
from marketplace.verifier.policy import InvalidDeliveryRef, PolicyId

log = logging.getLogger(__name__)
VERIFY_PATH = "/v1/verify"
MAX_BODY_BYTES = 16_384
SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)


class VerifyRequest(RequestModel):
    checkPolicyId: PolicyId
    deliveryRef: str = Field(min_length=1, max_length=2048)


class VerifyResponse(ResponseModel):
    passes: bool
    evidenceHash: str
    evidence: dict[str, Any]


def _error(status: int, code: str, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": code, "message": message}, status=status, headers=headers)


def _authorized(request: web.Request, settings: Settings) -> bool:
    secret = settings.scheduler_secret
    header = request.headers.get("Authorization", "")
    if secret is None or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[7:].encode(), secret.get_secret_value().encode())


async def verify(request: web.Request) -> web.Response:
    from ray.exceptions import GetTimeoutError, RayError, RayTaskError

    from marketplace.actors.runtime import settings_for_actor
    from marketplace.actors.verifier_task import run_policy_task
    from marketplace.verifier.policy import TransientPolicyError

    settings = request.app[SETTINGS]
    if not _authorized(request, settings):
        return _error(401, "unauthorized", "the scheduler secret is required")
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        return _error(413, "payload_too_large", f"at most {MAX_BODY_BYTES} bytes")
    raw = await request.content.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        return _error(413, "payload_too_large", f"at most {MAX_BODY_BYTES} bytes")
    try:
        body = VerifyRequest.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        return _error(400, "invalid_request", f"invalid request: {where}: {first['msg']}")
    if body.checkPolicyId not in await asyncio.to_thread(available_policies, settings):
        return _error(409, "policy_unavailable", f"{body.checkPolicyId.value} is not available")
    try:
        parse_delivery_ref(body.checkPolicyId, body.deliveryRef, settings)
    except InvalidDeliveryRef as exc:
        return _error(400, "invalid_request", f"invalid request: deliveryRef: {exc}")
    ref = run_policy_task.remote(
        settings_for_actor(settings), body.checkPolicyId.value, body.deliveryRef
    )
    try:
        result = await asyncio.wait_for(ref, settings.verifier_job_timeout_seconds)
    except TimeoutError:
        return _error(504, "verify_timeout", "the check did not finish in time")
    except RayTaskError as exc:
        cause = exc.cause if hasattr(exc, "cause") else None
        if isinstance(cause, TransientPolicyError):
            return _error(503, "service_unavailable", str(cause), **{"Retry-After": "5"})
        log.warning("verify task failed", exc_info=True)
        return _error(503, "service_unavailable", "the check failed to run", **{"Retry-After": "5"})
    except (RayError, GetTimeoutError):
        return _error(503, "service_unavailable", "Ray is unavailable", **{"Retry-After": "5"})
    return web.json_response(json.loads(VerifyResponse(**result).model_dump_json()))


def create_runtime_app(settings: Settings) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[SETTINGS] = settings
    app.router.add_post(VERIFY_PATH, verify)
    return app


def _connect_ray(settings: Settings) -> None:
    from marketplace.actors.runtime import ActorRuntime

    ActorRuntime(settings, database_url=settings.database_url).connect()


def cmd_serve(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    if args.host:
        overrides["host"] = args.host
    if args.port:
        overrides["port"] = args.port
    settings = load_settings(**overrides)
    configure_logging(settings.log_level, settings.log_json)
    if settings.scheduler_secret is None:
        print(
            "the verifier runtime needs MARKETPLACE_SCHEDULER_SECRET (its callers' bearer token)",
            file=sys.stderr,
        )
        return 2
    if not settings.ray_address:
        from marketplace.actors.ray_env import prepare_local_ray_environment

        prepare_local_ray_environment()
    _connect_ray(settings)
    log.info(
        "verifier runtime serving", extra={"url": f"http://{settings.listen_address}{VERIFY_PATH}"}
    )
    web.run_app(create_runtime_app(settings), host=settings.host, port=settings.port, print=None)
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    """``marketplace verifier``'s arguments (declared in :mod:`marketplace.capabilities`)."""
    actions = parser.add_subparsers(dest="verifier_command", required=True)
    serve = actions.add_parser("serve", help="serve POST /v1/verify (scheduler secret)")
    serve.add_argument("--host", help="listen address (default: MARKETPLACE_HOST)")
    serve.add_argument("--port", type=int, help="listen port (default: MARKETPLACE_PORT)")
    serve.set_defaults(func=cmd_serve)
