"""The examples of the real OpenAPI document (built from the app's route declarations, no
server): every request example is a body its operation accepts, every response example is what
its response model allows, no example is a placeholder, each 400 example names a field of its
own operation, and each curl command sends that operation's example."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
from openapi_spec_validator import validate
from pydantic import SecretStr

from marketplace.config import Settings
from marketplace.http.openapi import build_openapi
from marketplace.http.routes.system import API_TITLE, api_description
from marketplace.http.routing import AuthMode, Route

# The spec's areas (its section 4, "Endpoints"), in its order, then the event stream, our
# extension.
SPEC_AREAS = [
    "system",
    "wallet-links",
    "usernames",
    "api-keys",
    "projects",
    "project-creation",
    "bid-drafts",
    "challenge-submissions",
    "dispute-evidence",
    "legal",
    "messaging",
    "moderation",
    "notifications",
    "leaderboards",
    "verifier",
    "stream",
]
# What Swagger UI shows for a schema without an example, and what the example builder writes
# for a field it knows nothing about.
PLACEHOLDER = re.compile(r"^(string|<[\w-]+>)$")


@cache
def routes() -> tuple[Route, ...]:
    from marketplace.http.app import ROUTES, create_app

    settings = Settings(
        database_url="postgresql://unused",
        redis_url="redis://unused",
        jwt_secret=SecretStr("unused-" + "x" * 32),
        notification_unsubscribe_secret=SecretStr("unused-" + "u" * 32),
    )
    registered: list[Route] = create_app(settings)[ROUTES]
    return tuple(registered)


@cache
def document_text() -> str:
    listed = list(routes())
    doc = build_openapi(listed, title=API_TITLE, description=api_description(listed))
    return json.dumps(doc)


def document() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(document_text())  # a fresh copy each time
    return doc


def operations() -> Iterator[tuple[Route, str, dict[str, Any]]]:
    doc = document()
    by_name = {route.name: route for route in routes()}
    for path, methods in doc["paths"].items():
        for operation in methods.values():
            yield by_name[operation["operationId"]], path, operation


def request_examples(operation: dict[str, Any]) -> list[Any]:
    media = next(iter(operation["requestBody"]["content"].values()))
    if "example" in media:
        return [media["example"]]
    return [example["value"] for example in media.get("examples", {}).values()]


def success_media(route: Route, operation: dict[str, Any]) -> dict[str, Any]:
    response = operation["responses"][str(route.status)]
    media: dict[str, Any] = response["content"][route.response_content_type]
    return media


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)


def examples_in(value: Any) -> Iterator[Any]:
    """Every `example` and `examples` value anywhere in the document."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("example", "examples"):
                yield item
            else:
                yield from examples_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from examples_in(item)


def test_the_document_with_its_examples_is_valid_openapi() -> None:
    validate(document())


def test_tags_are_the_spec_areas_in_its_order_with_descriptions() -> None:
    doc = document()
    names = [tag["name"] for tag in doc["tags"]]
    assert names == SPEC_AREAS
    for tag in doc["tags"]:
        assert len(tag["description"]) > 40, tag["name"]
    used = {operation["tags"][0] for _, _, operation in operations()}
    assert used == set(SPEC_AREAS)
    for route, _, operation in operations():
        assert len(operation["tags"]) == 1 and operation["tags"][0] in names, route.name
    # The indexer and permission checks are the spec's "System and docs" routes.
    tags = {route.name: operation["tags"][0] for route, _, operation in operations()}
    assert tags["getIndexerStatus"] == tags["getPermissions"] == "system"


def test_every_request_example_is_a_body_its_operation_accepts() -> None:
    bodies = 0
    for route, path, operation in operations():
        if route.body is None:
            assert "requestBody" not in operation, path
            continue
        bodies += 1
        examples = request_examples(operation)
        assert examples, route.name
        for example in examples:
            if route.body_form:
                route.body.model_validate(example)
            else:
                # As the server reads a JSON body: strictly, from its text.
                route.body.model_validate_json(json.dumps(example), strict=True)
    assert bodies >= 20


def test_every_response_example_is_what_its_response_model_allows() -> None:
    for route, _, operation in operations():
        if route.response is None and route.response_content_type == "application/json":
            assert "content" not in operation["responses"][str(route.status)], route.name
            continue  # an answer without a body
        media = success_media(route, operation)
        assert "example" in media, route.name
        if route.response is not None:
            route.response.model_validate(media["example"])
        else:
            assert isinstance(media["example"], str) and media["example"].strip(), route.name


def test_parameters_have_examples_their_models_accept() -> None:
    for route, _, operation in operations():
        values: dict[str, dict[str, str]] = {"path": {}, "query": {}, "header": {}}
        for parameter in operation.get("parameters", []):
            if parameter["name"] == "Idempotency-Key":
                continue
            assert "example" in parameter, (route.name, parameter["name"])
            example = parameter["example"]
            text = ",".join(example) if isinstance(example, list) else str(example)
            values[parameter["in"]][parameter["name"]] = text
        for location, model in (
            ("path", route.path_params),
            ("query", route.query),
            ("header", route.header_params),
        ):
            if model is not None:
                model.model_validate(values[location])


