"""The moderation routes (offenses, audit log, lifting a suspension) for the anonymous caller, a
stranger, the user itself and a moderation admin, and the send checks through a probe route
declared like the real send routes."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from marketplace.http import keys
from marketplace.http.moderation_gate import NOT_SUSPENDED_TTL_SECONDS, screen_message
from marketplace.http.routing import AuthMode, RouteTable
from marketplace.moderation.errors import OffensiveContent, SendingSuspended
from tests.api.identity.conftest import GUARDED_PATH
from tests.api.moderation.conftest import (
    SEND_PATH,
    SUSPEND_AFTER,
    error_of,
    moderation_admin,
    offend,
    send,
    signed_in,
)

OFFENSES = "/v1/moderation/offenses"
AUDIT = "/v1/moderation/audit"


def lift_path(user_id: uuid.UUID | str) -> str:
    return f"/v1/moderation/suspensions/{user_id}"


async def offenses_of(client: Any, caller: Any, user_id: uuid.UUID, **query: Any) -> Any:
    return await client.get(
        OFFENSES, params={"userId": str(user_id), **query}, headers=caller.headers
    )


# --- sends ------------------------------------------------------------------------------------


async def test_a_clean_body_is_sent_and_an_offensive_one_is_refused(client: Any, db: Any) -> None:
    user = await signed_in(client)
    resp = await send(client, user, "the milestone is delivered, see the repo")
    assert resp.status == 201, await resp.text()
    # Whole words only: the town is not an offense.
    assert (await send(client, user, "greetings from Scunthorpe")).status == 201
    resp = await send(client, user, "you are B.A.D.W.O.R.D canary, pal", "project_chat")
    body = await error_of(resp, 422)
    assert body["error"] == "offensive_content"
    # The answer names neither the body nor the term.
    assert "canary" not in body["message"].lower() and "pal" not in body["message"]
    rows = await db.fetch("SELECT user_id, term, context FROM moderation_offenses")
    assert [tuple(row) for row in rows] == [(user.user_id, "badword-canary", "project_chat")]


async def test_the_threshold_suspends_every_send_until_an_admin_lifts_it(
    client: Any, db: Any
) -> None:
    user, admin = await signed_in(client), await moderation_admin(client, db)
    await offend(client, user, SUSPEND_AFTER - 1)
    assert (await send(client, user, "still fine")).status == 201
    await offend(client, user)  # the threshold: refused as offensive, and suspends

    for body in ("a perfectly clean message", "badword-canary again"):
        refused = await error_of(await send(client, user, body), 403)
        assert refused["error"] == "sending_suspended"
        until = datetime.fromisoformat(refused["until"])
        assert refused["until"].endswith("Z")
    # The check runs before validation: an invalid body is still refused for the suspension.
    resp = await client.post(SEND_PATH, json={"body": ""}, headers=user.headers)
    assert (await error_of(resp, 403))["error"] == "sending_suspended"
    # Refused while suspended: not offenses.
    assert await db.fetchval("SELECT count(*) FROM moderation_offenses") == SUSPEND_AFTER
    starts, ends = await db.fetchrow("SELECT starts_at, ends_at FROM moderation_suspensions")
    assert until == ends and ends - starts == timedelta(seconds=86_400)
    # Other guarded mutations are not message sends: the suspension does not touch them.
    resp = await client.post(GUARDED_PATH, json={"value": 1}, headers=user.headers)
    assert resp.status == 200, await resp.text()

    assert (await client.delete(lift_path(user.user_id), headers=admin.headers)).status == 204
    assert (await send(client, user, "sorry about that")).status == 201


async def test_a_suspension_made_elsewhere_applies_within_the_not_suspended_window(
    client: Any, db: Any
) -> None:
    """A frontend trusts "not suspended" for NOT_SUSPENDED_TTL_SECONDS; a suspension written by
    another frontend (here: straight into the table) applies once that has passed."""
    user = await signed_in(client)
    assert (await send(client, user, "hello")).status == 201
    offense = uuid.uuid4()
    await db.execute(
        "INSERT INTO moderation_offenses (id, user_id, term, context) "
        "VALUES ($1, $2, 'badword-canary', 'direct')",
        offense,
        user.user_id,
    )
    await db.execute(
        "INSERT INTO moderation_suspensions (user_id, offense_id, ends_at) "
        "VALUES ($1, $2, now() + interval '1 hour')",
        user.user_id,
        offense,
    )
    await asyncio.sleep(NOT_SUSPENDED_TTL_SECONDS + 0.1)
    refused = await error_of(await send(client, user, "hello again"), 403)
    assert refused["error"] == "sending_suspended"


async def test_screen_message_called_directly(client: Any, db: Any) -> None:
    user = await signed_in(client)
    app = client.app
    await screen_message(app, user.user_id, "nothing to see here", "direct")
    for _ in range(SUSPEND_AFTER):
        with pytest.raises(OffensiveContent):
            await screen_message(app, user.user_id, "b a d w o r d canary", "direct")
    # Past the guard (the handler had already started): no offense, the suspension's answer.
    with pytest.raises(SendingSuspended) as suspended:
        await screen_message(app, user.user_id, "badword-canary", "project_chat")
    ends = await db.fetchval("SELECT ends_at FROM moderation_suspensions")
    assert datetime.fromisoformat(suspended.value.until) == ends
    assert await db.fetchval("SELECT count(*) FROM moderation_offenses") == SUSPEND_AFTER
    # A clean body is screened clean even while suspended: the guard, not the gate, refuses.
    await screen_message(app, user.user_id, "clean", "direct")


async def test_offense_and_suspension_metrics(client: Any) -> None:
    async def sample(pattern: str) -> float:
        text = await (await client.get("/metrics")).text()
        match = re.search(pattern + r" ([0-9.e+]+)", text)
        return float(match.group(1)) if match else 0.0

    offenses = r'marketplace_moderation_offenses_total\{context="project_chat"\}'
    suspensions = r"marketplace_moderation_suspensions_total"
    before = (await sample(offenses), await sample(suspensions))
    user = await signed_in(client)
    await offend(client, user, SUSPEND_AFTER, context="project_chat")
    after = (await sample(offenses), await sample(suspensions))
    assert after == (before[0] + SUSPEND_AFTER, before[1] + 1)


def test_a_sending_route_must_be_guarded() -> None:
    table = RouteTable(tag="t")

    async def handler(call: Any) -> Any:
        raise AssertionError

    with pytest.raises(ValueError, match="sends_messages=True needs guarded=True"):
        table.post(
            "/v1/x",
            name="x",
            summary="x",
            auth=AuthMode.EITHER,
            response=None,
            sends_messages=True,
        )(handler)


# --- GET /v1/moderation/offenses ------------------------------------------------------------


async def test_offenses_for_the_user_itself_and_an_admin_only(client: Any, db: Any) -> None:
    user, admin, stranger = (
        await signed_in(client),
        await moderation_admin(client, db),
        await signed_in(client),
    )
    await offend(client, user, 1, context="project_chat")
    await offend(client, user, 1)

    anonymous = await client.get(OFFENSES, params={"userId": str(user.user_id)})
    assert (await error_of(anonymous, 401))["error"] == "unauthorized"
    refused = await error_of(await offenses_of(client, stranger, user.user_id), 403)
    assert refused["error"] == "not_offense_viewer"

    for caller in (user, admin):
        body = await (await offenses_of(client, caller, user.user_id)).json()
        assert body["userId"] == str(user.user_id)
        assert (body["total"], body["windowTotal"], body["suspendedUntil"]) == (2, 2, None)
        assert body["count"] == 2 and body["nextCursor"] is None
        assert [item["context"] for item in body["items"]] == ["direct", "project_chat"]
        assert {item["term"] for item in body["items"]} == {"badword-canary"}
        assert set(body["items"][0]) == {"id", "context", "term", "createdAt"}
    stored = await db.fetch("SELECT id FROM moderation_offenses ORDER BY seq DESC")
    assert [item["id"] for item in body["items"]] == [str(row["id"]) for row in stored]

    # A user with no offenses reads zeros; so does an admin asking about anyone.
    body = await (await offenses_of(client, stranger, stranger.user_id)).json()
    assert (body["total"], body["windowTotal"], body["items"], body["count"]) == (0, 0, [], 0)
    unknown = uuid.uuid4()
    body = await (await offenses_of(client, admin, unknown)).json()
    assert (body["userId"], body["total"], body["suspendedUntil"]) == (str(unknown), 0, None)


async def test_offense_figures_follow_suspension_and_lift(client: Any, db: Any) -> None:
    user, admin = await signed_in(client), await moderation_admin(client, db)
    await offend(client, user, SUSPEND_AFTER)
    body = await (await offenses_of(client, user, user.user_id)).json()
    ends = await db.fetchval("SELECT ends_at FROM moderation_suspensions")
    assert datetime.fromisoformat(body["suspendedUntil"]) == ends
    # The offenses behind the suspension no longer count towards the next one.
    assert (body["total"], body["windowTotal"]) == (SUSPEND_AFTER, 0)

    assert (await client.delete(lift_path(user.user_id), headers=admin.headers)).status == 204
    await offend(client, user)
    body = await (await offenses_of(client, user, user.user_id)).json()
    assert (body["total"], body["windowTotal"], body["suspendedUntil"]) == (
        SUSPEND_AFTER + 1,
        1,
        None,
    )


async def test_offenses_are_paged_newest_first(client: Any, db: Any) -> None:
    user = await signed_in(client)
    await offend(client, user, 2)
    await db.execute(
        "INSERT INTO moderation_offenses (id, user_id, term, context, created_at) "
        "SELECT gen_random_uuid(), $1, 'old', 'direct', now() - interval '3 days' "
        "FROM generate_series(1, 3)",
        user.user_id,
    )
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        body = await (await offenses_of(client, user, user.user_id, **query)).json()
        assert body["count"] == len(body["items"]) <= 2
        assert (body["total"], body["windowTotal"]) == (5, 2)
        seen += [item["id"] for item in body["items"]]
        pages += 1
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert pages == 3
    stored = await db.fetch("SELECT id FROM moderation_offenses ORDER BY seq DESC")
    assert seen == [str(row["id"]) for row in stored]


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"userId": "not-a-uuid"},
        {"limit": "0"},
        {"limit": "101"},
        {"cursor": "bm90LWEtY3Vyc29y"},
    ],
)
async def test_offense_query_validation(client: Any, query: dict[str, str]) -> None:
    user = await signed_in(client)
    params = {"userId": str(user.user_id), **query} if "userId" not in query and query else query
    resp = await client.get(OFFENSES, params=params, headers=user.headers)
    assert (await error_of(resp, 400))["error"] == "invalid_request"


# --- GET /v1/moderation/audit -----------------------------------------------------------------


async def test_the_audit_log_is_for_moderation_admins_only(client: Any, db: Any) -> None:
    user, admin = await signed_in(client), await moderation_admin(client, db)
    other = await signed_in(client)
    await offend(client, user, SUSPEND_AFTER)
    await offend(client, other, 1, context="project_chat")
    assert (await client.delete(lift_path(user.user_id), headers=admin.headers)).status == 204

    assert (await error_of(await client.get(AUDIT), 401))["error"] == "unauthorized"
    for caller in (user, other):  # the subject itself is not an admin either
        resp = await client.get(AUDIT, params={"userId": str(user.user_id)}, headers=caller.headers)
        assert (await error_of(resp, 403))["error"] == "not_moderation_admin"

    body = await (await client.get(AUDIT, headers=admin.headers)).json()
    actions = [entry["action"] for entry in body["items"]]
    assert actions == [
        "suspension_lifted",
        "offense",
        "suspension",
        "offense",
        "offense",
        "offense",
    ]
    assert body["count"] == 6 and body["nextCursor"] is None
    offense_entry = body["items"][1]
    assert offense_entry["subjectUserId"] == str(other.user_id)
    assert offense_entry["actorUserId"] is None
    assert offense_entry["details"]["term"] == "badword-canary"
    assert offense_entry["details"]["context"] == "project_chat"
    assert set(offense_entry) == {
        "id",
        "subjectUserId",
        "actorUserId",
        "action",
        "reason",
        "details",
        "createdAt",
    }
    lift = body["items"][0]
    assert (lift["subjectUserId"], lift["actorUserId"]) == (str(user.user_id), str(admin.user_id))
    suspension = body["items"][2]
    assert suspension["actorUserId"] is None
    assert suspension["details"]["suspensionId"] == lift["details"]["suspensionId"]

    only_user = await (
        await client.get(AUDIT, params={"userId": str(user.user_id)}, headers=admin.headers)
    ).json()
    assert [e["action"] for e in only_user["items"]] == [actions[0], *actions[2:]]
    assert {e["subjectUserId"] for e in only_user["items"]} == {str(user.user_id)}

    first = await (await client.get(AUDIT, params={"limit": 4}, headers=admin.headers)).json()
    assert first["count"] == 4 and first["nextCursor"]
    rest = await (
        await client.get(
            AUDIT, params={"limit": 4, "cursor": first["nextCursor"]}, headers=admin.headers
        )
    ).json()
    assert rest["count"] == 2 and rest["nextCursor"] is None
    assert [e["id"] for e in first["items"] + rest["items"]] == [e["id"] for e in body["items"]]

    resp = await client.get(AUDIT, params={"limit": 101}, headers=admin.headers)
    assert (await error_of(resp, 400))["error"] == "invalid_request"
    resp = await client.get(AUDIT, params={"cursor": "x"}, headers=admin.headers)
    assert (await error_of(resp, 400))["error"] == "invalid_request"


async def test_an_offense_cursor_is_not_an_audit_cursor(client: Any, db: Any) -> None:
    user, admin = await signed_in(client), await moderation_admin(client, db)
    await offend(client, user, 2)
    page = await (await offenses_of(client, admin, user.user_id, limit=1)).json()
    resp = await client.get(AUDIT, params={"cursor": page["nextCursor"]}, headers=admin.headers)
    assert (await error_of(resp, 400))["error"] == "invalid_request"


# --- DELETE /v1/moderation/suspensions/{userId} ----------------------------------------------


async def test_only_moderation_admins_lift_and_a_lift_is_idempotent(client: Any, db: Any) -> None:
    user, admin, stranger = (
        await signed_in(client),
        await moderation_admin(client, db),
        await signed_in(client),
    )
    await offend(client, user, SUSPEND_AFTER)

    assert (await error_of(await client.delete(lift_path(user.user_id)), 401))[
        "error"
    ] == "unauthorized"
    for caller in (stranger, user):  # not even the suspended user
        resp = await client.delete(lift_path(user.user_id), headers=caller.headers)
        assert (await error_of(resp, 403))["error"] == "not_moderation_admin"
    assert await db.fetchval("SELECT lifted_at FROM moderation_suspensions") is None

    resp = await client.delete(lift_path(user.user_id), headers=admin.headers)
    assert resp.status == 204 and await resp.read() == b""
    lifted_at, lifted_by = await db.fetchrow(
        "SELECT lifted_at, lifted_by_user_id FROM moderation_suspensions"
    )
    assert lifted_at is not None and lifted_by == admin.user_id
    events = await db.fetch(
        "SELECT type, payload FROM events WHERE subject = $1 ORDER BY id", f"user:{user.user_id}"
    )
    assert [row["type"] for row in events][-1] == "moderation.suspension_lifted"
    assert json.loads(events[-1]["payload"])["liftedByUserId"] == str(admin.user_id)
    entries = await db.fetchval("SELECT count(*) FROM moderation_audit")

    # Nothing active: 204 again, nothing written; also for a user who was never suspended.
    for target in (user.user_id, stranger.user_id, uuid.uuid4()):
        assert (await client.delete(lift_path(target), headers=admin.headers)).status == 204
    assert await db.fetchval("SELECT count(*) FROM moderation_audit") == entries
    assert await db.fetchval("SELECT lifted_at FROM moderation_suspensions") == lifted_at

    resp = await client.delete(lift_path("not-a-uuid"), headers=admin.headers)
    assert (await error_of(resp, 400))["error"] == "invalid_request"


async def test_an_admin_flag_revoked_takes_effect_at_once(client: Any, db: Any) -> None:
    from marketplace.identity.permissions import set_flags

    admin = await moderation_admin(client, db)
    assert (await client.get(AUDIT, headers=admin.headers)).status == 200
    await set_flags(db, admin.user_id, moderation_admin=False, verifier_admin=None)
    resp = await client.get(AUDIT, headers=admin.headers)
    assert (await error_of(resp, 403))["error"] == "not_moderation_admin"


# --- the OpenAPI document ---------------------------------------------------------------------


async def test_the_document_lists_the_moderation_errors(client: Any) -> None:
    doc = await (await client.get("/v1/openapi.json")).json()
    probe = doc["paths"][SEND_PATH]["post"]
    assert probe["x-sends-messages"] is True
    assert "`sending_suspended`" in probe["responses"]["403"]["description"]
    assert probe["responses"]["403"]["content"]["application/json"]["examples"][
        "sending_suspended"
    ]["value"]["until"]
    assert probe["responses"]["422"]["description"] == "error codes: `offensive_content`"
    assert "**Sends a message:**" in probe["description"]
    offenses = doc["paths"][OFFENSES]["get"]["responses"]
    assert "`not_offense_viewer`" in offenses["403"]["description"]
    assert "401" in offenses and "400" in offenses
    for path, method in ((AUDIT, "get"), ("/v1/moderation/suspensions/{userId}", "delete")):
        responses = doc["paths"][path][method]["responses"]
        assert "`not_moderation_admin`" in responses["403"]["description"], path
        assert "x-sends-messages" not in doc["paths"][path][method]
    assert "204" in doc["paths"]["/v1/moderation/suspensions/{userId}"]["delete"]["responses"]
    until = doc["components"]["schemas"]["ErrorResponse"]["properties"]["until"]
    assert until["format"] == "date-time"
    # A guarded route that sends nothing: no suspension answer.
    assert "sending_suspended" not in str(doc["paths"][GUARDED_PATH]["post"]["responses"])


async def test_the_term_filter_is_built_once_per_app(client: Any) -> None:
    term_filter = client.app[keys.TERM_FILTER]
    assert term_filter.match("badword canary") is not None
    assert term_filter.match("a canary in a mine") is None
