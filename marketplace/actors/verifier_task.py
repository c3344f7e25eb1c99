"""One policy run as a Ray task, for the verifier runtime's synchronous ``POST /v1/verify``.

The task reserves one CPU (so concurrent runs queue for the cluster's CPUs instead of starving
each other) and is spread over the nodes like the verifier pool's actors. It runs the same
:func:`marketplace.verifier.policies.run_policy` as a queued job, but signs nothing and stores
nothing: the runtime answers the outcome to its caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

import ray

from marketplace.verifier.evidence import evidence_hash
from marketplace.verifier.policies import run_policy
from marketplace.verifier.policy import PolicyContext, PolicyId, PolicySettings
from marketplace.verifier.workdirs import job_work_dir


@dataclass(frozen=True)
class PolicyTaskResult:
    """What the task answers: the outcome's verdict and facts, and the facts' hash."""

    passes: bool
    evidence_hash: str
    evidence: Mapping[str, object]  # JSON (marketplace/verifier/evidence.py)


def _run(settings: PolicySettings, policy: str, delivery_ref: str) -> PolicyTaskResult:
    # Only the policy settings cross to the task: no key or secret of the service.
    async def main() -> PolicyTaskResult:
        with job_work_dir() as work_dir:
            context = PolicyContext(settings, settings.chain_rpc_url, work_dir)
            outcome = await run_policy(PolicyId(policy), delivery_ref, context)
        return PolicyTaskResult(
            passes=outcome.passes,
            evidence_hash=evidence_hash(outcome.evidence),
            evidence=outcome.evidence,
        )

    return asyncio.run(main())


run_policy_task = ray.remote(num_cpus=1, max_retries=0, scheduling_strategy="SPREAD")(_run)
