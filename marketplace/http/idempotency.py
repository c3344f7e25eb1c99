"""``Idempotency-Key`` on the POST routes that create something (docs/api.md, "Retries and
idempotency").

A route declared with ``idempotent=True`` runs its handler through :func:`respond`. A request
without the header runs as usual. With it (1 to 255 printable ASCII characters, else 400
``invalid_request``), after authentication, the rate limit, the guards and validation:

- the key is claimed for the caller's user (keys are scoped per user: another user's same key is
  another key) in PostgreSQL, with the SHA-256 of the method, the path with its query and the
  body as sent;
- a live key with another hash answers 422 ``idempotency_key_reused``; one whose first request
  is still running answers 409 ``idempotency_key_in_progress``; one with a stored response
  answers that response again (status, body and the headers it had) with
  ``Idempotent-Replayed: true``, and the handler does not run;
- otherwise the handler runs. Its response is stored when it is a 2xx, or a 4xx that the same
  request would get again whatever else happens meanwhile (:data:`STORED_CLIENT_ERRORS`: the
  request itself is wrong). Anything else (a 5xx, a 503 of an unavailable actor, an error that
  depends on state that may change such as 404 or 409, an exception, a cancelled request)
  releases the key, so a retry runs again.

A claim lives :data:`CLAIM_LEASE` at most: if the process dies while the handler runs, a retry
takes the key over once the lease has passed. The handler's own writes and the stored response
are not one transaction: if the process dies after the handler committed and before the
response is stored, a retry after the lease runs the handler again (what a retry without a key
would do). Keys expire after ``idempotency_key_ttl_hours``; every frontend sweeps expired rows
(:func:`key_sweeper`).

At rest, a row holds the key's SHA-256, not the key, and the stored body is encrypted
(AES-256-GCM) under a key derived from the ``Idempotency-Key`` with HKDF: a create response may
carry a secret shown once (a new API key), and only the client that chose the key can have it
answered again. That is as strong as the key is unguessable, so docs/api.md asks for random keys
(a UUID v4).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import asyncpg
from aiohttp import web
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from marketplace.aio import cancel_and_wait
from marketplace.errors import (
    IdempotencyKeyInProgress,
    IdempotencyKeyReused,
    InvalidRequest,
    MarketplaceError,
    ServiceUnavailable,
)
from marketplace.http import keys
from marketplace.http.middlewares import error_response
from marketplace.storage.repositories import idempotency as repo

log = logging.getLogger(__name__)

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
# 1 to 255 printable ASCII characters, spaces included but not at either end (HTTP drops a
# header value's leading and trailing whitespace, so they could not be sent).
KEY_PATTERN = r"^[!-~](?:[ -~]{0,253}[!-~])?$"
_KEY_RE = re.compile(KEY_PATTERN)
# The longest a first request may hold its key: beyond it a retry takes the key over (the
# holder's process is presumed dead). Far longer than any create handler runs.
CLAIM_LEASE = timedelta(seconds=120)
# Where :func:`respond` leaves the identity of a keyed request (user, key and request hash) for
# :func:`repeat_safe_id`.
_REQUEST_IDENTITY: web.RequestKey[bytes] = web.RequestKey("idempotency_identity", bytes)
# 4xx answers stored like successes: they are about the request itself, so the same request
# gets the same answer again (400 invalid_request of the handler's own checks, 413, 415, 422
# such as offensive_content, which also counted an offense that a retry must not count twice).
# Not stored: 401, 403, 404, 409, 410 and the like depend on state that may change (a link made,
# a project indexed, a conflict resolved); 408, 425 and 429 on timing.
STORED_CLIENT_ERRORS = frozenset({400, 413, 415, 422})
# Response headers not stored with a response (they belong to each answer).
_NOT_STORED = frozenset(
    {"content-length", "date", "server", "x-request-id", "transfer-encoding", "connection"}
)
SWEEP_INTERVAL_SECONDS = 300.0
SWEEP_BATCH = 1000

Respond = Callable[[], Awaitable[web.StreamResponse]]


def request_key(request: web.Request) -> str | None:
    """The request's ``Idempotency-Key``, if it sent one; 400 if it is not a valid key."""
    value = request.headers.get(IDEMPOTENCY_KEY_HEADER)
    if value is None:
        return None
    if not _KEY_RE.fullmatch(value):
        raise InvalidRequest(
            f"{IDEMPOTENCY_KEY_HEADER} must be 1 to 255 printable ASCII characters",
            [
                {
                    "location": "header",
                    "field": IDEMPOTENCY_KEY_HEADER,
                    "message": "must be 1 to 255 printable ASCII characters",
                    "type": "string_pattern_mismatch",
                }
            ],
        )
    return value


def repeat_safe_id(request: web.Request, purpose: str) -> uuid.UUID:
    """The id of what ``request`` creates (``purpose`` names which thing): random, except under an
    ``Idempotency-Key``, where every run of the same request (same user, key, method, path and
    body) gets the same id. A 5xx releases the key, yet the first run may have committed (a shard
    that answered after the call timeout): the retry then finds what the first run created under
    that id instead of creating it again."""
    identity = request.get(_REQUEST_IDENTITY)
    if identity is None:
        return uuid.uuid4()
    digest = hashlib.sha256(identity + b"\0" + purpose.encode()).digest()
    return uuid.UUID(bytes=digest[:16], version=4)


def request_hash(method: str, path_qs: str, body: bytes) -> bytes:
    digest = hashlib.sha256()
    for part in (method.encode(), path_qs.encode(), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.digest()


def key_digest(key: str) -> bytes:
    return hashlib.sha256(b"marketplace idempotency key v1\0" + key.encode()).digest()


def _cipher(key: str, user_id: uuid.UUID, digest: bytes) -> AESGCM:
    secret = HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=user_id.bytes,
        info=b"marketplace idempotency response v1\0" + digest,
    ).derive(key.encode())
    return AESGCM(secret)


