"""The fast composer (``render``) against the reference (``compose``): for many inputs, the bytes
``render`` writes parse to the same headers, MIME structure and decoded parts as ``compose()``'s
message flattened for the wire; for ASCII headers they are the same bytes."""

from __future__ import annotations

import email
import email.policy
import random
from datetime import UTC, datetime
from email.message import EmailMessage

import pytest

from marketplace.notifications.email import EmailContent, WireMessage, compose, render
from marketplace.notifications.mailer import wire_format

NOW = datetime(2026, 11, 23, 12, 30, 5, tzinfo=UTC)
MESSAGE_ID = "<notification.4b1d6a0e-5f7c-4d8e-9a1b-2c3d4e5f6a7b@market.example>"
BOUNDARY = "=_0123456789abcdef0123456789abcdef"
FROMS = [
    "Marketplace <noreply@market.example>",
    "noreply@market.example",
    "Märkte Plätze <noreply@market.example>",
    '"Market, place" <noreply@market.example>',
]
HEADERS = (
    "From",
    "To",
    "Subject",
    "Date",
    "Message-ID",
    "List-Unsubscribe",
    "List-Unsubscribe-Post",
    "Auto-Submitted",
    "MIME-Version",
)
HOSTILE = [
    "Hi\r\nBcc: victim@example.com\r\n\r\n<b>body</b>\x00\u2028X-Evil: 1",
    '<script>alert("x")</script><a href="https://evil.example">win</a> & more',
    "=?utf-8?q?not_an_encoded_word?= =?iso-8859-1?b?Zm9v?=",
    "--=_0123456789abcdef0123456789abcdef--",
    ".\r\n.\r\nQUIT\r\n",
    "line with trailing spaces   \t",
    "= =3D =\n=",
    "émoji 🎉 mixed ASCII and ünïcödé, 中文, עברית, العربية",
    "\u00a0\u2003non-breaking and em spaces\u2009",
    "x" * 1000,
    "é" * 700,
    "a" * 77 + "é" + "b" * 200,
    "",
    "   ",
]
ALPHABET = (
    "abcdefghijklmnopqrstuvwxyz ABCXYZ 0123456789 .,;:!?=-_/<>&\"'`~@#%()[]{}"
    "\t\r\n\x00\x0b\x7f\x85\u2028éüñøß€中🎉\u00a0"
)


def reference(content: EmailContent, mail_from: str, preview_chars: int) -> bytes:
    message = compose(content, mail_from=mail_from, preview_chars=preview_chars, now=NOW)
    message.replace_header("Message-ID", MESSAGE_ID)  # in place: same header order
    message.set_boundary(BOUNDARY)
    return wire_format(message)[2]


def fast(content: EmailContent, mail_from: str, preview_chars: int) -> WireMessage:
    return render(
        content,
        mail_from=mail_from,
        preview_chars=preview_chars,
        message_id=MESSAGE_ID,
        now=NOW,
        boundary=BOUNDARY,
    )


def parse(data: bytes) -> EmailMessage:
    parsed = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    assert not parsed.defects
    return parsed


def structure(message: EmailMessage) -> list[tuple[str, str | None, str | None]]:
    return [
        (part.get_content_type(), part.get_content_charset(), part.get("Content-Transfer-Encoding"))
        for part in message.walk()
    ]


def assert_same_message(content: EmailContent, mail_from: str, preview_chars: int) -> None:
    want_bytes = reference(content, mail_from, preview_chars)
    got = fast(content, mail_from, preview_chars)
    want, have = parse(want_bytes), parse(got.data)
    for name in HEADERS:
        assert have.get_all(name) == want.get_all(name), name
    assert structure(have) == structure(want)
    for kind in ("plain", "html"):
        want_part, have_part = want.get_body((kind,)), have.get_body((kind,))
        assert want_part is not None and have_part is not None
        assert have_part.get_content() == want_part.get_content(), kind
    sender, recipients, _ = wire_format(compose(content, mail_from=mail_from, preview_chars=1))
    assert (got.sender, got.recipients) == (sender, recipients)
    assert all(len(line) <= 998 for line in got.data.split(b"\r\n"))
    assert got.data.endswith(b"\r\n") and b"\n" not in got.data.replace(b"\r\n", b"")
    # compose() decodes what looks like an encoded word in a subject before writing it (render
    # writes it as it is; it parses the same, as checked above), so bytes differ only there.
    if mail_from.isascii() and str(want["Subject"]).isascii() and "=?" not in content.subject:
        assert got.data == want_bytes


def content(
    *,
    subject: str = "New message from alice",
    summary: str = "alice sent you a direct message.",
    label: str = "Open the conversation",
    preview: str | None = "Hello Bob, are you free tomorrow?",
    unsubscribe: str | None = "https://market.example/v1/notifications/unsubscribe?token=abc",
    link: str = "https://market.example/messages/1",
    to: str = "bob@example.com",
) -> EmailContent:
    return EmailContent(
        to=to,
        subject=subject,
        summary=summary,
        link_url=link,
        link_label=label,
        preview=preview,
        unsubscribe_url=unsubscribe,
    )


@pytest.mark.parametrize("mail_from", FROMS)
@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_in_every_field_gives_the_same_message(mail_from: str, text: str) -> None:
    for preview_chars in (0, 20, 140, 5000):
        assert_same_message(content(subject=text), mail_from, preview_chars)
        assert_same_message(
            content(preview=text, summary=text, label=text), mail_from, preview_chars
        )


@pytest.mark.parametrize("unsubscribe", [None, "https://m.example/u?token=" + "t" * 800])
@pytest.mark.parametrize("preview", [None, "", "short", "é" * 300])
def test_optional_parts_give_the_same_message(unsubscribe: str | None, preview: str | None) -> None:
    assert_same_message(
        content(unsubscribe=unsubscribe, preview=preview, link="https://m.example/" + "p" * 850),
        FROMS[0],
        140,
    )


def test_random_texts_give_the_same_message() -> None:
    rng = random.Random(13)

    def text(longest: int) -> str:
        return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, longest)))

    for _ in range(150):
        assert_same_message(
            content(subject=text(400), summary=text(300), label=text(60), preview=text(600)),
            rng.choice(FROMS),
            rng.choice((0, 1, 140, 1000)),
        )


def test_a_non_ascii_subject_is_written_as_short_encoded_words() -> None:
    data = fast(content(subject="ünïcödé " * 60), FROMS[0], 140).data
    header, _, _ = data.partition(b"\r\n\r\n")
    subject = [line for line in header.split(b"\r\n") if line.startswith((b"Subject:", b" "))]
    assert len(subject) > 1
    assert all(len(line) <= 78 for line in subject)
    assert parse(data)["Subject"] == ("ünïcödé " * 60).strip()[:299] + "…"


def test_the_same_checks_refuse_bad_input() -> None:
    for bad in (content(to="not-an-address"), content(link="javascript:alert(1)")):
        with pytest.raises(ValueError, match="not an"):
            fast(bad, FROMS[0], 140)
    with pytest.raises(ValueError, match="Message-ID"):
        render(content(), mail_from=FROMS[0], preview_chars=1, message_id="<a@b>\r\nBcc: x@y")


def test_each_message_gets_its_own_boundary_unless_given() -> None:
    one = render(content(), mail_from=FROMS[0], preview_chars=140, message_id=MESSAGE_ID)
    two = render(content(), mail_from=FROMS[0], preview_chars=140, message_id=MESSAGE_ID)
    assert parse(one.data).get_boundary() != parse(two.data).get_boundary()
