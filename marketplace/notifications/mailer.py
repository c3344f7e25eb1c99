"""Sending one e-mail to the configured SMTP server (``MARKETPLACE_SMTP_URL``) with aiosmtplib.

:func:`parse_smtp_url` turns the URL into an :class:`SmtpTarget` (called when the settings load,
so a bad URL stops startup naming the variable); :func:`send_message` delivers one message and
sorts every failure into :class:`TransientMailError` (worth retrying: the server is unreachable,
slow, or answered 4xx) or :class:`PermanentMailError` (a 5xx answer: retrying cannot help).
Neither the target's ``repr`` nor an error's description ever contains the password.
"""

from __future__ import annotations

import asyncio
import copy
import email.policy
import ssl
from dataclasses import dataclass
from email.generator import BytesGenerator
from email.message import EmailMessage
from email.utils import getaddresses
from io import BytesIO

import aiosmtplib

from marketplace.config.mail import SmtpTarget

# Server replies quoted in an error are cut to this length (they end up in the delivery log).
MAX_REPLY_CHARS = 200
# How messages go on the wire: CRLF, and lines folded only beyond RFC 5322's hard limit of 998
# characters. aiosmtplib's own flattening folds at 78, which turns a long header without spaces
# (List-Unsubscribe's URL) into RFC 2047 encoded words that mail clients do not decode there.
WIRE_POLICY = email.policy.SMTP.clone(max_line_length=998)


class MailError(Exception):
    """Sending failed. ``description`` is short, safe to log and to store (no password);
    ``code`` is the SMTP reply code when the server answered one."""

    transient: bool = True

    def __init__(self, description: str, code: int | None = None) -> None:
        super().__init__(description, code)
        self.description = description
        self.code = code

    def __str__(self) -> str:
        return self.description


class TransientMailError(MailError):
    """Worth retrying later: connection refused or reset, a timeout, a 4xx reply."""

    transient = True


class PermanentMailError(MailError):
    """Retrying cannot help: a 5xx reply (recipient rejected, authentication refused, ...)."""

    transient = False


async def send_message(
    target: SmtpTarget,
    message: EmailMessage,
    # Per SMTP command (aiosmtplib's timeout), not a deadline for the whole exchange: a caller
    # wanting one wraps the call in asyncio.timeout.
    timeout: float,  # noqa: ASYNC109
    *,
    tls_context: ssl.SSLContext | None = None,
) -> None:
    """Deliver ``message`` (envelope sender and recipients from its From/To/Cc/Bcc headers) over
    a connection of its own, closed afterwards. ``tls_context`` replaces the default certificate
    checks (tests give one trusting their own CA). Raises :class:`TransientMailError` or
    :class:`PermanentMailError`. Many messages to one server: :class:`SmtpPool`.
    """
    pool = SmtpPool(target, timeout, size=1, tls_context=tls_context)
    try:
        await pool.send(*wire_format(message))
    finally:
        await pool.close()


class _DeadConnection(Exception):
    """A pooled connection turned out closed before the server accepted any part of the message
    (at MAIL or RCPT): the message can go on a fresh connection without risk of a duplicate."""


@dataclass(eq=False)
class _Connection:
    smtp: aiosmtplib.SMTP
    # Messages this connection carried; 0 while it is fresh.
    used: int = 0
    idle_timer: asyncio.TimerHandle | None = None


