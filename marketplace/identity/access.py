"""Who may act on whose identity records."""

from __future__ import annotations

import uuid

from marketplace.auth import Principal
from marketplace.errors import Forbidden


def ensure_self(principal: Principal, user_id: uuid.UUID | None) -> uuid.UUID:
    """The user a request acts on: the caller, unless it names someone else (403)."""
    if user_id is not None and user_id != principal.user_id:
        raise Forbidden("you can only act on your own account")
    return principal.user_id
