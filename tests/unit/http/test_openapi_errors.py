"""The OpenAPI error listing, built from route declarations alone (no app, no server): each
operation lists exactly the errors its route declares plus the ones its options imply, under
the right status, with one example per code; an error no route declares is listed nowhere."""

from __future__ import annotations

import re
from typing import Any

from openapi_spec_validator import validate
from pydantic import BaseModel

from marketplace.errors import Conflict, Forbidden, MarketplaceError, NotFound
from marketplace.http.openapi import all_errors, build_openapi, documented
from marketplace.http.routing import AuthMode, Call, Route, RouteTable
from marketplace.types import QueryModel, RequestModel, ResponseModel


class WidgetTaken(Conflict):
    code = "widget_taken"
    default_message = "the widget is taken"


class WidgetLocked(Conflict):
    code = "widget_locked"
    default_message = "the widget is locked"


class WidgetMissing(NotFound):
    code = "widget_not_found"
    default_message = "no such widget"


class NeverDeclared(Conflict):
    """Raised somewhere, declared on no route: must appear nowhere in the document."""

    code = "never_declared"


class Widget(ResponseModel):
    """A widget."""

    name: str


class WidgetBody(RequestModel):
    name: str


class WidgetQuery(QueryModel):
    limit: int = 20


class WidgetPath(QueryModel):
    widgetId: str


async def handler(call: Call[Any, Any, Any]) -> BaseModel:
    raise AssertionError("never called: the document is built from declarations")


def routes() -> list[Route]:
    table = RouteTable(tag="widgets")
    table.post(
        "/v1/widgets/{widgetId}",
        name="updateWidget",
        summary="Update a widget",
        auth=AuthMode.EITHER,
        guarded=True,
        body=WidgetBody,
        path_params=WidgetPath,
        response=Widget,
        errors=(WidgetMissing, WidgetTaken, WidgetLocked, documented(Forbidden, "not_owner")),
        description="Updates a widget; the rules of the operation are written here.",
    )(handler)
    table.get(
        "/v1/widgets",
        name="listWidgets",
        summary="List widgets",
        auth=AuthMode.OPTIONAL,
        query=WidgetQuery,
        response=Widget,
        description="Lists widgets; the rules of the operation are written here.",
    )(handler)
    table.get(
        "/v1/widgets/health",
        name="widgetHealth",
        summary="Health",
        auth=AuthMode.NONE,
        response=Widget,
        rate_limited=False,
        description="Says whether widgets work; the rules of the operation are written here.",
    )(handler)
    table.post(
        "/v1/widgets/{widgetId}/session-only",
        name="sessionWidget",
        summary="A session-only action",
        auth=AuthMode.SESSION,
        path_params=WidgetPath,
        response=Widget,
        description="Only for signed-in sessions; the rules of the operation are written here.",
    )(handler)
    return table.routes


def document() -> dict[str, Any]:
    return dict(build_openapi(routes(), title="widgets", description="test document"))


def listed(operation: dict[str, Any]) -> dict[str, list[str]]:
    """status -> the codes its response lists, in order; only error statuses."""
    out = {}
    for status, response in operation["responses"].items():
        if int(status) >= 400:
            codes = re.findall(r"`([a-z_]+)`", response["description"])
            examples = response["content"]["application/json"]["examples"]
            assert list(examples) == codes  # one example per listed code, same order
            for code, example in examples.items():
                assert example["value"]["error"] == code
                assert example["value"]["message"]
            out[status] = codes
    return out


def test_the_document_is_valid_openapi() -> None:
    validate(document())


def test_declared_errors_are_listed_under_their_status() -> None:
    update = document()["paths"]["/v1/widgets/{widgetId}"]["post"]
    assert listed(update) == {
        "400": ["invalid_request"],
        "401": ["unauthorized", "principal_mismatch"],
        "403": ["not_owner", "email_not_verified", "legal_acceptance_required"],
        "404": ["widget_not_found"],
        "409": ["widget_taken", "widget_locked"],
        "413": ["payload_too_large"],
        "415": ["unsupported_media_type"],
        "429": ["rate_limited"],
        "431": ["request_header_fields_too_large"],
        "503": ["service_unavailable"],
    }
    assert update["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/Widget"
    )
    example = update["responses"]["409"]["content"]["application/json"]["examples"]["widget_taken"]
    assert example["value"] == {"error": "widget_taken", "message": "the widget is taken"}
    # A family declared through `documented` lists its codes, not the family's own code.
    assert "forbidden" not in listed(update)["403"]


def test_undeclared_errors_are_not_listed() -> None:
    doc = document()
    paths = doc["paths"]
    listing = listed(paths["/v1/widgets"]["get"])
    # No route-specific errors; optional auth can still fail on a bad credential; no body.
    assert listing == {
        "400": ["invalid_request"],
        "401": ["unauthorized", "principal_mismatch"],
        "429": ["rate_limited"],
        "431": ["request_header_fields_too_large"],
        "503": ["service_unavailable"],
    }
    # No input, no auth, not rate-limited: only the oversize request line or header and the
    # outage answer remain.
    assert listed(paths["/v1/widgets/health"]["get"]) == {
        "431": ["request_header_fields_too_large"],
        "503": ["service_unavailable"],
    }
    # An agent key on a session-only route is 403 `forbidden`; no guard codes without guarded.
    session = listed(paths["/v1/widgets/{widgetId}/session-only"]["post"])
    assert session["403"] == ["forbidden"]
    assert "409" not in session and "404" not in session and "413" not in session
    text = str(doc)
    assert "never_declared" not in text
    # An error declared on one route does not leak into another.
    assert "widget_taken" not in str(paths["/v1/widgets"])


def test_error_catalogue_is_every_declared_code_by_status() -> None:
    found = all_errors(routes())
    assert "never_declared" not in found
    codes = list(found)
    statuses = [found[code].status for code in codes]
    assert statuses == sorted(statuses)  # by status, then code
    for status in set(statuses):
        same = [c for c in codes if found[c].status == status]
        assert same == sorted(same)
    assert found["widget_taken"].status == 409
    assert found["widget_taken"].error is WidgetTaken
    assert found["not_owner"].status == 403
    assert found["widget_taken"].operations == ["POST /v1/widgets/{widgetId}"]
    assert len(found["service_unavailable"].operations) == 4
    # Any request can carry a request line or header longer than the server reads.
    assert (
        found["request_header_fields_too_large"].operations
        == found["service_unavailable"].operations
    )
    # Answered on any path (unknown route, wrong method, unexpected failure), so listed even
    # though no route declares them.
    for code in ("not_found", "method_not_allowed"):
        assert found[code].operations == []
    assert found[MarketplaceError.code].status == 500
    schema_examples = document()["components"]["schemas"]["ErrorResponse"]["examples"]
    assert [example["error"] for example in schema_examples] == codes
