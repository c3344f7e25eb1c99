"""A real SMTP server for the suite (aiosmtpd in a thread of the test process).

It records what it receives (parsed), can be told to refuse the next N transactions with a 4xx
or 5xx reply, and can be stopped and started again on the same port (SMTP down, then up).
Optionally it offers a login (required, after TLS, when it offers STARTTLS too), offers STARTTLS,
or speaks TLS from the first byte.

    server = SmtpTestServer(); server.start()
    settings = make_settings(..., smtp_url=server.url)
    server.fail_next(2, 451)       # two transactions answered "451 ..." at RCPT
    server.wait_for(1)             # blocks until one message was accepted
    server.stop(); server.start()  # same port
"""

from __future__ import annotations

import email
import email.policy
import ssl
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from marketplace_devstack.embedded.procs import free_port


@dataclass(frozen=True)
class Received:
    mail_from: str
    rcpt_tos: list[str]
    raw: bytes
    message: EmailMessage


@dataclass
class _Failure:
    code: int
    text: str
    stage: str  # "rcpt" or "data"


class _Handler:
    def __init__(self, server: SmtpTestServer) -> None:
        self.server = server

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]
    ) -> str:
        failure = self.server._take_failure("rcpt")
        if failure is not None:
            return f"{failure.code} {failure.text}"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        failure = self.server._take_failure("data")
        if failure is not None:
            return f"{failure.code} {failure.text}"
        self.server._record(envelope.mail_from, list(envelope.rcpt_tos), envelope.original_content)
        return "250 OK"


class SmtpTestServer:
    def __init__(
        self,
        *,
        port: int = 0,
        credentials: tuple[str, str] | None = None,
        starttls_context: ssl.SSLContext | None = None,
        implicit_tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self.port = port or free_port()
        self.credentials = credentials
        self.starttls_context = starttls_context
        self.implicit_tls_context = implicit_tls_context
        self.received: list[Received] = []
        self.transactions_refused = 0
        self._failures: deque[_Failure] = deque()
        self._lock = threading.Condition()
        self._controller: Controller | None = None

    @property
    def url(self) -> str:
        scheme = "smtps" if self.implicit_tls_context is not None else "smtp"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._controller is not None

    def start(self) -> SmtpTestServer:
        assert self._controller is None, "already running"
        kwargs: dict[str, Any] = {}
        if self.credentials is not None:
            tls = self.starttls_context is not None
            # With STARTTLS: no mail without a login, no login before TLS. Without it the login
            # is offered in clear text (fine on loopback) but not required: aiosmtpd warns on
            # every connection about requiring a login without TLS.
            kwargs.update(authenticator=self._authenticate, auth_required=tls)
            kwargs["auth_require_tls"] = tls
        if self.starttls_context is not None:
            kwargs.update(tls_context=self.starttls_context, require_starttls=True)
        controller = Controller(
            _Handler(self),
            hostname="127.0.0.1",
            port=self.port,
            ssl_context=self.implicit_tls_context,
            server_hostname="localhost",
            ready_timeout=10,
            **kwargs,
        )
        controller.start()
        self._controller = controller
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None
            # The port is free again once nothing accepts on it.
            wait_until_refused(self.port)

    def fail_next(self, count: int, code: int, *, stage: str = "rcpt", text: str = "") -> None:
        """Answer the next ``count`` transactions with ``code`` at RCPT (or DATA)."""
        assert stage in ("rcpt", "data")
        default = "4.3.0 try again later" if code < 500 else "5.1.1 recipient rejected"
        with self._lock:
            self._failures.extend(_Failure(code, text or default, stage) for _ in range(count))

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        """Block until at least ``count`` messages were accepted; returns them all."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self.received) >= count, timeout):
                raise AssertionError(f"{len(self.received)} message(s) arrived, not {count}")
            return list(self.received)

    def messages(self) -> list[EmailMessage]:
        with self._lock:
            return [r.message for r in self.received]

    def clear(self) -> None:
        with self._lock:
            self.received.clear()
            self._failures.clear()
            self.transactions_refused = 0

    def _take_failure(self, stage: str) -> _Failure | None:
        with self._lock:
            if self._failures and self._failures[0].stage == stage:
                self.transactions_refused += 1
                return self._failures.popleft()
            return None

    def _record(self, mail_from: str, rcpt_tos: list[str], raw: bytes) -> None:
        parsed = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        with self._lock:
            self.received.append(Received(mail_from, rcpt_tos, raw, parsed))
            self._lock.notify_all()

    def _authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> AuthResult:
        assert self.credentials is not None
        if isinstance(auth_data, LoginPassword):
            user, password = self.credentials
            if auth_data.login == user.encode() and auth_data.password == password.encode():
                return AuthResult(success=True)
        return AuthResult(success=False, handled=False)

    def __enter__(self) -> SmtpTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until_refused(port: int, timeout: float = 5.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                pass
        except OSError:
            return
        time.sleep(0.02)
    raise AssertionError(f"port {port} still accepts connections")


@pytest.fixture
def smtp_server() -> Iterator[SmtpTestServer]:
    """A fresh SMTP test server on a free loopback port, stopped after the test."""
    server = SmtpTestServer().start()
    try:
        yield server
    finally:
        server.stop()
