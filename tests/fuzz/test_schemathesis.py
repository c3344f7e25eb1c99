"""Schemathesis over every operation of the app's OpenAPI document, against a running app.

The document is generated from the route declarations, as the app does at start-up, so the tests
can be collected one per operation; the first test proves the running app serves exactly this
document. Each operation is called with examples generated from its declaration (the coverage
phase's boundary and invalid values, then property-based fuzzing), signed in as a verified user
who accepted the legal documents, and again with that user's agent API key wherever agent keys
are accepted. Every answer must not be a server error, must use a status the operation
documents, and must match the documented schema for that status.

The run is deterministic (derandomized Hypothesis, no example database, fixed seeded rows) so CI
sends the same requests every time, and bounded by ``max-examples`` per operation.
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import hypothesis.strategies as st
import pytest
import schemathesis
from pydantic import SecretStr
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from marketplace.config import Settings
from marketplace.http.app import ROUTES, create_app
from marketplace.http.openapi import build_openapi
from marketplace.http.routes.system import API_TITLE, api_description
from marketplace.types import ADDRESS_PATTERN
from tests.fuzz.conftest import CALLER_USER_ID, CALLER_WALLET, PROJECTS, Caller, LiveApp

# Beyond the two the issue names: every status must be documented, and a request the document
# calls invalid must be refused (else the document claims a rule the server does not apply).
CHECKS = [
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    negative_data_rejection,
]

# Examples per operation in the fuzzing phase; the coverage phase adds its own bounded set of
# boundary and invalid values. The agent-key run is about who may call what, not input shapes
# (the session run covers those), so it fuzzes fewer examples and skips the coverage phase.
SESSION_MAX_EXAMPLES = 80
AGENT_KEY_MAX_EXAMPLES = 25


def _config(max_examples: int, *, coverage: bool) -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "generation": {
                "max-examples": max_examples,
                "deterministic": True,
                "database": "none",
                # Credentials come from the caller; generated ones would only get 401s.
                "with-security-parameters": False,
                # Unknown query parameters are ignored by design (cache busters, tracking).
                "allow-extra-parameters": False,
            },
            "phases": {"coverage": {"enabled": coverage}, "stateful": {"enabled": False}},
            "suppress-health-check": ["too_slow", "filter_too_much", "data_too_large"],
        }
    )


AGENT_KEY_MODES = {"either", "optional", "either_or_scheduler"}


def _document() -> dict[str, Any]:
    """The document the app builds at start-up (connections are only opened at start-up)."""
    settings = Settings(
        database_url="postgresql://unused",
        redis_url="redis://unused",
        jwt_secret=SecretStr("unused-" + "x" * 32),
        notification_unsubscribe_secret=SecretStr("unused-" + "u" * 32),
    )
    routes = create_app(settings)[ROUTES]
    return dict(build_openapi(routes, title=API_TITLE, description=api_description(routes)))


# Responses that never end (the live event stream stays open until the client leaves): the
# fuzzer reads a whole body, so it would wait forever. tests/api/stream covers every status.
ENDLESS_OPERATIONS = ["openEventStream"]

DOCUMENT = _document()
session_schema = schemathesis.openapi.from_dict(
    DOCUMENT, config=_config(SESSION_MAX_EXAMPLES, coverage=True)
).exclude(operation_id=ENDLESS_OPERATIONS)
agent_key_schema = (
    schemathesis.openapi.from_dict(DOCUMENT, config=_config(AGENT_KEY_MAX_EXAMPLES, coverage=False))
    .include(func=lambda ctx: ctx.operation.definition.raw.get("x-auth") in AGENT_KEY_MODES)
    .exclude(operation_id=ENDLESS_OPERATIONS)
)

# The create intent is made by the running app, so its id is only known once the caller exists.
_intents: list[str] = []


# Values naming the caller, its wallet or its rows. A random value is nearly always someone
# else's (403) or unknown (404), so hooks sometimes put the caller's own in, to reach the rest of
# the rules and the response models. Only a value that is already well formed is replaced: a
# malformed one belongs to a negative case, which must stay negative.
UUID_SHAPE = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
ADDRESS_SHAPE = re.compile(ADDRESS_PATTERN)
CALLER_VALUES: dict[str, tuple[re.Pattern[str], list[str]]] = {
    "userId": (UUID_SHAPE, [str(CALLER_USER_ID)]),
    "walletAddress": (ADDRESS_SHAPE, [CALLER_WALLET]),
    "bidderWalletAddress": (ADDRESS_SHAPE, [CALLER_WALLET]),
    "submitterAddress": (ADDRESS_SHAPE, [CALLER_WALLET]),
    "ownerAddress": (ADDRESS_SHAPE, [CALLER_WALLET]),
}
PATH_VALUES: dict[str, tuple[re.Pattern[str], list[str]]] = {
    "projectAddress": (ADDRESS_SHAPE, list(PROJECTS.values())),
    "intentId": (UUID_SHAPE, _intents),
}


def _sometimes_the_callers(
    container: Any, values: dict[str, tuple[re.Pattern[str], list[str]]]
) -> Any:
    if not isinstance(container, dict):
        return st.just(container)
    variants = [container]
    for name, (shape, choices) in values.items():
        current = container.get(name)
        if isinstance(current, str) and shape.fullmatch(current):
            variants += [{**container, name: choice} for choice in choices]
    return st.sampled_from(variants)


def flatmap_path_parameters(context: Any, path_parameters: Any) -> Any:
    return _sometimes_the_callers(path_parameters, PATH_VALUES)


def flatmap_body(context: Any, body: Any) -> Any:
    return _sometimes_the_callers(body, CALLER_VALUES)


def flatmap_query(context: Any, query: Any) -> Any:
    return _sometimes_the_callers(query, CALLER_VALUES)


for _schema in (session_schema, agent_key_schema):
    for _hook in (flatmap_path_parameters, flatmap_body, flatmap_query):
        _schema.hook(_hook)


@pytest.fixture(scope="module", autouse=True)
def _caller_intent(caller: Caller) -> None:
    _intents[:] = [caller.intent_id]


def test_the_running_app_serves_the_fuzzed_document(live_app: LiveApp) -> None:
    async def served() -> Any:
        async with aiohttp.ClientSession() as http:
            resp = await http.get(f"{live_app.base_url}/v1/openapi.json")
            assert resp.status == 200
            return await resp.json()

    assert live_app.run(served()) == DOCUMENT
    operations = sum(len(ops) for ops in DOCUMENT["paths"].values())
    assert len(session_schema) == operations
    fuzzed = sum(1 for _ in session_schema.get_all_operations())
    assert fuzzed == operations - len(ENDLESS_OPERATIONS)


@session_schema.parametrize()
def test_every_operation_with_a_session(
    case: schemathesis.Case, live_app: LiveApp, caller: Caller
) -> None:
    case.call_and_validate(
        base_url=live_app.base_url, headers=caller.session_headers, checks=CHECKS
    )


@agent_key_schema.parametrize()
def test_every_agent_key_operation_with_an_agent_key(
    case: schemathesis.Case, live_app: LiveApp, caller: Caller
) -> None:
    case.call_and_validate(base_url=live_app.base_url, headers=caller.agent_headers, checks=CHECKS)
