"""The embedded SMTP server of `marketplace up`: every message becomes an .eml file on disk."""

from __future__ import annotations

import email
import email.policy
import os
import signal
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import psutil
import pytest

from marketplace.config import Settings
from marketplace.config.mail import parse_smtp_url
from marketplace.notifications.email import EmailContent, compose
from marketplace.notifications.mailer import send_message, wire_format
from marketplace_devstack.devnet.node import Stoppable
from marketplace_devstack.embedded.smtp import EmbeddedSmtp
from marketplace_devstack.embedded.stack import start_smtp

FROM = "Marketplace <marketplace@localhost>"


def message(n: int, to: str = "carol@example.com") -> EmailMessage:
    return compose(
        EmailContent(
            to=to,
            subject=f"Message {n} about «Ünïcode» project",
            summary=f"dave posted message {n} in the project chat.",
            link_url="http://127.0.0.1:8080/v1/projects/0xabc",
            preview="Ça va? " * 10,
            unsubscribe_url="http://127.0.0.1:8080/v1/notifications/unsubscribe?token=xyz",
        ),
        mail_from=FROM,
        preview_chars=140,
    )


def read_eml(path: Path) -> EmailMessage:
    parsed = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    return parsed


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[EmbeddedSmtp]:
    with EmbeddedSmtp(tmp_path / "data") as server:
        yield server


async def test_each_message_is_written_as_an_eml_file_that_parses_back(
    embedded: EmbeddedSmtp,
) -> None:
    sent = message(1)
    await send_message(parse_smtp_url(embedded.url), sent, 5.0)
    [path] = list(embedded.mail_dir.glob("*.eml"))
    stored = read_eml(path)
    assert stored["Return-Path"] == "<marketplace@localhost>"
    assert stored["Delivered-To"] == "carol@example.com"
    for header in ("From", "To", "Subject", "Date", "Message-ID", "List-Unsubscribe"):
        assert stored[header] == sent[header], header
    assert stored["Subject"] == "Message 1 about «Ünïcode» project"
    assert stored["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    for kind in ("plain", "html"):
        ours, theirs = sent.get_body((kind,)), stored.get_body((kind,))
        assert ours is not None and theirs is not None
        assert theirs.get_content().replace("\r\n", "\n") == ours.get_content()
    # Byte for byte what went on the wire, after the two trace headers.
    _, _, data = wire_format(sent)
    assert path.read_bytes().endswith(data)


async def test_file_names_are_unique_and_sort_in_arrival_order(embedded: EmbeddedSmtp) -> None:
    target = parse_smtp_url(embedded.url)
    for n in range(5):
        await send_message(target, message(n), 5.0)
    paths = sorted(embedded.mail_dir.glob("*.eml"))
    assert len(paths) == 5
    assert [read_eml(p)["Subject"].split()[1] for p in paths] == ["0", "1", "2", "3", "4"]
    # Nothing half-written is left behind, and no other files.
    assert sorted(embedded.mail_dir.iterdir()) == paths


def test_it_listens_on_loopback_only(embedded: EmbeddedSmtp) -> None:
    assert embedded.pid is not None
    listening = [
        conn.laddr
        for conn in psutil.Process(embedded.pid).net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    ]
    assert [(a.ip, a.port) for a in listening] == [("127.0.0.1", embedded.port)]


async def test_a_killed_server_is_restarted_on_the_same_port(embedded: EmbeddedSmtp) -> None:
    target = parse_smtp_url(embedded.url)
    assert embedded.pid is not None
    os.kill(embedded.pid, signal.SIGKILL)
    psutil.Process(embedded.pid).wait(10)
    assert embedded.exit_status() is not None  # what the stack's watcher looks at
    embedded.restart()
    assert embedded.exit_status() is None
    await send_message(target, message(7), 5.0)
    assert len(list(embedded.mail_dir.glob("*.eml"))) == 1


def test_stop_ends_the_process(tmp_path: Path) -> None:
    server = EmbeddedSmtp(tmp_path)
    server.start()
    pid = server.pid
    assert pid is not None and psutil.pid_exists(pid)
    server.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


async def test_up_starts_it_when_no_smtp_url_is_configured(tmp_path: Path) -> None:
    started: list[Stoppable] = []
    settings = start_smtp(Settings(data_dir=tmp_path), started)
    try:
        [server] = started
        assert isinstance(server, EmbeddedSmtp)
        assert settings.smtp_url is not None
        assert settings.smtp_url.get_secret_value() == f"smtp://127.0.0.1:{server.port}"
        target = settings.smtp_target
        assert target is not None
        await send_message(target, message(1), 5.0)
        assert len(list((tmp_path / "mail").glob("*.eml"))) == 1
    finally:
        for each in started:
            each.stop()


def test_up_leaves_a_configured_smtp_url_alone(tmp_path: Path) -> None:
    started: list[Stoppable] = []
    configured = Settings(data_dir=tmp_path, smtp_url="smtp://mail.example.com")  # type: ignore[arg-type]
    assert start_smtp(configured, started) is configured
    assert started == [] and not (tmp_path / "mail").exists()
