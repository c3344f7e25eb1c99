"""Composing a notification e-mail from plain data (docs/notifications.md, "E-mail").

Everything a user wrote (usernames, project titles, message bodies) is untrusted here:
- headers never receive a CR, LF or other control character from it (a subject is reduced to
  one line of at most :data:`MAX_SUBJECT_CHARS` characters), so it cannot add headers;
- the subject and the names in it carry no bidirectional-text control (:func:`strip_bidi`), so
  a right-to-left override in a project title cannot make a mail client show the subject
  reversed or disguise what it names;
- the HTML part escapes it, so it cannot add markup or links;
- links must be absolute http(s) URLs, checked before they go into a header or an ``href``.
"""

from __future__ import annotations

import base64
import email.policy
import functools
import html
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from email import quoprimime
from email.message import EmailMessage
from email.utils import format_datetime, getaddresses, make_msgid
from urllib.parse import urlsplit

from marketplace.config.mail import CONTROL, check_address, check_mail_from
from marketplace.types import BIDI_CONTROLS

MAX_SUBJECT_CHARS = 300
MAX_URL_CHARS = 900  # a header line stays within RFC 5322's 998 characters
ELLIPSIS = "…"
# U+202A-U+202E (embeddings, overrides, pop), U+2066-U+2069 (isolates), U+200E, U+200F (marks)
# and U+061C (ARABIC LETTER MARK).
BIDI = re.compile(f"[{BIDI_CONTROLS}]")


def strip_bidi(text: str) -> str:
    """``text`` without bidirectional-text controls: right-to-left text still shows right to
    left (the letters carry their own direction), but nothing a user wrote can reorder what
    is around it."""
    return BIDI.sub("", text)


@dataclass(frozen=True)
class EmailContent:
    """What one notification says; the pipeline fills it in, :func:`compose` lays it out.

    ``summary`` is one sentence ("alice sent you a direct message."), ``link_url`` points at
    the project or thread and ``link_label`` names it, ``preview`` is the body being announced
    (chat and DMs; cut to the configured length), ``unsubscribe_url`` the signed one-click link.
    """

    to: str
    subject: str
    summary: str
    link_url: str
    link_label: str = "Open in the marketplace"
    preview: str | None = None
    unsubscribe_url: str | None = None


def one_line(text: str, limit: int) -> str:
    """``text`` as a single line without control characters, cut to ``limit`` characters
    (the last one an ellipsis when cut)."""
    line = " ".join(CONTROL.sub(" ", text).split())
    if len(line) > limit:
        line = line[: max(limit - 1, 0)].rstrip() + ELLIPSIS
    return line


def sanitize_subject(subject: str) -> str:
    """The ``Subject`` header's text: one line, no controls, no bidirectional-text controls
    (also for subjects stored before they were stripped at the source)."""
    return one_line(strip_bidi(subject), MAX_SUBJECT_CHARS) or "Marketplace notification"


def make_preview(body: str, chars: int) -> str | None:
    """The first ``chars`` characters of ``body`` on one line, followed by an ellipsis when
    cut; None when previews are off (``chars`` 0) or the body is blank."""
    if chars <= 0:
        return None
    line = " ".join(CONTROL.sub(" ", body).split())
    if not line:
        return None
    return line if len(line) <= chars else line[:chars].rstrip() + ELLIPSIS


# Pure and called per message with the same few URLs and addresses (a thread's link, a user's
# unsubscribe link and address): remembered, as parsing them is a good part of a message's cost.
@functools.lru_cache(maxsize=4096)
def check_url(url: str) -> str:
    """``url`` if it is an absolute http(s) URL fit for a header and an ``href``."""
    parts = urlsplit(url)
    if (
        parts.scheme not in ("http", "https")
        or not parts.netloc
        or len(url) > MAX_URL_CHARS
        or any(c in url for c in " <>\"'\\`")
        or CONTROL.search(url)
    ):
        raise ValueError(f"not an absolute http(s) URL usable in an e-mail: {url[:100]!r}")
    return url


@functools.lru_cache(maxsize=4096)
def sender_domain(mail_from: str) -> str:
    """The domain of the sender address (``Message-ID``s are made under it)."""
    return getaddresses([mail_from])[0][1].rpartition("@")[2] or "localhost"


