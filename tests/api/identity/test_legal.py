"""Legal documents, acceptances and the three assent modes on a guarded mutation."""

from __future__ import annotations

from typing import Any

import pytest

from marketplace.http.app import ROUTES
from tests.api.identity.conftest import GUARDED_PATH, GUARDED_ROUTE, agent, create_key, error_of
from tests.conftest import Servers, User, make_settings, new_user

TYPES = ["terms", "privacy", "draft_license", "ai_verifier_disclaimer", "challenge_mode_disclaimer"]
REQUIRED = [
    {"documentType": "terms", "version": "2025-03-01"},
    {"documentType": "privacy", "version": "2025-03-01"},
    {"documentType": "draft_license", "version": "2025-03-01"},
    {"documentType": "ai_verifier_disclaimer", "version": "2025-03-01"},
    {"documentType": "challenge_mode_disclaimer", "version": "2025-03-01"},
]


async def _accept(client: Any, headers: dict[str, str], document_type: str, version: str) -> Any:
    return await client.post(
        "/v1/legal/acceptances",
        json={"documentType": document_type, "version": version},
        headers=headers,
    )


async def _accept_all(client: Any, user: User) -> None:
    for ref in REQUIRED:
        assert (
            await _accept(client, user.headers, ref["documentType"], ref["version"])
        ).status == 200


async def _acceptances(client: Any, headers: dict[str, str]) -> dict[str, Any]:
    resp = await client.get("/v1/legal/acceptances", headers=headers)
    assert resp.status == 200
    return dict(await resp.json())


async def _guarded(client: Any, headers: dict[str, str], body: Any = None) -> Any:
    return await client.post(GUARDED_PATH, json=body or {"value": 1}, headers=headers)


async def test_public_documents(client: Any) -> None:
    resp = await client.get("/v1/legal/public-documents")
    body = await resp.json()
    assert resp.status == 200
    assert resp.headers["Cache-Control"] == "public, max-age=3600"
    assert body["acceptanceMode"] == "implicit"
    assert body["requiredVersions"] == REQUIRED
    assert sorted({d["documentType"] for d in body["documents"]}) == sorted(TYPES)
    terms = [d for d in body["documents"] if d["documentType"] == "terms"]
    assert [(d["version"], d["required"]) for d in terms] == [
        ("2024-11-01", False),
        ("2025-03-01", True),
    ]
    assert terms[1]["title"] == "Terms of Service"
    assert terms[1]["content"].startswith("# Terms of Service")
    assert terms[1]["contentType"] == "text/markdown"
    assert len(terms[1]["contentSha256"]) == 64
    # Public: a bad credential is not even looked at.
    resp = await client.get("/v1/legal/public-documents", headers={"Authorization": "Basic x"})
    assert resp.status == 200


async def test_documents_show_the_callers_state(client: Any) -> None:
    user = new_user()
    resp = await client.get("/v1/legal/documents", headers=user.headers)
    body = await resp.json()
    assert resp.status == 200
    assert set(body) == {"acceptanceMode", "documents", "requiredVersions", "missing"}
    assert body["acceptanceMode"] == "implicit"
    assert body["requiredVersions"] == REQUIRED
    assert body["missing"] == REQUIRED
    assert len(body["documents"]) == 6
    assert all(d["accepted"] is False and d["acceptedAt"] is None for d in body["documents"])
    assert {"documentType", "version", "title", "required", "accepted", "acceptedAt"} <= set(
        body["documents"][0]
    )

    resp = await _accept(client, user.headers, "terms", "2025-03-01")
    accepted = await resp.json()
    assert resp.status == 200, accepted
    body = await (await client.get("/v1/legal/documents", headers=user.headers)).json()
    terms = next(
        d for d in body["documents"] if (d["documentType"], d["version"]) == ("terms", "2025-03-01")
    )
    assert terms["accepted"] is True and terms["acceptanceKind"] == "explicit"
    assert terms["acceptedAt"] == accepted["acceptance"]["acceptedAt"]
    assert body["missing"] == REQUIRED[1:]


