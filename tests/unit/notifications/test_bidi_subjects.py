"""Bidirectional-text controls never reach an e-mail's Subject (issue 27; docs/notifications.md,
"E-mail"): a right-to-left override in a project title or a username is removed where the
subject is made (recipients) and again where the header is written (email)."""

from __future__ import annotations

import email
import email.policy
import uuid
from datetime import UTC, datetime

import pytest

from marketplace.events.types import parse_event
from marketplace.notifications.email import (
    EmailContent,
    compose,
    render,
    sanitize_subject,
    strip_bidi,
)
from marketplace.notifications.recipients import _Lookups, _notification
from marketplace.storage.repositories.notification_deliveries import ProjectParties

BIDI = [
    "\u202a",  # LEFT-TO-RIGHT EMBEDDING
    "\u202b",  # RIGHT-TO-LEFT EMBEDDING
    "\u202c",  # POP DIRECTIONAL FORMATTING
    "\u202d",  # LEFT-TO-RIGHT OVERRIDE
    "\u202e",  # RIGHT-TO-LEFT OVERRIDE
    "\u2066",  # LEFT-TO-RIGHT ISOLATE
    "\u2067",  # RIGHT-TO-LEFT ISOLATE
    "\u2068",  # FIRST STRONG ISOLATE
    "\u2069",  # POP DIRECTIONAL ISOLATE
    "\u200e",  # LEFT-TO-RIGHT MARK
    "\u200f",  # RIGHT-TO-LEFT MARK
    "\u061c",  # ARABIC LETTER MARK
]
ids = [f"U+{ord(c):04X}" for c in BIDI]
PROJECT = "0x" + "ab" * 20
OWNER = uuid.UUID(int=1)
BIDDER = uuid.UUID(int=2)
NOW = datetime(2026, 11, 27, tzinfo=UTC)


def _bid_draft_subject(title: str) -> str:
    event = parse_event(
        7,
        "bid_draft.created",
        f"project:{PROJECT}",
        NOW,
        {
            "draftId": str(uuid.uuid4()),
            "projectAddress": PROJECT,
            "bidderAddress": "0x" + "cd" * 20,
            "draftHash": "0x" + "ee" * 32,
            "userId": str(BIDDER),
        },
    )
    parties = ProjectParties(PROJECT, None, title, OWNER, None)
    notification = _notification(event, _Lookups({PROJECT: parties}, {}))
    assert notification is not None
    return notification.subject


def _dm_subject(username: str) -> str:
    event = parse_event(
        8,
        "dm.message",
        "thread:x",
        NOW,
        {
            "messageId": str(uuid.uuid4()),
            "threadId": str(uuid.uuid4()),
            "senderUserId": str(BIDDER),
            "recipientUserId": str(OWNER),
        },
    )
    notification = _notification(event, _Lookups({}, {BIDDER: username}))
    assert notification is not None
    return notification.subject


def _wire_subject(subject: str) -> str:
    content = EmailContent(
        to="owner@example.com", subject=subject, summary="s", link_url="https://m.example/p"
    )
    wire = render(
        content,
        mail_from="noreply@m.example",
        preview_chars=0,
        message_id="<n.1@m.example>",
        now=NOW,
    )
    parsed = email.message_from_bytes(wire.data, policy=email.policy.default)
    return str(parsed["Subject"])


@pytest.mark.parametrize("char", BIDI, ids=ids)
def test_a_bidi_control_in_a_project_title_does_not_reach_the_subject(char: str) -> None:
    title = f"Invoice {char}fdp.exe"
    subject = _bid_draft_subject(title)
    assert char not in subject
    assert subject == "New bid draft on “Invoice fdp.exe”"
    header = _wire_subject(subject)
    assert header == subject


def test_a_right_to_left_override_in_a_title_does_not_reach_the_subject_header() -> None:
    # A subject stored before the source stripped it is cleaned where the header is written.
    stored = "New bid draft on “Cheap \u202egnp.exe\u202c”"
    header = _wire_subject(stored)
    assert "\u202e" not in header and "\u202c" not in header
    assert header == "New bid draft on “Cheap gnp.exe”"
    composed = compose(
        EmailContent(to="a@example.com", subject=stored, summary="s", link_url="https://m.x/p"),
        mail_from="noreply@m.example",
        preview_chars=0,
    )
    assert str(composed["Subject"]) == header
    # The HTML part's <title> is the same cleaned subject.
    html_part = composed.get_body(("html",))
    assert html_part is not None
    assert "\u202e" not in html_part.get_content()


@pytest.mark.parametrize("char", BIDI, ids=ids)
def test_a_bidi_control_in_a_username_does_not_reach_the_subject(char: str) -> None:
    subject = _dm_subject(f"ali{char}ce")
    assert subject == "New direct message from alice"
    assert _wire_subject(subject) == subject


def test_a_name_of_nothing_but_bidi_controls_falls_back() -> None:
    assert _bid_draft_subject("\u202e\u2066\u200f") == f"New bid draft on project {PROJECT}"
    assert _dm_subject("\u202e\u061c") == "New direct message from a marketplace user"


def test_right_to_left_text_itself_is_kept() -> None:
    title = "\u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627"  # Hebrew and Arabic words
    assert _bid_draft_subject(title) == f"New bid draft on “{title}”"
    assert strip_bidi(f"\u202b{title}\u202c") == title
    assert sanitize_subject("a\u2067b\u2069c\u200ed") == "abcd"
