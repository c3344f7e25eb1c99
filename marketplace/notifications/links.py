"""Where the link in a notification e-mail points (docs/notifications.md, "Links").

The consumer puts a link path in each delivery's job (``linkPath``): the path of the API
resource the e-mail is about, below ``MARKETPLACE_PUBLIC_BASE_URL``. When the e-mail is composed,
:func:`link_url` turns it into the absolute URL the recipient opens:

- ``MARKETPLACE_PUBLIC_APP_URL`` empty: that API resource, ``<public base URL><path>``, which
  answers its recipient (with their credentials) 200;
- ``MARKETPLACE_PUBLIC_APP_URL`` set: the web app's page for the same thing, from the template
  of its kind (:data:`LINK_KINDS`).

The job carries the API path rather than a finished URL so that changing either setting changes
the links of e-mails still waiting to be sent. Paths of jobs queued by an earlier version
(``/projects/<address>``, ``/messages/threads/<threadId>``, which the API never served) are read
as the project and the direct-message thread they named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

from marketplace.config import Settings
from marketplace.notifications.unsubscribe import public_base_url

# Placeholders of the templates below, and what a path segment must look like to fill them.
_ADDRESS = r"0x[0-9a-f]{40}"
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_PLACEHOLDERS = {"address": _ADDRESS, "thread_id": _UUID}


@dataclass(frozen=True)
class LinkKind:
    """One kind of thing an e-mail links to: its API resource (``api``, a path below the public
    base URL) and the web app's page for it (``app``, below ``MARKETPLACE_PUBLIC_APP_URL``)."""

    api: str
    app: str

    def path(self, **values: str) -> str:
        return self.api.format(**{k: quote(v, safe="") for k, v in values.items()})


PROJECT = LinkKind("/v1/projects/{address}", "{app}/projects/{address}")
PROJECT_CHAT = LinkKind("/v1/projects/{address}/chat/messages", "{app}/projects/{address}/chat")
DIRECT_MESSAGE_THREAD = LinkKind(
    "/v1/messages/dm/threads/{thread_id}/messages",
    "{app}/messages/{thread_id}",
)
LINK_KINDS: tuple[LinkKind, ...] = (PROJECT, PROJECT_CHAT, DIRECT_MESSAGE_THREAD)

# Paths of jobs queued before links pointed at API resources, and the kind each one meant.
_LEGACY: tuple[tuple[str, LinkKind], ...] = (
    ("/projects/{address}", PROJECT),
    ("/messages/threads/{thread_id}", DIRECT_MESSAGE_THREAD),
)


def _pattern(template: str) -> re.Pattern[str]:
    regex = re.escape(template)
    for name, value in _PLACEHOLDERS.items():
        regex = regex.replace(re.escape(f"{{{name}}}"), f"(?P<{name}>{value})")
    return re.compile(regex)


_MATCHERS: tuple[tuple[re.Pattern[str], LinkKind], ...] = (
    *((_pattern(kind.api), kind) for kind in LINK_KINDS),
    *((_pattern(path), kind) for path, kind in _LEGACY),
)


def project_link(project_address: str) -> str:
    """The link path of a project (bid drafts, dispute evidence)."""
    return PROJECT.path(address=project_address.lower())


def project_chat_link(project_address: str) -> str:
    """The link path of a project's chat."""
    return PROJECT_CHAT.path(address=project_address.lower())


def thread_link(thread_id: str) -> str:
    """The link path of a direct-message thread."""
    return DIRECT_MESSAGE_THREAD.path(thread_id=thread_id.lower())


def resolve(link_path: str) -> tuple[LinkKind, dict[str, str]] | None:
    """The kind of link ``link_path`` is and the values it names; None for a path of no kind."""
    for pattern, kind in _MATCHERS:
        match = pattern.fullmatch(link_path)
        if match is not None:
            return kind, match.groupdict()
    return None


def public_app_url(settings: Settings) -> str:
    """``MARKETPLACE_PUBLIC_APP_URL`` without a trailing slash; empty when unset."""
    return settings.public_app_url.strip().rstrip("/")


def link_url(settings: Settings, link_path: str) -> str:
    """The absolute URL of the e-mail's link for ``link_path``: the web app's page when
    ``MARKETPLACE_PUBLIC_APP_URL`` is set, else the API resource."""
    resolved = resolve(link_path)
    app = public_app_url(settings)
    if resolved is None:
        # Not a path this module made: the API's URL of it, as before there were kinds.
        return f"{public_base_url(settings)}{link_path}"
    kind, values = resolved
    if app:
        return kind.app.format(app=app, **values)
    return f"{public_base_url(settings)}{kind.api.format(**values)}"