async def test_accept_is_idempotent_and_checks_the_listing(client: Any) -> None:
    user = new_user()
    resp = await _accept(client, user.headers, "privacy", "2025-03-01")
    first = await resp.json()
    assert resp.status == 200
    assert first["acceptance"] == {
        "documentType": "privacy",
        "version": "2025-03-01",
        "kind": "explicit",
        "acceptedAt": first["acceptance"]["acceptedAt"],
        "acceptedVia": "session",
        "triggerRoute": None,
    }
    assert first["acceptanceMode"] == "implicit"
    assert {"documentType": "privacy", "version": "2025-03-01"} not in first["missing"]
    again = await (await _accept(client, user.headers, "privacy", "2025-03-01")).json()
    assert again["acceptance"] == first["acceptance"]
    assert (await _acceptances(client, user.headers))["count"] == 1

    # An older version from the listing may be accepted; it does not satisfy the requirement.
    old = await (await _accept(client, user.headers, "terms", "2024-11-01")).json()
    assert {"documentType": "terms", "version": "2025-03-01"} in old["missing"]

    resp = await _accept(client, user.headers, "terms", "1999-01-01")
    assert await error_of(resp, 400) == "unknown_legal_document"
    resp = await _accept(client, user.headers, "cookies", "2025-03-01")
    assert await error_of(resp, 400) == "invalid_request"
    resp = await client.post(
        "/v1/legal/acceptances", json={"documentType": "terms"}, headers=user.headers
    )
    assert await error_of(resp, 400) == "invalid_request"


async def test_acceptances_list_and_agent_keys(client: Any) -> None:
    user = new_user()
    key = await create_key(client, user)
    assert (await _accept(client, agent(key["secret"]), "terms", "2025-03-01")).status == 200
    body = await _acceptances(client, user.headers)
    assert body["userId"] == str(user.user_id)
    assert body["count"] == 1
    assert body["items"][0]["acceptedVia"] == "agent_key"
    assert body["missing"] == REQUIRED[1:]
    assert body["requiredVersions"] == REQUIRED
    # Another user sees only their own records.
    assert (await _acceptances(client, new_user().headers))["count"] == 0


async def test_anonymous_callers_are_refused(client: Any) -> None:
    for method, path, body in (
        ("GET", "/v1/legal/documents", None),
        ("GET", "/v1/legal/acceptances", None),
        ("POST", "/v1/legal/acceptances", {"documentType": "terms", "version": "2025-03-01"}),
    ):
        resp = await client.request(method, path, json=body)
        assert await error_of(resp, 401) == "unauthorized", path


async def test_implicit_mode_records_implied_assent_on_a_guarded_mutation(client: Any) -> None:
    user = new_user()
    await _accept(client, user.headers, "terms", "2025-03-01")
    resp = await _guarded(client, user.headers)
    assert resp.status == 200, await resp.text()

    body = await _acceptances(client, user.headers)
    assert body["missing"] == []
    implied = [i for i in body["items"] if i["kind"] == "implied"]
    assert sorted((i["documentType"], i["version"]) for i in implied) == sorted(
        (r["documentType"], r["version"]) for r in REQUIRED[1:]
    )
    assert all(i["triggerRoute"] == GUARDED_ROUTE for i in implied)
    docs = await (await client.get("/v1/legal/documents", headers=user.headers)).json()
    kinds = {d["documentType"]: d["acceptanceKind"] for d in docs["documents"] if d["required"]}
    assert kinds == {**dict.fromkeys(TYPES, "implied"), "terms": "explicit"}

    assert (await _guarded(client, user.headers)).status == 200
    assert (await _acceptances(client, user.headers))["count"] == body["count"]
    # Explicit assent after implied assent is recorded next to it.
    await _accept(client, user.headers, "privacy", "2025-03-01")
    docs = await (await client.get("/v1/legal/documents", headers=user.headers)).json()
    privacy = next(d for d in docs["documents"] if d["documentType"] == "privacy")
    assert privacy["acceptanceKind"] == "explicit"


