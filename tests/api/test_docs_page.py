"""The API reference page: Swagger UI served by this server from the swagger-ui-bundle wheel."""

from __future__ import annotations

import gzip
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from swagger_ui_bundle import swagger_ui_path

from tests.support.browser import CHROMIUM_ARGS, chromium_path

IMMUTABLE = "public, max-age=31536000, immutable"
# Any absolute URL in the page: the page must name none (no CDN, no hosted validator).
EXTERNAL_URL = re.compile(r"(?:https?:)?//[A-Za-z0-9.-]+", re.IGNORECASE)


def asset_urls(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="(/v1/docs/static/[^"]+)"', html)


async def test_docs_page_is_swagger_ui_on_the_document(client: Any) -> None:
    resp = await client.get("/v1/docs")
    assert resp.status == 200
    assert resp.content_type == "text/html"
    assert resp.headers["Cache-Control"] == "no-cache"
    csp = resp.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp
    html = await resp.text()
    assert EXTERNAL_URL.findall(html) == []
    assert '<div id="swagger-ui"></div>' in html
    # Without JavaScript the page still says where the description is.
    noscript = html[html.index("<noscript>") : html.index("</noscript>")]
    assert 'href="/v1/openapi.json"' in noscript and "docs/hashes.md" in noscript
    urls = asset_urls(html)
    version = swagger_ui_path.name
    assert f"/v1/docs/static/{version}/swagger-ui-bundle.js" in urls
    assert f"/v1/docs/static/{version}/swagger-ui.css" in urls
    own = [u for u in urls if u.endswith("/docs.js")]
    assert len(own) == 1
    assert re.fullmatch(r"/v1/docs/static/marketplace-[0-9a-f]{16}/docs\.js", own[0])
    script = await (await client.get(own[0])).text()
    assert 'url: "/v1/openapi.json"' in script
    # Our search replaces Swagger UI's tag-name filter.
    assert "opsFilter: searchOperations" in script and "filter: true" in script
    assert "persistAuthorization: true" in script and "validatorUrl: null" in script
    assert EXTERNAL_URL.findall(script) == []


async def test_every_asset_of_the_page_is_served_with_a_long_cache(client: Any) -> None:
    html = await (await client.get("/v1/docs")).text()
    expected_types = {
        ".js": "text/javascript",
        ".css": "text/css",
        ".png": "image/png",
    }
    urls = asset_urls(html)
    assert len(urls) == 5
    for url in urls:
        resp = await client.get(url, headers={"Accept-Encoding": "identity"})
        assert resp.status == 200, url
        suffix = url[url.rfind(".") :]
        assert resp.content_type == expected_types[suffix], url
        assert resp.headers["Cache-Control"] == IMMUTABLE, url
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert "Content-Encoding" not in resp.headers
        body = await resp.read()
        assert len(body) > 100, url
        if url.startswith(f"/v1/docs/static/{swagger_ui_path.name}/"):
            name = url.rsplit("/", 1)[1]
            assert body == (swagger_ui_path / name).read_bytes(), url


async def test_text_assets_are_gzipped_for_clients_that_accept_it(client: Any) -> None:
    url = f"/v1/docs/static/{swagger_ui_path.name}/swagger-ui-bundle.js"
    resp = await client.get(url, headers={"Accept-Encoding": "gzip"}, auto_decompress=False)
    assert resp.status == 200
    assert resp.headers["Content-Encoding"] == "gzip"
    assert resp.headers["Vary"] == "Accept-Encoding"
    compressed = await resp.read()
    original = (swagger_ui_path / "swagger-ui-bundle.js").read_bytes()
    assert gzip.decompress(compressed) == original
    assert len(compressed) < len(original) / 2


async def test_unknown_assets_and_versions_are_json_404s(client: Any) -> None:
    version = swagger_ui_path.name
    for url in (
        f"/v1/docs/static/{version}/index.html",  # in the wheel, but not one the page uses
        f"/v1/docs/static/{version}/..%2F..%2F__init__.py",
        "/v1/docs/static/swagger-ui-0.0.1/swagger-ui.css",  # an old version is gone, not aliased
        "/v1/docs/static/marketplace-0000000000000000/docs.js",
    ):
        resp = await client.get(url)
        assert resp.status == 404, url
        assert (await resp.json())["error"] == "not_found"


