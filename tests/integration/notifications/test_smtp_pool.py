"""The SMTP connection pool against a real aiosmtpd server: connections reused for message after
message, closed after a failure or when idle, and a message after a server restart delivered
once on a fresh connection."""

from __future__ import annotations

import asyncio

import pytest

from marketplace.config.mail import parse_smtp_url
from marketplace.notifications.email import EmailContent, render
from marketplace.notifications.mailer import (
    PermanentMailError,
    SmtpPool,
    TransientMailError,
)
from tests.support.smtp import SmtpTestServer

FROM = "Marketplace <noreply@market.example>"
TIMEOUT = 5.0


def wire(n: int) -> tuple[str, list[str], bytes]:
    message = render(
        EmailContent(
            to=f"user{n}@example.com",
            subject=f"Message {n}",
            summary="alice sent you a direct message.",
            link_url="https://market.example/messages/1",
            preview=f"Hello number {n}",
        ),
        mail_from=FROM,
        preview_chars=140,
        message_id=f"<n{n}@market.example>",
    )
    return message.sender, message.recipients, message.data


async def test_one_connection_carries_many_messages(smtp_server: SmtpTestServer) -> None:
    pool = SmtpPool(parse_smtp_url(smtp_server.url), TIMEOUT, size=4)
    try:
        for n in range(10):
            await pool.send(*wire(n))
        assert pool.connections_made == 1
        received = smtp_server.wait_for(10)
        assert [r.rcpt_tos for r in received] == [[f"user{n}@example.com"] for n in range(10)]
        assert [r.message["Message-ID"] for r in received] == [
            f"<n{n}@market.example>" for n in range(10)
        ]
    finally:
        await pool.close()
    assert pool.idle == 0


async def test_concurrent_sends_use_at_most_size_connections(smtp_server: SmtpTestServer) -> None:
    pool = SmtpPool(parse_smtp_url(smtp_server.url), TIMEOUT, size=3)
    try:
        await asyncio.gather(*(pool.send(*wire(n)) for n in range(30)))
        assert pool.connections_made == 3
        assert pool.idle == 3
        assert len(smtp_server.wait_for(30)) == 30
    finally:
        await pool.close()


async def test_a_failed_transaction_closes_its_connection(smtp_server: SmtpTestServer) -> None:
    pool = SmtpPool(parse_smtp_url(smtp_server.url), TIMEOUT, size=2)
    try:
        await pool.send(*wire(1))
        smtp_server.fail_next(1, 451)
        with pytest.raises(TransientMailError) as transient:
            await pool.send(*wire(2))
        assert transient.value.code == 451
        assert pool.idle == 0
        smtp_server.fail_next(1, 554, stage="data", text="5.7.1 message refused")
        with pytest.raises(PermanentMailError) as permanent:
            await pool.send(*wire(3))
        assert permanent.value.code == 554
        await pool.send(*wire(4))
        # The first connection, one made after each failure.
        assert pool.connections_made == 3
        assert [r.rcpt_tos for r in smtp_server.wait_for(2)] == [
            ["user1@example.com"],
            ["user4@example.com"],
        ]
    finally:
        await pool.close()


async def test_after_a_server_restart_the_next_message_goes_once_on_a_new_connection(
    smtp_server: SmtpTestServer,
) -> None:
    pool = SmtpPool(parse_smtp_url(smtp_server.url), TIMEOUT, size=2)
    try:
        await pool.send(*wire(1))
        assert pool.idle == 1
        smtp_server.stop()  # drops the pooled connection
        with pytest.raises(TransientMailError, match="cannot deliver"):
            await pool.send(*wire(2))
        smtp_server.start()
        await pool.send(*wire(3))
        await asyncio.sleep(0.2)
        assert [r.rcpt_tos for r in smtp_server.received] == [
            ["user1@example.com"],
            ["user3@example.com"],
        ]
    finally:
        await pool.close()


async def test_a_restart_while_idle_costs_nothing(smtp_server: SmtpTestServer) -> None:
    pool = SmtpPool(parse_smtp_url(smtp_server.url), TIMEOUT, size=1)
    try:
        await pool.send(*wire(1))
        smtp_server.stop()
        smtp_server.start()
        # The pooled connection is dead (found closed, or failing at MAIL): the message goes
        # out on a fresh one, exactly once, and the caller sees no error.
        await pool.send(*wire(2))
        assert pool.connections_made == 2
        await asyncio.sleep(0.2)
        assert [r.rcpt_tos for r in smtp_server.received] == [
            ["user1@example.com"],
            ["user2@example.com"],
        ]
    finally:
        await pool.close()


async def test_idle_connections_are_closed(smtp_server: SmtpTestServer) -> None:
    pool = SmtpPool(parse_smtp_url(smtp_server.url), TIMEOUT, size=2, idle_seconds=0.2)
    try:
        await asyncio.gather(pool.send(*wire(1)), pool.send(*wire(2)))
        assert pool.idle == 2
        await asyncio.sleep(0.5)
        assert pool.idle == 0
        await pool.send(*wire(3))
        assert pool.connections_made == 3
    finally:
        await pool.close()


async def test_a_login_is_made_once_per_connection() -> None:
    with SmtpTestServer(credentials=("mailer", "secret")) as server:
        pool = SmtpPool(
            parse_smtp_url(f"smtp://mailer:secret@127.0.0.1:{server.port}"), TIMEOUT, size=1
        )
        try:
            for n in range(3):
                await pool.send(*wire(n))
            assert pool.connections_made == 1
            assert len(server.wait_for(3)) == 3
        finally:
            await pool.close()
        with pytest.raises(RuntimeError, match="closed"):
            await pool.send(*wire(9))
