"""Route declarations and the one adapter that runs every endpoint.

A domain module declares its endpoints on a :class:`RouteTable`: path, method, auth mode,
whether the mutation is guarded (and whether it sends a message, ``sends_messages``, which the
moderation guard acts on), request/query/path models, response model and the errors it can
raise. The same declarations drive request handling (below) and the OpenAPI document
(``openapi.py``), so the two cannot drift apart.

Per request the adapter does, in this order: authenticate (spec section 5; a verified session is
only recorded in memory, see ``marketplace.identity.session_recorder``), rate-limit, for an unsafe
method make sure the caller's ``users`` row is written (rows the request writes may reference it),
run the guarded-mutation checks (verified e-mail, then the registered hooks such as legal assent,
before validation as rule 8 requires), validate path/query/body with pydantic, call the handler
(an ``idempotent=True`` route through ``marketplace.http.idempotency``, which answers a stored
response again for a repeated ``Idempotency-Key``), and serialise its response model.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast, get_args, get_origin

import asyncpg
import redis.asyncio as aioredis
from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from pydantic import BaseModel, ValidationError

from marketplace.auth import (
    Principal,
    SessionClaims,
    bearer_token,
    combine_principals,
    is_scheduler_token,
)
from marketplace.config import Settings
from marketplace.errors import (
    EmailNotVerified,
    Forbidden,
    InvalidRequest,
    MarketplaceError,
    PrincipalMismatch,
    Unauthorized,
    UnsupportedMediaType,
    ValidationDetail,
)
from marketplace.http import idempotency, keys
from marketplace.http.middlewares import request_started_at
from marketplace.http.ratelimit import RATE_LIMITER
from marketplace.http.read_cache import READ_CACHE, Cacheable
from marketplace.metrics import READ_CACHE_BYPASSES, READ_CACHE_HITS, READ_CACHE_MISSES

log = logging.getLogger(__name__)

B = TypeVar("B")
Q = TypeVar("Q")
P = TypeVar("P")


class AuthMode(enum.StrEnum):
    NONE = "none"  # public; credentials are not even looked at
    OPTIONAL = "optional"  # viewer auth: anonymous allowed, a bad credential is still a 401
    EITHER = "either"  # session or agent key
    SESSION = "session"  # session token only
    SCHEDULER = "scheduler"  # scheduler secret only
    EITHER_OR_SCHEDULER = "either_or_scheduler"


@dataclass
class Call(Generic[B, Q, P]):
    """Everything a handler gets: the validated inputs, the principal and the app's services."""

    request: web.Request
    route: Route
    body: B
    query: Q
    path: P
    principal: Principal | None
    is_scheduler: bool = False
    # The validated `header_params` model of the route, when it declares one.
    headers: Any = None
    # Set by the handler of a cached route when its response may be cached (read_cache.py).
    cacheable: Cacheable | None = None

    @property
    def app(self) -> web.Application:
        return self.request.app

    @property
    def settings(self) -> Settings:
        return self.app[keys.SETTINGS]

    @property
    def pool(self) -> asyncpg.Pool:
        return self.app[keys.PG_POOL]

    @property
    def redis(self) -> aioredis.Redis:
        return self.app[keys.REDIS]

    def require_principal(self) -> Principal:
        if self.principal is None:
            raise Unauthorized()
        return self.principal


@dataclass(frozen=True)
class Reply:
    """A response model with a non-default status or extra headers."""

    model: BaseModel
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Call[Any, Any, Any]], Awaitable[BaseModel | Reply | web.StreamResponse]]
# The response-cache key of a request to a cached route, from the raw request (before
# validation: a hit skips it) and the authenticated principal; None: do not cache this request.
# Requests whose inputs are invalid never produce an entry, so their key only ever misses.
CacheKey = Callable[[web.Request, Principal | None], Hashable | None]

# Checks run, in order, after the verified-email check of every guarded mutation
# (spec section 5 rules 7-8); the app factory fills it from the capabilities' guards, in the
# order of marketplace.http.capabilities.GuardSlot.
GuardHook = Callable[[Call[Any, Any, Any]], Awaitable[None]]
GUARD_HOOKS: web.AppKey[list[GuardHook]] = web.AppKey("guard_hooks", list)

