"""A page on another origin uses the API from a real Chromium (docs/security.md "Browsers (CORS)").

The app serves a real TCP port with MARKETPLACE_CORS_ORIGINS naming the origin of a small page
that a second aiohttp server serves on another port. The page's own script lists projects,
calls a signed-in route with a bearer token, reads an error answer, asks for a stream ticket and
opens the live stream with the browser's native ``EventSource``; a chat message another user
sends over HTTP (from the test, not the browser) shows in the page within a second. A page from
an origin that is not listed cannot read the API's answers.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from aiohttp import web

from tests.api.messaging.conftest import post_chat, project_with_worker
from tests.conftest import Servers
from tests.support.apps import AppFactory
from tests.support.browser import CHROMIUM_ARGS, chromium_path

# The page: a client as a web app on another origin would write it, with nothing but fetch and
# EventSource. `connect` resolves once the stream is open; chat messages the stream announces
# are read by id and listed in #chat.
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cross-origin client</title></head>
<body>
<ul id="chat"></ul>
<pre id="log"></pre>
<script>
"use strict";
const log = (line) => { document.getElementById("log").textContent += line + "\\n"; };

async function connect(api, token) {
  const seen = {};
  const auth = {Authorization: "Bearer " + token};

  const projects = await fetch(api + "/v1/projects");
  seen.projects = {
    status: projects.status,
    count: (await projects.json()).items.length,
    requestId: projects.headers.get("x-request-id"),
  };

  const permissions = await fetch(api + "/v1/auth/permissions", {headers: auth});
  seen.permissions = {status: permissions.status, body: await permissions.json()};

  const anonymous = await fetch(api + "/v1/auth/permissions");
  seen.anonymous = {status: anonymous.status, body: await anonymous.json()};

  const issued = await fetch(api + "/v1/stream/tickets", {
    method: "POST",
    headers: {...auth, "Content-Type": "application/json"},
    body: "{}",
  });
  const ticket = await issued.json();
  seen.ticket = {status: issued.status, expiresAt: ticket.expiresAt};

  const source = new EventSource(api + "/v1/stream?ticket=" + encodeURIComponent(ticket.ticket));
  window.stream = source;
  source.addEventListener("chat.message", async (event) => {
    const {payload} = JSON.parse(event.data);
    log("event " + event.lastEventId + " chat.message " + payload.messageId);
    const answer = await fetch(
      api + "/v1/projects/" + payload.projectAddress + "/chat/messages?limit=20",
      {headers: auth},
    );
    for (const message of (await answer.json()).items) {
      if (message.id === payload.messageId) {
        const item = document.createElement("li");
        item.textContent = message.body;
        document.getElementById("chat").append(item);
      }
    }
  });
  await new Promise((resolve, reject) => {
    source.onopen = resolve;
    source.onerror = () => reject(new Error("the stream did not open: " + source.readyState));
  });
  seen.streamState = source.readyState;
  return seen;
}

async function tryRead(url) {
  try {
    const answer = await fetch(url);
    return "read " + answer.status + " " + (await answer.text()).length;
  } catch (error) {
    return "rejected: " + error.name;
  }
}
</script>
</body></html>
"""


def page_app() -> web.Application:
    async def index(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", index)
    return app


@pytest.fixture
async def db(servers: Servers) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(servers.database_url)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.mark.slow
@pytest.mark.timeout(300)  # a browser on a loaded 2-core machine: seconds per step
async def test_page_on_a_listed_origin_uses_the_api_and_its_live_stream(
    make_client: AppFactory, aiohttp_server: Any, db: asyncpg.Connection
) -> None:
    from playwright.async_api import async_playwright

    listed = await aiohttp_server(page_app())
    unlisted = await aiohttp_server(page_app())
    page_origin = str(listed.make_url("/")).rstrip("/")
    other_origin = str(unlisted.make_url("/")).rstrip("/")
    client = await make_client(cors_origins=page_origin)
    api = str(client.make_url("/")).rstrip("/")
    assert len({api, page_origin, other_origin}) == 3  # three ports: three origins
    project = await project_with_worker(client, db)
    owner = project.owner

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_ARGS
        )
        try:
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.goto(page_origin + "/")
            token = owner.user.token
            seen = await page.evaluate("([api, token]) => connect(api, token)", [api, token])

            assert seen["projects"]["status"] == 200
            assert seen["projects"]["count"] >= 1  # the seeded project is open and listed
            assert seen["projects"]["requestId"]  # exposed to the page
            assert seen["permissions"]["status"] == 200
            assert seen["permissions"]["body"]["userId"] == str(owner.user.user_id)
            # Error answers are readable too: the page can branch on the code.
            assert seen["anonymous"]["status"] == 401
            assert seen["anonymous"]["body"]["error"] == "unauthorized"
            assert seen["ticket"]["status"] == 201 and seen["ticket"]["expiresAt"]
            assert seen["streamState"] == 1  # EventSource.OPEN

            # Another user (the selected worker) sends over HTTP, not from the browser.
            text = "sent by the worker, seen in the owner's browser"
            resp = await post_chat(client, project.worker, project.address, text)
            assert resp.status == 201, await resp.text()
            sent = time.monotonic()
            await page.locator("#chat li", has_text=text).wait_for(timeout=1000)
            assert time.monotonic() - sent < 1.0
            assert await page.locator("#chat li").all_inner_texts() == [text]

            # The listed page reads the API; a page of another origin gets nothing to read.
            assert (await page.evaluate("(url) => tryRead(url)", api + "/v1/projects")).startswith(
                "read 200 "
            )
            other = await browser.new_page()
            await other.goto(other_origin + "/")
            for path in ("/v1/projects", "/v1/auth/permissions", "/v1/no-such-route"):
                outcome = await other.evaluate("(url) => tryRead(url)", api + path)
                assert outcome == "rejected: TypeError", (path, outcome)
            # Nor may it send credentials: the preflight of a bearer call is refused.
            refused = await other.evaluate(
                """([api, token]) => fetch(api + "/v1/auth/permissions",
                       {headers: {Authorization: "Bearer " + token}})
                   .then((r) => "read " + r.status, (e) => "rejected: " + e.name)""",
                [api, token],
            )
            assert refused == "rejected: TypeError"
            assert errors == []
        finally:
            await browser.close()
