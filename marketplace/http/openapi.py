"""The OpenAPI 3.1 document, generated from the route table and its pydantic models."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from marketplace import API_VERSION
from marketplace.errors import (
    EmailNotVerified,
    Forbidden,
    InvalidRequest,
    LegalAcceptanceRequired,
    MarketplaceError,
    PayloadTooLarge,
    PrincipalMismatch,
    RateLimited,
    ServiceUnavailable,
    Unauthorized,
    UnsupportedMediaType,
)
from marketplace.http.routing import AuthMode, Route
from marketplace.types import ResponseModel

REF = "#/components/schemas/{model}"

SECURITY_SCHEMES = {
    "sessionBearer": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "Session JWT from the identity provider; `sub` is the user id.",
    },
    "agentApiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "x-agent-api-key",
        "description": "Agent API key acting for its parent user.",
    },
    "schedulerBearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "Shared secret of the internal scheduler.",
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


class ErrorResponse(ResponseModel):
    """Every error: a machine code and a message; some errors add fields (spec section 7)."""

    model_config = {"extra": "allow"}
    error: str
    message: str


def _openapi_path(path: str) -> str:
    return re.sub(r"\{([^}:]+)(:[^}]*)?\}", r"{\1}", path)


def _errors_of(route: Route) -> list[type[MarketplaceError]]:
    errors: list[type[MarketplaceError]] = list(route.errors)
    if route.body or route.query or route.path_params:
        errors.append(InvalidRequest)
    if route.body:
        errors.extend((PayloadTooLarge, UnsupportedMediaType))
    if route.auth is not AuthMode.NONE:
        errors.extend((Unauthorized, PrincipalMismatch))
    if route.auth is AuthMode.SESSION:
        errors.append(Forbidden)  # an agent key on a session-only route
    if route.guarded:
        errors.extend((EmailNotVerified, LegalAcceptanceRequired))
    if route.rate_limited:
        errors.append(RateLimited)
    errors.append(ServiceUnavailable)
    return errors


def build_openapi(routes: list[Route], *, title: str, description: str) -> dict[str, Any]:
    models: list[tuple[type[BaseModel], Any]] = [(ErrorResponse, "serialization")]
    for route in routes:
        if route.body is not None:
            models.append((route.body, "validation"))
        if route.response is not None:
            models.append((route.response, "serialization"))
        for params in (route.query, route.path_params):
            if params is not None:
                models.append((params, "validation"))
    unique = list(dict.fromkeys(models))
    refs, top = models_json_schema(unique, ref_template=REF)
    schemas: dict[str, Any] = dict(top.get("$defs", {}))

    def resolve(model: type[BaseModel], mode: str) -> dict[str, Any]:
        ref = refs[(model, mode)]["$ref"]
        return schemas[ref.rsplit("/", 1)[1]]

    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        operation: dict[str, Any] = {
            "operationId": route.name,
            "summary": route.summary,
            "tags": [route.tag],
            "security": _SECURITY[route.auth],
            "x-auth": route.auth.value,
        }
        if route.description:
            operation["description"] = route.description.strip()
        if route.guarded:
            operation["x-guarded"] = True
        parameters = []
        for location, model in (("path", route.path_params), ("query", route.query)):
            if model is None:
                continue
            schema = resolve(model, "validation")
            required = set(schema.get("required", []))
            for name, prop in schema.get("properties", {}).items():
                param = {
                    "name": name,
                    "in": location,
                    "required": location == "path" or name in required,
                    "schema": {k: v for k, v in prop.items() if k != "description"},
                }
                if "description" in prop:
                    param["description"] = prop["description"]
                parameters.append(param)
        if parameters:
            operation["parameters"] = parameters
        if route.body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": refs[(route.body, "validation")]}},
            }
        responses: dict[str, Any] = {}
        if route.response is not None:
            responses[str(route.status)] = {
                "description": route.response.__doc__.strip().splitlines()[0]
                if route.response.__doc__
                else "OK",
                "content": {
                    route.response_content_type: {"schema": refs[(route.response, "serialization")]}
                },
            }
        else:
            responses[str(route.status)] = {"description": "OK"}
        by_status: dict[int, list[str]] = {}
        for error in _errors_of(route):
            codes = by_status.setdefault(error.status, [])
            # An error class standing for a family of codes lists them in `documented_codes`.
            for code in getattr(error, "documented_codes", (error.code,)):
                if code not in codes:
                    codes.append(code)
        for status, codes in sorted(by_status.items()):
            responses[str(status)] = {
                "description": "error codes: " + ", ".join(f"`{c}`" for c in codes),
                "content": {
                    "application/json": {"schema": {"$ref": REF.format(model="ErrorResponse")}}
                },
            }
        operation["responses"] = responses
        paths.setdefault(_openapi_path(route.path), {})[route.method.lower()] = operation

    for name in ("ErrorResponse",):
        schemas.setdefault(name, resolve(ErrorResponse, "serialization"))
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": API_VERSION, "description": description},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": SECURITY_SCHEMES},
    }
