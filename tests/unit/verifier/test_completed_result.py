"""A verifier job row's result: None before completion, typed once completed, and an error (not
a record without its result) when a completed row lacks one."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from marketplace.storage.repositories.verifier_jobs import VerifierJobRow
from marketplace.types import JsonObject
from marketplace.verifier.models import (
    AttestationPayload,
    VerifierJobRecord,
    VerifierJobRecordPublic,
    completed_result,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
ADDRESS = "0x" + "ab" * 20
HASH = "0x" + "cd" * 32
ATTESTATION: JsonObject = {
    "project": ADDRESS,
    "milestoneIndex": 1,
    "passes": True,
    "evidenceHash": HASH,
    "deadline": 100,
    "nonce": 7,
    "chainId": 31337,
    "signature": "0x" + "11" * 65,
    "signer": ADDRESS,
}
QUEUED = VerifierJobRow(
    id=uuid.uuid4(),
    seq=1,
    job_id=1,
    created_by=uuid.uuid4(),
    project_address=ADDRESS,
    milestone_index=1,
    check_policy_id="github-ref",
    delivery_ref="https://github.com/o/r/commit/" + "a" * 40,
    chain_id=31337,
    requested_nonce=None,
    requested_deadline=Decimal(100),
    attestation_nonce=Decimal(7),
    max_attempts=3,
    dispute_opened_at=5,
    created_at=NOW,
    completed_at=None,
    retention_expires_at=None,
    passes=None,
    evidence_hash=None,
    evidence=None,
    attestation=None,
    status="queued",
    attempt_count=0,
    next_attempt_at=None,
    error=None,
    updated_at=NOW,
)
COMPLETED = QUEUED._replace(
    status="completed",
    attempt_count=1,
    completed_at=NOW,
    retention_expires_at=NOW,
    passes=True,
    evidence_hash=HASH,
    evidence={"commit": "a" * 40},
    attestation=ATTESTATION,
)


def test_no_result_before_completion() -> None:
    assert completed_result(QUEUED) is None
    assert VerifierJobRecord.from_row(QUEUED).result is None
    assert VerifierJobRecordPublic.from_row(QUEUED).result is None


def test_a_completed_row_has_its_typed_result() -> None:
    result = completed_result(COMPLETED)
    assert result is not None
    assert result.attestation == AttestationPayload.model_validate(ATTESTATION)
    assert (result.passes, result.evidence_hash, result.completed_at) == (True, HASH, NOW)
    full = VerifierJobRecord.from_row(COMPLETED).model_dump(mode="json")["result"]
    assert full["attestation"]["nonce"] == 7 and full["evidence"] == {"commit": "a" * 40}
    public = VerifierJobRecordPublic.from_row(COMPLETED).model_dump(mode="json")["result"]
    assert "evidence" not in public and public["evidenceHash"] == HASH


def test_a_completed_row_without_its_result_is_an_error() -> None:
    with pytest.raises(ValueError, match="completed without its result"):
        completed_result(COMPLETED._replace(attestation=None))
