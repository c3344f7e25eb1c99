"""The OpenAPI 3.1 document, generated from the route table and its pydantic models."""

from __future__ import annotations

import inspect
import re
import sys
from datetime import datetime
from typing import Any, Literal, NotRequired, TypedDict, cast

from pydantic import BaseModel, Field, JsonValue
from pydantic.json_schema import (
    GenerateJsonSchema,
    JsonSchemaValue,
    SkipJsonSchema,
    models_json_schema,
)

from marketplace import API_VERSION
from marketplace.errors import (
    EmailNotVerified,
    ErrorBody,
    ErrorExtra,
    Forbidden,
    HeaderTooLarge,
    IdempotencyKeyInProgress,
    IdempotencyKeyReused,
    InvalidRequest,
    LegalAcceptanceRequired,
    MarketplaceError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PrincipalMismatch,
    RateLimited,
    ServiceUnavailable,
    Unauthorized,
    UnsupportedMediaType,
)
from marketplace.http.idempotency import IDEMPOTENCY_KEY_HEADER, KEY_PATTERN, REPLAYED_HEADER
from marketplace.http.openapi_examples import OperationExamples
from marketplace.http.routing import FORM_MEDIA_TYPES, AuthMode, Route
from marketplace.moderation.errors import OffensiveContent, SendingSuspended
from marketplace.types import JsonObject, ResponseModel

REF = "#/components/schemas/{model}"


# --- the document's shape (OpenAPI 3.1); JSON Schema pieces are pydantic's, passed through ----


class Example(TypedDict):
    value: JsonValue | ErrorBody
    summary: NotRequired[str]


class MediaType(TypedDict):
    schema: JsonObject
    example: NotRequired[JsonValue]
    examples: NotRequired[dict[str, Example]]


class RequestBody(TypedDict):
    required: bool
    content: dict[str, MediaType]


class Response(TypedDict):
    description: str
    headers: NotRequired[dict[str, JsonObject]]
    content: NotRequired[dict[str, MediaType]]


# Functional syntax: `in` and the `x-` extensions are no identifiers.
Parameter = TypedDict(
    "Parameter",
    {
        "name": str,
        "in": str,
        "required": bool,
        "schema": JsonObject,
        "description": NotRequired[JsonValue],
        "example": NotRequired[JsonValue],
    },
)


class CodeSample(TypedDict):
    lang: str
    label: str
    source: str


Operation = TypedDict(
    "Operation",
    {
        "operationId": str,
        "summary": str,
        "tags": list[str],
        "security": list[dict[str, list[str]]],
        "x-auth": str,
        "description": str,
        "x-guarded": NotRequired[bool],
        "x-sends-messages": NotRequired[bool],
        "parameters": NotRequired[list[Parameter]],
        "requestBody": NotRequired[RequestBody],
        "x-codeSamples": NotRequired[list[CodeSample]],
        "responses": NotRequired[dict[str, Response]],  # always, set last (the key order shows)
    },
)


class Info(TypedDict):
    title: str
    version: str
    description: str


class Components(TypedDict):
    schemas: dict[str, JsonObject]
    securitySchemes: dict[str, dict[str, str]]


class Tag(TypedDict):
    name: str
    description: str


class OpenApiDocument(TypedDict):
    openapi: str
    info: Info
    servers: list[dict[str, str]]
    tags: list[Tag]
    paths: dict[str, dict[str, Operation]]
    components: Components


SECURITY_SCHEMES: dict[str, dict[str, str]] = {
    "sessionBearer": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": (
            "`Authorization: Bearer <session JWT>` from the identity provider: `sub` is the "
            "user id (uuid), `email_verified`, `iat` and `exp` are required. An `email` claim of "
            "a token with `email_verified` true is kept as the user's notification address. In "
            "development: `marketplace token --user-id <uuid>`."
        ),
    },
    "agentApiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "x-agent-api-key",
        "description": (
            "`x-agent-api-key: <key>`: an agent API key (`POST /v1/api-keys`, shown once) "
            "acting for its user."
        ),
    },
    "schedulerBearer": {
        "type": "http",
        "scheme": "bearer",
        "description": (
            "`Authorization: Bearer <scheduler secret>` (`MARKETPLACE_SCHEDULER_SECRET`), "
            "only where an operation lists it. Uses the same header as sessionBearer: "
            "authorize one of the two at a time."
        ),
    },
    "streamTicket": {
        "type": "apiKey",
        "in": "query",
        "name": "ticket",
        "description": (
            "`?ticket=<ticket>`: a single-use stream ticket (`POST /v1/stream/tickets`, valid "
            "`MARKETPLACE_STREAM_TICKET_TTL_SECONDS`), only where an operation lists it "
            "(`GET /v1/stream`, for a browser's `EventSource`, which cannot send headers)."
        ),
    },
}