# --- what the document says ---------------------------------------------------------------------

# A file of this repository (`docs/claims.md`), not a URL path (`/v1/docs/static/`).
HEADINGS = (
    "**Implemented**",
    "**Partly implemented**",
    "**Still to come**",
    "**Beyond the spec**",
)
REPOSITORY_PATH = re.compile(
    r"(?<![/\w])(?:docs|marketplace|tests|scripts)/[\w./-]+|\b[\w-]+\.(?:md|py)\b"
)


def all_error_codes_in_the_code() -> set[str]:
    """The code of every error class the package defines (imported module by module)."""
    import importlib
    import pkgutil

    import marketplace
    from marketplace.errors import MarketplaceError
    from marketplace.storage.migrations import MigrationError

    for module in pkgutil.walk_packages(marketplace.__path__, "marketplace."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    codes: set[str] = set()
    pending = [MarketplaceError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        # MigrationError refuses to start the server and is never an answer; tests define
        # classes of their own; the verifier runtime (`marketplace verifier serve`) is another
        # service whose one route this document does not describe (docs/verifier.md).
        if (
            cls is not MigrationError
            and cls.__module__.startswith("marketplace.")
            and cls.__module__ != "marketplace.http.verifier_runtime"
        ):
            codes.update(getattr(cls, "documented_codes", (cls.code,)))
    return codes


async def openapi(client: Any) -> dict[str, Any]:
    resp = await client.get("/v1/openapi.json")
    assert resp.status == 200
    doc: dict[str, Any] = await resp.json()
    return doc


async def test_introduction_explains_credentials_guards_errors_and_what_is_served(
    client: Any,
) -> None:
    doc = await openapi(client)
    intro = doc["info"]["description"]
    # Shown at once: credentials, the order of checks and errors; the rest is folded away.
    shown = intro[: intro.index("<details>")]
    for text in (
        "`Authorization: Bearer <session JWT>`",
        "`x-agent-api-key: <key>`",
        "`Authorization: Bearer <scheduler secret>`",
        "`principal_mismatch`",
        "403 `email_not_verified`",
        "403 `legal_acceptance_required`",
        "before anything in the request is validated",
        '{"error": "<machine code>", "message": "<human-readable text>"}',
        "`Retry-After`",
        "`x-request-id`",
    ):
        assert text in shown, text
    assert len(shown) < 4000
    for summary in (
        "All error codes",
        "What is implemented",
        "Retries, idempotency and rate limits",
        "Browsers on other origins (CORS)",
    ):
        assert f"<summary>{summary}</summary>" in intro, summary
    assert intro.count("<details>") == intro.count("</details>") == 4
    assert "`Idempotency-Key`" in intro and "`MARKETPLACE_CORS_ORIGINS`" in intro
    assert REPOSITORY_PATH.findall(intro) == []
    # The guard order stated there is the order the adapter runs.
    assert (
        intro.index("verified e-mail address")
        < intro.index("then legal assent")
        < intro.index("sending not suspended")
        < intro.index("validation of path")
    )

    def section(title: str) -> str:
        """The intro's part under ``title``, up to the next bold heading (empty if absent)."""
        if title not in intro:
            return ""
        start = intro.index(title) + len(title)
        following = [intro.index(t, start) for t in HEADINGS if t in intro[start:]]
        return intro[start : min(following, default=len(intro))]

    implemented = section("**Implemented**")
    partial = section("**Partly implemented**")
    to_come = section("**Still to come**")
    beyond = section("**Beyond the spec**")
    for area in (
        "Identity: wallet links",
        "Legal assent",
        "Projects",
        "Project creation",
        "Records",
        "Moderation",
        "Messaging",
        "Live event stream",
        "Notifications",
        "Verifier jobs",
    ):
        assert area in implemented, area
    # Leaderboards: implemented, or partly while its boards are not served.
    assert "Leaderboards" in implemented + partial
    served = {f"`{method.upper()} {path}`" for path, ops in doc["paths"].items() for method in ops}
    for unserved in (to_come, partial):
        listed = set(re.findall(r"`[A-Z]+ /v1/[^`]*`", unserved))
        assert not listed & served, listed & served
    assert "`DELETE /v1/projects/create-intents/{intentId}`" in beyond
    assert "`GET /v1/verifier/jobs`" not in to_come + partial


async def test_every_operation_has_its_rules_and_credentials(client: Any) -> None:
    doc = await openapi(client)
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            text = operation["description"]
            rules, _, credentials = text.partition("**Credentials:**")
            assert len(rules.strip()) > 40, (method, path)
            assert credentials.strip(), (method, path)
            assert ("**Guarded mutation:**" in text) is operation.get("x-guarded", False)
            assert REPOSITORY_PATH.findall(text) == [], (method, path)


async def test_error_examples_cover_every_code_the_code_can_answer(client: Any) -> None:
    doc = await openapi(client)
    schema = doc["components"]["schemas"]["ErrorResponse"]
    examples = {example["error"]: example for example in schema["examples"]}
    assert len(examples) == len(schema["examples"])
    assert all(e["message"] for e in examples.values())
    assert examples["invalid_request"]["details"][0]["location"] == "body"
    assert examples["legal_acceptance_required"]["missing"][0]["documentType"]
    # Every class's code, so an error class nobody declared on a route fails here.
    assert all_error_codes_in_the_code() <= set(examples)
    table = doc["info"]["description"]
    for code in examples:
        assert f"| `{code}` |" in table, code
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if int(status) < 400:
                    continue
                listed = re.findall(r"`([a-z_]+)`", response["description"])
                media = response["content"]["application/json"]
                assert list(media["examples"]) == listed, (method, path, status)
                for code, example in media["examples"].items():
                    assert example["value"]["error"] == code
                    assert code in examples, code


def documented_400(operation: dict[str, Any]) -> dict[str, Any]:
    media = operation["responses"]["400"]["content"]["application/json"]
    value: dict[str, Any] = media["examples"]["invalid_request"]["value"]
    return value


async def test_400_examples_are_what_the_server_answers(client: Any) -> None:
    """The documented 400 of an operation is the answer to its own example with one field
    broken: a required body field left out (the chat send, a guarded mutation; a wallet-link
    challenge), a malformed path parameter."""
    from tests.conftest import make_token

    doc = await openapi(client)
    session = {"Authorization": f"Bearer {make_token()}"}
    for path in ("/v1/projects/{projectAddress}/chat/messages", "/v1/wallet-links/challenge"):
        operation = doc["paths"][path]["post"]
        expected = documented_400(operation)
        (detail,) = expected["details"]
        assert detail["type"] == "missing"
        body = dict(operation["requestBody"]["content"]["application/json"]["example"])
        del body[detail["field"]]
        url, headers = path, dict(session)
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "path":
                url = url.replace("{" + parameter["name"] + "}", parameter["example"])
            elif parameter["in"] == "header" and parameter["required"]:
                headers[parameter["name"]] = parameter["example"]
        resp = await client.post(url, json=body, headers=headers)
        assert resp.status == 400, (path, await resp.text())
        assert await resp.json() == expected, path
    revoke = doc["paths"]["/v1/wallet-links/{walletAddress}"]["delete"]
    expected = documented_400(revoke)
    assert expected["details"][0]["location"] == "path"
    resp = await client.delete("/v1/wallet-links/not-a-valid-value", headers=session)
    assert resp.status == 400
    assert await resp.json() == expected


async def test_declared_codes_are_the_ones_answered(client: Any) -> None:
    doc = await openapi(client)
    responses = doc["paths"]["/v1/projects/create-intents/{intentId}"]["delete"]["responses"]
    assert responses["409"]["description"] == "error codes: `project_create_intent_not_pending`"
    assert responses["404"]["description"] == "error codes: `project_create_intent_not_found`"
    patch = doc["paths"]["/v1/projects/{projectAddress}/metadata"]["patch"]["responses"]
    assert patch["404"]["description"] == "error codes: `project_not_found`"
    # The 404 the PATCH really answers for a project that is not indexed.
    from tests.conftest import make_token

    token = make_token()
    resp = await client.patch(
        "/v1/projects/0x" + "ab" * 20 + "/metadata",
        json={"title": "t"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert resp.status == 404
    assert (await resp.json())["error"] == "project_not_found"


async def test_claim_operation_states_the_hash_rules(client: Any) -> None:
    doc = await openapi(client)
    claim = doc["paths"]["/v1/projects/{projectAddress}/claim"]["post"]
    text = claim["description"]
    for rule in (
        "string title, string description, string repoUrl, string\n  projectMode, string "
        "biddingAccess",
        'string "service.project_create_intent_v1", string userId, string\n  intentId, '
        "bytes32 intentNonce",
        "H(abi.encode(bytes32 metadataHash, bytes32 intentHash))",
        "`configHash = metadataHash`",
        "keccak256",
        "lower-case hyphenated",
    ):
        assert rule in text, rule
    assert REPOSITORY_PATH.findall(text) == []
    for code in re.findall(r"`([a-z_]+)`", claim["responses"]["409"]["description"]):
        assert f"`{code}` |" in text, code  # every 409 code has its check in the table
    body = claim["requestBody"]["content"]["application/json"]
    assert [e["value"]["mode"] for e in body["examples"].values()] == ["intent", "direct"]
    assert list(body["examples"]["IntentClaimRequest"]["value"])[:2] == ["mode", "hashVersion"]


async def test_create_intent_body_may_be_empty_as_documented(client: Any) -> None:
    from tests.conftest import make_token

    doc = await openapi(client)
    operation = doc["paths"]["/v1/projects/create-intents"]["post"]
    assert operation["requestBody"]["required"] is False
    assert "no body at all (an empty or blank body counts as `{}`" in operation["description"]
    claim = doc["paths"]["/v1/projects/{projectAddress}/claim"]["post"]
    assert claim["requestBody"]["required"] is True

    path = "/v1/projects/create-intents"
    user_id = uuid.uuid4()
    session = {"Authorization": f"Bearer {make_token(user_id)}"}
    json_type = {"Content-Type": "application/json"}
    # `{}`, no body at all, and a blank body with or without a content type: all the same.
    for body, headers in ((b"{}", json_type), (b"", {}), (b"  \n", {}), (b"", json_type)):
        resp = await client.post(path, data=body, headers={**session, **headers})
        assert resp.status == 201, (body, await resp.text())
        assert (await resp.json())["version"] == "project_create_intent_v1"
    # Any field, or any JSON that is not an object, is refused.
    for body in (b'{"title": "x"}', b"null", b"[]"):
        resp = await client.post(path, data=body, headers={**session, **json_type})
        assert resp.status == 400, body
        assert (await resp.json())["error"] == "invalid_request"
    # Anonymous callers and agent keys (they claim in direct mode) get no intent.
    resp = await client.post(path, data=b"")
    assert resp.status == 401
    key = await client.post(
        "/v1/api-keys", json={"name": "k", "userId": str(user_id)}, headers=session
    )
    assert key.status == 201
    resp = await client.post(
        path, data=b"", headers={"x-agent-api-key": (await key.json())["secret"]}
    )
    assert resp.status == 403
    assert (await resp.json())["error"] == "forbidden"


# --- the page in a real browser -------------------------------------------------------------------


async def authorize(page: Any, scheme: str, value: str) -> None:
    await page.locator(".auth-wrapper .btn.authorize").click()
    dialog = page.locator(".dialog-ux .modal-ux")
    await dialog.wait_for()
    container = dialog.locator("form").filter(has=page.locator("h4").filter(has_text=scheme))
    await container.locator("input").fill(value)
    await container.locator("button.authorize").click()
    await container.locator("button", has_text="Logout").wait_for()
    await dialog.locator(".close-modal").click()
    await dialog.wait_for(state="detached")


async def logout(page: Any, scheme: str) -> None:
    await page.locator(".auth-wrapper .btn.authorize").click()
    dialog = page.locator(".dialog-ux .modal-ux")
    container = dialog.locator("form").filter(has=page.locator("h4").filter(has_text=scheme))
    await container.locator("button", has_text="Logout").click()
    await dialog.locator(".close-modal").click()
    await dialog.wait_for(state="detached")


async def try_it(page: Any, operation_dom_id: str) -> str:
    """Expands an operation, runs it with "Try it out" and returns the status it shows."""
    operation = page.locator(f"#{operation_dom_id}")
    if not await operation.locator(".opblock-body").count():
        await operation.locator(".opblock-summary-control").click()
    try_out = operation.locator(".try-out__btn")
    if (await try_out.inner_text()).strip() == "Try it out":
        await try_out.click()
    clear = operation.locator(".btn-clear")
    if await clear.count():
        await clear.click()
    await operation.locator(".execute").click()
    status = operation.locator(".live-responses-table .response .response-col_status")
    await status.wait_for()
    return (await status.inner_text()).strip()


@pytest.mark.slow
@pytest.mark.timeout(600)  # a browser on a loaded 2-core machine: seconds per step
async def test_docs_page_in_chromium(client: Any, tmp_path: Path) -> None:
    """Loads /v1/docs in headless Chromium as a reader would: the first operation is near the
    top; the search finds operations by area, operation id and path; the chat send expanded
    shows its realistic request example, curl command and own 400 example; the claim operation
    shows its description, the fields of both body shapes and its 409 codes; the Authorize
    dialog offers the three credentials, and "Try it out" works with each of them."""
    import os

    from playwright.async_api import async_playwright

    from marketplace.projects.claims import CLAIM_CONFLICT_CODES
    from tests.conftest import SCHEDULER_SECRET, make_token

    origin = str(client.make_url("/")).rstrip("/")
    user_id = "3fa85f64-5717-4562-b3fc-2c963f66afa6"
    token = make_token(user_id)
    resp = await client.post(
        "/v1/api-keys",
        json={"name": "docs page check", "userId": user_id},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert resp.status == 201, await resp.text()
    agent_key = (await resp.json())["secret"]

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_ARGS
        )
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            # Playwright's 30 s per step is a budget for an idle machine; here the other test
            # worker may start a Ray cluster meanwhile (the test took 22 to 50 s in full runs).
            page.set_default_timeout(120_000)
            requested: list[str] = []
            problems: list[str] = []
            page.on("request", lambda request: requested.append(request.url))
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.on(
                "console",
                lambda message: problems.append(message.text) if message.type == "error" else None,
            )
            await page.goto(f"{origin}/v1/docs")

            # The introduction, rendered from info.description.
            info = page.locator(".swagger-ui .information-container")
            await info.locator(".title").wait_for()
            assert "Project Marketplace API" in await info.locator(".title").inner_text()
            intro = await info.locator(".description").inner_text()
            for text in ("x-agent-api-key", "email_not_verified", "What is implemented"):
                assert text in intro, text
            # The folded sections open on a click.
            assert "Messaging" not in intro
            await info.locator("summary", has_text="What is implemented").click()
            assert "Messaging" in await info.locator(".description").inner_text()
            await info.locator("summary", has_text="What is implemented").click()

            # The first operation starts near the top, after the short introduction.
            doc = await openapi(client)
            # In the page's order: by tag, in the order of the document's tags.
            by_tag: dict[str, list[str]] = {tag["name"]: [] for tag in doc["tags"]}
            for operations in doc["paths"].values():
                for operation in operations.values():
                    by_tag[operation["tags"][0]].append(operation["operationId"])
            operation_ids = [name for names in by_tag.values() for name in names]
            blocks = page.locator(".opblock")
            await blocks.first.wait_for()
            top = await blocks.first.evaluate("e => e.getBoundingClientRect().top + window.scrollY")
            assert top < 1500, top
            assert await blocks.count() == len(operation_ids)

            # The search matches paths, summaries, operation ids and tags, in any case.
            search = page.locator(".operation-filter-input")
            assert "operation ids" in (await search.get_attribute("placeholder") or "")

            async def shows(phrase: str, expected: list[str]) -> None:
                """Types ``phrase`` and waits (React renders after the input event) until the
                listed operations are ``expected``, by operation id in page order."""
                await search.fill(phrase)
                ids: list[str] = []
                for _ in range(100):
                    ids = await blocks.evaluate_all("els => els.map(e => e.id.split('-').pop())")
                    if ids == expected:
                        return
                    await page.wait_for_timeout(100)
                assert ids == expected, phrase

            await shows("chat", ["postChatMessage", "listChatMessages"])
            await shows("CHAT post", ["postChatMessage"])
            await shows("sendDirectMessage", ["sendDirectMessage"])
            await shows("/v1/messages/block", ["blockUser", "unblockUser"])
            wallet_links = [
                "listWalletLinks",
                "createWalletLinkChallenge",
                "verifyWalletLink",
                "revokeWalletLink",
            ]
            await shows("wallet-links", wallet_links)
            await shows("no such operation", [])
            await shows("", operation_ids)

            # The chat send: a realistic request example, its curl command and its own 400.
            chat = page.locator("#operations-messaging-postChatMessage")
            await chat.locator(".opblock-summary-control").click()
            await chat.locator(".opblock-body").wait_for()
            request = await chat.locator(
                ".opblock-section-request-body .highlight-code"
            ).inner_text()
            assert '"body": "Hi! The first milestone is ready for review."' in request
            assert re.search(r'"senderWalletAddress": "0x[0-9a-fA-F]{40}"', request)
            curl = await chat.locator(".opblock-description pre").inner_text()
            assert curl.startswith('curl -X POST "http://127.0.0.1:8080/v1/projects/0x')
            for text in ('-H "Authorization: Bearer $TOKEN"', "x-user-wallet-address: 0x", "-d '{"):
                assert text in curl, text
            assert "Hi! The first milestone is ready for review." in curl
            bad = chat.locator('.responses-table tr.response[data-code="400"]')
            answer = await bad.locator(".highlight-code").inner_text()
            assert "body.senderWalletAddress" in answer and "metadata" not in answer
            created = chat.locator('.responses-table tr.response[data-code="201"]')
            record = await created.locator(".highlight-code").inner_text()
            assert '"kind": "project_chat"' in record
            everything = await chat.inner_text()
            assert '"string"' not in everything
            await chat.locator(".opblock-summary-control").click()

            # The claim operation, expanded.
            claim = page.locator("#operations-project-creation-claimProject")
            await claim.locator(".opblock-summary-control").click()
            await claim.locator(".opblock-body").wait_for()
            description = await claim.locator(".opblock-description-wrapper").first.inner_text()
            for text in (
                "Hash rules",
                "service.project_create_intent_v1",
                "bytes32 intentNonce",
                "config_hash_mismatch",
            ):
                assert text in description, text
            body = claim.locator(".opblock-section-request-body")
            options = await body.locator(".examples-select select option").all_inner_texts()
            # Named by their summaries: one example per body shape.
            assert [option.split(":")[0] for option in options] == ["Intent mode", "Direct mode"]
            example = await body.locator(".highlight-code").inner_text()
            assert '"mode": "intent"' in example and '"intentId"' in example
            await body.get_by_text("Schema", exact=True).click()
            model = await body.locator(".model-example").inner_text()
            for field in ("One of", "mode", "hashVersion", "intentId", "intentNonce", "txHash"):
                assert field in model, field
            assert "IntentClaimRequest" in model and "DirectClaimRequest" in model
            conflicts = claim.locator('.responses-table tr.response[data-code="409"]')
            codes = await conflicts.locator(".response-col_description").inner_text()
            for code in CLAIM_CONFLICT_CODES:
                assert code in codes, code
            # Kept where MARKETPLACE_DOCS_SCREENSHOT says, to look at the page without a browser.
            keep = os.environ.get("MARKETPLACE_DOCS_SCREENSHOT") or str(tmp_path / "claim.png")
            screenshot = await claim.screenshot(path=keep)
            assert screenshot[:8] == b"\x89PNG\r\n\x1a\n" and len(screenshot) > 50_000

            # The Authorize dialog offers the three credentials with their headers.
            await page.locator(".auth-wrapper .btn.authorize").click()
            dialog = page.locator(".dialog-ux .modal-ux")
            await dialog.wait_for()
            offered = await dialog.inner_text()
            for text in ("sessionBearer", "agentApiKey", "schedulerBearer", "x-agent-api-key"):
                assert text in offered, text
            await dialog.locator(".close-modal").click()

            # "Try it out" sends each credential: the anonymous call is refused, each works.
            permissions = "operations-system-getPermissions"
            indexer = "operations-system-getIndexerStatus"
            assert await try_it(page, permissions) == "401"
            await authorize(page, "sessionBearer", token)
            assert await try_it(page, permissions) == "200"
            await logout(page, "sessionBearer")
            await authorize(page, "agentApiKey", agent_key)
            assert await try_it(page, permissions) == "200"
            await logout(page, "agentApiKey")
            # Nothing else is authorized now: only the scheduler secret can open this one.
            await authorize(page, "schedulerBearer", SCHEDULER_SECRET)
            assert await try_it(page, indexer) == "200"

            # Only the refusal asked for above; no script error, no CSP violation.
            assert [p for p in problems if "status of 401" not in p] == []
            assert len(problems) == 1
            assert requested and all(url.startswith(origin + "/") for url in requested), requested
        finally:
            await browser.close()
