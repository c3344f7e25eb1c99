"""The OpenAPI document lists every identity route with its schemas and error codes."""

from __future__ import annotations

from typing import Any

from openapi_spec_validator import validate

ROUTES = {
    ("get", "/v1/wallet-links"): ("WalletLinkListResponse", None, {"403"}),
    ("post", "/v1/wallet-links/challenge"): (
        "WalletLinkChallengeResponse",
        "WalletLinkChallengeRequest",
        {"403"},
    ),
    ("post", "/v1/wallet-links/verify"): (
        "WalletLinkVerifyResponse",
        "WalletLinkVerifyRequest",
        {"400", "403", "404", "409", "410"},
    ),
    ("delete", "/v1/wallet-links/{walletAddress}"): ("WalletLinkRevokeResponse", None, {"404"}),
    ("get", "/v1/username"): ("UsernameGetResponse", None, set()),
    ("put", "/v1/username"): ("UsernameRecord", "UsernameSetRequest", {"403", "409"}),
    ("get", "/v1/username/check"): ("UsernameCheckResponse", None, set()),
    ("post", "/v1/username/batch"): ("UsernameBatchResponse", "UsernameBatchRequest", set()),
    ("get", "/v1/auth/permissions"): ("PermissionsResponse", None, set()),
    ("get", "/v1/api-keys"): ("ApiKeyListResponse", None, {"403"}),
    ("post", "/v1/api-keys"): ("ApiKeyCreateResponse", "ApiKeyCreateRequest", {"403", "409"}),
    ("post", "/v1/api-keys/{keyId}/rotate"): (
        "ApiKeyRotateResponse",
        "ApiKeyRotateRequest",
        {"403", "404", "409"},
    ),
    ("post", "/v1/api-keys/{keyId}/revoke"): ("ApiKeyRecord", None, {"403", "404"}),
    ("get", "/v1/api-keys/{keyId}/audit"): ("ApiKeyAuditResponse", None, {"403", "404"}),
    ("get", "/v1/legal/documents"): ("LegalDocumentsResponse", None, set()),
    ("get", "/v1/legal/public-documents"): ("PublicLegalDocumentsResponse", None, set()),
    ("get", "/v1/legal/acceptances"): ("LegalAcceptancesResponse", None, set()),
    ("post", "/v1/legal/acceptances"): ("LegalAcceptResponse", "LegalAcceptRequest", {"400"}),
}


async def test_identity_routes_are_documented(client: Any) -> None:
    doc = await (await client.get("/v1/openapi.json")).json()
    validate(doc)
    schemas = doc["components"]["schemas"]
    for (method, path), (response, request, statuses) in ROUTES.items():
        operation = doc["paths"][path][method]
        ok = next(code for code in operation["responses"] if code.startswith("2"))
        ref = operation["responses"][ok]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith(f"/{response}"), (path, ref)
        assert response in schemas
        if request:
            body_ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            assert body_ref.endswith(f"/{request}"), path
        assert statuses <= set(operation["responses"]), (path, operation["responses"].keys())
        public = path == "/v1/legal/public-documents"
        assert ("401" in operation["responses"]) is not public, path
    verify = doc["paths"]["/v1/wallet-links/verify"]["post"]["responses"]
    codes = " ".join(r["description"] for r in verify.values())
    for code in (
        "challenge_not_found",
        "challenge_expired",
        "challenge_user_mismatch",
        "challenge_already_used",
        "wallet_mismatch",
        "signature_malformed",
        "signature_mismatch",
    ):
        assert f"`{code}`" in codes
    assert (
        "`username_taken`" in doc["paths"]["/v1/username"]["put"]["responses"]["409"]["description"]
    )
    assert doc["paths"]["/v1/api-keys"]["post"]["security"] == [{"sessionBearer": []}]
    assert doc["paths"]["/v1/legal/public-documents"]["get"]["security"] == []
    username = schemas["UsernameSetRequest"]["properties"]["username"]
    assert username["pattern"] == "^[a-z0-9_]{3,24}$"
    assert schemas["UsernameBatchRequest"]["properties"]["userIds"]["maxItems"] == 200
