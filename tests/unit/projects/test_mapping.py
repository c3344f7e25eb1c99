"""Row-to-model mapping: the trusted constructor and the list document's nextCursor."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from eth_utils import to_checksum_address

from marketplace.projects.models import (
    MilestoneReadModel,
    ProjectListResponse,
    ProjectReadModel,
)
from marketplace.projects.read_models import (
    checksum,
    milestone_model,
    project_model,
    trusted_constructor,
)
from marketplace.storage.repositories.projects import ProjectReadRow
from marketplace.types import ResponseModel

T = datetime(2025, 1, 1, tzinfo=UTC)
ROW = ProjectReadRow(
    project_address="0x" + "ab" * 20,
    owner_address="0x" + "cd" * 20,
    status="bidding",
    project_mode="challenge",
    bidding_access="open",
    config_hash="0x" + "ef" * 32,
    selected_builder_address=None,
    milestone_count=1,
    bid_bond_usdc=None,
    challenge_payout_usdc=Decimal("1E+3"),
    challenge_submission_count=None,
    challenge_submission_window_seconds=60,
    challenge_owner_response_window_seconds=120,
    challenge_submission_deadline=100,
    challenge_owner_response_deadline=220,
    dispute_phase=None,
    dispute_reason=None,
    dispute_raised_by="0x" + "12" * 20,
    dispute_milestone_index=None,
    dispute_opened_at=None,
    dispute_verdict_submitted_at=None,
    dispute_owner_evidence_hash=None,
    dispute_worker_evidence_hash=None,
    created_block=7,
    created_log_index=1,
    created_at=T,
    updated_at=T,
    title="T",
    description=None,
    image_url=None,
    repo_url="https://git.example/indexer",
    milestone_policies=[{"milestoneIndex": 0, "checkPolicyId": "address-smoke"}],
    milestones=[
        (
            0,
            "approved",
            Decimal(5),
            T,
            T,
            None,
            T,
            "0x" + "aa" * 32,
            None,
            uuid.UUID(int=1),
            True,
            False,
        )
    ],
    viewer_is_owner=None,
)


def test_trusted_constructor_equals_model_construct() -> None:
    milestone = milestone_model(ROW.milestones[0])
    project = project_model(ROW, now=50)
    for built, model in ((milestone, MilestoneReadModel), (project, ProjectReadModel)):
        reference = model.model_construct(**dict(built))
        assert type(built) is model
        assert built == reference
        assert built.model_fields_set == reference.model_fields_set
        assert built.model_dump_json(exclude_none=True) == reference.model_dump_json(
            exclude_none=True
        )
        # and what it builds is valid
        assert model.model_validate(built.model_dump()) == built


def test_mapping_converts_like_validation_would() -> None:
    body = json.loads(project_model(ROW, now=50).model_dump_json(exclude_none=True))
    assert body["projectAddress"] == to_checksum_address(ROW.project_address)
    assert body["disputeRaisedBy"] == to_checksum_address(ROW.dispute_raised_by or "")
    assert body["challengePayoutUSDC"] == "1000"  # not "1E+3"
    assert body["challengeSubmissionDeadline"] == "100"
    assert body["challengeSubmissionCount"] == 0
    assert body["milestones"][0]["latestVerifierJobId"] == str(uuid.UUID(int=1))
    assert body["milestones"][0]["checkPolicyId"] == "address-smoke"
    assert body["milestonePolicies"] == [{"milestoneIndex": 0, "checkPolicyId": "address-smoke"}]
    assert ProjectReadModel.model_validate(body).model_dump(mode="json", exclude_none=True) == body


def test_checksum_is_memoised() -> None:
    address = "0x" + "9f" * 20
    assert checksum(address) == to_checksum_address(address)
    assert checksum(address) is checksum(address)


def test_trusted_constructor_refuses_partial_values_and_unsuitable_models() -> None:
    construct = trusted_constructor(MilestoneReadModel)
    with pytest.raises(TypeError, match="exactly its fields"):
        construct(milestoneIndex=0, status="pending")

    class WithExtras(ResponseModel):
        a: int = 0

        model_config = {"extra": "allow"}

    with pytest.raises(TypeError, match="needs model_construct"):
        trusted_constructor(WithExtras)


@pytest.mark.parametrize("indent", [None, 2])
def test_next_cursor_stays_null_under_exclude_none(indent: int | None) -> None:
    page = ProjectListResponse(items=[], count=0, nextCursor=None)
    body = json.loads(page.model_dump_json(exclude_none=True, indent=indent))
    assert body == {"items": [], "count": 0, "nextCursor": None}
    page = ProjectListResponse(items=[project_model(ROW, 50)], count=3, nextCursor="abc")
    body = json.loads(page.model_dump_json(exclude_none=True, indent=indent))
    assert body["nextCursor"] == "abc" and body["count"] == 3
    assert "description" not in body["items"][0]  # items still drop their absent fields
    assert json.loads(ProjectListResponse(items=[], count=0).model_dump_json()) == {
        "items": [],
        "count": 0,
        "nextCursor": None,
    }


def test_list_schema_requires_next_cursor() -> None:
    schema = ProjectListResponse.model_json_schema(mode="serialization")
    assert schema["required"] == ["items", "count", "nextCursor"]
    assert schema["properties"]["items"]["items"]["$ref"].endswith("ProjectReadModel")
