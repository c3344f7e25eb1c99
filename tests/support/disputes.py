"""Real disputes on a devnet for verifier tests: a verifier job is accepted only for the project's
active disputed milestone in phase ``challenged``, over the delivery the worker submitted
(keccak256 of ``deliveryRef`` = the milestone's on-chain ``deliveryRefHash``), with the
acceptance policy the owner fixed (docs/verifier.md, "What a verdict means")."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from web3.contract import Contract

from tests.contracts.helpers import Chain


def disputed_project(chain: Chain, delivery_ref: str, *, index: int = 0) -> Contract:
    """A standard project in Building (``chain.a.worker`` selected) whose milestone ``index``
    the worker submitted with ``delivery_ref`` and the owner disputed (LowQuality): phase
    ``challenged``. Earlier milestones are submitted and approved first."""
    project = chain.building(
        payouts=tuple(100 * 10**6 for _ in range(max(2, index + 1))),
        durations=tuple(3 * 86_400 for _ in range(max(2, index + 1))),
    )
    for earlier in range(index):
        chain.submit(project, earlier)
        chain.ok(chain.a.owner, project.functions.approveMilestone(earlier))
    chain.submit(project, index, delivery_ref=delivery_ref)
    chain.dispute(project, index)
    return project


def policies_json(policies: Sequence[tuple[int, str]]) -> str:
    return json.dumps([{"milestoneIndex": i, "checkPolicyId": p} for i, p in sorted(policies)])


async def set_policies(conn: Any, project: str, policies: Sequence[tuple[int, str]]) -> None:
    """Set the claimed metadata's acceptance policies directly (the API path is
    ``PATCH /v1/projects/{projectAddress}/metadata``, tested on its own)."""
    # Sent as text: a pool with the service's JSON codec would encode a jsonb parameter again.
    status = await conn.execute(
        "UPDATE project_metadata SET milestone_policies = $2::text::jsonb "
        "WHERE project_address = $1",
        project.lower(),
        policies_json(policies),
    )
    assert status == "UPDATE 1", f"{project} has no claimed metadata"
