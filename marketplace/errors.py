"""The error root every domain raises; the HTTP error middleware alone renders them.

Constructors take only simple values so instances pickle across the Ray boundary: an exception
raised inside an actor reaches the frontend as the same class mixed with ``RayTaskError``.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypedDict


class ValidationDetail(TypedDict):
    """One invalid field of a 400 ``invalid_request`` (the spec's ``details`` entries)."""

    location: str  # path, query, header or body
    field: str
    message: str
    type: str


class ErrorExtra(TypedDict, total=False):
    """The members an error body carries besides ``error`` and ``message`` (spec section 7),
    each only on the errors that define it."""

    details: list[ValidationDetail]  # invalid_request
    missing: list[dict[str, str]]  # legal_acceptance_required: documentType, version
    until: str  # sending_suspended (ISO date-time)
    unknown: list[str]  # unknown_category
    checks: dict[str, str]  # readiness' service_unavailable: dependency -> state


class ErrorBody(ErrorExtra):
    error: str
    message: str


class MarketplaceError(Exception):
    code: ClassVar[str] = "internal_error"
    status: ClassVar[int] = 500
    default_message: ClassVar[str] = "internal error"

    def __init__(self, message: str | None = None, extra: ErrorExtra | None = None) -> None:
        self.message = message or self.default_message
        self.extra: ErrorExtra = extra.copy() if extra else {}
        super().__init__(self.message, self.extra)

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclass constructors differ; rebuild from the instance state instead of calling them.
        return (_rebuild_error, (type(self), self.args, self.__dict__))

    def body(self) -> ErrorBody:
        return {"error": self.code, "message": self.message, **self.extra}

    def headers(self) -> dict[str, str]:
        return {}


class InvalidRequest(MarketplaceError):
    code = "invalid_request"
    status = 400
    default_message = "request validation failed"

    def __init__(
        self, message: str | None = None, details: list[ValidationDetail] | None = None
    ) -> None:
        super().__init__(message, {"details": details or []})


class Unauthorized(MarketplaceError):
    code = "unauthorized"
    status = 401
    default_message = "authentication required"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="marketplace"'}


class PrincipalMismatch(Unauthorized):
    code = "principal_mismatch"
    default_message = "session token and agent API key belong to different users"


class Forbidden(MarketplaceError):
    code = "forbidden"
    status = 403
    default_message = "not allowed"


class EmailNotVerified(Forbidden):
    code = "email_not_verified"
    default_message = "a verified e-mail address is required for this action"


class LegalAcceptanceRequired(Forbidden):
    code = "legal_acceptance_required"
    default_message = "required legal documents have not been accepted"

    def __init__(self, missing: list[dict[str, str]], message: str | None = None) -> None:
        super().__init__(message, {"missing": missing})


class NotFound(MarketplaceError):
    code = "not_found"
    status = 404
    default_message = "resource not found"


class MethodNotAllowed(MarketplaceError):
    code = "method_not_allowed"
    status = 405
    default_message = "method not allowed"


class Conflict(MarketplaceError):
    code = "conflict"
    status = 409
    default_message = "conflict"


class PayloadTooLarge(MarketplaceError):
    code = "payload_too_large"
    status = 413
    default_message = "request body too large"


class HeaderTooLarge(MarketplaceError):
    code = "request_header_fields_too_large"
    status = 431
    default_message = "a request header field or the request line is longer than the server accepts"


class UnsupportedMediaType(MarketplaceError):
    code = "unsupported_media_type"
    status = 415
    default_message = "request body must be application/json"


class RateLimited(MarketplaceError):
    code = "rate_limited"
    status = 429
    default_message = "rate limit exceeded; back off and retry"

    def __init__(self, retry_after: int, message: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class IdempotencyKeyInProgress(Conflict):
    code = "idempotency_key_in_progress"
    default_message = (
        "a request with this Idempotency-Key is still being processed; retry once it has ended"
    )


class IdempotencyKeyReused(MarketplaceError):
    code = "idempotency_key_reused"
    status = 422
    default_message = (
        "this Idempotency-Key was used with another request (method, path or body); "
        "use a new key for a new request"
    )


class ServiceUnavailable(MarketplaceError):
    code = "service_unavailable"
    status = 503
    default_message = "a backend component is unavailable; retry shortly"

    def __init__(self, message: str | None = None, retry_after: int = 2) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


def _rebuild_error(
    cls: type[MarketplaceError], args: tuple[object, ...], state: dict[str, object]
) -> MarketplaceError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error