_SECURITY: dict[AuthMode, list[dict[str, list[str]]]] = {
    AuthMode.NONE: [],
    AuthMode.OPTIONAL: [{}, {"sessionBearer": []}, {"agentApiKey": []}],
    AuthMode.EITHER: [{"sessionBearer": []}, {"agentApiKey": []}],
    AuthMode.SESSION: [{"sessionBearer": []}],
    AuthMode.SCHEDULER: [{"schedulerBearer": []}],
    AuthMode.EITHER_OR_SCHEDULER: [
        {"sessionBearer": []},
        {"agentApiKey": []},
        {"schedulerBearer": []},
    ],
}


_ACCESS: dict[AuthMode, str] = {
    AuthMode.NONE: "public; credentials are not looked at.",
    AuthMode.OPTIONAL: (
        "anonymous, or a session JWT or agent API key to see what that user may see; a "
        "credential that does not verify is still 401."
    ),
    AuthMode.EITHER: "a session JWT or an agent API key.",
    AuthMode.SESSION: "a session JWT only; an agent API key is 403 `forbidden`.",
    AuthMode.SCHEDULER: "the scheduler secret only.",
    AuthMode.EITHER_OR_SCHEDULER: "a session JWT, an agent API key or the scheduler secret.",
}
_GUARDED = (
    "**Guarded mutation:** after authentication and the rate limit, before the path, query "
    "and body are validated: a verified e-mail (else 403 `email_not_verified`), then legal "
    "assent (`strict`: 403 `legal_acceptance_required` with `missing`; `implicit`: missing "
    "versions are recorded as implied assent)."
)
_SENDS_MESSAGES = (
    "**Sends a message:** after legal assent, a caller whose sending is suspended after "
    "repeated offenses is refused with 403 `sending_suspended` (`until`: when sending is "
    "allowed again). Before anything is stored the body passes the offensive-term filter: a "
    "match is 422 `offensive_content`, the message is not stored and the send counts as an "
    "offense against the caller's account."
)


class ValidationDetail(ResponseModel):
    location: str = Field(description="`path`, `query` or `body`")
    field: str = Field(description="dotted path of the field inside that location")
    message: str
    type: str = Field(description="machine-readable kind of the failure")


class MissingLegalDocument(ResponseModel):
    documentType: str
    version: str


def _no_default(schema: JsonObject) -> None:
    schema.pop("default", None)  # the field is left out, never null


class ErrorResponse(ResponseModel):
    """Every error: a machine code and a message; some errors add fields (spec section 7)."""

    model_config = {"extra": "allow"}
    error: str = Field(description="machine code; each operation lists the codes it answers")
    message: str = Field(description="human-readable explanation; not meant to be parsed")
    details: list[ValidationDetail] | SkipJsonSchema[None] = Field(
        default=None,
        description="400 `invalid_request` only: one entry per invalid field",
        json_schema_extra=_no_default,
    )
    missing: list[MissingLegalDocument] | SkipJsonSchema[None] = Field(
        default=None,
        description="403 `legal_acceptance_required` only: required versions not yet accepted",
        json_schema_extra=_no_default,
    )
    until: datetime | SkipJsonSchema[None] = Field(
        default=None,
        description="403 `sending_suspended` only: when sending is allowed again (date-time)",
        json_schema_extra=_no_default,
    )


# Answered for any request, whatever route it names (or none): an unknown path, a method the
# path does not have, an oversize request line or header, an unexpected failure.
FRAMEWORK_ERRORS: tuple[type[MarketplaceError], ...] = (
    NotFound,
    MethodNotAllowed,
    HeaderTooLarge,
    MarketplaceError,
)


