"""Permission flags of the caller (set by operators with ``marketplace admin``)."""

from __future__ import annotations

from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.identity.models import PermissionFlags, PermissionsResponse
from marketplace.identity.permissions import flags_of

routes = RouteTable(tag="permissions")


@routes.get(
    "/v1/auth/permissions",
    name="getPermissions",
    summary="The caller's permission flags",
    auth=AuthMode.EITHER,
    response=PermissionsResponse,
)
async def get_permissions(call: Call[None, None, None]) -> PermissionsResponse:
    """Both shapes of the spec at once: nested under `permissions` and flat."""
    principal = call.require_principal()
    flags = await flags_of(call.pool, principal.user_id)
    return PermissionsResponse(
        userId=principal.user_id,
        permissions=PermissionFlags(
            moderationAdmin=flags.moderation_admin, verifierAdmin=flags.verifier_admin
        ),
        moderationAdmin=flags.moderation_admin,
        verifierAdmin=flags.verifier_admin,
    )
