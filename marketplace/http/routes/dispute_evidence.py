"""Dispute evidence (spec section 4 "Dispute evidence"): stored by the project's shard actor, one
per party per disputed milestone; listing straight from Postgres. Rules in
marketplace.records.dispute_evidence; docs/records.md."""

from __future__ import annotations

from marketplace.http import keys
from marketplace.http.paths import ProjectPath
from marketplace.http.routing import AuthMode, Call, Reply, RouteTable
from marketplace.records import dispute_evidence
from marketplace.records.errors import (
    EvidenceAlreadySubmitted,
    MilestoneNotDisputed,
    NoActiveDispute,
    NotDisputeParty,
    ProjectNotFound,
    SubmitterAmbiguous,
    WalletNotLinked,
)
from marketplace.records.models import (
    DisputeEvidenceListQuery,
    DisputeEvidenceListResponse,
    DisputeEvidenceRecord,
    DisputeEvidenceRequest,
    DisputeEvidenceSubmitRequest,
)

routes = RouteTable(tag="dispute-evidence")


@routes.post(
    "/v1/projects/{projectAddress}/dispute-evidence",
    name="submitDisputeEvidence",
    idempotent=True,
    summary="Submit the caller's evidence for the project's active dispute",
    auth=AuthMode.EITHER,
    response=DisputeEvidenceRecord,
    path_params=ProjectPath,
    body=DisputeEvidenceRequest,
    guarded=True,
    status=201,
    errors=(
        SubmitterAmbiguous,
        WalletNotLinked,
        NotDisputeParty,
        ProjectNotFound,
        NoActiveDispute,
        MilestoneNotDisputed,
        EvidenceAlreadySubmitted,
    ),
)
async def submit_dispute_evidence(
    call: Call[DisputeEvidenceRequest, None, ProjectPath],
) -> Reply:
    """Two body shapes: `{milestoneIndex, submitterAddress, evidenceHash, evidencePayload?}`
    or `{evidenceHash, payload?}` (milestone: the active dispute's; submitter: the caller's
    linked wallet that is the owner or the selected worker; 400 `submitter_ambiguous` if the
    caller links both). `submitterRole` is derived. The caller must act through an active link to
    the owner or selected-worker wallet (403 `wallet_not_linked` / `not_dispute_party`); the
    project needs an active dispute (409 `no_active_dispute`) and the milestone must be its
    disputed one (409 `milestone_not_disputed`). One submission per party per disputed milestone
    (409 `dispute_evidence_already_submitted`). An all-zero `evidenceHash` and a payload whose
    compact UTF-8 JSON exceeds 64000 bytes are 400 `invalid_request`. 201 with the record."""
    principal = call.require_principal()
    project = call.path.projectAddress
    body = call.body.root
    if isinstance(body, DisputeEvidenceSubmitRequest):
        command = dispute_evidence.SubmitDisputeEvidence(
            project_address=project,
            user_id=principal.user_id,
            evidence_hash=body.evidenceHash,
            evidence_payload=body.evidencePayload,
            milestone_index=body.milestoneIndex,
            submitter_address=body.submitterAddress,
        )
    else:
        command = dispute_evidence.SubmitDisputeEvidence(
            project_address=project,
            user_id=principal.user_id,
            evidence_hash=body.evidenceHash,
            evidence_payload=body.payload,
        )
    row = await call.app[keys.PROJECT_SHARDS].run(command)
    return Reply(DisputeEvidenceRecord.from_row(row), status=201)


@routes.get(
    "/v1/projects/{projectAddress}/dispute-evidence",
    name="listDisputeEvidence",
    summary="List a project's dispute evidence (owner, selected worker, dispute admins)",
    auth=AuthMode.EITHER,
    response=DisputeEvidenceListResponse,
    path_params=ProjectPath,
    query=DisputeEvidenceListQuery,
    errors=(ProjectNotFound, NotDisputeParty),
)
async def list_dispute_evidence(
    call: Call[None, DisputeEvidenceListQuery, ProjectPath],
) -> DisputeEvidenceListResponse:
    """Visible to callers with an active link to the owner wallet, the selected worker wallet or
    one of the configured `MARKETPLACE_DISPUTE_ADMIN_WALLETS` (else 403 `not_dispute_party`).
    Ordered by milestone, then submission time; `milestoneIndex` narrows it to one milestone."""
    principal = call.require_principal()
    project = call.path.projectAddress
    milestone = call.query.milestoneIndex
    rows = await dispute_evidence.list_dispute_evidence(
        call.pool, principal.user_id, project, milestone, call.settings.dispute_admin_wallets
    )
    items = [DisputeEvidenceRecord.from_row(row) for row in rows]
    return DisputeEvidenceListResponse(
        projectAddress=project, milestoneIndex=milestone, items=items, count=len(items)
    )