@dataclass(frozen=True)
class _Parts:
    """What :func:`compose` and :func:`render` lay out, checked and cut the same for both."""

    mail_from: str
    to: str
    subject: str
    unsubscribe: str | None
    text: str
    html: str


def _parts(content: EmailContent, *, mail_from: str, preview_chars: int) -> _Parts:
    to = check_address(content.to)
    link = check_url(content.link_url)
    unsubscribe = check_url(content.unsubscribe_url) if content.unsubscribe_url else None
    subject = sanitize_subject(content.subject)
    summary = one_line(content.summary, 2000)
    label = one_line(content.link_label, 200) or "Open in the marketplace"
    preview = make_preview(content.preview, preview_chars) if content.preview else None

    text = [summary, ""]
    if preview is not None:
        text += [f"> {preview}", ""]
    text += [f"{label}: {link}"]
    if unsubscribe is not None:
        text += ["", "--", f"Stop these e-mails: {unsubscribe}"]

    def esc(value: str) -> str:
        return html.escape(value, quote=True)

    parts = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8">',
        f"<title>{esc(subject)}</title></head>",
        '<body style="font-family: sans-serif; line-height: 1.4">',
        f"<p>{esc(summary)}</p>",
    ]
    if preview is not None:
        parts.append(
            '<blockquote style="margin: 0 0 1em; padding-left: 0.8em; '
            f'border-left: 3px solid #ccc; color: #444">{esc(preview)}</blockquote>'
        )
    parts.append(f'<p><a href="{esc(link)}">{esc(label)}</a></p>')
    if unsubscribe is not None:
        parts.append(
            '<p style="font-size: 0.85em; color: #666">'
            f'<a href="{esc(unsubscribe)}">Stop these e-mails</a></p>'
        )
    parts.append("</body></html>")
    return _Parts(
        mail_from=check_mail_from(mail_from),
        to=to,
        subject=subject,
        unsubscribe=unsubscribe,
        text="\n".join(text) + "\n",
        html="\n".join(parts) + "\n",
    )


def new_boundary() -> str:
    # "=_" cannot occur in the quoted-printable parts, so no line of theirs can match it.
    return f"=_{secrets.token_hex(16)}"


