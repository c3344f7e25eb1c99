"""The two checks every message send passes (docs/messaging.md, "Offenses and suspensions").

1. The ``moderation_suspension`` guard (:func:`moderation_suspension_guard`), declared by the
   moderation capability, runs for every guarded mutation after legal assent, and acts only on
   routes declared with ``sends_messages=True`` (``RouteTable.post(..., guarded=True,
   sends_messages=True)``): a suspended sender gets 403 ``sending_suspended`` with ``until``,
   before the request is validated. One indexed query per send, on PostgreSQL, unless this
   frontend found the sender not suspended within the last ``NOT_SUSPENDED_TTL_SECONDS``: a
   suspension made through this frontend (its offense is recorded here) applies to the next
   send at once, one made through another frontend within that time.
2. :func:`screen_message`, called by the send handlers before anything is stored: the term
   filter (the only place a body is matched), and for a match the handler's send rules (so a
   refused send is never an offense), an offense recorded by the user's shard, then 422
   ``offensive_content``.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from marketplace.http import keys
from marketplace.http.routing import Call
from marketplace.metrics import MODERATION_OFFENSES, MODERATION_SUSPENSIONS
from marketplace.moderation.counter import MessageContext, OffenseRecorded, RecordOffense
from marketplace.moderation.errors import OffensiveContent, SendingSuspended
from marketplace.moderation.reads import suspended_until
from marketplace.ttl_cache import TtlCache
from marketplace.wordfilter.terms import TermFilter

# How long a frontend trusts "not suspended" without asking again (the guard's query was a large
# share of a chat send's frontend CPU in bench/messaging.py). Only that answer is kept: a lifted
# suspension is seen at once.
NOT_SUSPENDED_TTL_SECONDS = 2.0
NOT_SUSPENDED_CACHE_SIZE = 100_000
NOT_SUSPENDED: web.AppKey[TtlCache[uuid.UUID, bool]] = web.AppKey("not_suspended", TtlCache)


def setup(app: web.Application) -> None:
    """One term filter per process, from the shipped list and the operator's file."""
    settings = app[keys.SETTINGS]
    app[keys.TERM_FILTER] = TermFilter.from_sources(extra_file=settings.moderation_terms_file)
    app[NOT_SUSPENDED] = TtlCache(NOT_SUSPENDED_CACHE_SIZE)


async def moderation_suspension_guard(call: Call[Any, Any, Any]) -> None:
    """403 ``sending_suspended`` (with ``until``) on a message-sending route while the caller's
    sending is suspended; every other guarded route passes untouched."""
    if not call.route.sends_messages:
        return
    user_id = call.require_principal().user_id
    not_suspended = call.app[NOT_SUSPENDED]
    if not_suspended.get(user_id):
        return
    until = await suspended_until(call.pool, user_id)
    if until is not None:
        raise SendingSuspended(until)
    not_suspended.put(user_id, True, NOT_SUSPENDED_TTL_SECONDS)


async def screen_message(
    app: web.Application,
    user_id: uuid.UUID,
    body: str,
    context: MessageContext,
    *,
    authorize: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """Pass a message body through the term filter; return if it is clean.

    For a match, ``authorize`` (the handler's send rules, read-only) runs first and its refusal
    propagates: only a send the rules accept may count as an offense, and a clean body, the
    common case, goes to the store without that check (the store checks the rules itself). A
    match is recorded as one offense of ``user_id`` by the user's shard (which may suspend the
    account in the same transaction) and raises :class:`OffensiveContent`; if the account turns
    out to be suspended already (a send that passed the guard just before its suspension
    started) nothing is recorded and :class:`SendingSuspended` is raised instead. The offense
    id is chosen here and the same command is sent again if the shard dies mid-call, so every
    ``OffensiveContent`` stands for exactly one stored offense. A shard that stays unreachable
    for the retries' few seconds is a 503, and then the offense may or may not be stored.

    Call it before anything of the message is stored, and hold no pooled connection while it
    runs (it awaits an actor). Neither the body nor the term reaches the answer.
    """
    match = app[keys.TERM_FILTER].match(body)
    if match is None:
        return
    if authorize is not None:
        await authorize()
    command = RecordOffense(
        user_id=user_id,
        offense_id=uuid.uuid4(),
        term=match.term,
        source=match.source,
        context=context,
    )
    # Whatever the outcome, the sender's next send asks PostgreSQL again.
    app[NOT_SUSPENDED].discard(user_id)
    outcome = await app[keys.USER_SHARDS].run_idempotent(command)
    app[NOT_SUSPENDED].discard(user_id)
    if not isinstance(outcome, OffenseRecorded):
        raise SendingSuspended(outcome.until)
    MODERATION_OFFENSES.labels(context).inc()
    if outcome.suspension_id is not None:
        MODERATION_SUSPENSIONS.inc()
    raise OffensiveContent()
