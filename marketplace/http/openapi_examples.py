"""Examples of the OpenAPI document: request and response bodies, parameters, the 400 answer of
each operation and its curl command, made from the operation's own models.

A value comes, in this order, from the operation's entry in ``REQUEST_BODIES`` (bodies whose
fields depend on each other), the schema's own ``examples`` (``Field(examples=[...])``), its
``const`` or first ``enum`` member, the field-name table ``FIELD_VALUES``, then the schema's
format or pattern (a uuid, a date-time, an address, a bytes32 hash). A string field none of
these covers gets a value that names the field (``<fieldName>``), which the tests refuse in the
real document, as they refuse ``"string"``: a reader never sees a placeholder.

The 400 example of an operation is made by breaking one field of its own valid example and
validating it with the operation's model, so it names a field that operation has, with the
message and type pydantic really answers.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import uuid
from collections.abc import Callable
from typing import Literal, cast

from pydantic import BaseModel, JsonValue, ValidationError

from marketplace.errors import ErrorBody, ValidationDetail
from marketplace.http.idempotency import IDEMPOTENCY_KEY_HEADER
from marketplace.http.routing import AuthMode, Route
from marketplace.types import (
    ADDRESS_PATTERN,
    BYTES32_PATTERN,
    DECIMAL_PATTERN,
    HEX_SIGNATURE_PATTERN,
    JsonObject,
)

# Where the curl commands send their requests: `marketplace up`'s default address.
CURL_BASE_URL = "http://127.0.0.1:8080"

_USER = "3fa85f64-5717-4562-b3fc-2c963f66afa6"
_OTHER_USER = "9b2f6c1e-4d3a-4f8e-a1b7-0c5d2e8f6a43"
_OWNER_WALLET = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
_WORKER_WALLET = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
_PROJECT = "0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0"
_WHEN = "2026-03-02T14:30:00Z"

# Values by field name, for fields whose schema says too little (a plain string, an object).
FIELD_VALUES: dict[str, JsonValue] = {
    # people and wallets
    "userId": _USER,
    "subjectUserId": _OTHER_USER,
    "recipientUserId": _OTHER_USER,
    "otherUserId": _OTHER_USER,
    "blockedUserId": _OTHER_USER,
    "mutedUserId": _OTHER_USER,
    "actorUserId": _USER,
    "senderUserId": _USER,
    "reporterUserId": _USER,
    "resolvedByUserId": _USER,
    "userIds": [_USER, _OTHER_USER],
    "walletAddress": _WORKER_WALLET,
    "ownerAddress": _OWNER_WALLET,
    "ownerWalletAddress": _OWNER_WALLET,
    "bidderAddress": _WORKER_WALLET,
    "bidderWalletAddress": _WORKER_WALLET,
    "submitterAddress": _WORKER_WALLET,
    "senderWalletAddress": _OWNER_WALLET,
    "x-user-wallet-address": _OWNER_WALLET,
    "selectedBuilderAddress": _WORKER_WALLET,
    "signer": _WORKER_WALLET,
    "disputeRaisedBy": _OWNER_WALLET,
    "nodeAddress": "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
    "registryAddress": "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512",
    "projectAddress": _PROJECT,
    "project": _PROJECT,
    "idOrWallet": _WORKER_WALLET,
    "username": "ada_lovelace",
    "usernameLower": "ada_lovelace",
    "otherUsername": "grace_hopper",
    "displayName": "Ada Lovelace",
    "actorName": "ada_lovelace",
    "actorId": _USER,
    "name": "deploy bot",
    "role": "worker",
    "submitterRole": "worker",
    # projects
    "title": "Landing page redesign",
    "description": "Redesign the landing page and ship it behind a feature flag.",
    "repoUrl": "https://github.com/example-org/landing-page",
    "imageUrl": "https://example.com/images/landing-page.png",
    "projectMode": "standard",
    "biddingAccess": "open",
    "status": "open",
    "effectiveStatus": "open",
    "metadataStatus": "merged",
    "disputePhase": "none",
    "disputeReason": "The delivered page does not match the agreed design.",
    "bondUSDC": "50",
    "bidBondUSDC": "50",
    "payoutUSDC": "1500",
    "totalPayoutUSDC": "4500",
    "challengePayoutUSDC": "2000",
    "payoutsUSDC": ["1500", "3000"],
    "durationsSeconds": [604800, 1209600],
    "hashVersion": "v1",
    "notes": "Two milestones: design, then implementation.",
    "note": "Reviewed and resolved.",
    "reason": "Spam: the same link posted five times.",
    "body": "Hi! The first milestone is ready for review.",
    "content": "Terms of service ...",
    "context": "project_chat_message",
    "subject": _PROJECT,
    "kind": "explicit",
    "acceptedVia": "api",
    "state": "completed",
    "category": "smart-contracts",
    "categories": ["smart-contracts", "frontend"],
    "previousCategories": ["frontend"],
    "term": "badword",
    "action": "suspension_lifted",
    "type": "missing",
    "location": "body",
    "field": "title",
    "message": "Field required",
    "error": "timeout after 120 s",
    "lastError": "connection refused",
    "verifierSandbox": "bubblewrap",
    "nodeId": "4c1f0a9d2e7b",
    "triggerRoute": "POST /v1/messages/dm",
    "route": "POST /v1/messages/dm",
    "method": "POST",
    "clientAddress": "203.0.113.7",
    "contentType": "application/json",
    "contentSha256": "9f2c4e6b1d3a5c7e9b0d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c0e2b4d6f8a0c1e",
    "artifactUri": "https://github.com/example-org/landing-page/tree/main",
    "deliveryRef": "https://github.com/example-org/landing-page/commit/a1b2c3d",
    "keyPrefix": "mk_live_",
    "keyLast4": "9f3a",
    "secret": "mk_live_7Qm2c9XfE1pLr8TzW4vNb6Ys0KdHa3Gu",
    "ticket": "st_4kT9mQ2xV7bN1cR8pL5wZ3yH6fD0aS",
    "token": "un_8Hc2Lx5Qe9Rm3Tz7Wb1Nv4Ka6Yp0Gd",
    "pollUrl": "/v1/verifier/jobs/1e0d8c43-2f57-5a5e-9a3b-7b2c6d5f4e31",
    "openapi": "3.1.0",
    "version": "2026-03-01",
    "auth": "Authorization: Bearer <session JWT> or x-agent-api-key: <key>",
    "postgres": "ok",
    "redis": "ok",
    "indexer": "ok",
    "cursor": "eyJpZCI6IjNmYTg1ZjY0In0",
    "nextCursor": "eyJpZCI6IjNmYTg1ZjY0In0",
    "lastEventId": "1709389800000-0",
    "nonce": "4f1c2a9e",
    "List-Unsubscribe": "One-Click",  # RFC 8058's one-click body
    # numbers a reader would expect, and fields that are null in the usual case
    "chainId": 31337,
    "deadline": 1772462400,
    "maxAttempts": 3,
    "freshnessTargetMs": 60000,
    "pollIntervalMs": 2000,
    "lagAlertSeconds": 300,
    "startBlock": 1000,
    "lastSyncedBlock": 1042,
    "headBlock": 1042,
    "lagBlocks": 0,
    "lagSeconds": 2.5,
    "disputes": 0,
    "disputesLost": 0,
    "gracePeriodSeconds": 3600,
    "stale": False,
    "staleReason": None,
    "indexerStaleReason": None,
    "failingSince": None,
    "revokedAt": None,
    "retentionExpiresAt": "2026-06-02T14:30:00Z",
    "expiresAt": "2026-03-02T14:40:00Z",
    "wallets": [_WORKER_WALLET],
    # free-form objects
    "evidence": {"summary": "3 of 3 checks passed", "commit": "a1b2c3d"},
    "evidencePayload": {"summary": "Screenshots of the delivered page", "links": 2},
    "payload": {"summary": "Screenshots of the delivered page", "links": 2},
    "details": {"checks": 3, "passed": 3},
    "raw": {"stdout": "ok", "exitCode": 0},
    "result": {"passes": True, "checks": 3},
    "logs": "checking out main ... ok",
}

# Bodies whose fields constrain each other, by operation id (validated like every example).
REQUEST_BODIES: dict[str, JsonValue] = {}

# Bodies of answers that are not JSON, by operation id.
TEXT_RESPONSES: dict[str, str] = {
    "getDocs": '<!doctype html>\n<html lang="en">\n<head><title>Project Marketplace API'
    " reference</title></head>\n...",
    "showNotificationUnsubscribe": (
        "<!doctype html>\n<title>Unsubscribe</title>\n<p>E-mails about new direct messages are"
        ' on.</p>\n<form method="post"><button name="List-Unsubscribe" value="One-Click">'
        "Unsubscribe</button></form>"
    ),
    "getMetrics": (
        "# HELP marketplace_http_requests_total HTTP requests answered\n"
        "# TYPE marketplace_http_requests_total counter\n"
        'marketplace_http_requests_total{method="GET",route="getHealth",status="200"} 42\n'
    ),
    "openEventStream": (
        "id: 1709389800000-0\nevent: project_chat_message\n"
        'data: {"projectAddress": "' + _PROJECT + '", "messageId": "'
        "1e0d8c43-2f57-5a5e-9a3b-7b2c6d5f4e31" + '"}\n\n'
    ),
}


_NULL: JsonObject = {"type": "null"}
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def _fits(value: JsonValue, schema: JsonObject) -> bool:
    """Whether a table value suits this schema: its type, its enum, and for an object only a
    free-form one (a model's fields are built from its own schema)."""
    if value is None:
        return any(m == _NULL for key in ("anyOf", "oneOf") for m in _members(schema, key))
    if any(key in schema for key in ("$ref", "anyOf", "oneOf", "allOf")):
        return False  # decided on the member or the target
    if "const" in schema:
        return value == schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list):
        return value in enum
    kind = schema.get("type")
    if not isinstance(kind, str) or kind not in _JSON_TYPES:
        return "properties" not in schema
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    if kind == "object" and schema.get("properties"):
        return False
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and not (isinstance(value, str) and re.search(pattern, value)):
        return False
    return isinstance(value, _JSON_TYPES[kind])