def documented(error: type[MarketplaceError], *codes: str) -> type[MarketplaceError]:
    """``error`` as a route declares it when only ``codes`` of its family can happen there.

    The class belongs to the module that declares it (not to this one), so a declaration in a
    test stays the test's: the docs page test counts the classes of ``marketplace`` modules."""
    declaring_module = sys._getframe(1).f_globals.get("__name__", __name__)
    return type(
        error.__name__, (error,), {"documented_codes": codes, "__module__": declaring_module}
    )


def codes_of(error: type[MarketplaceError]) -> tuple[str, ...]:
    # An error class standing for a family of codes lists them in `documented_codes`.
    return tuple(getattr(error, "documented_codes", (error.code,)))


def _message(error: type[MarketplaceError], code: str) -> str:
    if code == error.code:
        if error is MarketplaceError:
            return "internal error (request id 5f0c2d8e9b7a4e21)"
        return error.default_message
    return f"{error.default_message}: {code.replace('_', ' ')}"


def error_example(error: type[MarketplaceError], code: str) -> ErrorBody:
    example: ErrorBody = {"error": code, "message": _message(error, code)}
    if issubclass(error, InvalidRequest):
        example["message"] = "invalid body: body.metadata.title"
        example["details"] = [
            {
                "location": "body",
                "field": "metadata.title",
                "message": "String should have at least 1 character",
                "type": "string_too_short",
            }
        ]
    if issubclass(error, LegalAcceptanceRequired):
        example["missing"] = [{"documentType": "terms", "version": "2025-03-01"}]
    # Errors with spec-defined extra fields show them in their example.
    example.update(cast(ErrorExtra, getattr(error, "example_extra", {})))
    return example


def _operation_error_example(
    error: type[MarketplaceError], code: str, invalid: ErrorBody | None
) -> ErrorBody:
    if code != InvalidRequest.code:
        return error_example(error, code)
    # The operation's own broken field; without one, no field at all rather than another
    # operation's.
    return invalid or {"error": code, "message": error.default_message}


class _Answered:
    """One error code: the class that raises it and the operations that declare it."""

    def __init__(self, error: type[MarketplaceError]) -> None:
        self.error = error
        self.status = error.status
        self.operations: list[str] = []


def all_errors(routes: list[Route]) -> dict[str, _Answered]:
    """Every error code the API can answer, by status then code."""
    found: dict[str, _Answered] = {}
    for route in routes:
        for error in _errors_of(route):
            for code in codes_of(error):
                answered = found.setdefault(code, _Answered(error))
                answered.operations.append(_route_key(route))
    for error in FRAMEWORK_ERRORS:
        found.setdefault(error.code, _Answered(error))
    return dict(sorted(found.items(), key=lambda item: (item[1].status, item[0])))


def _ordered(value: Any, parent_key: str | None = None) -> Any:
    if parent_key in ("examples", "example"):
        return value  # shown as written: sorted keys would put `mode` after `metadata`
    if isinstance(value, list):
        return [_ordered(item, parent_key) for item in value]
    if not isinstance(value, dict):
        return value
    keys = list(value) if parent_key in ("properties", "default") else sorted(value)
    return {key: _ordered(value[key], key) for key in keys}


class _SchemaGenerator(GenerateJsonSchema):
    """pydantic's generator, but examples keep the key order they were written in."""

    def sort(self, value: JsonSchemaValue, parent_key: str | None = None) -> JsonSchemaValue:
        result: JsonSchemaValue = _ordered(value, parent_key)
        return result


def _openapi_path(path: str) -> str:
    return re.sub(r"\{([^}:]+)(:[^}]*)?\}", r"{\1}", path)


def _errors_of(route: Route) -> list[type[MarketplaceError]]:
    errors: list[type[MarketplaceError]] = list(route.errors)
    if route.body or route.query or route.path_params or route.header_params:
        errors.append(InvalidRequest)
    if route.body:
        errors.extend((PayloadTooLarge, UnsupportedMediaType))
    if route.auth is not AuthMode.NONE:
        errors.extend((Unauthorized, PrincipalMismatch))
    if route.auth is AuthMode.SESSION:
        errors.append(Forbidden)  # an agent key on a session-only route
    if route.guarded:
        errors.extend((EmailNotVerified, LegalAcceptanceRequired))
    if route.sends_messages:
        errors.extend((SendingSuspended, OffensiveContent))
    if route.rate_limited:
        errors.append(RateLimited)
    if route.idempotent:
        errors.extend((IdempotencyKeyReused, IdempotencyKeyInProgress))
    # Any request can carry a request line or a header longer than the server reads
    # (schemathesis found it with a long query string).
    errors.extend((HeaderTooLarge, ServiceUnavailable))
    return errors


