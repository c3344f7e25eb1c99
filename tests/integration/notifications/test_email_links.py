"""Every link a notification e-mail contains leads somewhere (docs/notifications.md, "Links").

Each event type that sends e-mail (direct message, project chat, bid draft, dispute evidence) is
produced through the real routes, consumed, and sent by the `notifications` worker with the
production SMTP sender to a real SMTP server; the delivered messages are parsed and every http(s)
link in them (text part, HTML part, `List-Unsubscribe`) is requested from the app:

- without ``MARKETPLACE_PUBLIC_APP_URL``, each link is an API resource that answers its
  recipient, with the recipient's token, 200 and shows what the e-mail is about; the unsubscribe
  link answers `GET` (the confirmation page) and the one-click `POST` with 200, no credentials;
- with it, the links open the web app's pages of the documented templates, and the unsubscribe
  link still goes to the API (mail clients post to it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.message import EmailMessage
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from marketplace.notifications.unsubscribe import UNSUBSCRIBE_PATH
from tests.api.messaging.conftest import chat_message, dm, project_with_worker
from tests.api.records.conftest import HASH_A, Party, linked_party, seed_dispute, seed_project
from tests.conftest import Servers
from tests.integration.notifications.conftest import Pipeline, deliveries, set_email
from tests.integration.notifications.test_email_delivery import BASE_URL, settled, smtp_worker
from tests.support.smtp import SmtpTestServer
from tests.support.waiting import eventually

APP_URL = "https://app.example/market"
# A URL anywhere in a text: up to whitespace, a quote or an angle bracket.
URL = re.compile(r"https?://[^\s<>\"']+")


@dataclass(frozen=True)
class Sent:
    """What the four events were about, and who gets each e-mail."""

    chat_project: str
    chat_message_id: str
    thread_id: str
    dm_id: str
    disputed: str
    bidding: str
    # Recipient address -> the party it belongs to.
    parties: dict[str, Party]


async def send_one_of_each(client: Any, db: asyncpg.Connection, pipeline: Pipeline) -> Sent:
    project = await project_with_worker(client, db, bidding_access="invite_only")
    owner, worker = project.owner, project.worker
    parties = {await set_email(db, owner): owner, await set_email(db, worker): worker}
    chat = await chat_message(client, owner, project.address, "the milestone is up")
    direct = await dm(client, worker, owner, "can we talk about the scope?")
    # Invite-only projects: only their parties can read them, which the recipients are.
    disputed = await seed_dispute(
        db, owner.address, worker.address, milestone=1, bidding_access="invite_only"
    )
    resp = await client.post(
        f"/v1/projects/{disputed}/dispute-evidence",
        json={"evidenceHash": HASH_A},
        headers=worker.headers,
    )
    assert resp.status == 201, await resp.text()
    bidder = await linked_party(client)
    bidding = await seed_project(db, owner_address=owner.lower)
    resp = await client.post(
        f"/v1/projects/{bidding}/bid-drafts",
        json={"bidderWalletAddress": bidder.address, "draftHash": HASH_A},
        headers=bidder.headers,
    )
    assert resp.status == 200, await resp.text()
    assert await pipeline.consume() == 4
    return Sent(
        project.address,
        chat["id"],
        direct["threadId"],
        direct["id"],
        disputed,
        bidding,
        parties,
    )


class _Hrefs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.hrefs += [value for name, value in attrs if name in ("href", "src") and value]


def links_of(message: EmailMessage) -> tuple[list[str], list[str]]:
    """(every URL of the text part, every URL of the HTML part: its hrefs and any URL in its
    text), in order; the `List-Unsubscribe` URL is checked against them by the caller."""
    text_part, html_part = message.get_body(("plain",)), message.get_body(("html",))
    assert text_part is not None and html_part is not None
    text, html = text_part.get_content(), html_part.get_content()
    parser = _Hrefs()
    parser.feed(html)
    in_html = list(dict.fromkeys([*parser.hrefs, *URL.findall(html)]))
    return URL.findall(text), in_html


async def delivered(
    db: asyncpg.Connection, servers: Servers, smtp: SmtpTestServer, **settings: Any
) -> dict[str, EmailMessage]:
    """The four e-mails, by event type, once the worker has sent them all."""
    async with smtp_worker(servers, smtp, **settings):
        await eventually(lambda: settled(db), within=30, what="deliveries sent")
    rows = await deliveries(db)
    assert [r["status"] for r in rows] == ["sent"] * 4
    by_id = {str(r["id"]): r["event_type"] for r in rows}
    messages = {}
    for item in smtp.wait_for(4):
        match = re.match(r"<notification\.([0-9a-f-]{36})@", item.message["Message-ID"])
        assert match is not None, item.message["Message-ID"]
        messages[by_id[match.group(1)]] = item.message
    assert len(messages) == 4
    return messages


def unsubscribe_link(message: EmailMessage) -> str:
    header = message["List-Unsubscribe"]
    assert header.startswith("<") and header.endswith(">"), header
    link = header[1:-1]
    assert link.startswith(f"{BASE_URL}{UNSUBSCRIBE_PATH}?token=u1.")
    return link


async def follow(client: Any, link: str, party: Party) -> Any:
    """``GET`` of an API link of an e-mail from the app, with the recipient's token."""
    assert link.startswith(f"{BASE_URL}/v1/"), link
    resp = await client.get(link[len(BASE_URL) :], headers=party.headers)
    assert resp.status == 200, (link, resp.status, await resp.text())
    return await resp.json()


