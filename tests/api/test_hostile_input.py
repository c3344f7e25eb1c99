"""Hostile request shapes (issue 9): each is answered with a JSON 4xx and the process lives.

Everything runs against a real app served on a socket by aiohttp in this process, so a crash of
the parser (the nesting bomb used to segfault the interpreter) would take the test run down.
"""

from __future__ import annotations

import gzip
import json
import socket
import sys
from typing import Any

from marketplace.interpreter import RECURSION_LIMIT
from tests.conftest import new_user


async def _error(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    body = await resp.json()
    assert body["error"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    return body


async def _alive(client: Any) -> None:
    resp = await client.get("/v1/health")
    assert resp.status == 200


async def test_the_recursion_limit_is_pinned_after_the_app_is_built(client: Any) -> None:
    # eth_account -> py_ecc raises it to 100000, which turns deep recursion into a segfault.
    assert sys.getrecursionlimit() == RECURSION_LIMIT


async def test_gzip_nesting_bomb_from_an_unverified_user_is_a_400(client: Any) -> None:
    user = new_user(email_verified=False)
    bomb = gzip.compress(b"[" * 100_000 + b"]" * 100_000)
    assert len(bomb) < 1000
    for path in ("/v1/username/batch", "/v1/wallet-links/challenge"):
        resp = await client.post(
            path,
            data=bomb,
            headers={
                **user.headers,
                "Content-Encoding": "gzip",
                "Content-Type": "application/json",
            },
        )
        body = await _error(resp, 400, "invalid_request")
        assert "JSON" in body["message"]
    await _alive(client)


async def test_deep_nesting_without_compression_is_a_400(probe_client: Any) -> None:
    for depth in (250, 1_000):  # the probe app takes bodies up to 2048 bytes
        body = '{"name": "x", "count": 1, "extra": ' + "[" * depth + "]" * depth + "}"
        resp = await probe_client.post(
            "/v1/_probe/echo", data=body, headers={"Content-Type": "application/json"}
        )
        await _error(resp, 400, "invalid_request")
    await _alive(probe_client)


async def test_decompressed_size_is_bounded(probe_client: Any) -> None:
    # 64 MiB of zeros compresses to about 64 KiB; the limit applies to what it inflates to.
    bomb = gzip.compress(b" " * (64 * 1024 * 1024), compresslevel=9)
    assert len(bomb) < 200_000
    resp = await probe_client.post(
        "/v1/_probe/echo",
        data=bomb,
        headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
    )
    await _error(resp, 413, "payload_too_large")
    await _alive(probe_client)


async def test_integers_beyond_pythons_digit_limit_are_a_400(client: Any) -> None:
    user = new_user()
    huge = "9" * 5_000
    resp = await client.post(
        "/v1/wallet-links/challenge",
        data='{"walletAddress": "0x' + "ab" * 20 + '", "chainId": ' + huge + "}",
        headers={**user.headers, "Content-Type": "application/json"},
    )
    await _error(resp, 400, "invalid_request")
    resp = await client.get(f"/v1/projects?limit={huge}")
    await _error(resp, 400, "invalid_request")


async def test_booleans_and_numeric_strings_are_not_integers(client: Any) -> None:
    user = new_user()
    wallet = "0x" + "ab" * 20
    for chain_id in (True, "31337", 31337.5):
        resp = await client.post(
            "/v1/wallet-links/challenge",
            json={"walletAddress": wallet, "chainId": chain_id},
            headers=user.headers,
        )
        body = await _error(resp, 400, "invalid_request")
        assert any(d["field"] == "chainId" for d in body["details"]), body


async def test_control_characters_are_refused_in_every_string(client: Any) -> None:
    user = new_user()
    for name in ("key\x00name", "key\x07name", "key\x1bname"):
        resp = await client.post(
            "/v1/api-keys", json={"name": name, "userId": str(user.user_id)}, headers=user.headers
        )
        body = await _error(resp, 400, "invalid_request")
        assert "control characters" in json.dumps(body)
    resp = await client.get("/v1/username/check?username=ab%00cd", headers=user.headers)
    await _error(resp, 400, "invalid_request")
    # Tabs and line breaks are text, not control noise: a name with them is judged on its merits.
    resp = await client.post(
        "/v1/api-keys",
        json={"name": "line one\nline two", "userId": str(user.user_id)},
        headers=user.headers,
    )
    assert resp.status == 201, await resp.text()


async def test_lone_surrogates_are_refused(probe_client: Any) -> None:
    resp = await probe_client.post(
        "/v1/_probe/echo",
        data='{"name": "\\ud800", "count": 1}',
        headers={"Content-Type": "application/json"},
    )
    await _error(resp, 400, "invalid_request")


async def test_a_json_body_needs_a_json_content_type(probe_client: Any) -> None:
    payload = json.dumps({"name": "x", "count": 1})
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": content_type} if content_type else {}
        resp = await probe_client.post(
            "/v1/_probe/echo",
            data=payload.encode(),
            headers=headers,
            skip_auto_headers=["Content-Type"],
        )
        await _error(resp, 415, "unsupported_media_type")
    for content_type in (
        "application/json",
        "application/json; charset=utf-8",
        "application/merge-patch+json",
    ):
        resp = await probe_client.post(
            "/v1/_probe/echo", data=payload, headers={"Content-Type": content_type}
        )
        assert resp.status == 200, (content_type, await resp.text())


def _raw_http(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, body


async def test_oversize_header_and_request_line_are_json(client: Any) -> None:
    import asyncio

    port = client.server.port
    big_header = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
    status, headers, body = await asyncio.to_thread(_raw_http, port, big_header)
    assert status == 431
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body)["error"] == "request_header_fields_too_large"

    long_line = b"GET /v1/health?" + b"q" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    status, headers, body = await asyncio.to_thread(_raw_http, port, long_line)
    assert status in (400, 431)
    assert json.loads(body)["error"] in ("invalid_request", "request_header_fields_too_large")

    garbage = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http\r\n\r\n"
    status, headers, body = await asyncio.to_thread(_raw_http, port, garbage)
    assert status == 400
    assert json.loads(body) == {
        "error": "invalid_request",
        "message": "malformed HTTP request",
        "details": [],
    }
    await _alive(client)


async def test_bidi_controls_are_refused_in_uris(client: Any) -> None:
    user = new_user()
    project = "0x" + "33" * 20
    base = {"bidderWalletAddress": "0x" + "11" * 20, "draftHash": "0x" + "22" * 32}
    for uri in ("https://example.com/\u202egnp.exe", "ipfs://bafy\u2066x", "https://a.b/\u200fc"):
        resp = await client.post(
            f"/v1/projects/{project}/bid-drafts",
            json={**base, "artifactUri": uri},
            headers=user.headers,
        )
        body = await _error(resp, 400, "invalid_request")
        assert [d["field"] for d in body["details"]] == ["artifactUri"], body