def _description(route: Route) -> str:
    parts = [inspect.cleandoc(route.description)] if route.description.strip() else []
    access = f"**Credentials:** {_ACCESS[route.auth]}"
    if not route.rate_limited:
        access += " Not rate-limited."
    parts.append(access)
    if route.guarded:
        parts.append(_GUARDED)
    if route.sends_messages:
        parts.append(_SENDS_MESSAGES)
    if route.idempotent:
        parts.append(_IDEMPOTENT)
    return "\n\n".join(parts)


def _body_examples(schema: JsonObject, schemas: dict[str, JsonObject]) -> dict[str, Example]:
    """Named examples of a request body: its own, or one per `oneOf` member that has any."""
    # pydantic writes `examples` as a list, `oneOf` as a list of objects, `$ref`, `title` and
    # `description` as text: the casts say so.
    examples: dict[str, Example] = {}
    for index, value in enumerate(cast(list[JsonValue], schema.get("examples", []))):
        examples[f"example{index + 1}"] = {"value": value}
    for member in cast(list[JsonObject], schema.get("oneOf", [])):
        ref = cast(str, member.get("$ref", ""))
        target = schemas.get(ref.rsplit("/", 1)[-1], member)
        for value in cast(list[JsonValue], target.get("examples", []))[:1]:
            name = cast(str, target.get("title", f"option{len(examples) + 1}"))
            examples[name] = {"summary": cast(str, target.get("description", name)), "value": value}
    return examples


_IDEMPOTENT = (
    "**Idempotent with a key:** a request with an `Idempotency-Key` header answers, for the "
    "same key, user, method, path and body within `MARKETPLACE_IDEMPOTENCY_KEY_TTL_HOURS`, "
    "the first request's response again (with `Idempotent-Replayed: true`) and does nothing; "
    "the same key with another request is 422 `idempotency_key_reused`, while the first is "
    "still running 409 `idempotency_key_in_progress`. Successes and 400/413/415/422 answers "
    "are kept; other answers (5xx included) are not, so a retry runs again."
)
IDEMPOTENCY_PARAMETER: Parameter = {
    "name": IDEMPOTENCY_KEY_HEADER,
    "in": "header",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": KEY_PATTERN},
    "description": (
        "a key the client chose for this request (a UUID is a good one; 1 to 255 printable "
        "ASCII characters); a retry with the same key gets the first response again"
    ),
}
_INTEGER: JsonObject = {"type": "integer", "minimum": 0}
RATE_LIMIT_HEADERS: dict[str, JsonObject] = {
    "RateLimit-Limit": {"description": "requests the route's limit allows", "schema": _INTEGER},
    "RateLimit-Remaining": {
        "description": "requests the caller may still make at once",
        "schema": _INTEGER,
    },
    "RateLimit-Reset": {
        "description": "seconds until the caller's full limit is available again",
        "schema": _INTEGER,
    },
    "RateLimit-Policy": {
        "description": "the limit as `<requests>;w=<window seconds>`",
        "schema": {"type": "string", "examples": ["120;w=60"]},
    },
}
RETRY_AFTER_HEADER: JsonObject = {
    "description": "seconds to wait before retrying",
    "schema": {"type": "integer", "minimum": 1},
}
REPLAYED_HEADER_DOC: JsonObject = {
    "description": "`true` when this is the stored response of an earlier request with the "
    "same `Idempotency-Key`",
    "schema": {"type": "string", "enum": ["true"]},
}


