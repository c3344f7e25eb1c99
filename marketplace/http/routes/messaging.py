"""Messaging (spec section 4 "Messaging", issue #12): project chat, direct messages, blocks and
mutes, message reports and the moderation admins' workflow. Rules in marketplace.messaging;
docs/messaging.md.

Both sends are guarded and declared ``sends_messages``: the moderation suspension guard runs
before validation, and the handler passes the body through the term filter before storing it.
Blocks, mutes and reports are not guarded mutations: they protect a user from others, so neither
an unverified e-mail address nor missing legal assent may stand in their way, and they publish
nothing other users read.
"""

from __future__ import annotations

import functools

from aiohttp import web

from marketplace.errors import InvalidRequest
from marketplace.http import keys
from marketplace.http.idempotency import repeat_safe_id
from marketplace.http.moderation_gate import screen_message
from marketplace.http.paths import (
    BlockedUserPath,
    MutedUserPath,
    ProjectPath,
    ReportPath,
    ThreadPath,
)
from marketplace.http.routing import AuthMode, Call, Reply, RouteTable
from marketplace.messaging import chat, direct, relations, reports
from marketplace.messaging.errors import (
    Blocked,
    InvalidTransition,
    MessageNotFound,
    NoSharedProject,
    ReportNotFound,
    ThreadNotFound,
    UserNotFound,
    WorkerNotSelected,
)
from marketplace.messaging.models import (
    BlockRecord,
    BlockRequest,
    ChatMessageList,
    ChatMessageRecord,
    ChatMessageRequest,
    DirectMessageList,
    DirectMessageRecord,
    DirectMessageRequest,
    MuteRecord,
    MuteRequest,
    PageQuery,
    ReportDetail,
    ReportList,
    ReportListQuery,
    ReportRecord,
    ReportRequest,
    ReportStatusRequest,
    ThreadList,
    ThreadRecord,
    WalletHeader,
)
from marketplace.moderation.errors import NotModerationAdmin
from marketplace.records.errors import NotProjectParty, ProjectNotFound, WalletNotLinked

routes = RouteTable(tag="messaging")


# --- project chat ---------------------------------------------------------------------------


@routes.post(
    "/v1/projects/{projectAddress}/chat/messages",
    name="postChatMessage",
    idempotent=True,
    summary="Send a project chat message (owner or selected worker)",
    auth=AuthMode.EITHER,
    response=ChatMessageRecord,
    status=201,
    path_params=ProjectPath,
    header_params=WalletHeader,
    body=ChatMessageRequest,
    guarded=True,
    sends_messages=True,
    errors=(ProjectNotFound, WalletNotLinked, NotProjectParty, WorkerNotSelected),
)
async def post_chat_message(
    call: Call[ChatMessageRequest, None, ProjectPath],
) -> ChatMessageRecord:
    """Sends as `senderWalletAddress`, which must equal the `x-user-wallet-address` header
    (missing or different: 400 `invalid_request`). Then, in this order: a project that is not
    indexed or that the caller cannot see is 404 `project_not_found`; a wallet that is not an
    active link of the caller is 403 `wallet_not_linked`; the owner wallet before a worker is
    selected is 409 `worker_not_selected`; any wallet that is neither the owner nor the selected
    worker (also before selection) is 403 `not_project_party`; then the body passes the term
    filter (422 `offensive_content`, nothing stored). Answers 201 with the message. Messages of
    one project are stored by one writer, in send order, each with its `chat.message` event."""
    principal = call.require_principal()
    header: WalletHeader = call.headers
    body = call.body
    if header.userWalletAddress != body.senderWalletAddress:
        raise InvalidRequest(
            "the x-user-wallet-address header must equal senderWalletAddress",
            [
                {
                    "location": "header",
                    "field": "x-user-wallet-address",
                    "message": "must equal body.senderWalletAddress",
                    "type": "value_error",
                }
            ],
        )
    project = call.path.projectAddress
    # An offending body is checked against the send rules before it counts as an offense; a
    # clean one goes straight to the shard, which checks them as the project's single writer.
    await screen_message(
        call.app,
        principal.user_id,
        body.body,
        "project_chat",
        authorize=functools.partial(
            chat.authorize_send, call.pool, principal.user_id, project, body.senderWalletAddress
        ),
    )
    command = chat.PostChatMessage(
        project_address=project,
        # Under an Idempotency-Key, the same id on a retry: one that follows a 503 whose call
        # committed after all finds that message rather than storing a second one.
        message_id=repeat_safe_id(call.request, "chat-message"),
        user_id=principal.user_id,
        sender_wallet=body.senderWalletAddress,
        body=body.body,
    )
    # Safe to repeat: the message id is chosen above, so a command sent again stores it once.
    row = await call.app[keys.PROJECT_SHARDS].run_idempotent(command)
    return ChatMessageRecord.from_row(row)


