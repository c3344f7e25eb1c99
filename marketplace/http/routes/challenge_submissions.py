"""Challenge submissions (spec section 4 "Challenge submissions"): artifact registrations checked
against the chain by the project's shard actor; listing straight from Postgres. Rules in
marketplace.records.challenge_submissions; docs/records.md."""

from __future__ import annotations

from marketplace.http import keys
from marketplace.http.paths import ProjectPath
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.records import challenge_submissions
from marketplace.records.errors import (
    NotChallengeParticipant,
    ProjectModeMismatch,
    ProjectNotFound,
    SubmissionHashMismatch,
    WalletNotLinked,
)
from marketplace.records.models import (
    ChallengeSubmissionListQuery,
    ChallengeSubmissionListResponse,
    ChallengeSubmissionRecord,
    ChallengeSubmissionUpsertRequest,
)

routes = RouteTable(tag="challenge-submissions")


@routes.post(
    "/v1/projects/{projectAddress}/challenge-submissions",
    name="upsertChallengeSubmission",
    summary="Register or update the artifact of an on-chain challenge submission",
    auth=AuthMode.EITHER,
    response=ChallengeSubmissionRecord,
    path_params=ProjectPath,
    body=ChallengeSubmissionUpsertRequest,
    guarded=True,
    errors=(WalletNotLinked, ProjectNotFound, ProjectModeMismatch, SubmissionHashMismatch),
)
async def upsert_challenge_submission(
    call: Call[ChallengeSubmissionUpsertRequest, None, ProjectPath],
) -> ChallengeSubmissionRecord:
    """Upsert keyed by (project, submitter wallet); always 200 with the stored record.
    `submitterAddress` must be an active wallet link of the caller (403 `wallet_not_linked`);
    the project must be indexed and visible (404 `project_not_found`) and in challenge mode (409
    `project_mode_mismatch`). On create, or when `submissionHash` changes, it must equal
    `challengeSubmissionOf(submitterAddress)` on the project contract at the latest block (409
    `submission_hash_mismatch`; 503 when the chain does not answer). With an unchanged hash only
    `artifactUri` and `notes` change, and an omitted one is cleared."""
    principal = call.require_principal()
    project = call.path.projectAddress
    body = call.body
    command = challenge_submissions.UpsertChallengeSubmission(
        project_address=project,
        user_id=principal.user_id,
        submitter_address=body.submitterAddress,
        submission_hash=body.submissionHash,
        artifact_uri=body.artifactUri,
        notes=body.notes,
    )
    row = await call.app[keys.PROJECT_SHARDS].run(command)
    return ChallengeSubmissionRecord.from_row(row)


@routes.get(
    "/v1/projects/{projectAddress}/challenge-submissions",
    name="listChallengeSubmissions",
    summary="List challenge-submission registrations visible to the caller",
    auth=AuthMode.EITHER,
    response=ChallengeSubmissionListResponse,
    path_params=ProjectPath,
    query=ChallengeSubmissionListQuery,
    errors=(ProjectNotFound, ProjectModeMismatch, NotChallengeParticipant),
)
async def list_challenge_submissions(
    call: Call[None, ChallengeSubmissionListQuery, ProjectPath],
) -> ChallengeSubmissionListResponse:
    """The owner (active link to the owner wallet) sees every registration; a submitter sees
    only the registrations of their own linked wallets, so competing artifacts stay private;
    anyone else is refused (403 `not_challenge_participant`). `onchainSubmissionCount` is the
    indexed on-chain count (public on the project read model anyway). Oldest first."""
    principal = call.require_principal()
    project = call.path.projectAddress
    submitter = call.query.submitterAddress
    count, rows = await challenge_submissions.list_challenge_submissions(
        call.pool, principal.user_id, project, submitter
    )
    items = [ChallengeSubmissionRecord.from_row(row) for row in rows]
    return ChallengeSubmissionListResponse(
        projectAddress=project,
        submitterAddress=submitter,
        onchainSubmissionCount=count,
        items=items,
        count=len(items),
    )
