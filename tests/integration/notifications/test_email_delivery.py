"""Notification e-mails end to end: events from the real routes, the consumer, the
`notifications` job worker with the production sender (`smtp_sender`) and a real SMTP server
(aiosmtpd, `tests/support/smtp.py`). Each event type arrives as one e-mail to the right address
with its subject, link and one-click unsubscribe; the per-recipient limit holds on what is
sent; an SMTP server that is down is retried until it is back, once; a 5xx fails at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg

from marketplace.jobs.worker import JobWorker
from marketplace.notifications.sending import NOTIFICATIONS_QUEUE
from marketplace.storage.pool import create_pool
from tests.api.messaging.conftest import chat_message, dm, project_with_worker
from tests.api.records.conftest import HASH_A, linked_party, seed_dispute, seed_project
from tests.conftest import Servers, make_settings
from tests.integration.notifications.conftest import Pipeline, deliveries, set_email
from tests.support.smtp import SmtpTestServer
from tests.support.waiting import eventually

BASE_URL = "https://market.example"


@contextlib.asynccontextmanager
async def smtp_worker(
    servers: Servers, smtp: SmtpTestServer, **overrides: Any
) -> AsyncIterator[JobWorker]:
    """A `notifications` worker in the test's loop with the default (SMTP) sender; ``overrides``
    are settings (``public_app_url``, ...)."""
    settings = make_settings(
        servers,
        **{
            "smtp_url": smtp.url,
            "public_base_url": BASE_URL,
            "jobs_poll_interval_ms": 100,
            "jobs_backoff_base_seconds": 0.2,
            "jobs_backoff_cap_seconds": 0.5,
            **overrides,
        },
    )
    pool = await create_pool(servers.database_url, min_size=1, max_size=6)
    worker = JobWorker(NOTIFICATIONS_QUEUE, pool, settings, owner="test-smtp")
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        await worker.stop(grace_seconds=0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await pool.close()


async def statuses(db: asyncpg.Connection) -> list[str]:
    return [r["status"] for r in await deliveries(db)]


async def settled(db: asyncpg.Connection) -> bool:
    return "queued" not in await statuses(db)


async def test_each_event_type_arrives_as_one_email(
    client: Any,
    db: asyncpg.Connection,
    pipeline: Pipeline,
    servers: Servers,
    smtp_server: SmtpTestServer,
) -> None:
    project = await project_with_worker(client, db)
    owner, worker = project.owner, project.worker
    owner_email, worker_email = await set_email(db, owner), await set_email(db, worker)
    await chat_message(client, owner, project.address, "the milestone is up")
    direct = await dm(client, worker, owner, "can we talk about the scope?")
    disputed = await seed_dispute(db, owner.address, worker.address, milestone=1)
    resp = await client.post(
        f"/v1/projects/{disputed}/dispute-evidence",
        json={"evidenceHash": HASH_A},
        headers=worker.headers,
    )
    assert resp.status == 201, await resp.text()
    bidder = await linked_party(client)
    bidding = await seed_project(db, owner_address=owner.lower)
    resp = await client.post(
        f"/v1/projects/{bidding}/bid-drafts",
        json={"bidderWalletAddress": bidder.address, "draftHash": HASH_A},
        headers=bidder.headers,
    )
    assert resp.status == 200, await resp.text()
    assert await pipeline.consume() == 4

    async with smtp_worker(servers, smtp_server):
        await eventually(lambda: settled(db), within=30, what="deliveries sent")
        await asyncio.sleep(0.3)  # a second send of any of them would show by now
    assert await statuses(db) == ["sent"] * 4
    received = smtp_server.wait_for(4)
    assert len(received) == 4
    by_subject = {r.message["Subject"]: r for r in received}
    expected = {
        f"New message in the chat of project {project.address}": (worker_email,),
        "New direct message from a marketplace user": (owner_email,),
        f"Dispute evidence submitted on project {disputed}, milestone 1": (owner_email,),
        f"New bid draft on project {bidding}": (owner_email,),
    }
    rows = {r["subject"]: r for r in await deliveries(db)}
    assert set(rows) == set(by_subject) == set(expected)
    for subject, item in by_subject.items():
        row = rows[subject]
        assert item.rcpt_tos == [row["email"]]
        assert item.message["To"] == row["email"]
        assert item.message["Message-ID"].startswith(f"<notification.{row['id']}@")
        assert item.message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        assert item.message["List-Unsubscribe"].startswith(
            f"<{BASE_URL}/v1/notifications/unsubscribe?token="
        )
        text = item.message.get_body(("plain",)).get_content()  # type: ignore[union-attr]
        html = item.message.get_body(("html",)).get_content()  # type: ignore[union-attr]
        assert BASE_URL in text and BASE_URL in html
        assert row["email"] == expected[subject][0]
    dm_mail = by_subject["New direct message from a marketplace user"].message
    dm_text = dm_mail.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    assert "can we talk about the scope?" in dm_text
    assert f"{BASE_URL}/v1/messages/dm/threads/{direct['threadId']}/messages" in dm_text


async def test_a_burst_of_15_dms_sends_5_and_rate_limits_10(
    client: Any,
    db: asyncpg.Connection,
    pipeline: Pipeline,
    servers: Servers,
    smtp_server: SmtpTestServer,
) -> None:
    project = await project_with_worker(client, db)
    await set_email(db, project.worker)
    for n in range(15):
        await dm(client, project.owner, project.worker, f"message {n}")
    assert await pipeline.consume() == 15
    async with smtp_worker(servers, smtp_server):
        await eventually(lambda: settled(db), within=30, what="deliveries settled")
        await asyncio.sleep(0.3)
    got = await statuses(db)
    assert (got.count("sent"), got.count("rate_limited"), len(got)) == (5, 10, 15)
    assert len(smtp_server.wait_for(5)) == 5


async def test_smtp_down_then_up_is_retried_and_sent_once(
    client: Any,
    db: asyncpg.Connection,
    pipeline: Pipeline,
    servers: Servers,
    smtp_server: SmtpTestServer,
) -> None:
    project = await project_with_worker(client, db)
    await set_email(db, project.worker)
    await dm(client, project.owner, project.worker)
    await pipeline.consume()
    smtp_server.stop()

    async def retried() -> bool:
        row = (await deliveries(db))[0]
        return bool(row["attempts"] >= 2 and row["last_error"])

    async with smtp_worker(servers, smtp_server):
        await eventually(retried, within=30, what="a failed attempt retried")
        (row,) = await deliveries(db)
        assert row["status"] == "queued"  # still to be sent: attempts remain
        assert "TransientMailError" in row["last_error"]
        smtp_server.start()
        await eventually(
            lambda: settled(db), within=30, what="delivery sent after the server came back"
        )
        await asyncio.sleep(0.5)
    (row,) = await deliveries(db)
    assert row["status"] == "sent" and row["sent_at"] is not None
    assert len(smtp_server.wait_for(1)) == 1


async def test_an_smtp_5xx_fails_the_delivery_after_one_attempt(
    client: Any,
    db: asyncpg.Connection,
    pipeline: Pipeline,
    servers: Servers,
    smtp_server: SmtpTestServer,
) -> None:
    project = await project_with_worker(client, db)
    await set_email(db, project.worker)
    await dm(client, project.owner, project.worker)
    await pipeline.consume()
    smtp_server.fail_next(1, 550, text="5.1.1 no such mailbox")
    async with smtp_worker(servers, smtp_server):
        await eventually(lambda: settled(db), within=30, what="delivery failed")
        await asyncio.sleep(0.3)
    (row,) = await deliveries(db)
    assert (row["status"], row["attempts"], row["sent_at"]) == ("failed", 1, None)
    assert "550" in row["last_error"]
    assert smtp_server.messages() == []