@routes.get(
    "/v1/projects/{projectAddress}/chat/messages",
    name="listChatMessages",
    summary="Read a project's chat (owner and selected worker only)",
    auth=AuthMode.EITHER,
    response=ChatMessageList,
    path_params=ProjectPath,
    query=PageQuery,
    errors=(ProjectNotFound, NotProjectParty),
)
async def list_chat_messages(call: Call[None, PageQuery, ProjectPath]) -> ChatMessageList:
    """Newest first. Only for a caller with an active wallet link to the project's owner or
    selected worker wallet (403 `not_project_party`); a project that is not indexed or not
    visible to the caller is 404 `project_not_found`. A removed message has `body: null`, except
    for moderation admins. `limit` 1..100 (default 50); pass `nextCursor` back unchanged as
    `cursor` for the next page."""
    principal = call.require_principal()
    page = await chat.list_chat(
        call.pool,
        principal.user_id,
        call.path.projectAddress,
        limit=call.query.limit,
        cursor=call.query.cursor,
    )
    items = [ChatMessageRecord.from_row(row, moderator=page.moderator) for row in page.rows]
    return ChatMessageList(items=items, count=len(items), nextCursor=page.next_cursor)


# --- direct messages ------------------------------------------------------------------------


@routes.post(
    "/v1/messages/dm",
    name="sendDirectMessage",
    idempotent=True,
    summary="Send a direct message to a user you share a project with",
    auth=AuthMode.EITHER,
    response=DirectMessageRecord,
    status=201,
    body=DirectMessageRequest,
    guarded=True,
    sends_messages=True,
    errors=(NoSharedProject, Blocked),
)
async def send_direct_message(
    call: Call[DirectMessageRequest, None, None],
) -> DirectMessageRecord:
    """In this order: to yourself is 400 `invalid_request`; without a shared project it is 403
    `no_shared_project` (the two users, through wallets each has actively linked now, are on one
    indexed project the owner and the selected worker, the owner and a bidder with a bid draft,
    or the owner and a challenge submitter with a registered submission; an unknown recipient
    answers the same); a block in either direction is 403 `blocked`; then the body passes the
    term filter (422 `offensive_content`, nothing stored). Answers 201 with the message and its
    `threadId`: the first message between two users creates their one thread, later ones (in
    either direction) join it."""
    principal = call.require_principal()
    sender, recipient, text = principal.user_id, call.body.recipientUserId, call.body.body
    # As for chat: the rules first, so a refused send is never counted as an offense.
    await screen_message(
        call.app,
        sender,
        text,
        "direct",
        authorize=functools.partial(direct.authorize_send, call.pool, sender, recipient),
    )
    row = await direct.send(call.pool, sender, recipient, text)
    return DirectMessageRecord.from_row(row)


@routes.get(
    "/v1/messages/dm/threads",
    name="listDirectMessageThreads",
    summary="The caller's direct-message threads",
    auth=AuthMode.EITHER,
    response=ThreadList,
    query=PageQuery,
)
async def list_threads(call: Call[None, PageQuery, None]) -> ThreadList:
    """The caller's threads, the one with the most recent message first, each from the caller's
    side: the other user, their username (null if none), when the last message was sent and
    whether the caller has muted the other user. A thread that receives a message while you page
    moves to the top, so it may appear again or be skipped; start over for a consistent view.
    `limit` 1..100 (default 50); pass `nextCursor` back unchanged as `cursor` for the next
    page."""
    principal = call.require_principal()
    page = await direct.list_threads(
        call.pool, principal.user_id, limit=call.query.limit, cursor=call.query.cursor
    )
    items = [ThreadRecord.from_row(row) for row in page.rows]
    return ThreadList(items=items, count=len(items), nextCursor=page.next_cursor)


