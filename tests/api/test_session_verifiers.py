"""Session JWT verification with a public key, a JWKS URL, issuer and audience."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from marketplace.http.app import create_app
from tests.api.probe import probe
from tests.conftest import Servers, bearer, make_settings

pytestmark = pytest.mark.usefixtures("ray_cluster", "clean_state")


def _claims(**extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"sub": str(uuid.uuid4()), "email_verified": True, "iat": now, "exp": now + 60, **extra}


def _pem(private_key: Any) -> str:
    return (
        private_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


async def test_rs256_and_es256_public_keys(aiohttp_client: Any, servers: Servers) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    app = create_app(
        make_settings(servers, jwt_secret=None, jwt_public_key=_pem(rsa_key)), extra_routes=[probe]
    )
    client = await aiohttp_client(app)
    good = jwt.encode(_claims(), rsa_key, algorithm="RS256")
    assert (await client.get("/v1/_probe/auth/either", headers=bearer(good))).status == 200
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(_claims(), other, algorithm="RS256")
    assert (await client.get("/v1/_probe/auth/either", headers=bearer(forged))).status == 401
    # An HS256 token "signed" with the public key must not pass (algorithm confusion).
    confused = jwt.encode(_claims(), "x" * 40, algorithm="HS256")
    assert (await client.get("/v1/_probe/auth/either", headers=bearer(confused))).status == 401

    ec_key = ec.generate_private_key(ec.SECP256R1())
    app = create_app(
        make_settings(servers, jwt_secret=None, jwt_public_key=_pem(ec_key)), extra_routes=[probe]
    )
    client = await aiohttp_client(app)
    token = jwt.encode(_claims(), ec_key, algorithm="ES256")
    assert (await client.get("/v1/_probe/auth/either", headers=bearer(token))).status == 200


async def test_issuer_and_audience(aiohttp_client: Any, servers: Servers) -> None:
    secret = "issuer-audience-secret-" + "z" * 20
    settings = make_settings(
        servers, jwt_secret=secret, jwt_issuer="https://id.example", jwt_audience="marketplace"
    )
    client = await aiohttp_client(create_app(settings, extra_routes=[probe]))

    async def status(claims: dict[str, Any]) -> int:
        token = jwt.encode(claims, secret, algorithm="HS256")
        return (await client.get("/v1/_probe/auth/either", headers=bearer(token))).status

    assert await status(_claims(iss="https://id.example", aud="marketplace")) == 200
    assert await status(_claims(iss="https://id.example", aud="another-service")) == 401
    assert await status(_claims(iss="https://id.example")) == 401
    assert await status(_claims(iss="https://evil.example", aud="marketplace")) == 401


async def test_jwks_url(aiohttp_client: Any, aiohttp_server: Any, servers: Servers) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": "k1", "use": "sig", "alg": "RS256"})

    async def serve_jwks(_: web.Request) -> web.Response:
        return web.json_response({"keys": [jwk]})

    jwks_app = web.Application()
    jwks_app.router.add_get("/jwks.json", serve_jwks)
    jwks_server = await aiohttp_server(jwks_app)
    settings = make_settings(
        servers, jwt_secret=None, jwks_url=str(jwks_server.make_url("/jwks.json"))
    )
    client = await aiohttp_client(create_app(settings, extra_routes=[probe]))
    token = jwt.encode(_claims(), key, algorithm="RS256", headers={"kid": "k1"})
    assert (await client.get("/v1/_probe/auth/either", headers=bearer(token))).status == 200
    unknown_kid = jwt.encode(_claims(), key, algorithm="RS256", headers={"kid": "k2"})
    assert (await client.get("/v1/_probe/auth/either", headers=bearer(unknown_kid))).status == 401