def _members(schema: JsonObject, key: str) -> list[JsonObject]:
    return cast(list[JsonObject], schema.get(key, []))


def _stable_uuid(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"marketplace:{name}"))


def _stable_hex(name: str, length: int) -> str:
    digest = hashlib.sha256(f"marketplace:{name}".encode()).hexdigest()
    return "0x" + (digest * (length // 64 + 1))[:length]


class _Builder:
    """Builds example values from JSON Schema."""

    def __init__(self, schemas: dict[str, JsonObject]) -> None:
        self.schemas = schemas

    def resolve(self, schema: JsonObject) -> JsonObject:
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self.schemas[ref.rsplit("/", 1)[-1]]
        return schema

    def value(self, schema: JsonObject, name: str = "") -> JsonValue:
        # The name table first: an address type's own example is the same for every field,
        # while an owner's wallet and a project's address should differ.
        if name in FIELD_VALUES and _fits(FIELD_VALUES[name], schema):
            return FIELD_VALUES[name]
        own = cast(list[JsonValue], schema.get("examples") or [])
        if own and own[0] != "string":
            return own[0]
        if "$ref" in schema:
            return self.value(self.resolve(schema), name)
        for key in ("anyOf", "oneOf"):
            members = [m for m in _members(schema, key) if m != _NULL]
            if members:
                return self.value(members[0], name)
        if "const" in schema:
            return schema["const"]
        enum = cast(list[JsonValue], schema.get("enum") or [])
        if enum:
            return enum[0]
        kind = schema.get("type")
        if kind == "object" or "properties" in schema:
            properties = cast(dict[str, JsonObject], schema.get("properties", {}))
            return {prop: self.value(sub, prop) for prop, sub in properties.items()}
        if kind == "array":
            item = self.value(cast(JsonObject, schema.get("items", {})), name)
            return [item]
        if kind == "integer":
            return self._number(schema, name, 1)
        if kind == "number":
            return self._number(schema, name, 1.5)
        if kind == "boolean":
            return True
        if kind == "null":
            return None
        return self._string(schema, name)

    def _number(self, schema: JsonObject, name: str, default: int | float) -> JsonValue:
        table = FIELD_VALUES.get(name)
        if isinstance(table, int | float) and not isinstance(table, bool):
            return table
        low = cast(float, schema.get("minimum", schema.get("exclusiveMinimum", default)))
        high = cast(float, schema.get("maximum", max(low, default)))
        if "limit" in name.lower():
            return int(min(max(20, low), high))
        return type(default)(min(max(default, low), high))

    def _string(self, schema: JsonObject, name: str) -> JsonValue:
        pattern = schema.get("pattern")
        fmt = schema.get("format")
        if pattern == ADDRESS_PATTERN:
            return _stable_hex(name, 40)
        if pattern == BYTES32_PATTERN:
            return _stable_hex(name, 64)
        if pattern == HEX_SIGNATURE_PATTERN:
            return _stable_hex(name, 130)
        if pattern == DECIMAL_PATTERN:
            return "1500"
        if fmt == "uuid":
            return _stable_uuid(name)
        if fmt == "date-time":
            return _WHEN
        if fmt == "date":
            return _WHEN[:10]
        if fmt in ("uri", "url"):
            return "https://example.com/" + name
        if fmt == "email":
            return "ada@example.com"
        listed = FIELD_VALUES.get(name)
        if isinstance(listed, list) and all(isinstance(item, str) for item in listed):
            return ",".join(cast(list[str], listed))  # a comma-separated query parameter
        return f"<{name}>"


def _parameter_model_values(builder: _Builder, schema: JsonObject) -> dict[str, JsonValue]:
    properties = cast(dict[str, JsonObject], schema.get("properties", {}))
    return {name: builder.value(sub, name) for name, sub in properties.items()}


class OperationExamples:
    """The examples of one operation, built from its route and the document's schemas."""

    def __init__(
        self,
        route: Route,
        schemas: dict[str, JsonObject],
        resolve: Callable[[type[BaseModel], Literal["validation", "serialization"]], JsonObject],
    ) -> None:
        self.route = route
        builder = _Builder(schemas)
        self.path: dict[str, JsonValue] = {}
        self.query: dict[str, JsonValue] = {}
        self.headers: dict[str, JsonValue] = {}
        for model, target in (
            (route.path_params, self.path),
            (route.query, self.query),
            (route.header_params, self.headers),
        ):
            if model is not None:
                target.update(_parameter_model_values(builder, resolve(model, "validation")))
        self.body: JsonValue | None = None
        if route.body is not None:
            if route.name in REQUEST_BODIES:
                self.body = REQUEST_BODIES[route.name]
            else:
                self.body = builder.value(resolve(route.body, "validation"))
        self.response: JsonValue | None = None
        if route.response is not None:
            self.response = builder.value(resolve(route.response, "serialization"))
        elif route.name in TEXT_RESPONSES:
            self.response = TEXT_RESPONSES[route.name]

    # --- the 400 answer ---------------------------------------------------------------------

    def invalid_request(self) -> ErrorBody | None:
        """The 400 this operation answers for one broken field of its own example, or None when
        none of its inputs can be broken (its 400 then comes from its own checks)."""
        route = self.route
        if route.body is not None and isinstance(self.body, dict) and not route.body_form:
            found = _broken_body(route.body, self.body)
            if found:
                return found
        for location, model, values in (
            ("path", route.path_params, self.path),
            ("query", route.query, self.query),
            ("header", route.header_params, self.headers),
        ):
            if model is not None and values:
                found = _broken_parameters(model, values, location)
                if found:
                    return found
        return None

    # --- curl ---------------------------------------------------------------------------------

    def curl(self) -> str:
        route = self.route
        path = route.path
        for name, value in self.path.items():
            path = _replace_path_param(path, name, str(value))
        required = _required(route.query)
        query = "&".join(
            f"{name}={_query_text(value)}" for name, value in self.query.items() if name in required
        )
        if route.query_credential is not None:
            query = "&".join(filter(None, (query, f"{route.query_credential.param}=$TICKET")))
        url = CURL_BASE_URL + path + (f"?{query}" if query else "")
        lines = [f"curl -X {route.method} {_double_quoted(url)}"]
        token = {
            AuthMode.EITHER: "$TOKEN",
            AuthMode.SESSION: "$TOKEN",
            AuthMode.EITHER_OR_SCHEDULER: "$TOKEN",
            AuthMode.SCHEDULER: "$SCHEDULER_SECRET",
        }.get(route.auth)
        if token and route.query_credential is None:
            lines.append(f'-H "Authorization: Bearer {token}"')
        for name, value in self.headers.items():
            lines.append("-H " + shlex.quote(f"{name}: {value}"))
        if route.idempotent:
            lines.append(f'-H "{IDEMPOTENCY_KEY_HEADER}: $(uuidgen)"')
        if route.body is not None and isinstance(self.body, dict):
            if route.body_form:
                lines += [
                    "--data-urlencode " + shlex.quote(f"{name}={value}")
                    for name, value in self.body.items()
                ]
            else:
                lines.append("-H 'Content-Type: application/json'")
                lines.append("-d " + shlex.quote(json.dumps(self.body)))
        if route.response_content_type == "text/event-stream":
            lines.insert(1, "-N")  # print events as they arrive
        return " \\\n  ".join(lines)


def _double_quoted(text: str) -> str:
    # Double quotes: the URL may carry `$TICKET`, which the shell must expand.
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _replace_path_param(path: str, name: str, value: str) -> str:
    start = path.find("{" + name)
    if start < 0:
        return path
    end = path.index("}", start)
    return path[:start] + value + path[end + 1 :]


def _query_text(value: JsonValue) -> str:
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _required(model: type[BaseModel] | None) -> set[str]:
    if model is None:
        return set()
    return {info.alias or name for name, info in model.model_fields.items() if info.is_required()}


def _error(location: str, exc: ValidationError) -> ErrorBody:
    details: list[ValidationDetail] = [
        {
            "location": location,
            "field": ".".join(str(part) for part in error["loc"]),
            "message": error["msg"],
            "type": error["type"],
        }
        for error in exc.errors(include_url=False, include_input=False)
    ]
    fields = ", ".join(f"{d['location']}.{d['field']}" if d["field"] else location for d in details)
    return {
        "error": "invalid_request",
        "message": f"invalid {location}: {fields}",
        "details": details,
    }


def _broken_body(model: type[BaseModel], body: dict[str, JsonValue]) -> ErrorBody | None:
    """A required field left out, else a field of the wrong type."""
    fields = [(info.alias or name, info) for name, info in model.model_fields.items()]
    attempts: list[JsonValue] = []
    for name, info in fields:
        if info.is_required() and name in body:
            attempts.append({key: value for key, value in body.items() if key != name})
    for name, _ in fields:
        if name in body:
            wrong: JsonValue = 12345 if isinstance(body[name], str) else "twelve"
            attempts.append({**body, name: wrong})
    for attempt in [*attempts, []]:  # an empty model refuses only a body that is no object
        try:
            model.model_validate_json(json.dumps(attempt), strict=True)
        except ValidationError as exc:
            return _error("body", exc)
    return None


def _broken_parameters(
    model: type[BaseModel], values: dict[str, JsonValue], location: str
) -> ErrorBody | None:
    """One parameter given a value of the wrong shape (as text: parameters arrive as text)."""
    text = {name: _query_text(value) for name, value in values.items()}
    for name in text:
        for wrong in ("not-a-valid-value", "-1", "", "x" * 1000):
            try:
                model.model_validate({**text, name: wrong})
            except ValidationError as exc:
                return _error(location, exc)
    return None
