"""The mail settings' own parsing (``MARKETPLACE_SMTP_URL``, ``MARKETPLACE_MAIL_FROM``): pure
functions of the standard library, here so that ``config`` imports no domain package (the
notifications package re-exports them where it uses them)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from email.headerregistry import Address
from email.utils import getaddresses
from urllib.parse import unquote, urlsplit

SCHEMES = {"smtp": 25, "smtps": 465}
# C0 and C1 controls and the Unicode line separators: never in a header.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


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


def check_address(address: str) -> str:
    """A bare ``user@domain`` address (no display name, no control characters)."""
    if CONTROL.search(address):
        raise ValueError("an e-mail address may not contain control characters")
    try:
        parsed = Address(addr_spec=address.strip())
    except (ValueError, IndexError) as exc:
        raise ValueError(f"not an e-mail address: {address[:100]!r}") from exc
    if not parsed.username or not parsed.domain:
        raise ValueError(f"not an e-mail address: {address[:100]!r}")
    return parsed.addr_spec


@functools.lru_cache(maxsize=16)
def check_mail_from(value: str) -> str:
    """A ``Name <user@domain>`` or bare sender address, as MARKETPLACE_MAIL_FROM takes it."""
    if CONTROL.search(value):
        raise ValueError("MARKETPLACE_MAIL_FROM may not contain control characters")
    pairs = getaddresses([value])
    if len(pairs) != 1 or not pairs[0][1]:
        raise ValueError(f"MARKETPLACE_MAIL_FROM is not one address: {value!r}")
    try:
        check_address(pairs[0][1])
    except ValueError as exc:
        raise ValueError(f"MARKETPLACE_MAIL_FROM: {exc}") from None
    return value
