"""Apps for the moderation API tests: their own Ray namespace (user shards are named actors that
keep the settings they were created with, so this package's moderation policy must not meet
another package's), a send probe route declared like the real send routes, and helpers."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any, Literal

import pytest
import ray
from pydantic import Field

from marketplace.config import Settings
from marketplace.http.keys import SESSION_RECORDER
from marketplace.http.moderation_gate import screen_message
from marketplace.http.routing import AuthMode, Call, Reply, RouteTable
from marketplace.identity.permissions import set_flags
from marketplace.types import RequestModel, ResponseModel
from tests.api.identity.conftest import guarded_probe
from tests.conftest import Servers, User, make_settings, new_user
from tests.support import apps

SUSPEND_AFTER = 3
USER_SHARDS = 2

send_probe = RouteTable(tag="moderation-probe")
SEND_PATH = "/v1/_moderation_probe/send"


class SendBody(RequestModel):
    body: str = Field(min_length=1, max_length=4000)
    context: Literal["project_chat", "direct"] = "direct"


class Sent(ResponseModel):
    """What the probe would have stored."""

    body: str


@send_probe.post(
    SEND_PATH,
    name="moderationProbeSend",
    summary="a message send for tests, checked like the real ones",
    auth=AuthMode.EITHER,
    response=Sent,
    body=SendBody,
    guarded=True,
    sends_messages=True,
    status=201,
)
async def probe_send(call: Call[SendBody, None, None]) -> Reply:
    principal = call.require_principal()
    await screen_message(call.app, principal.user_id, call.body.body, call.body.context)
    return Reply(Sent(body=call.body.body))


@pytest.fixture(scope="package")
def namespace(ray_cluster: None) -> Iterator[str]:
    namespace = f"moderation-api-{uuid.uuid4().hex[:8]}"
    yield namespace
    for index in range(USER_SHARDS):
        with contextlib.suppress(ValueError):
            ray.kill(ray.get_actor(f"user-shard-{index}", namespace=namespace), no_restart=True)


@pytest.fixture
def settings(servers: Servers, namespace: str) -> Settings:
    return make_settings(
        servers,
        ray_namespace=namespace,
        moderation_suspend_after=SUSPEND_AFTER,
        user_shards=USER_SHARDS,
    )


@pytest.fixture
def app_routes() -> list[RouteTable]:
    """The suite's apps serve the send probe and the guarded probe routes too."""
    return [send_probe, guarded_probe]


# A direct connection, opened after the client (tests/support/apps.py).
db = apps.db


async def signed_in(client: Any) -> User:
    """A new user whose account row exists: a signed-in read records the session off the request
    path, so the recorder is asked to write it now (as an unsafe request would)."""
    user = new_user()
    resp = await client.get("/v1/auth/permissions", headers=user.headers)
    assert resp.status == 200, await resp.text()
    await client.app[SESSION_RECORDER].ensure(user.user_id)
    return user


async def moderation_admin(client: Any, db: Any) -> User:
    user = await signed_in(client)
    await set_flags(db, user.user_id, moderation_admin=True, verifier_admin=None)
    return user


async def send(client: Any, user: User, body: str, context: str = "direct") -> Any:
    return await client.post(
        SEND_PATH, json={"body": body, "context": context}, headers=user.headers
    )


async def offend(client: Any, user: User, times: int = 1, context: str = "direct") -> None:
    for _ in range(times):
        resp = await send(client, user, "well badword-canary to you", context)
        body = await resp.json()
        assert resp.status == 422, body
        assert body["error"] == "offensive_content"


async def error_of(resp: Any, status: int) -> dict[str, Any]:
    body: dict[str, Any] = await resp.json()
    assert resp.status == status, body
    assert set(body) >= {"error", "message"} and body["message"]
    return body