class SmtpPool:
    """Up to ``size`` SMTP connections to ``target``, each carrying one message at a time and
    many in turn, made in one process and on one event loop.

    A connection logs in (and upgrades with STARTTLS, when offered) once, when it is made. After
    any failure it is closed, never reused. A connection found closed at MAIL or RCPT (the server
    dropped an idle connection, for instance) costs nothing: the message goes out on a fresh
    connection, once; from DATA on, a lost connection is reported, as the server may have taken
    the message. A connection idle for ``idle_seconds`` is closed (QUIT). Failures are
    classified as :func:`send_message`'s.
    """

    def __init__(
        self,
        target: SmtpTarget,
        # Per SMTP command, as send_message's.
        timeout: float,
        *,
        size: int,
        idle_seconds: float = 15.0,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("an SMTP pool needs room for one connection")
        self.target = target
        self.timeout = timeout
        self.size = size
        self.idle_seconds = idle_seconds
        self.tls_context = tls_context
        self.loop = asyncio.get_running_loop()
        self._slots = asyncio.Semaphore(size)
        # Most recently used last: the next send takes the warmest connection.
        self._idle: list[_Connection] = []
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False
        self.connections_made = 0

    @property
    def idle(self) -> int:
        return len(self._idle)

    async def send(self, sender: str, recipients: list[str], data: bytes) -> None:
        """Deliver ``data`` from ``sender`` to ``recipients`` (message bytes with CRLF line
        ends, as :func:`wire_format` gives them). Raises :class:`MailError`."""
        if self._closed:
            raise RuntimeError("the SMTP pool is closed")
        async with self._slots:
            try:
                conn = self._take_idle()
                if conn is not None:
                    try:
                        await self._transaction(conn, sender, recipients, data)
                        return
                    except _DeadConnection:
                        self._discard(conn)
                conn = await self._connect()
                await self._transaction(conn, sender, recipients, data)
            except _DeadConnection as dead:
                raise classify(dead.__cause__ or dead, self.target) from None
            except MailError:
                raise
            except Exception as exc:
                raise classify(exc, self.target) from None

    async def close(self) -> None:
        """Close the idle connections (QUIT) and refuse further sends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            if conn.idle_timer is not None:
                conn.idle_timer.cancel()
            self._quit_later(conn)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    # --- connections --------------------------------------------------------------------------

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.idle_timer is not None:
                conn.idle_timer.cancel()
                conn.idle_timer = None
            if conn.smtp.is_connected:
                return conn
            conn.smtp.close()  # the server closed it while it was idle
        return None

    async def _connect(self) -> _Connection:
        target = self.target
        smtp = aiosmtplib.SMTP(
            hostname=target.host,
            port=target.port,
            username=target.username,
            password=target.password,
            use_tls=target.implicit_tls,
            # None: STARTTLS exactly when the server offers it (aiosmtplib's documented default).
            start_tls=False if target.implicit_tls else None,
            timeout=self.timeout,
            tls_context=self.tls_context,
        )
        # Connects, upgrades with STARTTLS when offered and logs in; closes itself on failure.
        await smtp.connect()
        try:
            if smtp.is_ehlo_or_helo_needed:
                # Now rather than at the first MAIL, so every message states its SIZE. A server
                # without ESMTP gets HELO, as aiosmtplib's own sendmail does it.
                try:
                    await smtp.ehlo()
                except aiosmtplib.SMTPHeloError:
                    if not smtp.is_connected:
                        raise
                    await smtp.helo()
        except BaseException:
            smtp.close()
            raise
        self.connections_made += 1
        return _Connection(smtp)

    async def _transaction(
        self, conn: _Connection, sender: str, recipients: list[str], data: bytes
    ) -> None:
        """MAIL, RCPT for each recipient, DATA, as ``aiosmtplib.SMTP.sendmail`` does them (the
        message goes out when one recipient at least is accepted), but knowing which step
        failed. The connection goes back to the pool only when the message was accepted."""
        smtp = conn.smtp
        reused = conn.used > 0
        try:
            options = []
            if smtp.supports_extension("size"):
                options.append(f"SIZE={len(data)}")
            try:
                await smtp.mail(sender, options=options)
                refused: list[aiosmtplib.SMTPRecipientRefused] = []
                for recipient in recipients:
                    try:
                        await smtp.rcpt(recipient)
                    except aiosmtplib.SMTPRecipientRefused as exc:
                        refused.append(exc)
            except (aiosmtplib.SMTPServerDisconnected, ConnectionError) as exc:
                if reused:
                    raise _DeadConnection() from exc
                raise
            if len(refused) == len(recipients):
                raise aiosmtplib.SMTPRecipientsRefused(refused)
            await smtp.data(data)
        except BaseException:
            self._discard(conn)
            raise
        conn.used += 1
        self._give_back(conn)

    def _give_back(self, conn: _Connection) -> None:
        if self._closed or not conn.smtp.is_connected:
            self._discard(conn)
            return
        conn.idle_timer = self.loop.call_later(self.idle_seconds, self._expire, conn)
        self._idle.append(conn)

    def _expire(self, conn: _Connection) -> None:
        if conn in self._idle:
            self._idle.remove(conn)
            conn.idle_timer = None
            self._quit_later(conn)

    def _quit_later(self, conn: _Connection) -> None:
        task = self.loop.create_task(self._quit(conn))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _quit(self, conn: _Connection) -> None:
        try:
            await conn.smtp.quit(timeout=min(self.timeout, 5.0))
        except Exception:
            pass  # closing anyway: a server gone quiet or away changes nothing
        finally:
            conn.smtp.close()

    def _discard(self, conn: _Connection) -> None:
        if conn.idle_timer is not None:
            conn.idle_timer.cancel()
            conn.idle_timer = None
        conn.smtp.close()


def wire_format(message: EmailMessage) -> tuple[str, list[str], bytes]:
    """(envelope sender, envelope recipients, message bytes without Bcc) for ``message``."""
    senders = [addr for _, addr in getaddresses([str(v) for v in message.get_all("From", [])])]
    recipients = [
        addr
        for _, addr in getaddresses(
            [str(v) for name in ("To", "Cc", "Bcc") for v in message.get_all(name, [])]
        )
        if addr
    ]
    if len(senders) != 1 or not senders[0]:
        raise ValueError("the message needs exactly one From address")
    if not recipients:
        raise ValueError("the message has no recipient")
    # `del` rebinds the header list, so the shallow copy leaves the caller's message intact.
    wire = copy.copy(message)
    del wire["Bcc"]
    buffer = BytesIO()
    BytesGenerator(buffer, policy=WIRE_POLICY).flatten(wire)
    return senders[0], recipients, buffer.getvalue()


def classify(exc: BaseException, target: SmtpTarget) -> MailError:
    """The :class:`MailError` for a failure of :func:`send_message`."""
    where = target.describe()
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        refusals = exc.recipients
        # One refusal worth retrying makes the whole message worth retrying.
        worst = next((r for r in refusals if not _permanent_code(r.code)), None)
        chosen = worst or (refusals[0] if refusals else None)
        if chosen is None:
            return TransientMailError(_clean(f"recipients refused by {where}", target))
        text = f"{chosen.code} {chosen.message} (recipient refused by {where})"
        return _by_code(chosen.code, _clean(text, target))
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        # Covers refused senders, refused data, refused logins, a 4xx/5xx greeting.
        return _by_code(exc.code, _clean(f"{exc.code} {exc.message} ({where})", target))
    if isinstance(exc, aiosmtplib.SMTPNotSupported):
        return PermanentMailError(_clean(f"not supported by {where}: {exc.message}", target))
    if isinstance(exc, asyncio.TimeoutError | TimeoutError | aiosmtplib.SMTPTimeoutError):
        return TransientMailError(_clean(f"timed out talking to {where}", target))
    if isinstance(exc, ssl.SSLError):
        return TransientMailError(_clean(f"TLS failed with {where}: {_reason(exc)}", target))
    if isinstance(exc, ConnectionError | OSError | aiosmtplib.SMTPException):
        # Refused, reset, unreachable, disconnected, a failed STARTTLS handshake.
        return TransientMailError(_clean(f"cannot deliver to {where}: {_reason(exc)}", target))
    return TransientMailError(_clean(f"{type(exc).__name__} sending to {where}", target))


def _permanent_code(code: int) -> bool:
    return 500 <= code < 600


def _by_code(code: int, text: str) -> MailError:
    if _permanent_code(code):
        return PermanentMailError(text, code)
    return TransientMailError(text, code)


def _reason(exc: BaseException) -> str:
    message = getattr(exc, "message", None)
    return str(message) if message else (str(exc) or type(exc).__name__)


def _clean(text: str, target: SmtpTarget) -> str:
    text = " ".join(text.split())
    if target.password:
        text = text.replace(target.password, "***")
    if len(text) > MAX_REPLY_CHARS:
        text = text[: MAX_REPLY_CHARS - 1] + "…"
    return text
