"""Streaming responses are measured as streams: their lifetime stays out of the request latency
histogram, the in-flight gauge and the request's access-log line."""

from __future__ import annotations

import io
from typing import Any

from prometheus_client import REGISTRY

from marketplace.http import keys


def _sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return value or 0.0


async def test_a_stream_is_accounted_when_it_opens_not_when_it_closes(probe_client: Any) -> None:
    route = "/v1/_probe/stream"
    access = probe_client.app[keys.ACCESS_LOG]
    access.enabled, access.json_lines, access.stream = True, True, io.StringIO()
    latency_name = "marketplace_http_request_duration_seconds_sum"
    latency_before = _sample(latency_name, method="GET", route=route)
    streams_before = _sample("marketplace_http_stream_duration_seconds_count", route=route)

    resp = await probe_client.get(route, params={"limit": "10"})  # open for ~1 s
    assert resp.status == 200
    assert resp.headers["x-request-id"]
    first = await resp.content.readline()
    assert first == b"data: 0\n"
    # While it is open: accounted as a request already, counted as an open stream.
    assert _sample("marketplace_http_streams_open", route=route) == 1
    assert _sample("marketplace_http_in_flight_requests") == 0
    access.flush()
    assert '"msg": "stream opened"' in access.stream.getvalue()
    body = first + await resp.read()
    assert body.count(b"data:") == 10

    latency = _sample(latency_name, method="GET", route=route) - latency_before
    assert latency < 0.5, latency  # time to open, not the ~1 s the stream lived
    assert _sample("marketplace_http_streams_open", route=route) == 0
    streams = _sample("marketplace_http_stream_duration_seconds_count", route=route)
    assert streams == streams_before + 1
    assert _sample("marketplace_http_stream_duration_seconds_sum", route=route) >= 0.9
    access.flush()
    assert '"msg": "stream closed"' in access.stream.getvalue()


async def test_an_error_after_the_head_ends_the_stream_without_a_second_response(
    probe_client: Any,
) -> None:
    resp = await probe_client.get("/v1/_probe/stream", params={"limit": "2", "tags": "fail"})
    assert resp.status == 200
    assert (await resp.read()).count(b"data:") == 2
    # The app is fine afterwards.
    assert (await probe_client.get("/v1/health")).status == 200
