"""Usernames: get, set, check availability, batch lookup. Rules in marketplace.identity."""

from __future__ import annotations

from marketplace.errors import Forbidden
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.identity import usernames
from marketplace.identity.access import ensure_self
from marketplace.identity.models import (
    UsernameBatchRequest,
    UsernameBatchResponse,
    UsernameCheckQuery,
    UsernameCheckResponse,
    UsernameGetResponse,
    UsernameQuery,
    UsernameRecord,
    UsernameSetRequest,
)
from marketplace.storage.repositories import usernames as repo

routes = RouteTable(tag="usernames")


@routes.get(
    "/v1/username",
    name="getUsername",
    summary="Get a user's username",
    auth=AuthMode.EITHER,
    response=UsernameGetResponse,
    query=UsernameQuery,
)
async def get_username(call: Call[None, UsernameQuery, None]) -> UsernameGetResponse:
    """Usernames are display names: any signed-in caller may read any user's (as with the batch
    lookup). `userId` defaults to the caller."""
    principal = call.require_principal()
    user_id = call.query.userId or principal.user_id
    return UsernameGetResponse.from_row(user_id, await repo.get(call.pool, user_id))


@routes.put(
    "/v1/username",
    name="setUsername",
    summary="Set the caller's username",
    auth=AuthMode.EITHER,
    response=UsernameRecord,
    body=UsernameSetRequest,
    errors=(Forbidden, usernames.UsernameTaken),
)
async def set_username(call: Call[UsernameSetRequest, None, None]) -> UsernameRecord:
    """Only for yourself. 409 `username_taken` when another user holds the name (compared
    case-insensitively); changing your own name frees the old one."""
    user_id = ensure_self(call.require_principal(), call.body.userId)
    row = await usernames.set_username(call.pool, user_id, call.body.username)
    return UsernameRecord.from_row(row)


@routes.get(
    "/v1/username/check",
    name="checkUsername",
    summary="Check whether a username is available",
    auth=AuthMode.EITHER,
    response=UsernameCheckResponse,
    query=UsernameCheckQuery,
)
async def check_username(call: Call[None, UsernameCheckQuery, None]) -> UsernameCheckResponse:
    """`available` is whether the caller could set it now: false when it does not match
    `^[a-z0-9_]{3,24}$` or another user holds it (your own current name is available to you)."""
    principal = call.require_principal()
    candidate = call.query.username
    reason = await usernames.availability(call.pool, principal.user_id, candidate)
    return UsernameCheckResponse(username=candidate, available=reason is None, reason=reason)


@routes.post(
    "/v1/username/batch",
    name="batchGetUsernames",
    summary="Usernames of up to 200 users",
    auth=AuthMode.EITHER,
    response=UsernameBatchResponse,
    body=UsernameBatchRequest,
)
async def batch_usernames(call: Call[UsernameBatchRequest, None, None]) -> UsernameBatchResponse:
    """Returns only the users that have a username; more than 200 ids is a 400."""
    call.require_principal()
    rows = await repo.get_many(call.pool, list(dict.fromkeys(call.body.userIds)))
    items = [UsernameRecord.from_row(row) for row in rows]
    return UsernameBatchResponse(items=items, count=len(items))