@routes.get(
    "/v1/messages/dm/threads/{threadId}/messages",
    name="listDirectMessages",
    summary="Read a direct-message thread (its two participants only)",
    auth=AuthMode.EITHER,
    response=DirectMessageList,
    path_params=ThreadPath,
    query=PageQuery,
    errors=(ThreadNotFound,),
)
async def list_thread_messages(
    call: Call[None, PageQuery, ThreadPath],
) -> DirectMessageList:
    """Newest first. Anyone but the thread's two participants gets 404 `thread_not_found`, as
    for a thread that does not exist; a `threadId` that is not a uuid is 400. A removed message
    has `body: null`, except for moderation admins. `limit` 1..100 (default 50); pass
    `nextCursor` back unchanged as `cursor` for the next page."""
    principal = call.require_principal()
    page = await direct.list_thread_messages(
        call.pool,
        principal.user_id,
        call.path.threadId,
        limit=call.query.limit,
        cursor=call.query.cursor,
    )
    items = [DirectMessageRecord.from_row(row, moderator=page.moderator) for row in page.rows]
    return DirectMessageList(items=items, count=len(items), nextCursor=page.next_cursor)


# --- blocks and mutes -----------------------------------------------------------------------


@routes.post(
    "/v1/messages/block",
    name="blockUser",
    summary="Block a user",
    auth=AuthMode.EITHER,
    response=BlockRecord,
    body=BlockRequest,
    errors=(UserNotFound,),
)
async def block_user(call: Call[BlockRequest, None, None]) -> BlockRecord:
    """Blocks direct messages between the caller and `blockedUserId` in both directions (403
    `blocked` for either sender); existing threads stay readable. Idempotent: 200 with the
    block, also when it existed already (then with its original `createdAt`). Yourself is 400
    `invalid_request`; a user the service has never seen is 404 `user_not_found`."""
    principal = call.require_principal()
    row = await relations.block(call.pool, principal.user_id, call.body.blockedUserId)
    return BlockRecord.from_row(row)


@routes.delete(
    "/v1/messages/block/{blockedUserId}",
    name="unblockUser",
    summary="Remove a block",
    auth=AuthMode.EITHER,
    response=None,
    status=204,
    path_params=BlockedUserPath,
)
async def unblock_user(call: Call[None, None, BlockedUserPath]) -> web.StreamResponse:
    """Removes the caller's block of `blockedUserId`. Idempotent: 204 whether or not there was
    one (also for an unknown user). Yourself is 400 `invalid_request`. A block the other user
    holds against the caller stays."""
    principal = call.require_principal()
    await relations.unblock(call.pool, principal.user_id, call.path.blockedUserId)
    return web.Response(status=204)


@routes.post(
    "/v1/messages/mute",
    name="muteUser",
    summary="Mute a user",
    auth=AuthMode.EITHER,
    response=MuteRecord,
    body=MuteRequest,
    errors=(UserNotFound,),
)
async def mute_user(call: Call[MuteRequest, None, None]) -> MuteRecord:
    """Messages from `mutedUserId` are still delivered, but the caller's thread with that user
    shows `muted: true` and sends no notifications. Idempotent: 200 with the mute, also when it
    existed already (then with its original `createdAt`). Yourself is 400 `invalid_request`; a
    user the service has never seen is 404 `user_not_found`."""
    principal = call.require_principal()
    row = await relations.mute(call.pool, principal.user_id, call.body.mutedUserId)
    return MuteRecord.from_row(row)


@routes.delete(
    "/v1/messages/mute/{mutedUserId}",
    name="unmuteUser",
    summary="Remove a mute",
    auth=AuthMode.EITHER,
    response=None,
    status=204,
    path_params=MutedUserPath,
)
async def unmute_user(call: Call[None, None, MutedUserPath]) -> web.StreamResponse:
    """Removes the caller's mute of `mutedUserId`. Idempotent: 204 whether or not there was one
    (also for an unknown user). Yourself is 400 `invalid_request`."""
    principal = call.require_principal()
    await relations.unmute(call.pool, principal.user_id, call.path.mutedUserId)
    return web.Response(status=204)


# --- reports --------------------------------------------------------------------------------


