"""Agent API keys: issue, list, rotate, revoke, usage audit (spec section 5 rule 4).

``setup`` registers the database-backed key resolver and the usage recorder (an after-request
hook that only enqueues, plus a background task that writes batches).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
from aiohttp import web

from marketplace.errors import Forbidden
from marketplace.http import keys
from marketplace.http.middlewares import route_template
from marketplace.http.paths import ApiKeyPath
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.identity import api_keys
from marketplace.identity.access import ensure_self
from marketplace.identity.models import (
    ApiKeyAuditQuery,
    ApiKeyAuditResponse,
    ApiKeyCreateRequest,
    ApiKeyCreateResponse,
    ApiKeyListResponse,
    ApiKeyRecord,
    ApiKeyRotateRequest,
    ApiKeyRotateResponse,
    ApiKeyUsageEntry,
    UserIdQuery,
)
from marketplace.storage.repositories import api_keys as repo

routes = RouteTable(tag="api-keys")

USAGE_RECORDER: web.AppKey[api_keys.UsageRecorder] = web.AppKey(
    "api_key_usage_recorder", api_keys.UsageRecorder
)


@routes.get(
    "/v1/api-keys",
    name="listApiKeys",
    summary="List the caller's API keys (never their secrets)",
    auth=AuthMode.EITHER,
    response=ApiKeyListResponse,
    query=UserIdQuery,
    errors=(Forbidden,),
)
async def list_api_keys(call: Call[None, UserIdQuery, None]) -> ApiKeyListResponse:
    """Self only: `userId` defaults to the caller; another user's id is refused (403)."""
    user_id = ensure_self(call.require_principal(), call.query.userId)
    items = [ApiKeyRecord.from_row(row) for row in await repo.list_keys(call.pool, user_id)]
    return ApiKeyListResponse(userId=user_id, items=items, count=len(items))


@routes.post(
    "/v1/api-keys",
    name="createApiKey",
    idempotent=True,
    summary="Issue an agent API key (the secret is shown once)",
    auth=AuthMode.SESSION,
    response=ApiKeyCreateResponse,
    body=ApiKeyCreateRequest,
    status=201,
    errors=(Forbidden, api_keys.ApiKeyLimitReached),
)
async def create_api_key(call: Call[ApiKeyCreateRequest, None, None]) -> ApiKeyCreateResponse:
    """Session only; `userId` must be the caller. Send the returned `secret` as the
    `x-agent-api-key` header; it cannot be retrieved again (rotate to get a new one)."""
    user_id = ensure_self(call.require_principal(), call.body.userId)
    settings = call.settings
    row, secret = await api_keys.create_key(
        call.pool,
        user_id=user_id,
        name=call.body.name,
        prefix=settings.api_key_prefix,
        max_active=settings.api_key_max_active_per_user,
    )
    return ApiKeyCreateResponse.from_row(row, secret=secret)


@routes.post(
    "/v1/api-keys/{keyId}/rotate",
    name="rotateApiKey",
    idempotent=True,
    summary="Replace a key's secret, optionally keeping the old one for a grace period",
    auth=AuthMode.EITHER,
    response=ApiKeyRotateResponse,
    body=ApiKeyRotateRequest,
    path_params=ApiKeyPath,
    errors=(Forbidden, api_keys.ApiKeyNotFound, api_keys.ApiKeyRevoked),
)
async def rotate_api_key(
    call: Call[ApiKeyRotateRequest, None, ApiKeyPath],
) -> ApiKeyRotateResponse:
    """A session may rotate any of its user's keys; an agent key only itself (`keyId` equal to
    the authenticated key). The old secret stops working at once, or at `graceExpiresAt` when
    `gracePeriodSeconds` (at most 604800, 7 days) is given. The body may be empty."""
    rotation = await api_keys.rotate_key(
        call.pool,
        principal=call.require_principal(),
        key_id=call.path.keyId,
        grace_seconds=call.body.gracePeriodSeconds,
        prefix=call.settings.api_key_prefix,
    )
    return ApiKeyRotateResponse.from_row(
        rotation.row, secret=rotation.secret, graceExpiresAt=rotation.grace_expires_at
    )


@routes.post(
    "/v1/api-keys/{keyId}/revoke",
    name="revokeApiKey",
    summary="Revoke a key; it stops working at once on every frontend",
    auth=AuthMode.SESSION,
    response=ApiKeyRecord,
    path_params=ApiKeyPath,
    errors=(Forbidden, api_keys.ApiKeyNotFound),
)
async def revoke_api_key(call: Call[None, None, ApiKeyPath]) -> ApiKeyRecord:
    """Session only. Idempotent: revoking a revoked key returns its original `revokedAt`."""
    principal = call.require_principal()
    row = await api_keys.revoke_key(call.pool, user_id=principal.user_id, key_id=call.path.keyId)
    return ApiKeyRecord.from_row(row)


@routes.get(
    "/v1/api-keys/{keyId}/audit",
    name="getApiKeyAudit",
    summary="Usage log of a key, newest first",
    auth=AuthMode.SESSION,
    response=ApiKeyAuditResponse,
    path_params=ApiKeyPath,
    query=ApiKeyAuditQuery,
    errors=(Forbidden, api_keys.ApiKeyNotFound),
)
async def get_api_key_audit(
    call: Call[None, ApiKeyAuditQuery, ApiKeyPath],
) -> ApiKeyAuditResponse:
    """Session only, own keys only. Every request authenticated with the key is logged (time,
    method, route template, status, client address); entries are written in batches, so requests
    served by other frontends appear within the flush interval. Page with `limit` and the
    returned `nextCursor`."""
    user_id = ensure_self(call.require_principal(), call.query.userId)
    key = await api_keys.get_owned_key(call.pool, call.path.keyId, user_id)
    # Read-your-writes on this frontend: write what this process still holds first.
    await call.app[USAGE_RECORDER].flush()
    rows, next_cursor = await api_keys.usage_page(
        call.pool, key.key_id, limit=call.query.limit, cursor=call.query.cursor
    )
    items = [ApiKeyUsageEntry.from_row(row) for row in rows]
    return ApiKeyAuditResponse(
        keyId=key.key_id, userId=user_id, items=items, count=len(items), nextCursor=next_cursor
    )


def _usage_hook(recorder: api_keys.UsageRecorder) -> keys.AfterRequestHook:
    def record_usage(request: web.Request, status: int) -> None:
        principal = request.get(keys.PRINCIPAL)
        key_id = getattr(principal, "api_key_id", None)
        if key_id is None:
            return
        recorder.add(
            (
                key_id,
                datetime.now(UTC),
                request.method,
                route_template(request),
                status,
                request.remote,
            )
        )

    return record_usage


def setup(app: web.Application) -> None:
    def pool() -> asyncpg.Pool:
        return app[keys.PG_POOL]

    settings = app[keys.SETTINGS]
    app[keys.API_KEY_RESOLVER] = api_keys.DatabaseApiKeyResolver(pool, app[keys.SESSION_RECORDER])
    recorder = api_keys.UsageRecorder(
        pool,
        interval_ms=settings.api_key_audit_flush_interval_ms,
        max_rows=settings.api_key_audit_flush_max_rows,
    )
    app[USAGE_RECORDER] = recorder
    app[keys.AFTER_REQUEST_HOOKS].append(_usage_hook(recorder))


async def usage_writer(app: web.Application) -> AsyncIterator[None]:
    """Writes the buffered usage audit in batches; the last batch on shutdown."""
    recorder = app[USAGE_RECORDER]
    recorder.start()
    yield
    await recorder.stop()