def _add_response_headers(route: Route, responses: dict[str, Response]) -> None:
    """The response headers: rate-limit fields on successes and 429, `Retry-After` on 429,
    `Idempotent-Replayed` on the successes of idempotent routes."""
    successes = [str(route.status), *(str(status) for status, _ in route.also_status)]
    for status in successes:
        headers: dict[str, JsonObject] = {}
        if route.rate_limited:
            headers.update(RATE_LIMIT_HEADERS)
        if route.idempotent:
            headers[REPLAYED_HEADER] = REPLAYED_HEADER_DOC
        if headers and status in responses:
            responses[status] = {**responses[status], "headers": headers}
    if "429" in responses:
        limits = RATE_LIMIT_HEADERS if route.rate_limited else {}
        responses["429"] = {
            **responses["429"],
            "headers": {**limits, "Retry-After": RETRY_AFTER_HEADER},
        }


def build_openapi(routes: list[Route], *, title: str, description: str) -> OpenApiDocument:
    models: list[tuple[type[BaseModel], Literal["validation", "serialization"]]] = [
        (ErrorResponse, "serialization")
    ]
    for route in routes:
        if route.body is not None:
            models.append((route.body, "validation"))
        if route.response is not None:
            models.append((route.response, "serialization"))
        for params in (route.query, route.path_params, route.header_params):
            if params is not None:
                models.append((params, "validation"))
    unique = list(dict.fromkeys(models))
    refs, top = models_json_schema(unique, ref_template=REF, schema_generator=_SchemaGenerator)
    schemas: dict[str, JsonObject] = dict(top.get("$defs", {}))

    def resolve(model: type[BaseModel], mode: Literal["validation", "serialization"]) -> JsonObject:
        ref: str = refs[(model, mode)]["$ref"]
        return schemas[ref.rsplit("/", 1)[1]]

    paths: dict[str, dict[str, Operation]] = {}
    for route in routes:
        samples = OperationExamples(route, schemas, resolve)
        curl = samples.curl()
        operation: Operation = {
            "operationId": route.name,
            "summary": route.summary,
            "tags": [tag_of(route)],
            "security": _SECURITY[route.auth]
            + ([{route.query_credential.scheme: []}] if route.query_credential else []),
            "x-auth": route.auth.value,
            # The curl command is in the text too: Swagger UI shows descriptions, not x-codeSamples.
            "description": _description(route) + f"\n\n**Example:**\n\n```shell\n{curl}\n```",
        }
        if route.guarded:
            operation["x-guarded"] = True
        if route.sends_messages:
            operation["x-sends-messages"] = True
        parameters: list[Parameter] = []
        for location, model, values in (
            ("path", route.path_params, samples.path),
            ("query", route.query, samples.query),
            ("header", route.header_params, samples.headers),
        ):
            if model is None:
                continue
            schema = resolve(model, "validation")
            required = set(cast(list[str], schema.get("required", [])))
            for name, prop in cast(dict[str, JsonObject], schema.get("properties", {})).items():
                param: Parameter = {
                    "name": name,
                    "in": location,
                    "required": location == "path" or name in required,
                    "schema": {k: v for k, v in prop.items() if k != "description"},
                }
                if "description" in prop:
                    param["description"] = prop["description"]
                if name in values:
                    param["example"] = values[name]
                parameters.append(param)
        if route.idempotent:
            parameters.append(IDEMPOTENCY_PARAMETER)
        if parameters:
            operation["parameters"] = parameters
        if route.body is not None:
            body_schema = resolve(route.body, "validation")
            # An empty body counts as `{}`: a body with no required field may be left out.
            optional = body_schema.get("type") == "object" and not body_schema.get("required")
            media: MediaType = {"schema": refs[(route.body, "validation")]}
            examples = _body_examples(body_schema, schemas)
            if examples:
                media["examples"] = examples
            elif samples.body is not None:
                media["example"] = samples.body
            media_types = FORM_MEDIA_TYPES if route.body_form else ("application/json",)
            operation["requestBody"] = {
                "required": not optional,
                "content": {media_type: media for media_type in media_types},
            }
        responses: dict[str, Response] = {}
        if route.response is not None:
            responses[str(route.status)] = {
                "description": route.response.__doc__.strip().splitlines()[0]
                if route.response.__doc__
                else "OK",
                "content": {
                    route.response_content_type: {
                        "schema": refs[(route.response, "serialization")],
                        "example": samples.response,
                    }
                },
            }
        elif route.response_content_type != "application/json":
            text: MediaType = {"schema": {"type": "string"}}
            if samples.response is not None:
                text["example"] = samples.response
            responses[str(route.status)] = {
                "description": "OK",
                "content": {route.response_content_type: text},
            }
        else:
            responses[str(route.status)] = {"description": "OK"}
        for status, meaning in route.also_status:
            responses[str(status)] = {**responses[str(route.status)], "description": meaning}
        by_status: dict[int, dict[str, type[MarketplaceError]]] = {}
        for error in _errors_of(route):
            codes = by_status.setdefault(error.status, {})
            for code in codes_of(error):
                codes.setdefault(code, error)
        invalid = samples.invalid_request()
        for status, codes in sorted(by_status.items()):
            responses[str(status)] = {
                "description": "error codes: " + ", ".join(f"`{c}`" for c in codes),
                "content": {
                    "application/json": {
                        "schema": {"$ref": REF.format(model="ErrorResponse")},
                        "examples": {
                            code: {"value": _operation_error_example(error, code, invalid)}
                            for code, error in codes.items()
                        },
                    }
                },
            }
        _add_response_headers(route, responses)
        operation["x-codeSamples"] = [{"lang": "Shell", "label": "curl", "source": curl}]
        operation["responses"] = responses
        paths.setdefault(_openapi_path(route.path), {})[route.method.lower()] = operation

    for name in ("ErrorResponse",):
        schemas.setdefault(name, resolve(ErrorResponse, "serialization"))
    # Generated from every route's declared errors, so no code can be missing from the list.
    schemas["ErrorResponse"]["examples"] = cast(
        list[JsonValue],
        [error_example(answered.error, code) for code, answered in all_errors(routes).items()],
    )
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": API_VERSION, "description": description},
        "servers": [{"url": "/"}],
        "tags": document_tags(routes),
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": SECURITY_SCHEMES},
    }