# Methods that write nothing: only requests with another method may write rows referencing the
# caller's user, so only they wait for its session record (RFC 9110 section 9.2.1).
SAFE_METHODS = frozenset({hdrs.METH_GET, hdrs.METH_HEAD, hdrs.METH_OPTIONS})


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    name: str
    summary: str
    tag: str
    auth: AuthMode
    response: type[BaseModel] | None
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    path_params: type[BaseModel] | None = None
    # Request headers the route reads (field aliases are the header names, matched
    # case-insensitively); documented as `in: header` parameters.
    header_params: type[BaseModel] | None = None
    guarded: bool = False
    # The route sends a chat or direct message: the moderation capability's guard refuses it
    # while the caller's sending is suspended (403 `sending_suspended`), and its handler must
    # pass the body through `marketplace.http.moderation_gate.screen_message` before storing
    # anything (422 `offensive_content`). Guards run only for guarded routes, so it needs
    # `guarded=True`. The OpenAPI document lists both errors for such routes.
    sends_messages: bool = False
    status: int = 200
    # Other success statuses with the same body, and what each means (a tuple: routes are
    # hashed to cache the OpenAPI document).
    also_status: tuple[tuple[int, str], ...] = ()
    errors: tuple[type[MarketplaceError], ...] = ()
    rate_limited: bool = True
    exclude_none: bool = False
    description: str = ""
    response_content_type: str = "application/json"
    # The body is an HTML form (application/x-www-form-urlencoded or multipart/form-data, text
    # fields only) instead of JSON: RFC 8058 one-click unsubscribe posts one.
    body_form: bool = False
    # Serve this read from the frontend's response cache (marketplace/http/read_cache.py); the
    # handler sets ``call.cacheable`` when its response may be stored.
    cache: CacheKey | None = None
    # A POST that creates something: an `Idempotency-Key` header makes a retry answer the first
    # response again (marketplace/http/idempotency.py); the OpenAPI document lists the header.
    idempotent: bool = False
    # A query-string credential this route (and only it) accepts besides its auth mode's
    # headers; it satisfies `AuthMode.EITHER`.
    query_credential: QueryCredential | None = None

    def __post_init__(self) -> None:
        if self.sends_messages and not self.guarded:
            # The suspension check is a guard: without `guarded` it would silently not run.
            raise ValueError(f"{self.name}: sends_messages=True needs guarded=True")
        if self.idempotent and (self.method != "POST" or self.body_form or self.cache):
            raise ValueError(f"{self.name}: idempotent=True is for POST routes with a JSON body")


@dataclass(frozen=True)
class QueryCredential:
    """A credential one route accepts in its query string instead of the headers (the event
    stream's single-use ticket: a browser's EventSource cannot send headers). Only a route that
    declares it reads the parameter; it counts as a presented credential for the
    failed-authentication limit, and sending it with header credentials is 400."""

    param: str
    # The principal the value proves (spending it, for a single-use one); raises Unauthorized
    # for a value that does not verify.
    redeem: Callable[[web.Request, str], Awaitable[Principal]]
    # Name of its OpenAPI security scheme (openapi.SECURITY_SCHEMES).
    scheme: str


# Every route the app registered, in registration order (the OpenAPI document is built from it).
ROUTES: web.AppKey[list[Route]] = web.AppKey("routes", list)