async def test_implied_assent_survives_a_validation_failure(client: Any) -> None:
    user = new_user()
    resp = await _guarded(client, user.headers, {"value": -1})
    assert await error_of(resp, 400) == "invalid_request"
    body = await _acceptances(client, user.headers)
    assert body["count"] == 5 and body["missing"] == []
    assert {i["kind"] for i in body["items"]} == {"implied"}


async def test_implied_assent_is_recorded_for_agent_keys(client: Any) -> None:
    user = new_user()
    key = await create_key(client, user)
    assert (await _guarded(client, agent(key["secret"]))).status == 200
    items = (await _acceptances(client, user.headers))["items"]
    assert len(items) == 5
    assert {i["acceptedVia"] for i in items} == {"agent_key"}


async def test_no_assent_is_implied_before_the_email_check_passes(client: Any) -> None:
    user = new_user(email_verified=False)
    resp = await _guarded(client, user.headers)
    assert await error_of(resp, 403) == "email_not_verified"
    assert (await _acceptances(client, user.headers))["count"] == 0


async def test_strict_mode_blocks_until_everything_is_accepted(make_client: Any) -> None:
    client = await make_client(legal_acceptance_mode="strict")
    user = new_user()
    resp = await _guarded(client, user.headers)
    body = await resp.json()
    assert resp.status == 403
    assert body["error"] == "legal_acceptance_required"
    assert body["missing"] == REQUIRED
    # Blocked before validation, and nothing was implied.
    resp = await _guarded(client, user.headers, {"value": -1})
    assert await error_of(resp, 403) == "legal_acceptance_required"
    assert (await _acceptances(client, user.headers))["count"] == 0

    await _accept(client, user.headers, "terms", "2025-03-01")
    body = await (await _guarded(client, user.headers)).json()
    assert body["missing"] == REQUIRED[1:]
    await _accept_all(client, user)
    assert (await _guarded(client, user.headers)).status == 200
    docs = await (await client.get("/v1/legal/documents", headers=user.headers)).json()
    assert docs["acceptanceMode"] == "strict" and docs["missing"] == []


async def test_off_mode_checks_nothing(make_client: Any) -> None:
    client = await make_client(legal_acceptance_mode="off")
    user = new_user()
    assert (await _guarded(client, user.headers)).status == 200
    body = await _acceptances(client, user.headers)
    assert body["count"] == 0 and body["acceptanceMode"] == "off"
    public = await (await client.get("/v1/legal/public-documents")).json()
    assert public["acceptanceMode"] == "off"
    # The e-mail check still applies in every mode.
    resp = await _guarded(client, new_user(email_verified=False).headers)
    assert await error_of(resp, 403) == "email_not_verified"


async def test_required_versions_are_configuration(make_client: Any) -> None:
    client = await make_client(legal_required_versions={"terms": "2024-11-01"})
    user = new_user()
    body = await (await client.get("/v1/legal/documents", headers=user.headers)).json()
    assert body["requiredVersions"][0] == {"documentType": "terms", "version": "2024-11-01"}
    assert body["requiredVersions"][1:] == REQUIRED[1:]
    await _guarded(client, user.headers)
    implied = {
        (i["documentType"], i["version"])
        for i in (await _acceptances(client, user.headers))["items"]
    }
    assert ("terms", "2024-11-01") in implied and ("terms", "2025-03-01") not in implied


@pytest.mark.parametrize(
    "required", [{"terms": "2000-01-01"}, {"cookies": "2025-03-01"}], ids=["version", "type"]
)
def test_unknown_required_version_stops_the_app(servers: Servers, required: Any) -> None:
    from marketplace.http.app import create_app

    with pytest.raises(ValueError, match="legal_required_versions"):
        create_app(make_settings(servers, legal_required_versions=required))


async def test_identity_routes_are_not_guarded(client: Any) -> None:
    identity = [
        r
        for r in client.app[ROUTES]
        if r.tag in {"wallet-links", "usernames", "permissions", "api-keys", "legal"}
    ]
    assert len(identity) == 18
    assert not [r.path for r in identity if r.guarded]