def test_no_example_anywhere_is_a_placeholder() -> None:
    found = [text for value in examples_in(document()) for text in strings_in(value)]
    assert len(found) > 1000
    assert [text for text in found if PLACEHOLDER.match(text)] == []
    for route, _, operation in operations():
        samples = operation["x-codeSamples"][0]["source"]
        assert '"string"' not in samples, route.name


def body_schema_has(schema: dict[str, Any], schemas: dict[str, Any], parts: list[str]) -> bool:
    """Whether ``parts`` (a validation error's dotted field) is a path into ``schema``."""
    if "$ref" in schema:
        return body_schema_has(schemas[schema["$ref"].rsplit("/", 1)[1]], schemas, parts)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return any(body_schema_has(member, schemas, parts) for member in schema[key])
    if not parts:
        return True
    head, rest = parts[0], parts[1:]
    if head.isdigit() and "items" in schema:
        return body_schema_has(schema["items"], schemas, rest)
    properties = schema.get("properties", {})
    return head in properties and body_schema_has(properties[head], schemas, rest)


def test_each_400_example_names_a_field_of_its_own_operation() -> None:
    doc = document()
    schemas = doc["components"]["schemas"]
    with_details = 0
    for route, _, operation in operations():
        response = operation["responses"].get("400")
        if response is None:
            continue
        example = response["content"]["application/json"]["examples"]["invalid_request"]["value"]
        assert example["error"] == "invalid_request"
        for detail in example.get("details", []):
            with_details += 1
            location, field = detail["location"], detail["field"]
            assert f"{location}." in example["message"] or example["message"].endswith(location)
            if location == "body":
                media = next(iter(operation["requestBody"]["content"].values()))
                parts = field.split(".") if field else []
                assert body_schema_has(media["schema"], schemas, parts), (route.name, field)
            else:
                names = {p["name"] for p in operation.get("parameters", []) if p["in"] == location}
                assert field in names, (route.name, location, field)
    assert with_details >= 60
    # The chat send names its own fields, not the claim's `metadata.title` (the reported bug).
    chat = doc["paths"]["/v1/projects/{projectAddress}/chat/messages"]["post"]
    invalid = chat["responses"]["400"]["content"]["application/json"]["examples"]
    assert "metadata" not in json.dumps(invalid)
    assert invalid["invalid_request"]["value"]["details"][0]["field"] in (
        "senderWalletAddress",
        "body",
    )


def curl_arguments(source: str) -> list[str]:
    return shlex.split(source.replace("\\\n", " "))


@pytest.mark.parametrize(
    "operation_id", ["postChatMessage", "claimProject", "getProject", "getIndexerStatus"]
)
def test_curl_sample_sends_the_operations_example(operation_id: str) -> None:
    route, path, operation = next(op for op in operations() if op[0].name == operation_id)
    assert operation["x-codeSamples"][0]["lang"] == "Shell"
    source = operation["x-codeSamples"][0]["source"]
    # The page shows it in the description as well (Swagger UI does not render x-codeSamples).
    assert f"```shell\n{source}\n```" in operation["description"]
    args = curl_arguments(source)
    assert args[:3] == ["curl", "-X", route.method]
    url = args[3]
    expected = path
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "path":
            expected = expected.replace("{" + parameter["name"] + "}", parameter["example"])
    assert url.endswith(expected) and "{" not in url
    headers = [args[i + 1] for i, arg in enumerate(args) if arg == "-H"]
    authorization = [h for h in headers if h.startswith("Authorization: Bearer ")]
    if route.auth in (AuthMode.NONE, AuthMode.OPTIONAL):
        assert authorization == []
    elif route.auth is AuthMode.SCHEDULER:
        assert authorization == ["Authorization: Bearer $SCHEDULER_SECRET"]
    else:
        assert authorization == ["Authorization: Bearer $TOKEN"]
    if route.body is not None:
        body = json.loads(args[args.index("-d") + 1])
        assert body == request_examples(operation)[0]
        assert "Content-Type: application/json" in headers
    else:
        assert "-d" not in args


def test_every_operation_has_a_curl_sample_with_its_method_and_credentials() -> None:
    for route, _, operation in operations():
        args = curl_arguments(operation["x-codeSamples"][0]["source"])
        assert args[:3] == ["curl", "-X", route.method], route.name
        needs_header = route.auth not in (AuthMode.NONE, AuthMode.OPTIONAL)
        if route.query_credential is not None:
            assert "ticket=$TICKET" in args[3], route.name
        else:
            assert ("Authorization: Bearer" in " ".join(args)) is needs_header, route.name
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "header" and parameter["name"] != "Idempotency-Key":
                assert f"{parameter['name']}: {parameter['example']}" in args, route.name
