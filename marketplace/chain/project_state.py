"""``getProjectState()`` of one project contract, read on demand (the indexer reads it in
batches itself). Used where a decision must follow the chain rather than the read model, which
may lag behind it: freezing acceptance policies once bidding opens, and what a verifier
signature may judge."""

from __future__ import annotations

from functools import cache
from typing import Any, TypedDict

from marketplace.chain.abi import AbiFunction, ContractAbi
from marketplace.chain.enums import ProjectStatus
from marketplace.chain.rpc import JsonRpcClient


class MilestoneState(TypedDict):
    """One ``Milestone`` of :class:`ProjectState`, decoded (enums as their ``uint8``)."""

    status: int
    payout: int
    deadline: int
    submittedAt: int
    approvedAt: int
    resolvedAt: int
    deliveryRefHash: str
    latestEvidenceHash: str
    attested: bool


class ProjectState(TypedDict):
    """The ``ProjectState`` struct ``getProjectState()`` returns, decoded by
    :mod:`marketplace.chain.abi`: member names as in the contract, integers as int, addresses
    and ``bytes32`` as ``0x`` text (addresses lower-case or checksummed, as the caller asked),
    enums as their ``uint8``. ``tests/unit/chain`` checks it against the compiled ABI."""

    owner: str
    registry: str
    escrow: str
    usdc: str
    status: int
    mode: int
    biddingAccess: int
    configHash: str
    createdAt: int
    openedAt: int
    selectedBuilder: str
    milestoneCount: int
    currentMilestone: int
    bidBond: int
    selectedBuilderBond: int
    challengePayout: int
    challengeSubmissionCount: int
    challengeSubmissionWindowSeconds: int
    challengeOwnerResponseWindowSeconds: int
    challengeSubmissionDeadline: int
    challengeOwnerResponseDeadline: int
    challengeSelectionPhase: bool
    challengeWinner: str
    disputePhase: int
    disputeReason: int
    disputeRaisedBy: str
    disputeMilestoneIndex: int
    disputeOpenedAt: int
    disputeVerdictSubmittedAt: int
    disputeReasonHash: str
    disputeOwnerEvidenceHash: str
    disputeWorkerEvidenceHash: str
    disputeVerdictPasses: bool
    feeRateBps: int
    disputeMultisig: str
    verifierSigner: str
    treasury: str
    escrowBalance: int
    milestones: list[MilestoneState]


class ProjectCreated(TypedDict):
    """The arguments of the registry's ``ProjectCreated`` event, decoded (``tests/unit/chain``
    checks it against the compiled ABI)."""

    project: str
    owner: str
    configHash: str
    timestamp: int


@cache
def _get_state() -> AbiFunction:
    return ContractAbi.load("MarketplaceProject").functions["getProjectState"]


async def project_state(
    rpc: JsonRpcClient, project: str, block: str = "latest"
) -> ProjectState | None:
    """The decoded ``ProjectState`` struct (field names as in the contract, addresses
    lower-case) at ``block``; None when no project contract answers at ``project``. RPC failures
    propagate (``RpcError``, ``aiohttp.ClientError``, ``TimeoutError``, ``OSError``)."""
    function = _get_state()
    data = await rpc.call("eth_call", [{"to": project, "data": function.encode_call()}, block])
    if not isinstance(data, str) or data in ("0x", ""):
        return None
    try:
        state: ProjectState = function.decode_result(data, checksum_addresses=False)
    except Exception:
        # Some other contract answered with data that is no ProjectState.
        return None
    return state


async def project_status(rpc: JsonRpcClient, project: str) -> ProjectStatus | None:
    state = await project_state(rpc, project)
    return None if state is None else ProjectStatus(state["status"])


def bytes32_hex(value: Any) -> str:
    """A decoded ``bytes32`` as lower-case ``0x`` hex, whichever form the decoder gave."""
    text = value if isinstance(value, str) else "0x" + bytes(value).hex()
    return text.lower()
