"""Sending through a real aiosmtpd server: delivery, and how each failure is classified."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from email.message import EmailMessage
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from marketplace.config.mail import SmtpTarget, parse_smtp_url
from marketplace.notifications.email import EmailContent, compose
from marketplace.notifications.mailer import (
    PermanentMailError,
    TransientMailError,
    send_message,
)
from marketplace_devstack.embedded.procs import free_port
from tests.support.smtp import SmtpTestServer

FROM = "Marketplace <noreply@market.example>"
TIMEOUT = 5.0


def message_to(to: str = "bob@example.com", subject: str = "New message") -> EmailMessage:
    return compose(
        EmailContent(
            to=to,
            subject=subject,
            summary="alice sent you a direct message.",
            link_url="https://market.example/messages/1",
            preview="Hello Bob",
            unsubscribe_url="https://market.example/v1/notifications/unsubscribe?token=abc",
        ),
        mail_from=FROM,
        preview_chars=140,
    )


async def test_a_message_is_delivered_as_composed(smtp_server: SmtpTestServer) -> None:
    message = message_to()
    await send_message(parse_smtp_url(smtp_server.url), message, TIMEOUT)
    [received] = smtp_server.wait_for(1)
    assert received.mail_from == "noreply@market.example"
    assert received.rcpt_tos == ["bob@example.com"]
    got = received.message
    assert got["Subject"] == "New message"
    assert got["Message-ID"] == message["Message-ID"]
    assert got["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    body = got.get_body(("plain",))
    assert body is not None and "Hello Bob" in body.get_content()


async def test_a_4xx_at_rcpt_is_transient(smtp_server: SmtpTestServer) -> None:
    smtp_server.fail_next(1, 451)
    with pytest.raises(TransientMailError) as caught:
        await send_message(parse_smtp_url(smtp_server.url), message_to(), TIMEOUT)
    assert caught.value.code == 451
    assert "451" in caught.value.description and "try again later" in caught.value.description
    assert smtp_server.received == []


async def test_a_4xx_at_data_is_transient(smtp_server: SmtpTestServer) -> None:
    smtp_server.fail_next(1, 452, stage="data", text="4.3.1 insufficient storage")
    with pytest.raises(TransientMailError) as caught:
        await send_message(parse_smtp_url(smtp_server.url), message_to(), TIMEOUT)
    assert caught.value.code == 452 and "insufficient storage" in str(caught.value)


async def test_a_5xx_recipient_rejection_is_permanent(smtp_server: SmtpTestServer) -> None:
    smtp_server.fail_next(1, 550)
    with pytest.raises(PermanentMailError) as caught:
        await send_message(parse_smtp_url(smtp_server.url), message_to(), TIMEOUT)
    assert caught.value.code == 550 and not caught.value.transient
    assert "recipient rejected" in caught.value.description
    assert smtp_server.received == []


async def test_a_5xx_at_data_is_permanent(smtp_server: SmtpTestServer) -> None:
    smtp_server.fail_next(1, 554, stage="data", text="5.7.1 message refused")
    with pytest.raises(PermanentMailError) as caught:
        await send_message(parse_smtp_url(smtp_server.url), message_to(), TIMEOUT)
    assert caught.value.code == 554


async def test_failures_last_for_the_transactions_they_were_set_for(
    smtp_server: SmtpTestServer,
) -> None:
    target = parse_smtp_url(smtp_server.url)
    smtp_server.fail_next(2, 421)
    for _ in range(2):
        with pytest.raises(TransientMailError):
            await send_message(target, message_to(), TIMEOUT)
    await send_message(target, message_to(), TIMEOUT)
    assert len(smtp_server.wait_for(1)) == 1
    assert smtp_server.transactions_refused == 2


async def test_smtp_down_is_transient_then_up_again_delivers(smtp_server: SmtpTestServer) -> None:
    target = parse_smtp_url(smtp_server.url)
    smtp_server.stop()
    with pytest.raises(TransientMailError) as caught:
        await send_message(target, message_to(), TIMEOUT)
    assert caught.value.code is None
    assert f"127.0.0.1:{smtp_server.port}" in caught.value.description
    smtp_server.start()  # same port
    await send_message(target, message_to(), TIMEOUT)
    assert len(smtp_server.wait_for(1)) == 1


async def test_a_server_that_never_answers_times_out_as_transient() -> None:
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # accepts into the backlog, never greets
        target = SmtpTarget("smtp", "127.0.0.1", silent.getsockname()[1])
        with pytest.raises(TransientMailError, match="timed out"):
            await send_message(target, message_to(), 0.5)


async def test_nothing_listening_is_transient() -> None:
    target = SmtpTarget("smtp", "127.0.0.1", free_port())
    with pytest.raises(TransientMailError, match="cannot deliver"):
        await send_message(target, message_to(), TIMEOUT)


# --- TLS, with a certificate authority made for the test -----------------------------------


def make_tls(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context, client context trusting it) for 127.0.0.1 / localhost."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_path, key_path)
    client = ssl.create_default_context(cafile=str(cert_path))
    return server, client


async def test_starttls_is_used_when_offered_and_the_login_is_sent(tmp_path: Path) -> None:
    server_ctx, client_ctx = make_tls(tmp_path)
    # The server refuses MAIL before STARTTLS and AUTH before TLS: delivery proves both.
    with SmtpTestServer(
        credentials=("bob@example.com", "p@ss:w/rd"), starttls_context=server_ctx
    ) as server:
        url = f"smtp://bob%40example.com:p%40ss%3Aw%2Frd@127.0.0.1:{server.port}"
        await send_message(parse_smtp_url(url), message_to(), TIMEOUT, tls_context=client_ctx)
        assert len(server.wait_for(1)) == 1


async def test_a_refused_login_is_permanent_and_does_not_leak_the_password(
    tmp_path: Path,
) -> None:
    server_ctx, client_ctx = make_tls(tmp_path)
    with SmtpTestServer(credentials=("bob", "right"), starttls_context=server_ctx) as server:
        target = parse_smtp_url(f"smtp://bob:wrongpassword@127.0.0.1:{server.port}")
        with pytest.raises(PermanentMailError) as caught:
            await send_message(target, message_to(), TIMEOUT, tls_context=client_ctx)
        assert caught.value.code == 535
        assert "wrongpassword" not in str(caught.value) and "wrongpassword" not in repr(
            caught.value
        )
        assert server.received == []


async def test_an_untrusted_certificate_fails_as_transient(tmp_path: Path) -> None:
    server_ctx, _ = make_tls(tmp_path)
    with SmtpTestServer(starttls_context=server_ctx) as server:
        with pytest.raises(TransientMailError):
            # Default trust store: our test CA is not in it.
            await send_message(parse_smtp_url(server.url), message_to(), TIMEOUT)
        assert server.received == []


async def test_smtps_speaks_tls_from_the_first_byte(tmp_path: Path) -> None:
    server_ctx, client_ctx = make_tls(tmp_path)
    with SmtpTestServer(implicit_tls_context=server_ctx) as server:
        assert server.url.startswith("smtps://")
        target = parse_smtp_url(server.url)
        await send_message(target, message_to(), TIMEOUT, tls_context=client_ctx)
        assert len(server.wait_for(1)) == 1
        # A plain-text client gets nowhere with it.
        plain = SmtpTarget("smtp", "127.0.0.1", server.port)
        with pytest.raises(TransientMailError):
            await send_message(plain, message_to(), 2.0)


async def test_a_login_without_tls_is_sent_when_credentials_are_given() -> None:
    with SmtpTestServer(credentials=("mailer", "p w:@/")) as server:
        good = parse_smtp_url(f"smtp://mailer:p%20w%3A%40%2F@127.0.0.1:{server.port}")
        await send_message(good, message_to(), TIMEOUT)
        assert len(server.wait_for(1)) == 1
        bad = parse_smtp_url(f"smtp://mailer:nope@127.0.0.1:{server.port}")
        with pytest.raises(PermanentMailError) as caught:
            await send_message(bad, message_to(), TIMEOUT)
        assert caught.value.code == 535
        assert len(server.received) == 1
