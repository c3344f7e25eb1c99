"""Composing notification e-mails: both parts, headers, previews, and hostile user content."""

from __future__ import annotations

import email
import email.policy
from datetime import UTC, datetime
from email.message import EmailMessage

import pytest

from marketplace.notifications.email import (
    MAX_SUBJECT_CHARS,
    EmailContent,
    compose,
    make_preview,
    one_line,
)
from marketplace.notifications.mailer import wire_format

FROM = "Marketplace <noreply@market.example>"
LINK = "https://market.example/projects/0xabc"
UNSUBSCRIBE = "https://market.example/v1/notifications/unsubscribe?token=" + "t" * 300


def content(**overrides: object) -> EmailContent:
    values: dict[str, object] = {
        "to": "bob@example.com",
        "subject": "New message from alice",
        "summary": "alice sent you a direct message.",
        "link_url": LINK,
        "link_label": "Open the conversation",
        "preview": "Hello Bob, are you free tomorrow?",
        "unsubscribe_url": UNSUBSCRIBE,
    }
    values.update(overrides)
    return EmailContent(**values)  # type: ignore[arg-type]


def on_the_wire(message: EmailMessage) -> EmailMessage:
    """The message as a recipient's server receives and parses it."""
    _, _, data = wire_format(message)
    parsed = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    return parsed


def parts(message: EmailMessage) -> tuple[str, str]:
    text = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert text is not None and html is not None
    return text.get_content(), html.get_content()


def test_a_message_has_text_and_html_parts_with_the_link_and_preview() -> None:
    message = on_the_wire(compose(content(), mail_from=FROM, preview_chars=140))
    assert message.get_content_type() == "multipart/alternative"
    text, html = parts(message)
    assert "alice sent you a direct message." in text
    assert "> Hello Bob, are you free tomorrow?" in text
    assert f"Open the conversation: {LINK}" in text
    assert f'<a href="{LINK}">Open the conversation</a>' in html
    assert "Hello Bob, are you free tomorrow?</blockquote>" in html


def test_headers_name_sender_recipient_subject_date_and_message_id() -> None:
    now = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    message = on_the_wire(compose(content(), mail_from=FROM, preview_chars=140, now=now))
    assert message["From"] == FROM
    assert message["To"] == "bob@example.com"
    assert message["Subject"] == "New message from alice"
    assert message["Date"].datetime == now
    message_id = message["Message-ID"]
    assert message_id.startswith("<") and message_id.endswith("@market.example>")
    assert message["Auto-Submitted"] == "auto-generated"
    other = compose(content(), mail_from=FROM, preview_chars=140)
    assert other["Message-ID"] != message_id


def test_one_click_unsubscribe_headers_survive_the_wire_unfolded() -> None:
    message = on_the_wire(compose(content(), mail_from=FROM, preview_chars=140))
    # Not split into RFC 2047 encoded words, even though the URL is over 300 characters.
    assert message["List-Unsubscribe"] == f"<{UNSUBSCRIBE}>"
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    text, html = parts(message)
    assert UNSUBSCRIBE in text
    assert f'href="{UNSUBSCRIBE}"' in html


def test_without_an_unsubscribe_url_there_is_no_list_unsubscribe() -> None:
    message = compose(content(unsubscribe_url=None), mail_from=FROM, preview_chars=140)
    assert "List-Unsubscribe" not in message and "List-Unsubscribe-Post" not in message


def test_the_preview_is_cut_to_the_configured_length_with_an_ellipsis() -> None:
    body = "word " * 100
    message = on_the_wire(compose(content(preview=body), mail_from=FROM, preview_chars=20))
    text, html = parts(message)
    assert "> word word word word…" in text.splitlines()
    assert "word word word word…</blockquote>" in html
    assert make_preview("x" * 30, 20) == "x" * 20 + "…"
    assert make_preview("short", 20) == "short"
    assert make_preview("line one\nline two", 140) == "line one line two"
    assert make_preview("   ", 140) is None


def test_preview_chars_zero_disables_the_preview() -> None:
    message = on_the_wire(compose(content(), mail_from=FROM, preview_chars=0))
    text, html = parts(message)
    assert "are you free" not in text and "are you free" not in html
    assert "<blockquote" not in html


def test_user_content_is_escaped_in_html() -> None:
    evil = '<script>alert("x")</script><a href="https://evil.example">win</a> & more'
    message = on_the_wire(
        compose(
            content(summary=f"{evil} sent you a message.", preview=evil, subject=evil),
            mail_from=FROM,
            preview_chars=500,
        )
    )
    text, html = parts(message)
    assert "<script>" not in html and 'evil.example"' not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "&amp; more" in html
    assert html.count("<a href=") == 2  # ours: the link and the unsubscribe link
    assert evil in text  # plain text needs no escaping


def test_header_injection_through_the_subject_is_neutralised() -> None:
    subject = "Hi\r\nBcc: victim@example.com\r\n\r\n<b>body</b>\x00\u2028X-Evil: 1"
    message = on_the_wire(compose(content(subject=subject), mail_from=FROM, preview_chars=140))
    assert message["Bcc"] is None and message["X-Evil"] is None
    assert message["Subject"] == "Hi Bcc: victim@example.com <b>body</b> X-Evil: 1"
    _, _, data = wire_format(compose(content(subject=subject), mail_from=FROM, preview_chars=1))
    assert b"\r\nBcc:" not in data and b"\r\nX-Evil:" not in data


def test_subjects_are_bounded_to_300_characters() -> None:
    message = compose(content(subject="é" * 1000), mail_from=FROM, preview_chars=140)
    subject = on_the_wire(message)["Subject"]
    assert len(subject) == MAX_SUBJECT_CHARS and subject.endswith("…")
    assert one_line("  a \t b\n", 10) == "a b"


@pytest.mark.parametrize(
    "to", ["bob@example.com\r\nBcc: x@y.example", "not-an-address", "Bob <bob@example.com>", ""]
)
def test_a_bad_recipient_address_is_refused(to: str) -> None:
    with pytest.raises(ValueError, match=r"e-mail address|control characters"):
        compose(content(to=to), mail_from=FROM, preview_chars=140)


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "/relative/path",
        "https://market.example/x\r\nBcc: y@z.example",
        'https://market.example/"onmouseover="x',
        "https://market.example/<x>",
        "https://market.example/" + "a" * 1000,
    ],
)
def test_unusable_links_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="not an absolute http"):
        compose(content(link_url=url), mail_from=FROM, preview_chars=140)
    with pytest.raises(ValueError, match="not an absolute http"):
        compose(content(unsubscribe_url=url), mail_from=FROM, preview_chars=140)


def test_the_wire_format_drops_bcc_and_keeps_the_callers_message() -> None:
    message = compose(content(), mail_from=FROM, preview_chars=140)
    message["Bcc"] = "audit@market.example"
    sender, recipients, data = wire_format(message)
    assert sender == "noreply@market.example"
    assert recipients == ["bob@example.com", "audit@market.example"]
    assert b"audit@market.example" not in data
    assert message["Bcc"] == "audit@market.example"
    assert max(len(line) for line in data.split(b"\r\n")) <= 998


def test_every_flattening_gives_the_same_bytes() -> None:
    message = compose(content(), mail_from=FROM, preview_chars=140)
    assert wire_format(message)[2] == wire_format(message)[2]