# --- tags: the spec's areas (its section 4), in its order ----------------------------------------

TAGS: tuple[Tag, ...] = (
    {
        "name": "system",
        "description": "**System and docs.** Health and readiness, this document and page, the "
        "caller's permission flags, the indexer's freshness, Prometheus metrics.",
    },
    {
        "name": "wallet-links",
        "description": "**Wallet links.** Link a wallet to the account by signing a one-time "
        "challenge (EIP-191 or EIP-712); list and revoke links. Most writes about a project need "
        "a linked wallet of the caller.",
    },
    {
        "name": "usernames",
        "description": "**Usernames.** One public name per user (3 to 24 of `a-z`, `0-9`, `_`): "
        "set, read, check availability, and look up many users at once.",
    },
    {
        "name": "api-keys",
        "description": "**Agent API keys.** Keys that let software act for their user "
        "(`x-agent-api-key`): issue (the secret is shown once), rotate, revoke, audit use.",
    },
    {
        "name": "projects",
        "description": "**Projects (read).** Read models indexed from the chain: projects, their "
        "milestones and bids. Anonymous callers see what anyone may see; invite-only projects "
        "only show to their owner and allowed wallets.",
    },
    {
        "name": "project-creation",
        "description": "**Project creation.** Bind an on-chain project creation to its off-chain "
        "metadata: a create intent (sessions) or direct mode (agent keys), then the claim; edit "
        "the metadata afterwards.",
    },
    {
        "name": "bid-drafts",
        "description": "**Bid drafts.** A bidder's off-chain draft of a bid (its hash, an "
        "artifact link, notes), created or updated by the bidder; the project owner lists them.",
    },
    {
        "name": "challenge-submissions",
        "description": "**Challenge submissions.** Off-chain records of challenge-mode "
        "submissions, checked against the on-chain submission hash.",
    },
    {
        "name": "dispute-evidence",
        "description": "**Dispute evidence.** Evidence of the owner and the selected worker in a "
        "dispute, one submission per party.",
    },
    {
        "name": "legal",
        "description": "**Legal assent.** The legal documents, their required versions and the "
        "caller's acceptances. Guarded mutations check assent by the deployment's "
        "`acceptanceMode`: `strict` refuses them until the required versions are accepted, "
        "`implicit` (the default) records missing versions as implied assent, `off` checks "
        "nothing. Accepting is not guarded, so a new account can always do it.",
    },
    {
        "name": "messaging",
        "description": "**Messaging.** Project chat between the owner and the selected worker, "
        "direct messages, block, mute and reports. Sends are guarded and pass the "
        "offensive-term filter.",
    },
    {
        "name": "moderation",
        "description": "**Moderation.** Offenses counted by the term filter, the moderation "
        "audit trail and sending suspensions.",
    },
    {
        "name": "notifications",
        "description": "**Notifications.** E-mail deliveries, the caller's preferences per event "
        "type and channel, and one-click unsubscribe.",
    },
    {
        "name": "leaderboards",
        "description": "**Leaderboards and agents.** Categories, milestone category tags, "
        "leaderboards and agent profiles.",
    },
    {
        "name": "verifier",
        "description": "**Verifier.** Jobs that run deterministic checks on delivered work "
        "(repository and artifact references, a deployed address, a repository's tests in a "
        "sandbox) and the evidence they produce.",
    },
    {
        "name": "stream",
        "description": "**Live event stream** (our extension, not in the spec). Server-Sent "
        "Events of the changes the caller may see; a single-use ticket opens it from a "
        "browser's `EventSource`.",
    },
)