_NONCE_BYTES = 12


def seal(key: str, user_id: uuid.UUID, digest: bytes, body: bytes) -> bytes:
    """``body`` encrypted for storage: only the holder of ``key`` can read it back."""
    nonce = os.urandom(_NONCE_BYTES)
    return nonce + _cipher(key, user_id, digest).encrypt(nonce, body, None)


def unseal(key: str, user_id: uuid.UUID, digest: bytes, sealed: bytes) -> bytes:
    nonce, ciphertext = sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:]
    return _cipher(key, user_id, digest).decrypt(nonce, ciphertext, None)


def stored(status: int) -> bool:
    """Whether a response with ``status`` is stored and answered again for its key."""
    return 200 <= status < 300 or status in STORED_CLIENT_ERRORS


def _headers_to_store(response: web.StreamResponse) -> dict[str, str]:
    return {
        name: value
        for name, value in response.headers.items()
        if name.lower() not in _NOT_STORED and not name.lower().startswith("ratelimit")
    }


def replay(entry: repo.StoredKey, body: bytes) -> web.Response:
    assert entry.status is not None
    headers = dict(entry.headers)
    headers[REPLAYED_HEADER] = "true"
    return web.Response(status=entry.status, body=body, headers=headers)


async def respond(
    request: web.Request,
    user_id: uuid.UUID | None,
    pool: asyncpg.Pool,
    ttl_hours: int,
    route_name: str,
    run: Respond,
) -> web.StreamResponse:
    """``run()`` (the route's handler, answering for the caller ``user_id``) under the request's
    ``Idempotency-Key``, if it has one."""
    key = request_key(request)
    if key is None or user_id is None:
        return await run()
    digest = request_hash(request.method, request.path_qs, await request.read())
    held = key_digest(key)
    ttl = timedelta(hours=ttl_hours)
    token = None
    # A key released or expired between the claim and the read is claimed again.
    for _ in range(3):
        token = await repo.claim(
            pool, user_id, held, digest, route_name, ttl=ttl, lease=CLAIM_LEASE
        )
        if token is not None:
            break
        entry = await repo.get(pool, user_id, held)
        if entry is None:
            continue
        if entry.request_hash != digest:
            raise IdempotencyKeyReused()
        if entry.in_progress:
            raise IdempotencyKeyInProgress()
        assert entry.body is not None
        # The digest matched, so the key did too: the body decrypts (InvalidTag otherwise, a
        # 500, which only a row altered in the database could cause).
        return replay(entry, unseal(key, user_id, digest, entry.body))
    if token is None:
        raise ServiceUnavailable("the idempotency key could not be claimed; retry shortly")

    request[_REQUEST_IDENTITY] = hashlib.sha256(user_id.bytes + held + digest).digest()
    try:
        response = await run()
    except MarketplaceError as exc:
        if stored(exc.status):
            answer = error_response(exc, None)
            await _complete(pool, user_id, key, digest, token, answer, answer.body)
        else:
            await _release(pool, user_id, held, token)
        raise
    except BaseException:
        await _release(pool, user_id, held, token)
        raise
    if isinstance(response, web.Response) and not response.prepared and stored(response.status):
        await _complete(pool, user_id, key, digest, token, response, response.body)
    else:
        await _release(pool, user_id, held, token)
    return response


async def _complete(
    pool: asyncpg.Pool,
    user_id: uuid.UUID,
    key: str,
    digest: bytes,
    token: uuid.UUID,
    response: web.Response,
    body: object,
) -> None:
    # The handler has done its work: failing to store its answer must not turn it into an
    # error (the client would retry and the work would be done twice while the claim holds).
    # The claim then ends with its lease, and a retry after that runs again.
    try:
        plain = bytes(body) if isinstance(body, (bytes, bytearray)) else b""
        done = await repo.complete(
            pool,
            user_id,
            key_digest(key),
            token,
            status=response.status,
            headers=_headers_to_store(response),
            body=seal(key, user_id, digest, plain),
        )
    except Exception:
        log.warning("storing the response of an idempotency key failed", exc_info=True)
        return
    if not done:
        log.warning("an idempotency key's claim was lost before its response was stored")


async def _release(pool: asyncpg.Pool, user_id: uuid.UUID, held: bytes, token: uuid.UUID) -> None:
    try:
        await asyncio.shield(repo.release(pool, user_id, held, token))
    except Exception:
        log.warning("releasing an idempotency key failed; it frees with its lease", exc_info=True)


# --- the sweep ----------------------------------------------------------------------------


async def sweep_expired(pool: asyncpg.Pool) -> int:
    """Delete every expired key, a batch at a time; returns how many."""
    total = 0
    while True:
        deleted = await repo.sweep(pool, SWEEP_BATCH)
        total += deleted
        if deleted < SWEEP_BATCH:
            return total


async def sweep_forever(pool: asyncpg.Pool, interval: float = SWEEP_INTERVAL_SECONDS) -> None:
    while True:
        try:
            swept = await sweep_expired(pool)
            if swept:
                log.info("expired idempotency keys deleted", extra={"keys": swept})
        except Exception:
            log.warning("idempotency key sweep failed; retrying later", exc_info=True)
        await asyncio.sleep(interval)


async def key_sweeper(app: web.Application) -> AsyncIterator[None]:
    """Delete expired idempotency keys now and then, in every frontend (a DELETE of expired
    rows: any number of frontends may run it at once)."""
    task = asyncio.create_task(sweep_forever(app[keys.PG_POOL]), name="idempotency-sweep")
    yield
    await cancel_and_wait(task)
