"""What the chain says a verdict may judge (docs/verifier.md, "What a verdict means").

A verifier signature moves escrowed money: ``attestMilestone`` accepts it during the dispute's
``challenged`` phase and ``finalizeDispute`` pays (or rejects) 48 hours later. So the service
signs only for the project's active dispute, in phase ``challenged``, on the milestone that is
disputed, over the reference the worker submitted on chain (``deliveryRefHash``), with the
acceptance policy the owner fixed before bidding. These facts are read from the chain itself
(never from the read model, which may lag) when a job is accepted and again right before it
signs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eth_utils import keccak

from marketplace.chain.enums import DisputePhase, ProjectStatus
from marketplace.chain.project_state import bytes32_hex, project_state
from marketplace.chain.rpc import RPC_FAILURES, JsonRpcClient
from marketplace.verifier.policy import TransientPolicyError

ZERO_HASH = "0x" + "00" * 32


def delivery_ref_hash(delivery_ref: str) -> str:
    """keccak256 of the UTF-8 bytes of ``deliveryRef``: what ``submitMilestone`` records."""
    return "0x" + keccak(delivery_ref.encode("utf-8")).hex()


@dataclass(frozen=True)
class DisputeFacts:
    """The chain's state of one project, as far as a verdict on ``milestone_index`` cares."""

    status: ProjectStatus
    phase: DisputePhase
    # The milestone the active dispute is about (meaningful while ``phase`` is not NONE).
    dispute_milestone_index: int
    # Identifies the dispute: a milestone disputed again later is another dispute.
    dispute_opened_at: int
    # The requested milestone's deliveryRefHash (lower-case hex), None when it has none or the
    # project has no such milestone.
    delivery_ref_hash: str | None
    # The timestamp of the block the state was read at.
    block_time: int

    def judges(self, milestone_index: int) -> bool:
        """True when ``milestone_index`` is the active disputed milestone in phase
        ``challenged``: the only time ``attestMilestone`` accepts a verdict."""
        return (
            self.status == ProjectStatus.DISPUTE
            and self.phase == DisputePhase.CHALLENGED
            and self.dispute_milestone_index == milestone_index
        )

    def matches_delivery(self, delivery_ref: str) -> bool:
        return self.delivery_ref_hash is not None and self.delivery_ref_hash == delivery_ref_hash(
            delivery_ref
        )


async def chain_call(rpc: JsonRpcClient, method: str, params: list[Any]) -> Any:
    """``rpc.call``, a failure to get an answer being :class:`TransientPolicyError` (the job is
    retried)."""
    try:
        return await rpc.call(method, params)
    except RPC_FAILURES as exc:
        raise TransientPolicyError(f"chain RPC {method} failed: {exc}") from exc


async def read_dispute(rpc: JsonRpcClient, project: str, milestone_index: int) -> DisputeFacts:
    """The project's dispute state and the milestone's delivery hash at the latest block.

    The state is read at the number of the block whose time is reported, so the two agree.
    Raises :class:`TransientPolicyError` when the chain cannot be read."""
    block = await chain_call(rpc, "eth_getBlockByNumber", ["latest", False])
    block_time = int(block["timestamp"], 16)
    try:
        state = await project_state(rpc, project, block["number"])
    except RPC_FAILURES as exc:
        raise TransientPolicyError(f"chain RPC eth_call failed: {exc}") from exc
    if state is None:
        # No project contract at the address: nothing is disputed there.
        return DisputeFacts(ProjectStatus.DRAFT, DisputePhase.NONE, 0, 0, None, block_time)
    milestones = state["milestones"]
    ref_hash: str | None = None
    if milestone_index < len(milestones):
        text = bytes32_hex(milestones[milestone_index]["deliveryRefHash"])
        ref_hash = None if text == ZERO_HASH else text
    return DisputeFacts(
        status=ProjectStatus(state["status"]),
        phase=DisputePhase(state["disputePhase"]),
        dispute_milestone_index=int(state["disputeMilestoneIndex"]),
        dispute_opened_at=int(state["disputeOpenedAt"]),
        delivery_ref_hash=ref_hash,
        block_time=block_time,
    )