# Route tables whose operations belong to another table's area of the spec.
_TAG_OF_TABLE = {"indexer": "system", "permissions": "system"}


def tag_of(route: Route) -> str:
    return _TAG_OF_TABLE.get(route.tag, route.tag)


def document_tags(routes: list[Route]) -> list[Tag]:
    """The spec's areas that have operations, in the spec's order; a tag of no area (a test's
    own route table) after them, without a description."""
    used = dict.fromkeys(tag_of(route) for route in routes)
    known = [tag for tag in TAGS if tag["name"] in used]
    names = {tag["name"] for tag in TAGS}
    return known + [{"name": name, "description": ""} for name in used if name not in names]


# --- the introduction's generated parts ---------------------------------------------------------

# The spec's endpoints by area (its section 4, plus the extensions planned in the issues). The
# route table decides what is implemented, so this list only changes when the spec does.
SPEC_AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "System",
        (
            "GET /v1/health",
            "GET /v1/openapi.json",
            "GET /v1/internal/indexer/status",
            "GET /v1/auth/permissions",
        ),
    ),
    (
        "Identity: wallet links",
        (
            "GET /v1/wallet-links",
            "POST /v1/wallet-links/challenge",
            "POST /v1/wallet-links/verify",
            "DELETE /v1/wallet-links/{walletAddress}",
        ),
    ),
    (
        "Identity: usernames",
        (
            "GET /v1/username",
            "PUT /v1/username",
            "GET /v1/username/check",
            "POST /v1/username/batch",
        ),
    ),
    (
        "Identity: agent API keys",
        (
            "GET /v1/api-keys",
            "POST /v1/api-keys",
            "POST /v1/api-keys/{keyId}/rotate",
            "POST /v1/api-keys/{keyId}/revoke",
            "GET /v1/api-keys/{keyId}/audit",
        ),
    ),
    (
        "Legal assent",
        (
            "GET /v1/legal/documents",
            "GET /v1/legal/public-documents",
            "GET /v1/legal/acceptances",
            "POST /v1/legal/acceptances",
        ),
    ),
    (
        "Projects (read models indexed from the chain)",
        (
            "GET /v1/projects",
            "GET /v1/projects/{projectAddress}",
            "GET /v1/projects/{projectAddress}/milestones",
        ),
    ),
    (
        "Project creation: create intents, claims, metadata edits",
        (
            "POST /v1/projects/create-intents",
            "POST /v1/projects/{projectAddress}/claim",
            "PATCH /v1/projects/{projectAddress}/metadata",
        ),
    ),
    (
        "Records: bid drafts, challenge submissions, dispute evidence",
        (
            "POST /v1/projects/{projectAddress}/bid-drafts",
            "GET /v1/projects/{projectAddress}/bid-drafts",
            "POST /v1/projects/{projectAddress}/challenge-submissions",
            "GET /v1/projects/{projectAddress}/challenge-submissions",
            "POST /v1/projects/{projectAddress}/dispute-evidence",
            "GET /v1/projects/{projectAddress}/dispute-evidence",
        ),
    ),
    (
        "Messaging: project chat, direct messages, block, mute, reports",
        (
            "GET /v1/projects/{projectAddress}/chat/messages",
            "POST /v1/projects/{projectAddress}/chat/messages",
            "GET /v1/messages/dm/threads",
            "GET /v1/messages/dm/threads/{threadId}/messages",
            "POST /v1/messages/dm",
            "POST /v1/messages/block",
            "DELETE /v1/messages/block/{blockedUserId}",
            "POST /v1/messages/mute",
            "DELETE /v1/messages/mute/{mutedUserId}",
            "POST /v1/messages/reports",
            "GET /v1/messages/reports",
            "POST /v1/messages/reports/{reportId}/status",
        ),
    ),
    (
        "Moderation",
        (
            "GET /v1/moderation/offenses",
            "GET /v1/moderation/audit",
            "DELETE /v1/moderation/suspensions/{userId}",
        ),
    ),
    (
        "Notifications",
        (
            "GET /v1/notifications/deliveries",
            "GET /v1/notifications/preferences",
            "PUT /v1/notifications/preferences",
            "GET /v1/notifications/unsubscribe",
            "POST /v1/notifications/unsubscribe",
        ),
    ),
    (
        "Leaderboards and agent profiles",
        (
            "GET /v1/leaderboard/categories",
            "POST /v1/projects/{projectAddress}/milestones/{milestoneIndex}/category-tags",
            "GET /v1/projects/{projectAddress}/milestones/{milestoneIndex}/category-tags",
            "GET /v1/projects/{projectAddress}/milestones/{milestoneIndex}/category-tags/revisions",
            "GET /v1/leaderboards",
            "GET /v1/agents/{idOrWallet}",
        ),
    ),
    (
        "Verifier jobs",
        (
            "POST /v1/verifier/jobs",
            "GET /v1/verifier/jobs",
            "GET /v1/verifier/jobs/{jobId}",
            "GET /v1/verifier/jobs/{jobId}/evidence",
            "GET /v1/verifier/jobs/{jobId}/evidence/raw",
        ),
    ),
    (
        "Live event stream (Server-Sent Events; our extension)",
        ("GET /v1/stream", "POST /v1/stream/tickets"),
    ),
)


