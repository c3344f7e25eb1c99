"""Browsers on other origins (CORS, the Fetch standard's "CORS protocol"), for the exact origins
of ``MARKETPLACE_CORS_ORIGINS``; with none listed (the default) this module installs nothing and
no response carries a CORS header.

With origins listed:

- **Preflights** (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``) from a
  listed origin, to any path the app serves, are answered 204 with the URL's methods, the
  request headers clients send (:data:`ALLOWED_REQUEST_HEADERS`, plus any header a route
  declares) and ``Access-Control-Max-Age``. The answer depends only on the origin and the path:
  a preflight runs no authentication, no rate limit and no failed-authentication count (a 429 or
  401 on a preflight reaches a page only as an unreadable network error, and answering one
  costs no more than a 404). A preflight from an origin not listed, or an ``OPTIONS`` that is no
  preflight, is answered as before: 405 ``method_not_allowed`` with ``Allow``; a preflight to a
  path the app does not serve is the usual 404 ``not_found`` (both fail the browser's check).
- **Every other response** to a request whose ``Origin`` is listed, errors and the event stream
  included, carries ``Access-Control-Allow-Origin: <that origin>`` and
  ``Access-Control-Expose-Headers`` (:data:`EXPOSED_RESPONSE_HEADERS`); every response carries
  ``Vary: Origin``, since what it grants depends on that header. A request from an origin not
  listed is served as usual without a grant: the browser keeps its answer from the page.
- Never ``*`` and never ``Access-Control-Allow-Credentials``: credentials travel in headers
  (``Authorization``, ``x-agent-api-key``), not cookies, so pages call ``fetch`` without
  ``credentials: "include"``. The event stream, which ``EventSource`` opens without custom
  headers, takes a stream ticket in its URL instead.

Why not aiohttp-cors: it sends no ``Vary: Origin`` (shared caches could hand one origin's grant
to another; aio-libs/aiohttp-cors issue 351, open since 2021), answers a preflight from an origin
it does not know with a text 403 instead of our JSON, echoes only the requested method, and is
configured resource by resource. Preflight routes are added to the router here (one per path,
beside the path's own routes) instead of a middleware, so requests that are no preflight pay
nothing and a preflight is metered and logged under its route template. The response headers are
set in ``on_response_prepare``, which runs for every response as its head is sent: answers the
error middleware makes, and streams, whose head leaves long before the handler returns.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import hdrs, web

from marketplace.http.routing import ROUTES

# The request headers browser clients send (besides the CORS-safelisted ones): the credentials,
# the wallet of wallet-specific routes, the idempotency key of writes, the event stream's resume
# position, a JSON body's type and the client's own request id.
ALLOWED_REQUEST_HEADERS = (
    "Authorization",
    "Content-Type",
    "Idempotency-Key",
    "Last-Event-ID",
    "x-agent-api-key",
    "x-request-id",
    "x-user-wallet-address",
)
# Response headers a page may read besides the CORS-safelisted ones (Content-Type, Cache-Control,
# ...): the request id, when to retry, where a created resource is, whether a write was replayed
# under its idempotency key, and the rate-limit state (the RateLimit header fields draft).
EXPOSED_RESPONSE_HEADERS = (
    "x-request-id",
    "Retry-After",
    "Location",
    "Idempotent-Replayed",
    "RateLimit-Limit",
    "RateLimit-Remaining",
    "RateLimit-Reset",
    "RateLimit-Policy",
)
# How long a browser may reuse a preflight answer: Chromium's cap (Firefox allows a day). The
# answer changes only with a deployment.
PREFLIGHT_MAX_AGE_SECONDS = 7200


def install_cors(app: web.Application, origins: Iterable[str]) -> None:
    """Serve ``origins`` as above; nothing at all when there are none. Call it once every route
    is registered (its preflight routes cover exactly the paths served at that moment)."""
    allowed_origins = frozenset(origins)
    if not allowed_origins:
        return
    request_headers = ", ".join(_request_headers(app))
    exposed = ", ".join(EXPOSED_RESPONSE_HEADERS)

    async def grant(request: web.Request, response: web.StreamResponse) -> None:
        _vary_on_origin(response)
        origin = request.headers.get(hdrs.ORIGIN)
        if origin not in allowed_origins or hdrs.ACCESS_CONTROL_ALLOW_ORIGIN in response.headers:
            return  # not listed, or a preflight answer (complete already)
        response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = origin
        response.headers[hdrs.ACCESS_CONTROL_EXPOSE_HEADERS] = exposed

    async def preflight(request: web.Request) -> web.StreamResponse:
        # The methods the router serves at this URL: several routes, some with variables, may
        # match it (what a 405 lists in `Allow`), and the first to match answers OPTIONS.
        methods: set[str] = set()
        for resource in request.app.router.resources():
            _, allowed = await resource.resolve(request)
            methods.update(allowed)
        methods.discard(hdrs.METH_OPTIONS)
        origin = request.headers.get(hdrs.ORIGIN)
        if (
            origin not in allowed_origins
            or hdrs.ACCESS_CONTROL_REQUEST_METHOD not in request.headers
        ):
            # What the router answered before this route existed.
            raise web.HTTPMethodNotAllowed(request.method, methods)
        return web.Response(
            status=204,
            headers={
                hdrs.ACCESS_CONTROL_ALLOW_ORIGIN: origin,
                hdrs.ACCESS_CONTROL_ALLOW_METHODS: ", ".join(sorted(methods)),
                hdrs.ACCESS_CONTROL_ALLOW_HEADERS: request_headers,
                hdrs.ACCESS_CONTROL_MAX_AGE: str(PREFLIGHT_MAX_AGE_SECONDS),
            },
        )

    # aiohttp keeps one resource per registered route: add the preflight route to the first
    # resource of each path (the one the router tries first).
    paths: dict[str, web.AbstractResource] = {}
    for resource in app.router.resources():
        methods = {route.method for route in resource}
        if hdrs.METH_OPTIONS in methods or hdrs.METH_ANY in methods:
            raise ValueError(f"{resource.canonical}: answers OPTIONS itself; CORS cannot")
        paths.setdefault(_path_key(resource), resource)
    for resource in paths.values():
        if not isinstance(resource, web.Resource):
            raise TypeError(f"{resource.canonical}: a {type(resource).__name__} takes no routes")
        resource.add_route(hdrs.METH_OPTIONS, preflight)
    app.on_response_prepare.append(grant)


def _request_headers(app: web.Application) -> list[str]:
    """:data:`ALLOWED_REQUEST_HEADERS` and every header a route declares (``header_params``)."""
    names = list(ALLOWED_REQUEST_HEADERS)
    known = {name.lower() for name in names}
    for route in app.get(ROUTES, []):
        if route.header_params is None:
            continue
        for name, field in route.header_params.model_fields.items():
            header = field.alias or name
            if header.lower() not in known:
                known.add(header.lower())
                names.append(header)
    return names


def _path_key(resource: web.AbstractResource) -> str:
    """What a resource matches: its path, or its pattern when it has variables."""
    info = resource.get_info()
    pattern = info.get("pattern")
    if pattern is not None:
        return f"pattern:{pattern.pattern}"
    return f"path:{info.get('path', resource.canonical)}"


def _vary_on_origin(response: web.StreamResponse) -> None:
    vary = response.headers.get(hdrs.VARY)
    if vary is None:
        response.headers[hdrs.VARY] = "Origin"
        return
    listed = {part.strip().lower() for part in vary.split(",")}
    if "origin" not in listed and "*" not in listed:
        response.headers[hdrs.VARY] = f"{vary}, Origin"
