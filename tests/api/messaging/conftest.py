"""Helpers of the messaging API tests: linked parties, seeded projects, sends, admins.

As in tests/api/records, wallets are linked through the API with real signatures and projects
are rows of the read model the indexer fills (the messaging rules read nothing else). Bid drafts
and challenge-submission registrations, which make a shared project for direct messages, are
inserted as rows too: their own rules are tested in tests/api/records.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

from marketplace.http.keys import SESSION_RECORDER
from marketplace.identity.permissions import set_flags
from tests.api.records.conftest import (
    Party,
    error_code,
    linked_party,
    seed_project,
)
from tests.conftest import User, new_user
from tests.support import apps

# A direct connection, opened after the shared ``client`` (tests/support/apps.py).
db = apps.db

__all__ = ["Party", "error_code", "linked_party", "seed_project"]

BODY = "hello from the tests"


@dataclass
class Project:
    address: str
    owner: Party
    worker: Party


async def project_with_worker(client: Any, db: asyncpg.Connection, **values: Any) -> Project:
    """An indexed project in `building` with an owner and a selected worker, both linked."""
    owner = await linked_party(client)
    worker = await linked_party(client)
    fields: dict[str, Any] = {
        "owner_address": owner.lower,
        "selected_builder_address": worker.lower,
        "status": "building",
    }
    fields.update(values)
    address = await seed_project(db, **fields)
    return Project(address, owner, worker)


def chat_path(project: str) -> str:
    return f"/v1/projects/{project}/chat/messages"


async def post_chat(
    client: Any,
    party: Party,
    project: str,
    body: str = BODY,
    *,
    wallet: str | None = None,
    header: str | None = "same",
    headers: dict[str, str] | None = None,
) -> Any:
    """POST a chat message as ``wallet`` (default: the party's wallet); the wallet header equals
    it unless ``header`` says otherwise (None: left out)."""
    sender = wallet or party.address
    sent = dict(party.headers if headers is None else headers)
    if header == "same":
        sent["x-user-wallet-address"] = sender
    elif header is not None:
        sent["x-user-wallet-address"] = header
    return await client.post(
        chat_path(project), json={"senderWalletAddress": sender, "body": body}, headers=sent
    )


async def chat_message(client: Any, party: Party, project: str, body: str = BODY) -> dict[str, Any]:
    resp = await post_chat(client, party, project, body)
    assert resp.status == 201, await resp.text()
    result: dict[str, Any] = await resp.json()
    return result


async def post_dm(client: Any, sender: Party | User, recipient: uuid.UUID, body: str = BODY) -> Any:
    return await client.post(
        "/v1/messages/dm",
        json={"recipientUserId": str(recipient), "body": body},
        headers=sender.headers,
    )


async def dm(client: Any, sender: Party, recipient: Party, body: str = BODY) -> dict[str, Any]:
    resp = await post_dm(client, sender, recipient.user.user_id, body)
    assert resp.status == 201, await resp.text()
    result: dict[str, Any] = await resp.json()
    return result


async def signed_in(client: Any) -> User:
    """A user without wallets whose account row exists: a signed-in read records the session off
    the request path, so the recorder is asked to write it now (as an unsafe request would)."""
    user = new_user()
    resp = await client.get("/v1/auth/permissions", headers=user.headers)
    assert resp.status == 200, await resp.text()
    await client.app[SESSION_RECORDER].ensure(user.user_id)
    return user


async def make_admin(db: asyncpg.Connection, user: User) -> None:
    await set_flags(db, user.user_id, moderation_admin=True, verifier_admin=None)


async def moderation_admin(client: Any, db: asyncpg.Connection) -> User:
    user = await signed_in(client)
    await make_admin(db, user)
    return user


async def report(client: Any, reporter: Party | User, message_id: str, reason: str = "spam") -> Any:
    return await client.post(
        "/v1/messages/reports",
        json={"messageId": message_id, "reason": reason},
        headers=reporter.headers,
    )


async def set_status(
    client: Any, admin: User, report_id: str, status: str, note: str | None = None
) -> Any:
    body: dict[str, Any] = {"status": status}
    if note is not None:
        body["note"] = note
    return await client.post(
        f"/v1/messages/reports/{report_id}/status", json=body, headers=admin.headers
    )


async def insert_bid_draft(db: asyncpg.Connection, project: str, bidder: str) -> None:
    await db.execute(
        "INSERT INTO bid_drafts (project_address, bidder_address, draft_hash) VALUES ($1, $2, $3)",
        project,
        bidder,
        "0x" + os.urandom(32).hex(),
    )


async def insert_submission(db: asyncpg.Connection, project: str, submitter: str) -> None:
    await db.execute(
        "INSERT INTO challenge_submissions (project_address, submitter_address, submission_hash)"
        " VALUES ($1, $2, $3)",
        project,
        submitter,
        "0x" + os.urandom(32).hex(),
    )


def anonymous_paths() -> list[tuple[str, str, dict[str, Any] | None]]:
    """Every messaging route (method, path, body), with ids that exist nowhere."""
    project = "0x" + os.urandom(20).hex()
    some = str(uuid.uuid4())
    return [
        ("POST", chat_path(project), {"senderWalletAddress": project, "body": BODY}),
        ("GET", chat_path(project), None),
        ("POST", "/v1/messages/dm", {"recipientUserId": some, "body": BODY}),
        ("GET", "/v1/messages/dm/threads", None),
        ("GET", f"/v1/messages/dm/threads/{some}/messages", None),
        ("POST", "/v1/messages/block", {"blockedUserId": some}),
        ("DELETE", f"/v1/messages/block/{some}", None),
        ("POST", "/v1/messages/mute", {"mutedUserId": some}),
        ("DELETE", f"/v1/messages/mute/{some}", None),
        ("POST", "/v1/messages/reports", {"messageId": some, "reason": "spam"}),
        ("GET", "/v1/messages/reports", None),
        ("GET", f"/v1/messages/reports/{some}", None),
        ("POST", f"/v1/messages/reports/{some}/status", {"status": "reviewing"}),
    ]
