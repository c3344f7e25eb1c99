"""The shared edge types: LowerAddress in request models, the shared path models, and the
row -> model mappers beside the models."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from eth_utils import to_checksum_address
from pydantic import ValidationError

from marketplace.http.paths import ProjectMilestonePath, ProjectPath, VerifierJobPath
from marketplace.identity.models import ApiKeyCreateResponse, UsernameGetResponse
from marketplace.projects.models import ProjectListQuery
from marketplace.records.models import BidDraftListQuery, BidDraftRecord, BidDraftUpsertRequest
from marketplace.storage.repositories.api_keys import ApiKeyRow
from marketplace.storage.repositories.bid_drafts import BidDraftRow
from marketplace.storage.repositories.usernames import UsernameRow
from marketplace.types import ADDRESS_PATTERN

LOWER = "0x5fbdb2315678afecb367f032d93f642f64180aa3"
CHECKSUMMED = to_checksum_address(LOWER)
UPPER = "0x" + LOWER[2:].upper()
HASH = "0x" + "ab" * 32
T = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("spelled", [LOWER, UPPER, CHECKSUMMED])
def test_addresses_are_lower_cased_in_path_query_and_body(spelled: str) -> None:
    assert ProjectPath.model_validate({"projectAddress": spelled}).projectAddress == LOWER
    assert ProjectListQuery.model_validate({"ownerAddress": spelled}).ownerAddress == LOWER
    query = BidDraftListQuery.model_validate({"bidderWalletAddress": spelled})
    assert query.bidderWalletAddress == LOWER
    # Bodies are validated strictly from JSON, as the router does.
    body = BidDraftUpsertRequest.model_validate_json(
        json.dumps({"bidderWalletAddress": spelled, "draftHash": HASH}), strict=True
    )
    assert body.bidderWalletAddress == LOWER


@pytest.mark.parametrize(
    "bad", ["0x123", "0x" + "z" * 40, "0x" + "a" * 41, LOWER[2:], " " + LOWER, "0X" + LOWER[2:]]
)
def test_malformed_addresses_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ProjectPath.model_validate({"projectAddress": bad})
    assert [e["loc"] for e in caught.value.errors()] == [("projectAddress",)]


def test_the_schema_shows_the_spec_pattern() -> None:
    assert ADDRESS_PATTERN == "^0x[0-9a-fA-F]{40}$"  # spec, "Conventions"
    for model, name in (
        (ProjectPath, "projectAddress"),
        (BidDraftUpsertRequest, "bidderWalletAddress"),
    ):
        prop = model.model_json_schema()["properties"][name]
        assert prop["pattern"] == ADDRESS_PATTERN
        assert prop["type"] == "string"


def test_milestone_path_reads_the_index_from_path_text_within_bounds() -> None:
    path = ProjectMilestonePath.model_validate({"projectAddress": UPPER, "milestoneIndex": "7"})
    assert (path.projectAddress, path.milestoneIndex) == (LOWER, 7)
    for bad in ("-1", "65536", "1.5", "x"):
        with pytest.raises(ValidationError):
            ProjectMilestonePath.model_validate({"projectAddress": LOWER, "milestoneIndex": bad})
    job = uuid.uuid4()
    assert VerifierJobPath.model_validate({"jobId": str(job)}).jobId == job
    with pytest.raises(ValidationError):
        VerifierJobPath.model_validate({"jobId": "not-a-uuid"})


def _draft_row(**changes: Any) -> BidDraftRow:
    row = BidDraftRow(
        draft_id=uuid.uuid4(),
        project_address="0x" + "cd" * 20,
        bidder_address=LOWER,
        draft_hash=HASH,
        artifact_uri=None,
        notes="n",
        created_at=T,
        updated_at=T,
    )
    return row._replace(**changes)


def test_bid_draft_from_row_checksums_addresses_and_omits_absent_fields() -> None:
    row = _draft_row()
    record = BidDraftRecord.from_row(row)
    assert record.id == row.draft_id
    assert record.projectAddress == to_checksum_address(row.project_address)
    assert record.bidderWalletAddress == CHECKSUMMED
    assert (record.draftHash, record.notes, record.createdAt) == (HASH, "n", T)
    dumped = json.loads(record.model_dump_json())
    assert "artifactUri" not in dumped
    assert dumped["notes"] == "n"


def test_bid_draft_from_row_validates_what_it_maps() -> None:
    with pytest.raises(ValidationError):
        BidDraftRecord.from_row(_draft_row(draft_hash="0x12"))


def test_api_key_from_row_takes_the_subclass_fields() -> None:
    row = ApiKeyRow(
        key_id=uuid.uuid4(),
        user_id=uuid.uuid4(),
        name="ci",
        key_prefix="mk_",
        key_last4="abcd",
        created_at=T,
        rotated_at=None,
        last_used_at=None,
        revoked_at=None,
    )
    created = ApiKeyCreateResponse.from_row(row, secret="mk_secret")
    assert (created.id, created.userId, created.secret) == (
        row.key_id,
        row.user_id,
        "mk_secret",
    )
    with pytest.raises(ValidationError):
        ApiKeyCreateResponse.from_row(row)  # the secret is required there


def test_username_response_without_a_row_is_the_null_username() -> None:
    user_id = uuid.uuid4()
    empty = json.loads(UsernameGetResponse.from_row(user_id, None).model_dump_json())
    assert empty == {"userId": str(user_id), "username": None}
    row = UsernameRow(
        user_id=user_id,
        username="alice_1",
        username_lower="alice_1",
        created_at=T,
        updated_at=T,
    )
    full = UsernameGetResponse.from_row(user_id, row)
    assert (full.username, full.usernameLower, full.updatedAt) == ("alice_1", "alice_1", T)
