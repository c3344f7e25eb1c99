"""Moderation (spec section 4 "Moderation", issue #12): a user's offenses, the audit log, and
lifting a suspension. Reads come from PostgreSQL; the lift goes through the user's shard (the
moderation counter actor). Rules in marketplace.moderation; docs/messaging.md."""

from __future__ import annotations

from aiohttp import web

from marketplace.http import keys
from marketplace.http.paths import UserIdPath
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.moderation import reads
from marketplace.moderation.counter import LiftSuspension
from marketplace.moderation.errors import NotModerationAdmin, NotOffenseViewer
from marketplace.moderation.models import (
    AuditEntry,
    AuditListResponse,
    AuditQuery,
    OffenseItem,
    OffensesQuery,
    OffensesResponse,
    SuspensionItem,
    SuspensionListResponse,
    SuspensionsQuery,
)

routes = RouteTable(tag="moderation")


@routes.get(
    "/v1/moderation/offenses",
    name="listModerationOffenses",
    summary="A user's offenses and suspension state (the user itself or a moderation admin)",
    auth=AuthMode.EITHER,
    response=OffensesResponse,
    query=OffensesQuery,
    errors=(NotOffenseViewer,),
)
async def list_offenses(call: Call[None, OffensesQuery, None]) -> OffensesResponse:
    """The offenses of `userId` (sends the term filter refused), newest first, with `total` (all
    of them), `windowTotal` (those that count towards the next suspension now: within
    `MARKETPLACE_MODERATION_WINDOW_SECONDS` and after the latest suspension's start or lift)
    and `suspendedUntil` (null when sending is allowed). Readable by the user itself and by
    moderation admins; anyone else gets 403 `not_offense_viewer`. `limit` 1..100 (default 50);
    pass `nextCursor` back as `cursor` for the next page."""
    principal = call.require_principal()
    overview = await reads.offense_overview(
        call.pool,
        call.settings,
        viewer_id=principal.user_id,
        user_id=call.query.userId,
        limit=call.query.limit,
        cursor=call.query.cursor,
    )
    items = [OffenseItem.from_row(row) for row in overview.items]
    return OffensesResponse(
        userId=overview.user_id,
        total=overview.total,
        windowTotal=overview.window_total,
        suspendedUntil=overview.suspended_until,
        items=items,
        count=len(items),
        nextCursor=overview.next_cursor,
    )


@routes.get(
    "/v1/moderation/audit",
    name="listModerationAudit",
    summary="The moderation audit log (moderation admins only)",
    auth=AuthMode.EITHER,
    response=AuditListResponse,
    query=AuditQuery,
    errors=(NotModerationAdmin,),
)
async def list_audit(call: Call[None, AuditQuery, None]) -> AuditListResponse:
    """Every offense, suspension, lift, report and report transition, newest first; with
    `userId`, only the entries whose subject is that user (the offender, or the author of the
    reported message). `actorUserId` is null for the system. Callers without the
    `moderationAdmin` flag get 403 `not_moderation_admin`. `limit` 1..100 (default 50); pass
    `nextCursor` back as `cursor` for the next page."""
    principal = call.require_principal()
    rows, next_cursor = await reads.audit_page(
        call.pool,
        viewer_id=principal.user_id,
        subject_user_id=call.query.userId,
        limit=call.query.limit,
        cursor=call.query.cursor,
    )
    items = [AuditEntry.from_row(row) for row in rows]
    return AuditListResponse(items=items, count=len(items), nextCursor=next_cursor)


@routes.get(
    "/v1/moderation/suspensions",
    name="listModerationSuspensions",
    summary="Suspended accounts (moderation admins only)",
    auth=AuthMode.EITHER,
    response=SuspensionListResponse,
    query=SuspensionsQuery,
    errors=(NotModerationAdmin,),
)
async def list_suspensions(call: Call[None, SuspensionsQuery, None]) -> SuspensionListResponse:
    """The accounts whose sending is suspended now (`state=all`: every account ever suspended),
    the newest suspension first: `{userId, suspendedUntil, suspendedAt, offenses}`, where
    `suspendedUntil` is the end of the active suspension (null for an account not suspended now,
    only with `state=all`), `suspendedAt` its start (else the latest suspension's), and
    `offenses` the account's offenses within `MARKETPLACE_MODERATION_WINDOW_SECONDS` up to now.
    Callers without the `moderationAdmin` flag get 403 `not_moderation_admin`. `limit` 1..100
    (default 50); pass `nextCursor` back as `cursor` (with the same `state`) for the next page."""
    principal = call.require_principal()
    rows, next_cursor = await reads.suspensions_page(
        call.pool,
        call.settings,
        viewer_id=principal.user_id,
        state=call.query.state,
        limit=call.query.limit,
        cursor=call.query.cursor,
    )
    items = [SuspensionItem.from_row(row) for row in rows]
    return SuspensionListResponse(items=items, count=len(items), nextCursor=next_cursor)


@routes.delete(
    "/v1/moderation/suspensions/{userId}",
    name="liftModerationSuspension",
    summary="Lift a user's suspension of sending (moderation admins only)",
    auth=AuthMode.EITHER,
    response=None,
    status=204,
    path_params=UserIdPath,
    errors=(NotModerationAdmin,),
)
async def lift_suspension(call: Call[None, None, UserIdPath]) -> web.StreamResponse:
    """Ends the active suspension of `userId` now: 204, with one `suspension_lifted` audit entry
    (actor: the caller). The offenses before the lift no longer count towards the next
    suspension. No active suspension: 204 as well, and nothing is written. Callers without the
    `moderationAdmin` flag get 403 `not_moderation_admin`."""
    principal = call.require_principal()
    await reads.require_moderation_admin(call.pool, principal.user_id)
    command = LiftSuspension(user_id=call.path.userId, admin_user_id=principal.user_id)
    # Safe to repeat: a lift that committed before its shard died finds nothing active.
    await call.app[keys.USER_SHARDS].run_idempotent(command)
    return web.Response(status=204)
