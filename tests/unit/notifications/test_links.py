"""The link of a notification e-mail (marketplace/notifications/links.py): the API resource
without ``MARKETPLACE_PUBLIC_APP_URL``, the web app's page of the kind's template with it; paths
queued by earlier versions still find their kind. (That each API link answers its recipient 200
is tests/integration/notifications/test_email_links.py.)"""

from __future__ import annotations

import pytest

from marketplace.config import Settings
from marketplace.notifications.links import (
    LINK_KINDS,
    link_url,
    project_chat_link,
    project_link,
    resolve,
    thread_link,
)

ADDRESS = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
LOWER = ADDRESS.lower()
THREAD = "5f0c2b8e-1d4a-4c6e-9b7a-2e3f4a5b6c7d"
API = "https://api.example"
APP = "https://app.example/market"

CASES = [
    # (link path, API URL, web app URL)
    (
        project_link(ADDRESS),
        f"{API}/v1/projects/{LOWER}",
        f"{APP}/projects/{LOWER}",
    ),
    (
        project_chat_link(ADDRESS),
        f"{API}/v1/projects/{LOWER}/chat/messages",
        f"{APP}/projects/{LOWER}/chat",
    ),
    (
        thread_link(THREAD.upper()),
        f"{API}/v1/messages/dm/threads/{THREAD}/messages",
        f"{APP}/messages/{THREAD}",
    ),
    # Queued before links pointed at the API (the API never served these paths).
    (f"/projects/{LOWER}", f"{API}/v1/projects/{LOWER}", f"{APP}/projects/{LOWER}"),
    (
        f"/messages/threads/{THREAD}",
        f"{API}/v1/messages/dm/threads/{THREAD}/messages",
        f"{APP}/messages/{THREAD}",
    ),
]


def settings(app: str = "") -> Settings:
    return Settings(public_base_url=f"{API}/", public_app_url=app)


@pytest.mark.parametrize(
    ("path", "api", "app"),
    CASES,
    ids=["project", "project_chat", "thread", "old_project_path", "old_thread_path"],
)
def test_links_go_to_the_api_resource_or_the_apps_page(path: str, api: str, app: str) -> None:
    assert link_url(settings(), path) == api
    assert link_url(settings(APP), path) == app
    assert link_url(settings(f" {APP}/ "), path) == app


def test_every_kind_has_a_maker_and_its_paths_resolve_to_it() -> None:
    made = [project_link(ADDRESS), project_chat_link(ADDRESS), thread_link(THREAD)]
    assert [resolve(path)[0] for path in made] == list(LINK_KINDS)  # type: ignore[index]
    assert resolve(project_link(ADDRESS)) == (LINK_KINDS[0], {"address": LOWER})


@pytest.mark.parametrize(
    "path",
    [
        "/v1/projects/not-an-address",
        f"/v1/projects/{LOWER}/milestones",
        "/v1/messages/dm/threads/1/messages",
        f"/v1/projects/{LOWER}/chat/messages/extra",
    ],
)
def test_a_path_of_no_kind_stays_an_api_link(path: str) -> None:
    assert resolve(path) is None
    assert link_url(settings(APP), path) == f"{API}{path}"


def test_without_a_public_base_url_the_listen_address_is_used() -> None:
    local = Settings(host="127.0.0.1", port=8080)
    assert link_url(local, thread_link(THREAD)) == (
        f"http://127.0.0.1:8080/v1/messages/dm/threads/{THREAD}/messages"
    )