class RouteTable:
    """The endpoints of one domain module."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.routes: list[Route] = []

    def route(
        self,
        method: str,
        path: str,
        *,
        name: str,
        summary: str,
        auth: AuthMode,
        response: type[BaseModel] | None,
        **options: Any,
    ) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            self.routes.append(
                Route(
                    method=method,
                    path=path,
                    handler=handler,
                    name=name,
                    summary=summary,
                    tag=self.tag,
                    auth=auth,
                    response=response,
                    description=options.pop("description", handler.__doc__ or ""),
                    **options,
                )
            )
            return handler

        return register

    def get(self, path: str, **kw: Any) -> Callable[[Handler], Handler]:
        return self.route("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> Callable[[Handler], Handler]:
        return self.route("POST", path, **kw)

    def put(self, path: str, **kw: Any) -> Callable[[Handler], Handler]:
        return self.route("PUT", path, **kw)

    def patch(self, path: str, **kw: Any) -> Callable[[Handler], Handler]:
        return self.route("PATCH", path, **kw)

    def delete(self, path: str, **kw: Any) -> Callable[[Handler], Handler]:
        return self.route("DELETE", path, **kw)


# --- authentication -----------------------------------------------------------------------


async def authenticate(request: web.Request, route: Route) -> tuple[Principal | None, bool]:
    if route.auth is AuthMode.NONE:
        return None, False
    app = request.app
    authorization = request.headers.get("Authorization")
    key_secret = request.headers.get("x-agent-api-key")
    carried = route.query_credential
    in_query = None
    if carried is not None:
        in_query = request.query.get(carried.param)
        if in_query is not None and (authorization is not None or key_secret is not None):
            raise InvalidRequest(f"send either credential headers or `{carried.param}`, not both")
    limiter = app[RATE_LIMITER]
    attempt = None
    if authorization is not None or key_secret is not None or in_query is not None:
        # Before any credential is looked at: an address that spent its failed-authentication
        # budget gets 429 whatever it presents, so guesses cannot be checked faster than that.
        attempt = await limiter.before_credentials(request)
    try:
        principal: Principal | None
        if carried is not None and in_query is not None:
            session, is_scheduler = None, False
            principal = await carried.redeem(request, in_query)
        else:
            session, principal, is_scheduler = await _verify_credentials(
                request, authorization, key_secret
            )
    except PrincipalMismatch:
        if attempt is not None:
            await limiter.credentials_accepted(request, attempt)
        raise
    except Unauthorized:
        if attempt is not None:
            await limiter.credentials_failed(request, attempt)
        raise
    if attempt is not None:
        await limiter.credentials_accepted(request, attempt)
    # Set before the mode checks so after-request hooks (the API-key usage audit) also see
    # requests refused here, e.g. an agent key on a session-only route.
    request[keys.PRINCIPAL] = principal

    mode = route.auth
    if mode is AuthMode.SCHEDULER and not is_scheduler:
        raise Unauthorized("this endpoint needs the scheduler token")
    if mode is AuthMode.EITHER_OR_SCHEDULER and principal is None and not is_scheduler:
        raise Unauthorized()
    if mode in (AuthMode.EITHER, AuthMode.SESSION) and principal is None:
        raise Unauthorized()
    if mode is AuthMode.SESSION and principal is not None and not principal.has_session:
        raise Forbidden("this action needs a signed-in session; agent API keys cannot do it")
    if session is not None:
        # In memory only: authentication writes nothing (the recorder writes in batches).
        app[keys.SESSION_RECORDER].record(
            session.user_id,
            email_verified=session.email_verified,
            email=session.email,
            issued_at=session.issued_at,
        )
    return principal, is_scheduler


async def _verify_credentials(
    request: web.Request, authorization: str | None, key_secret: str | None
) -> tuple[SessionClaims | None, Principal | None, bool]:
    """What the presented credentials prove; 401 for any that does not verify."""
    app = request.app
    settings = app[keys.SETTINGS]
    token = bearer_token(authorization)
    scheduler_secret = (
        settings.scheduler_secret.get_secret_value() if settings.scheduler_secret else None
    )
    is_scheduler = False
    session = None
    if token is not None:
        if is_scheduler_token(token, scheduler_secret):
            is_scheduler = True
        else:
            session = await app[keys.SESSION_VERIFIER].verify(token)
    key = None
    if is_scheduler and key_secret is not None:
        # The scheduler is not a user: there is no user for the two carriers to agree on.
        raise PrincipalMismatch("the scheduler token cannot be combined with an agent API key")
    if key_secret is not None:
        key = await app[keys.API_KEY_RESOLVER].resolve(key_secret.strip())
        if key is None:
            raise Unauthorized("invalid or revoked agent API key")
    return session, combine_principals(session, key), is_scheduler


# --- validation -----------------------------------------------------------------------------


def _details(exc: ValidationError, location: str) -> list[ValidationDetail]:
    details: list[ValidationDetail] = []
    for error in exc.errors(include_url=False, include_input=False):
        loc = ".".join(str(part) for part in error["loc"])
        details.append(
            {"location": location, "field": loc, "message": error["msg"], "type": error["type"]}
        )
    return details


def _invalid(exc: ValidationError, location: str) -> InvalidRequest:
    details = _details(exc, location)
    fields = ", ".join(
        f"{d['location']}.{d['field']}" if d["field"] else d["location"] for d in details
    )
    return InvalidRequest(f"invalid {location}: {fields}", details)


def _validate(model: type[BaseModel], data: Any, location: str) -> BaseModel:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc, location) from None


def _query_data(request: web.Request, model: type[BaseModel]) -> dict[str, str | list[str]]:
    data: dict[str, str | list[str]] = {}
    for name, info in model.model_fields.items():
        wanted = info.alias or name
        values = request.query.getall(wanted, [])
        if not values:
            continue
        annotation = info.annotation
        is_list = get_origin(annotation) is list or any(
            get_origin(arg) is list for arg in get_args(annotation)
        )
        if is_list:
            data[wanted] = [part for value in values for part in value.split(",") if part]
        else:
            data[wanted] = values[-1]
    return data


def _header_data(request: web.Request, model: type[BaseModel]) -> dict[str, str]:
    data: dict[str, str] = {}
    for name, info in model.model_fields.items():
        wanted = info.alias or name
        value = request.headers.get(wanted)
        if value is not None:
            data[wanted] = value
    return data


def _is_json_media_type(content_type: str) -> bool:
    main, _, sub = content_type.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


async def _validate_body(request: web.Request, model: type[BaseModel]) -> BaseModel:
    """Parse and validate the body in one step with pydantic's JSON parser.

    Its parser is not recursive in Python, bounds nesting itself and refuses numbers out of
    range, so no body within the size limit can exhaust a stack or turn into a 500. Validation is
    strict: JSON ``true`` or ``"5"`` is not an integer. An empty body counts as ``{}``.
    """
    try:
        raw = await request.read()  # decompressed; aiohttp enforces client_max_size on the result
    except web.RequestPayloadError:
        # Corrupt gzip/deflate data or broken chunked framing: the client sent it that way.
        # Nothing more of the body can be read, so aiohttp must not try to drain it after the
        # answer (it would log the decoding error as unhandled); the error middleware closes
        # the connection, whose HTTP parser is now out of step.
        request.content.feed_eof()
        raise InvalidRequest("request body could not be decoded") from None
    if not raw.strip():
        raw = b"{}"
    elif not _is_json_media_type(request.content_type) or hdrs.CONTENT_TYPE not in request.headers:
        raise UnsupportedMediaType(
            f"request bodies must be application/json, not {request.content_type!r}"
        )
    try:
        return model.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        if errors and errors[0]["type"] == "json_invalid":
            raise InvalidRequest(f"request body is not valid JSON: {errors[0]['msg']}") from None
        raise _invalid(exc, "body") from None


FORM_MEDIA_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


async def _validate_form(request: web.Request, model: type[BaseModel]) -> BaseModel:
    """Parse an HTML form body (text fields only; the last of repeated fields wins) and validate
    it like a query. An empty body counts as an empty form."""
    if request.body_exists and request.content_type not in FORM_MEDIA_TYPES:
        raise UnsupportedMediaType(
            f"request bodies must be one of {', '.join(FORM_MEDIA_TYPES)}, "
            f"not {request.content_type!r}"
        )
    try:
        form = await request.post() if request.body_exists else {}
    except web.RequestPayloadError:
        request.content.feed_eof()  # as in _validate_body: the framing itself is broken
        raise InvalidRequest("request body could not be decoded") from None
    except (ValueError, LookupError, HttpProcessingError):
        # A malformed multipart part (bad part headers, unknown charset, ...); the body's
        # framing is intact, so aiohttp drains the rest and the connection stays usable.
        raise InvalidRequest("request body is not a readable form") from None
    data: dict[str, str] = {}
    for name, value in form.items():
        if not isinstance(value, str):
            raise InvalidRequest(f"form field {name!r} must be text, not a file")
        data[name] = value
    return _validate(model, data, "body")


# --- the adapter ------------------------------------------------------------------------------


def make_endpoint(route: Route) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    if route.cache is not None:
        return _cached_endpoint(route, route.cache)

    async def endpoint(request: web.Request) -> web.StreamResponse:
        principal, is_scheduler = await authenticate(request, route)
        request[keys.PRINCIPAL] = principal
        if route.rate_limited:
            await request.app[RATE_LIMITER].check(request, route.name, principal, is_scheduler)
        return await _run(request, route, principal, is_scheduler)

    endpoint.__name__ = route.name
    return endpoint


def _cached_endpoint(
    route: Route, cache_key_of: CacheKey
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The endpoint of a route served from the read cache when it can be (read_cache.py):
    authentication and rate limiting first, as for every route, then the lookup."""
    # Label children bound once: `labels()` takes a lock and builds a key on every call.
    hits = READ_CACHE_HITS.labels(route.name)
    misses = READ_CACHE_MISSES.labels(route.name)
    uncacheable = READ_CACHE_BYPASSES.labels(route.name, "uncacheable")
    not_serving = READ_CACHE_BYPASSES.labels(route.name, "not_serving")

    async def endpoint(request: web.Request) -> web.StreamResponse:
        principal, is_scheduler = await authenticate(request, route)
        request[keys.PRINCIPAL] = principal
        if route.rate_limited:
            await request.app[RATE_LIMITER].check(request, route.name, principal, is_scheduler)
        cache = request.app.get(READ_CACHE)
        if cache is None:
            return await _run(request, route, principal, is_scheduler)
        cache_key = cache_key_of(request, principal)
        if cache_key is None:
            uncacheable.inc()
            return await _run(request, route, principal, is_scheduler)
        if not cache.serving(request_started_at(request)):
            not_serving.inc()
            return await _run(request, route, principal, is_scheduler)
        body = cache.get(cache_key)
        if body is None:
            pending = cache.filling.get(cache_key)
            if pending is not None:
                # A fill of this key is under way: its body, once stored, answers this request
                # too (32 clients missing one list page cost one query, not 32).
                body = await asyncio.shield(pending)
        if body is not None:
            hits.inc()
            return web.Response(body=body, status=route.status, content_type="application/json")
        misses.inc()
        filled = cache.begin_fill(cache_key)
        stored: bytes | None = None
        try:
            generation = cache.generation
            response = await _run(request, route, principal, is_scheduler)
            call_cacheable = request.get(_CACHEABLE)
            if call_cacheable is not None and isinstance(response, web.Response):
                body = cast(bytes, response.body)
                if cache.put(cache_key, body, call_cacheable, generation):
                    stored = body
            return response
        finally:
            cache.end_fill(cache_key, filled, stored)

    endpoint.__name__ = route.name
    return endpoint


