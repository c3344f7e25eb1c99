"""Streaming responses (server-sent events and the like) as the middleware must see them.

A stream lives as long as its client stays connected: minutes or hours. Measured like a request,
it would fill the latency histogram's top bucket, hold the in-flight gauge and keep its access-log
line until the client leaves. So a streaming handler opens its response with :func:`open_stream`:
at that moment the request is accounted for as a request (latency = time to open, access-log line
with the status, in-flight released) and becomes an open stream (a gauge by route); when the
handler returns, the middleware records only the stream's duration and a short closing line.
"""

from __future__ import annotations

import time

from aiohttp import web

from marketplace.http import keys
from marketplace.http.middlewares import REQUEST_ID_HEADER, account_request, route_template
from marketplace.http.ratelimit import RATE_LIMIT_HEADERS
from marketplace.metrics import HTTP_IN_FLIGHT, HTTP_STREAMS_OPEN


async def open_stream(request: web.Request, response: web.StreamResponse) -> None:
    """Send the response head and account for the request; the body follows as it comes."""
    response.headers[REQUEST_ID_HEADER] = request[keys.REQUEST_ID]
    # The head goes now: the route limit's headers, which the middleware adds to other answers,
    # must be in it.
    response.headers.update(request.get(RATE_LIMIT_HEADERS, {}))
    await response.prepare(request)
    request[keys.STREAM_RESPONSE] = response
    request[keys.STREAM_OPENED_AT] = time.perf_counter()
    HTTP_IN_FLIGHT.dec()
    HTTP_STREAMS_OPEN.labels(route_template(request)).inc()
    account_request(request, response.status, event="stream opened")
