"""The project read routes as the OpenAPI document shows them."""

from __future__ import annotations

from typing import Any

SPEC_REQUIRED_PROJECT = {
    "projectAddress",
    "ownerAddress",
    "status",
    "effectiveStatus",
    "configHash",
    "createdAt",
    "updatedAt",
    "milestoneCount",
    "milestones",
}
SPEC_PROJECT_FIELDS = SPEC_REQUIRED_PROJECT | {
    "projectMode",
    "biddingAccess",
    "title",
    "description",
    "imageUrl",
    "viewerCanEditMetadata",
    "selectedBuilderAddress",
    "bidBondUSDC",
    "challengePayoutUSDC",
    "challengeSubmissionCount",
    "challengeSubmissionWindowSeconds",
    "challengeOwnerResponseWindowSeconds",
    "challengeSubmissionDeadline",
    "challengeOwnerResponseDeadline",
    "disputePhase",
    "disputeReason",
    "disputeRaisedBy",
    "disputeMilestoneIndex",
    "disputeOpenedAt",
    "disputeVerdictSubmittedAt",
    "disputeOwnerEvidenceHash",
    "disputeWorkerEvidenceHash",
}
# Fields the spec does not show, fixed by issue 25 (the acceptance policies) and issue 27 (the
# claimed repository URL).
ISSUE_PROJECT_FIELDS = {"milestonePolicies", "repoUrl"}
ISSUE_MILESTONE_FIELDS = {"checkPolicyId"}
SPEC_MILESTONE_FIELDS = {
    "milestoneIndex",
    "status",
    "payoutUSDC",
    "deadlineAt",
    "approvedAt",
    "resolvedAt",
    "submittedAt",
    "deliveryRefHash",
    "latestEvidenceHash",
    "latestVerifierJobId",
    "latestVerifierPasses",
    "attestedOnChain",
}


async def test_project_read_routes_in_the_document(client: Any) -> None:
    doc = await (await client.get("/v1/openapi.json")).json()
    schemas = doc["components"]["schemas"]

    project = schemas["ProjectReadModel"]
    assert set(project["properties"]) == SPEC_PROJECT_FIELDS | ISSUE_PROJECT_FIELDS
    assert set(project["required"]) == SPEC_REQUIRED_PROJECT
    milestone = schemas["MilestoneReadModel"]
    assert set(milestone["properties"]) == SPEC_MILESTONE_FIELDS | ISSUE_MILESTONE_FIELDS
    assert set(milestone["required"]) == {"milestoneIndex", "status"}
    assert set(schemas["ProjectListResponse"]["required"]) == {"items", "count", "nextCursor"}
    assert set(schemas["MilestoneListResponse"]["required"]) == {
        "projectAddress",
        "items",
        "count",
    }

    listing = doc["paths"]["/v1/projects"]["get"]
    params = {p["name"]: p for p in listing["parameters"]}
    assert set(params) == {"ownerAddress", "status", "effectiveStatus", "limit", "cursor"}
    assert params["limit"]["schema"]["maximum"] == 100
    assert params["limit"]["schema"]["default"] == 20
    assert {"", "sessionBearer", "agentApiKey"} == {next(iter(s), "") for s in listing["security"]}
    assert "400" in listing["responses"] and "401" in listing["responses"]

    for path in ("/v1/projects/{projectAddress}", "/v1/projects/{projectAddress}/milestones"):
        operation = doc["paths"][path]["get"]
        assert [p["name"] for p in operation["parameters"]] == ["projectAddress"]
        assert operation["parameters"][0]["in"] == "path"
        assert {"200", "400", "404"} <= set(operation["responses"])
