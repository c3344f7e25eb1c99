"""Notifications (spec section 4 "Notifications", issue #13): the delivery log, preferences and
the one-click unsubscribe target. Rules in marketplace.notifications; docs/notifications.md.

The unsubscribe target is public and authenticated by its signed token alone (RFC 8058): the
``POST`` does the work; a ``GET`` only shows a confirmation page with a button that posts, so a
mail client or security scanner that prefetches links unsubscribes nobody.
"""

from __future__ import annotations

import html
from typing import Any, Literal
from urllib.parse import quote

from aiohttp import web
from pydantic import ConfigDict, Field

from marketplace.errors import InvalidRequest
from marketplace.http import keys
from marketplace.http.routing import AuthMode, Call, Reply, RouteTable
from marketplace.notifications import preferences
from marketplace.notifications.deliveries import (
    DeliveriesQuery,
    DeliveriesResponse,
    DeliveryItem,
    delivery_page,
)
from marketplace.notifications.errors import InvalidUnsubscribeToken, NotDeliveryViewer
from marketplace.notifications.models import NotificationEventType
from marketplace.notifications.preferences import PreferencesResponse, PreferencesUpdate
from marketplace.notifications.unsubscribe import (
    TOKEN_LENGTH,
    UNSUBSCRIBE_PATH,
    UnsubscribeTarget,
    read_token,
    unsubscribe_key,
)
from marketplace.types import QueryModel, RequestModel, ResponseModel

routes = RouteTable(tag="notifications")

# The HMAC key of unsubscribe tokens, read once when the app is built: without a configured
# secret the app does not start (marketplace.notifications.unsubscribe.unsubscribe_key).
UNSUBSCRIBE_KEY: web.AppKey[bytes] = web.AppKey("unsubscribe_key", bytes)

ONE_CLICK = "One-Click"

EVENT_LABELS: dict[NotificationEventType, str] = {
    NotificationEventType.BID_DRAFT: "new bid drafts on your projects",
    NotificationEventType.DISPUTE_EVIDENCE: "dispute evidence submitted against you",
    NotificationEventType.PROJECT_CHAT_MESSAGE: "project chat messages",
    NotificationEventType.DIRECT_MESSAGE: "direct messages",
}

# The page carries the token in its URL: it must not leak through Referer, caches or frames.
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
}


def setup(app: web.Application) -> None:
    app[UNSUBSCRIBE_KEY] = unsubscribe_key(app[keys.SETTINGS])


# --- the delivery log -------------------------------------------------------------------------


@routes.get(
    "/v1/notifications/deliveries",
    name="listNotificationDeliveries",
    summary="The caller's notification deliveries, newest first (moderation admins: anyone's)",
    auth=AuthMode.EITHER,
    response=DeliveriesResponse,
    query=DeliveriesQuery,
    errors=(NotDeliveryViewer,),
)
async def list_deliveries(call: Call[None, DeliveriesQuery, None]) -> DeliveriesResponse:
    """One row per lifecycle e-mail the service decided on for the recipient: `queued` (a send
    job is pending or retrying), `sent`, `failed` (after the last attempt; `lastError` says
    why), `rate_limited` (over the per-recipient limit of its event type, not sent) or
    `suppressed` (not sent; `reason` is `no_email`, `muted`, `blocked` or `unsubscribed`).
    Filter with `eventType` and `status`; `limit` 1..100 (default 50); pass `nextCursor` back
    as `cursor` for the next page. Without `userId`, or with the caller's own id, the caller's
    deliveries; another user's id needs the `moderationAdmin` flag (403 `not_delivery_viewer`
    otherwise)."""
    principal = call.require_principal()
    rows, next_cursor = await delivery_page(
        call.pool, viewer_id=principal.user_id, query=call.query
    )
    items = [DeliveryItem.from_row(row) for row in rows]
    return DeliveriesResponse(items=items, count=len(items), nextCursor=next_cursor)


# --- preferences ------------------------------------------------------------------------------


@routes.get(
    "/v1/notifications/preferences",
    name="getNotificationPreferences",
    summary="The caller's notification preferences, per event type",
    auth=AuthMode.EITHER,
    response=PreferencesResponse,
)
async def get_preferences(call: Call[None, None, None]) -> PreferencesResponse:
    """Every event type with `{email: boolean}`: whether the caller gets e-mail of that type.
    A type never set is `true` (the default); an unsubscribe link sets its type to `false`."""
    principal = call.require_principal()
    values = await preferences.read_preferences(call.pool, principal.user_id)
    return PreferencesResponse.from_values(values)


@routes.put(
    "/v1/notifications/preferences",
    name="putNotificationPreferences",
    summary="Change the caller's notification preferences",
    auth=AuthMode.EITHER,
    guarded=True,
    response=PreferencesResponse,
    body=PreferencesUpdate,
)
async def put_preferences(call: Call[PreferencesUpdate, None, None]) -> PreferencesResponse:
    """Sets `{email: boolean}` for the event types in the body (any subset of `bid_draft`,
    `dispute_evidence`, `project_chat_message`, `direct_message`; the others keep their value)
    and answers all of them as they are now. An unknown event type is 400 `invalid_request`.
    Idempotent: sending the same body again changes nothing. Turning e-mail off makes later
    deliveries of that type `suppressed` with reason `unsubscribed`."""
    principal = call.require_principal()
    values = await preferences.update_preferences(call.pool, principal.user_id, call.body.values())
    return PreferencesResponse.from_values(values)


