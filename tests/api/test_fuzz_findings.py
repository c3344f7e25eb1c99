"""Regressions for what the fuzz suites (tests/fuzz) found, each reduced to its smallest request.

Like test_hostile_input.py, these run against a real app served on a socket by aiohttp.
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from marketplace_devstack.devnet.anvil import AnvilProcess
from tests.api.identity.conftest import create_key
from tests.api.records.conftest import HASH_A, linked_party, seed_project
from tests.conftest import Servers, make_settings, new_user


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


async def test_a_failed_chain_read_is_a_503_that_names_no_internals(
    aiohttp_client: Any,
    servers: Servers,
    module_namespace: str,
    clean_state: None,
    tmp_path: Path,
) -> None:
    """The challenge-submission check answered 503 with the chain client's own words: a
    ``ValueError('ABI data too short ...')`` for a project address without code, and the RPC
    node's host and port when the node was down."""
    from marketplace.http.app import create_app

    with AnvilProcess(tmp_path / "anvil", silent=True) as anvil:
        settings = make_settings(
            servers, ray_namespace=module_namespace, chain_rpc_url=anvil.rpc_url
        )
        client = await aiohttp_client(create_app(settings))
        party = await linked_party(client)
        conn = await asyncpg.connect(servers.database_url)
        try:
            # Indexed as a challenge project, but nothing is deployed at its address.
            project = await seed_project(
                conn, project_mode="challenge", challenge_submission_count=1
            )
        finally:
            await conn.close()
        path = f"/v1/projects/{project}/challenge-submissions"
        body = {"submitterAddress": party.address, "submissionHash": HASH_A}
        resp = await client.post(path, json=body, headers=party.headers)
        answer = await _error(resp, 503, "service_unavailable")
        assert "no usable answer" in answer["message"]
        for internal in ("Error", "ABI", "bytes"):
            assert internal not in answer["message"], answer
        anvil.stop()
        resp = await client.post(path, json=body, headers=party.headers)
        answer = await _error(resp, 503, "service_unavailable")
        assert "did not answer" in answer["message"]
        for internal in ("127.0.0.1", str(anvil.port), "http", "Error"):
            assert internal not in answer["message"], answer


async def test_the_document_requires_a_body_only_where_an_empty_one_is_refused(
    client: Any,
) -> None:
    """Every request body was documented as required, but an empty body is read as ``{}``: where
    that is a valid body, a request without one is accepted, so the body is optional."""
    document = await (await client.get("/v1/openapi.json")).json()

    def required(method: str, path: str) -> bool:
        return bool(document["paths"][path][method]["requestBody"]["required"])

    user = new_user()
    resp = await client.post("/v1/projects/create-intents", headers=user.headers)
    assert resp.status == 201, await resp.text()
    assert required("post", "/v1/projects/create-intents") is False
    key = await create_key(client, user)
    resp = await client.post(f"/v1/api-keys/{key['id']}/rotate", headers=user.headers)
    assert resp.status == 200, await resp.text()
    assert required("post", "/v1/api-keys/{keyId}/rotate") is False

    resp = await client.post("/v1/api-keys", headers=user.headers)
    await _error(resp, 400, "invalid_request")
    assert required("post", "/v1/api-keys") is True
