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
from dataclasses import dataclass, field
from email.generator import BytesGenerator
from email.message import EmailMessage
from email.utils import getaddresses
from io import BytesIO
from urllib.parse import unquote, urlsplit

import aiosmtplib

SCHEMES = {"smtp": 25, "smtps": 465}
# Server replies quoted in an error are cut to this length (they end up in the delivery log).
MAX_REPLY_CHARS = 200
# How messages go on the wire: CRLF, and lines folded only beyond RFC 5322's hard limit of 998
# characters. aiosmtplib's own flattening folds at 78, which turns a long header without spaces
# (List-Unsubscribe's URL) into RFC 2047 encoded words that mail clients do not decode there.
WIRE_POLICY = email.policy.SMTP.clone(max_line_length=998)


@dataclass(frozen=True)
class SmtpTarget:
    """Where and how to connect: ``smtps`` is TLS from the first byte; ``smtp`` upgrades with
    STARTTLS when the server offers it."""

    scheme: str
    host: str
    port: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def implicit_tls(self) -> bool:
        return self.scheme == "smtps"

    def describe(self) -> str:
        """``smtp://user@host:port``: the target without its password, for logs and errors."""
        user = f"{self.username}@" if self.username else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{user}{host}:{self.port}"


def parse_smtp_url(url: str) -> SmtpTarget:
    """Parse ``smtp://[user[:password]@]host[:port]`` (or ``smtps://``); user and password are
    percent-decoded. Raises ValueError, whose message never repeats the password."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise ValueError("not a valid smtp:// or smtps:// URL (bad host or port)") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        shown = f"{scheme}://" if scheme else "no scheme"
        raise ValueError(f"the SMTP URL must start with smtp:// or smtps://, got {shown}")
    if not parts.hostname:
        raise ValueError("the SMTP URL names no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("the SMTP URL takes no path, query or fragment")
    if port == 0:
        raise ValueError("the SMTP URL's port must be between 1 and 65535")
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    if password and not username:
        raise ValueError("the SMTP URL has a password but no user")
    return SmtpTarget(
        scheme=scheme,
        host=parts.hostname,
        port=port or SCHEMES[scheme],
        username=username,
        password=password or None,
    )


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
    one connection. ``tls_context`` replaces the default certificate checks (tests give one
    trusting their own CA). Raises :class:`TransientMailError` or :class:`PermanentMailError`.
    """
    sender, recipients, data = wire_format(message)
    try:
        await aiosmtplib.send(
            data,
            sender=sender,
            recipients=recipients,
            hostname=target.host,
            port=target.port,
            username=target.username,
            password=target.password,
            use_tls=target.implicit_tls,
            # None: STARTTLS exactly when the server offers it (aiosmtplib's documented default).
            start_tls=False if target.implicit_tls else None,
            timeout=timeout,
            tls_context=tls_context,
        )
    except Exception as exc:
        raise classify(exc, target) from None


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
