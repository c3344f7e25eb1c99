"""Regressions for what the fuzz suites (tests/fuzz) found, each reduced to its smallest request.

Like test_hostile_input.py, these run against a real app served on a socket by aiohttp.
"""

from __future__ import annotations

import gzip
import json
import logging
from typing import Any

import pytest

from tests.conftest import new_user


async def _error(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    body = await resp.json()
    assert body["error"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    return dict(body)


async def test_a_corrupt_gzip_body_is_a_400_that_ends_the_connection(
    client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """It was a 500, and aiohttp then logged the decoding error as unhandled while draining the
    body and dropped the connection the client had been told to keep."""
    user = new_user()
    valid = gzip.compress(json.dumps({"userIds": []}).encode())
    for body in (valid[:10] + b"\x00garbage", b"not gzip at all"):
        resp = await client.post(
            "/v1/username/batch",
            data=body,
            headers={
                **user.headers,
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
            },
        )
        await _error(resp, 400, "invalid_request")
        # The connection's HTTP parser is out of step now: the client must not reuse it.
        assert resp.headers.get("Connection") == "close"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    # The same body, intact, is read as usual.
    resp = await client.post(
        "/v1/username/batch",
        data=valid,
        headers={**user.headers, "Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert resp.status == 200, await resp.text()
    assert (await client.get("/v1/health")).status == 200