async def unsubscribe_works(client: Any, link: str) -> None:
    """The unsubscribe link as documented: `GET` shows the confirmation page, the one-click
    `POST` (no credentials) unsubscribes."""
    path = link[len(BASE_URL) :]
    page = await client.get(path, headers={"Accept": "text/html"})
    assert page.status == 200, await page.text()
    assert "<form method=post" in await page.text()
    done = await client.post(path, data={"List-Unsubscribe": "One-Click"})
    assert done.status == 200, await done.text()
    assert (await done.json())["email"] is False


async def test_every_link_of_every_email_answers_its_recipient(
    client: Any,
    db: asyncpg.Connection,
    pipeline: Pipeline,
    servers: Servers,
    smtp_server: SmtpTestServer,
) -> None:
    sent = await send_one_of_each(client, db, pipeline)
    messages = await delivered(db, servers, smtp_server)
    expected = {
        "direct_message": f"{BASE_URL}/v1/messages/dm/threads/{sent.thread_id}/messages",
        "project_chat_message": f"{BASE_URL}/v1/projects/{sent.chat_project}/chat/messages",
        "dispute_evidence": f"{BASE_URL}/v1/projects/{sent.disputed}",
        "bid_draft": f"{BASE_URL}/v1/projects/{sent.bidding}",
    }
    for event_type, message in messages.items():
        party = sent.parties[message["To"]]
        text_links, html_links = links_of(message)
        unsubscribe = unsubscribe_link(message)
        # The link of its kind and the unsubscribe link, in both parts, and nothing else.
        assert text_links == html_links == [expected[event_type], unsubscribe], event_type
        read = await follow(client, expected[event_type], party)
        # What the recipient lands on is what the e-mail was about.
        if event_type == "direct_message":
            assert [m["id"] for m in read["items"]] == [sent.dm_id]
        elif event_type == "project_chat_message":
            assert [m["id"] for m in read["items"]] == [sent.chat_message_id]
        else:
            assert read["projectAddress"].lower() == expected[event_type].rsplit("/", 1)[1]
        await unsubscribe_works(client, unsubscribe)
    # Each unsubscribe link turned off its own type for its own recipient.
    rows = await db.fetch("SELECT user_id, event_type, email FROM notification_preferences")
    assert {(r["user_id"], r["event_type"], r["email"]) for r in rows} == {
        (sent.parties[m["To"]].user.user_id, t, False) for t, m in messages.items()
    }


async def test_with_a_public_app_url_links_open_the_apps_pages(
    client: Any,
    db: asyncpg.Connection,
    pipeline: Pipeline,
    servers: Servers,
    smtp_server: SmtpTestServer,
) -> None:
    sent = await send_one_of_each(client, db, pipeline)
    # A trailing slash is dropped, as for the public base URL.
    messages = await delivered(db, servers, smtp_server, public_app_url=f"{APP_URL}/")
    expected = {
        "direct_message": f"{APP_URL}/messages/{sent.thread_id}",
        "project_chat_message": f"{APP_URL}/projects/{sent.chat_project}/chat",
        "dispute_evidence": f"{APP_URL}/projects/{sent.disputed}",
        "bid_draft": f"{APP_URL}/projects/{sent.bidding}",
    }
    for event_type, message in messages.items():
        text_links, html_links = links_of(message)
        unsubscribe = unsubscribe_link(message)
        assert text_links == html_links == [expected[event_type], unsubscribe], event_type
        assert urlsplit(expected[event_type]).netloc == "app.example"
        # The one-click target stays the API's: mail clients post to it, not to the app.
        await unsubscribe_works(client, unsubscribe)