# --- one-click unsubscribe (RFC 8058) ---------------------------------------------------------


class UnsubscribeQuery(QueryModel):
    token: str = Field(
        min_length=1,
        max_length=200,
        description=f"the signed token of the e-mail's unsubscribe link ({TOKEN_LENGTH} "
        "URL-safe characters)",
    )


class OneClickForm(RequestModel):
    """The RFC 8058 one-click body, `List-Unsubscribe=One-Click` (other fields are ignored)."""

    model_config = ConfigDict(extra="ignore")

    List_Unsubscribe: str = Field(
        alias="List-Unsubscribe", description="must be `One-Click` (RFC 8058)"
    )


class UnsubscribeResponse(ResponseModel):
    """The link's recipient no longer gets e-mail of this event type."""

    eventType: NotificationEventType
    email: Literal[False] = Field(description="always false: e-mail of this type is off")


def _target(call: Call[Any, UnsubscribeQuery, None]) -> UnsubscribeTarget:
    return read_token(call.app[UNSUBSCRIBE_KEY], call.query.token)


def _page(title: str, body: str) -> web.Response:
    text = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<meta name=robots content=noindex><title>{html.escape(title)}</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:3rem auto;"
        "padding:0 1rem;line-height:1.5}button{font-size:1rem;padding:.5rem 1rem}</style>"
        f"</head><body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )
    return web.Response(text=text, content_type="text/html", headers=PAGE_HEADERS)


def _wants_html(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    return "text/html" in accept


@routes.get(
    UNSUBSCRIBE_PATH,
    name="showNotificationUnsubscribe",
    summary="Confirmation page of an unsubscribe link (changes nothing)",
    auth=AuthMode.NONE,
    response=None,
    query=UnsubscribeQuery,
    errors=(InvalidUnsubscribeToken,),
    response_content_type="text/html",
)
async def show_unsubscribe(call: Call[None, UnsubscribeQuery, None]) -> web.StreamResponse:
    """An HTML page naming the event type the link is about, whether its e-mails are on, and a
    button that posts the one-click form to this URL. It unsubscribes nobody: mail clients and
    link scanners fetch links on their own, and RFC 8058 puts the action in the `POST`. A
    malformed or forged token, or one of an account that no longer exists, is 400
    `invalid_unsubscribe_token` (JSON)."""
    target = _target(call)
    enabled = await preferences.target_state(call.pool, target)
    if enabled is None:
        raise InvalidUnsubscribeToken()
    label = html.escape(EVENT_LABELS[target.event_type])
    if not enabled:
        return _page("Unsubscribed", f"<p>You no longer get e-mails about {label}.</p>")
    action = html.escape(f"{UNSUBSCRIBE_PATH}?token={quote(call.query.token, safe='')}")
    form = (
        f'<form method=post action="{action}">'
        f'<input type=hidden name="List-Unsubscribe" value="{ONE_CLICK}">'
        "<button type=submit>Unsubscribe</button></form>"
    )
    return _page("Unsubscribe", f"<p>Stop e-mails about {label}?</p>{form}")


@routes.post(
    UNSUBSCRIBE_PATH,
    name="notificationUnsubscribe",
    summary="One-click unsubscribe (RFC 8058): e-mail of the link's event type off",
    auth=AuthMode.NONE,
    response=UnsubscribeResponse,
    query=UnsubscribeQuery,
    body=OneClickForm,
    body_form=True,
    errors=(InvalidUnsubscribeToken,),
)
async def unsubscribe(
    call: Call[OneClickForm, UnsubscribeQuery, None],
) -> Reply | web.StreamResponse:
    """The target of the `List-Unsubscribe` header: a form body (`application/x-www-form-
    urlencoded` or `multipart/form-data`) with `List-Unsubscribe=One-Click`, no credentials;
    the signed `token` names the user and the event type. Sets that user's preference for that
    type to `{email: false}` and answers 200 `{eventType, email: false}` (an HTML page instead
    when the request accepts `text/html`, as a browser submitting the confirmation form does).
    Idempotent: repeating it answers the same and changes nothing. Another event type's
    preference is untouched. A malformed or forged token, or one of an account that no longer
    exists, is 400 `invalid_unsubscribe_token`; a body without `List-Unsubscribe=One-Click` is
    400 `invalid_request`."""
    target = _target(call)
    if call.body.List_Unsubscribe != ONE_CLICK:
        raise InvalidRequest(
            "invalid body: body.List-Unsubscribe",
            [
                {
                    "location": "body",
                    "field": "List-Unsubscribe",
                    "message": "must be `One-Click` (RFC 8058)",
                    "type": "value_error",
                }
            ],
        )
    if not await preferences.unsubscribe(call.pool, target):
        raise InvalidUnsubscribeToken()
    if _wants_html(call.request):
        label = html.escape(EVENT_LABELS[target.event_type])
        return _page("Unsubscribed", f"<p>You no longer get e-mails about {label}.</p>")
    model = UnsubscribeResponse(eventType=target.event_type, email=False)
    return Reply(model, headers={"Cache-Control": "no-store"})
