"""Path parameter models, one per parameter set, shared by every route with those parameters.

A route names one of these as ``path_params``; its fields are the ``{placeholders}`` of the
route's path, so a parameter has one type, one pattern in the OpenAPI document and one
normalisation (addresses lower-case) wherever it appears.
"""

from __future__ import annotations

import uuid

from marketplace.types import LowerAddress, MilestoneIndex, QueryModel


class ProjectPath(QueryModel):
    """Path parameters of `/v1/projects/{projectAddress}/...`."""

    projectAddress: LowerAddress


class ProjectMilestonePath(ProjectPath):
    """Path parameters of `/v1/projects/{projectAddress}/milestones/{milestoneIndex}/...`."""

    milestoneIndex: MilestoneIndex


class WalletAddressPath(QueryModel):
    """Path parameters of `/v1/wallet-links/{walletAddress}`."""

    walletAddress: LowerAddress


class ApiKeyPath(QueryModel):
    """Path parameters of `/v1/api-keys/{keyId}/...`."""

    keyId: uuid.UUID


class IntentPath(QueryModel):
    """Path parameters of `/v1/projects/create-intents/{intentId}`."""

    intentId: uuid.UUID


class VerifierJobPath(QueryModel):
    """Path parameters of `/v1/verifier/jobs/{jobId}/...`."""

    jobId: uuid.UUID


class UserIdPath(QueryModel):
    """Path parameters of `/v1/moderation/suspensions/{userId}`."""

    userId: uuid.UUID


class ThreadPath(QueryModel):
    """Path parameters of `/v1/messages/dm/threads/{threadId}/...`."""

    threadId: uuid.UUID


class BlockedUserPath(QueryModel):
    """Path parameters of `/v1/messages/block/{blockedUserId}`."""

    blockedUserId: uuid.UUID


class MutedUserPath(QueryModel):
    """Path parameters of `/v1/messages/mute/{mutedUserId}`."""

    mutedUserId: uuid.UUID


class ReportPath(QueryModel):
    """Path parameters of `/v1/messages/reports/{reportId}/...`."""

    reportId: uuid.UUID