def compose(
    content: EmailContent,
    *,
    mail_from: str,
    preview_chars: int,
    now: datetime | None = None,
    message_id_domain: str | None = None,
) -> EmailMessage:
    """The message for ``content``: a text part and an HTML part, ``Message-ID``, ``Date``,
    and, with an unsubscribe URL, ``List-Unsubscribe`` + ``List-Unsubscribe-Post`` (RFC 8058).

    The reference layout: :func:`render` writes the same message's bytes directly, faster.
    Raises ValueError for an unusable recipient address or URL.
    """
    parts = _parts(content, mail_from=mail_from, preview_chars=preview_chars)
    message = EmailMessage(policy=email.policy.default)
    message["From"] = parts.mail_from
    message["To"] = parts.to
    message["Subject"] = parts.subject
    message["Date"] = format_datetime(now or datetime.now(UTC))
    message["Message-ID"] = make_msgid(domain=message_id_domain or sender_domain(mail_from))
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation replies, please
    if parts.unsubscribe is not None:
        message["List-Unsubscribe"] = f"<{parts.unsubscribe}>"
        message["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    message.set_content(parts.text, cte="quoted-printable")
    message.add_alternative(parts.html, subtype="html", cte="quoted-printable")
    # Fixed now rather than drawn anew each time the message is flattened, so every send of it
    # puts the same bytes on the wire.
    message.set_boundary(new_boundary())
    return message


@dataclass(frozen=True)
class WireMessage:
    """A message ready for SMTP: envelope sender and recipients, and its bytes (CRLF)."""

    sender: str
    recipients: list[str]
    data: bytes


# RFC 2047: encoded words of at most 75 characters on lines of at most 76. 42 bytes of UTF-8
# (never split inside a character) make a 68-character word, so even the first line,
# "Subject: " and a word, stays within 78.
_WORD_BYTES = 42
# The quoted-printable line length compose()'s parts get (email.policy.default's).
_QP_LINE = 78


def render(
    content: EmailContent,
    *,
    mail_from: str,
    preview_chars: int,
    message_id: str,
    now: datetime | None = None,
    boundary: str | None = None,
) -> WireMessage:
    """:func:`compose`'s message with ``message_id``, as the bytes SMTP sends, written directly
    rather than through an ``EmailMessage`` and its generator (which cost milliseconds per
    message). For ASCII headers the bytes are :func:`compose`'s flattened by
    :func:`~marketplace.notifications.mailer.wire_format`; a non-ASCII subject is written as
    base64 encoded words (the same text once decoded). The rare message this does not cover (a
    non-ASCII address) is composed by :func:`compose`.

    Raises ValueError for an unusable recipient address, URL or ``message_id``.
    """
    parts = _parts(content, mail_from=mail_from, preview_chars=preview_chars)
    if CONTROL.search(message_id) or not message_id.isascii():
        raise ValueError("a Message-ID is one line of ASCII")
    boundary = boundary or new_boundary()
    date = format_datetime(now or datetime.now(UTC))
    sender, from_line = _from_header(parts.mail_from)
    if not parts.to.isascii():
        return _composed(content, mail_from, preview_chars, message_id, now, boundary)
    lines = [
        from_line,
        f"To: {parts.to}",
        f"Subject: {_subject_value(parts.subject)}",
        f"Date: {date}",
        f"Message-ID: {message_id}",
        "Auto-Submitted: auto-generated",
    ]
    if parts.unsubscribe is not None:
        lines.append(f"List-Unsubscribe: <{parts.unsubscribe}>")
        lines.append("List-Unsubscribe-Post: List-Unsubscribe=One-Click")
    lines += [
        "MIME-Version: 1.0",
        f'Content-Type: multipart/alternative; boundary="{boundary}"',
        "",
        f"--{boundary}",
        'Content-Type: text/plain; charset="utf-8"',
        "Content-Transfer-Encoding: quoted-printable",
        "",
        _quoted_printable(parts.text),
        f"--{boundary}",
        'Content-Type: text/html; charset="utf-8"',
        "Content-Transfer-Encoding: quoted-printable",
        # compose() gets it from add_alternative(); kept so both give the same bytes.
        "MIME-Version: 1.0",
        "",
        _quoted_printable(parts.html),
        f"--{boundary}--",
        "",
    ]
    return WireMessage(sender, [parts.to], "\r\n".join(lines).encode("ascii"))


def _quoted_printable(text: str) -> str:
    # What compose()'s set_content(cte="quoted-printable") does: UTF-8 bytes, encoded line by
    # line with soft breaks at 78 characters. The text ends with a newline, so the encoded text
    # does too, and the join above adds the blank line before the boundary that compose() has.
    encoded = quoprimime.body_encode(text.encode("utf-8").decode("latin-1"), _QP_LINE)
    return encoded.replace("\n", "\r\n")


def _subject_value(subject: str) -> str:
    if subject.isascii():
        return subject
    words: list[str] = []
    chunk = bytearray()
    for char in subject:
        encoded = char.encode("utf-8")
        if chunk and len(chunk) + len(encoded) > _WORD_BYTES:
            words.append(_word(chunk))
            chunk = bytearray()
        chunk += encoded
    if chunk:
        words.append(_word(chunk))
    # Folded between words: the whitespace between two encoded words is not part of the text.
    return "\r\n ".join(words)


def _word(data: bytes | bytearray) -> str:
    return f"=?utf-8?b?{base64.b64encode(data).decode('ascii')}?="


@functools.lru_cache(maxsize=16)
def _from_header(mail_from: str) -> tuple[str, str]:
    """(envelope sender, the ``From:`` line as compose()'s message puts it on the wire): made
    by the standard library once per sender, since a display name may need encoding."""
    from marketplace.notifications.mailer import WIRE_POLICY

    header = EmailMessage(policy=email.policy.default)
    header["From"] = mail_from
    line = header.as_bytes(policy=WIRE_POLICY).decode("ascii").split("\r\n\r\n")[0]
    address = getaddresses([mail_from])[0][1]
    return address, line


def _composed(
    content: EmailContent,
    mail_from: str,
    preview_chars: int,
    message_id: str,
    now: datetime | None,
    boundary: str,
) -> WireMessage:
    from marketplace.notifications.mailer import wire_format

    message = compose(content, mail_from=mail_from, preview_chars=preview_chars, now=now)
    del message["Message-ID"]
    message["Message-ID"] = message_id
    message.set_boundary(boundary)
    sender, recipients, data = wire_format(message)
    return WireMessage(sender, recipients, data)