def _route_key(route: Route) -> str:
    return f"{route.method} {_openapi_path(route.path)}"


def implementation_status(routes: list[Route]) -> str:
    """Markdown: which spec areas this server implements, which are still to come, and the
    operations it has beyond the spec."""
    present = {_route_key(route) for route in routes}
    done, partial, todo = [], [], []
    for area, endpoints in SPEC_AREAS:
        missing = [e for e in endpoints if e not in present]
        if not missing:
            done.append(f"- {area} ({len(endpoints)} operations)")
        elif len(missing) < len(endpoints):
            listed = ", ".join(f"`{e}`" for e in missing)
            partial.append(
                f"- {area}: {len(endpoints) - len(missing)} of {len(endpoints)}; to come: {listed}"
            )
        else:
            listed = ", ".join(f"`{e}`" for e in endpoints)
            todo.append(f"- {area}: {listed}")
    in_spec = {e for _, endpoints in SPEC_AREAS for e in endpoints}
    extra = sorted(present - in_spec, key=lambda e: (e.split(" ", 1)[1], e))
    lines = ["**Implemented**", "", *done]
    if partial:
        lines += ["", "**Partly implemented**", "", *partial]
    if todo:
        lines += ["", "**Still to come** (not served yet: these paths answer 404)", "", *todo]
    if extra:
        lines += ["", "**Beyond the spec** (our extensions)", "", *(f"- `{e}`" for e in extra)]
    return "\n".join(lines)


def error_code_table(routes: list[Route]) -> str:
    """Markdown table of every error code the API answers, from the route declarations."""
    rows = ["| Status | Code | Meaning |", "|---|---|---|"]
    for code, answered in all_errors(routes).items():
        error = answered.error
        if error is MarketplaceError:
            meaning = "unexpected failure; the message carries only the request id"
        elif code == error.code:
            meaning = error.default_message
        else:
            # A code of a family (the claim conflicts): its meaning is in the operations' text.
            meaning = "see " + ", ".join(f"`{op}`" for op in dict.fromkeys(answered.operations))
        rows.append(f"| {answered.status} | `{code}` | {meaning} |")
    return "\n".join(rows)