# The handler's Cacheable of this request (set by _run for the cache lookup in the endpoint).
_CACHEABLE: web.RequestKey[Cacheable] = web.RequestKey("read_cache_cacheable", Cacheable)


async def _run(
    request: web.Request, route: Route, principal: Principal | None, is_scheduler: bool
) -> web.StreamResponse:
    """Everything after authentication and rate limiting: validate, call, render."""
    if principal is not None and request.method not in SAFE_METHODS:
        # Guards (implied legal assent) and handlers may write rows with a foreign key to
        # users; a no-op unless this process still holds the caller's session record.
        await request.app[keys.SESSION_RECORDER].ensure(principal.user_id)
    call: Call[Any, Any, Any] = Call(request, route, None, None, None, principal, is_scheduler)
    if route.guarded:
        await run_guards(call)
    if route.path_params is not None:
        call.path = _validate(route.path_params, dict(request.match_info), "path")
    if route.query is not None:
        call.query = _validate(route.query, _query_data(request, route.query), "query")
    if route.header_params is not None:
        data = _header_data(request, route.header_params)
        call.headers = _validate(route.header_params, data, "header")
    if route.body is not None and route.body_form:
        call.body = await _validate_form(request, route.body)
    elif route.body is not None:
        call.body = await _validate_body(request, route.body)
    if route.idempotent:
        user_id = None if call.principal is None else call.principal.user_id
        return await idempotency.respond(
            request,
            user_id,
            call.pool,
            call.settings.idempotency_key_ttl_hours,
            route.name,
            lambda: _respond(call),
        )
    return await _respond(call)