@routes.post(
    "/v1/messages/reports",
    name="reportMessage",
    idempotent=True,
    summary="Report a message you can see",
    auth=AuthMode.EITHER,
    response=ReportRecord,
    status=201,
    body=ReportRequest,
    errors=(MessageNotFound,),
)
async def report_message(call: Call[ReportRequest, None, None]) -> Reply:
    """For a message the caller can see now: a direct message of one of the caller's threads,
    or a chat message of a project where the caller has an active link to the owner or the
    selected worker wallet (anything else, like an unknown id, is 404 `message_not_found`).
    Your own message is 400 `invalid_request`. A new report answers 201 with `status: open`; the
    message's `bodyStatus` becomes `reported` (it stays readable; a removed one stays removed).
    The same reporter reporting the same message again gets the existing report with 200 and
    nothing changes. Each new report is written to the moderation audit log (its subject is the
    message's author)."""
    principal = call.require_principal()
    row, created = await reports.create(
        call.pool, principal.user_id, call.body.messageId, call.body.reason
    )
    return Reply(ReportRecord.from_row(row), status=201 if created else 200)


@routes.get(
    "/v1/messages/reports",
    name="listMessageReports",
    summary="List message reports (moderation admins only)",
    auth=AuthMode.EITHER,
    response=ReportList,
    query=ReportListQuery,
    errors=(NotModerationAdmin,),
)
async def list_reports(call: Call[None, ReportListQuery, None]) -> ReportList:
    """Newest first; `status` narrows the list to one status. Callers without the
    `moderationAdmin` permission flag get 403 `not_moderation_admin`. `limit` 1..100 (default
    50); pass `nextCursor` back unchanged as `cursor` for the next page."""
    principal = call.require_principal()
    page = await reports.list_reports(
        call.pool,
        principal.user_id,
        status=call.query.status,
        limit=call.query.limit,
        cursor=call.query.cursor,
    )
    items = [ReportRecord.from_row(row) for row in page.rows]
    return ReportList(items=items, count=len(items), nextCursor=page.next_cursor)


@routes.get(
    "/v1/messages/reports/{reportId}",
    name="getMessageReport",
    summary="A report with its message, body included (moderation admins only)",
    auth=AuthMode.EITHER,
    response=ReportDetail,
    path_params=ReportPath,
    errors=(NotModerationAdmin, ReportNotFound),
)
async def get_report(call: Call[None, None, ReportPath]) -> ReportDetail:
    """What an admin needs to decide on a report: the report and the message as stored, its
    `body` shown even when the message was removed. Callers without the `moderationAdmin`
    permission flag get 403 `not_moderation_admin`; an unknown report is 404
    `report_not_found`."""
    principal = call.require_principal()
    report, message = await reports.get_with_message(
        call.pool, principal.user_id, call.path.reportId
    )
    return ReportDetail.from_rows(report, message)


@routes.post(
    "/v1/messages/reports/{reportId}/status",
    name="changeMessageReportStatus",
    summary="Move a report along the admin workflow (moderation admins only)",
    auth=AuthMode.EITHER,
    response=ReportRecord,
    path_params=ReportPath,
    body=ReportStatusRequest,
    errors=(NotModerationAdmin, ReportNotFound, InvalidTransition),
)
async def change_report_status(
    call: Call[ReportStatusRequest, None, ReportPath],
) -> ReportRecord:
    """Transitions: open -> reviewing | actioned | dismissed; reviewing -> actioned | dismissed;
    anything else (actioned and dismissed are final, and a status cannot be set again) is 409
    `invalid_transition`. `actioned` removes the message (`bodyStatus: removed`, its body is then
    null for everyone but moderation admins); `dismissed` makes it `visible` again unless it was
    removed or another report of it is still open or in review. `actioned` and `dismissed` set
    `resolvedByUserId` to the caller. A `note` replaces the stored one (omitted: kept). Answers
    200 with the updated report and writes one moderation audit entry (subject: the message's
    author). Of two admins changing the same report at once, the second sees the first's result.
    Callers without the `moderationAdmin` flag get 403 `not_moderation_admin`; an unknown report
    is 404 `report_not_found`."""
    principal = call.require_principal()
    row = await reports.change_status(
        call.pool, principal.user_id, call.path.reportId, call.body.status, call.body.note
    )
    return ReportRecord.from_row(row)