async def _respond(call: Call[Any, Any, Any]) -> web.StreamResponse:
    """The handler's answer, rendered."""
    result = await call.route.handler(call)
    if call.cacheable is not None and call.route.cache is not None:
        call.request[_CACHEABLE] = call.cacheable
    return render(call.route, result)


async def run_guards(call: Call[Any, Any, Any]) -> None:
    """Guarded mutations (spec section 5 rules 7-8): verified e-mail first, then the hooks."""
    principal = call.require_principal()
    if call.settings.require_verified_email and not principal.email_verified:
        raise EmailNotVerified()
    for hook in call.app[GUARD_HOOKS]:
        await hook(call)


def render(route: Route, result: BaseModel | Reply | web.StreamResponse) -> web.StreamResponse:
    if isinstance(result, web.StreamResponse):
        return result
    status, headers = route.status, {}
    if isinstance(result, Reply):
        status = result.status or status
        headers = result.headers
        result = result.model
    return web.Response(
        body=_serialise(route, result),
        status=status,
        headers=headers,
        content_type="application/json",
    )


def _serialise(route: Route, result: BaseModel) -> bytes:
    if route.response is not None and not isinstance(result, route.response):
        raise TypeError(
            f"{route.name} returned {type(result).__name__}, declared {route.response.__name__}"
        )
    return result.model_dump_json(by_alias=True, exclude_none=route.exclude_none).encode()
