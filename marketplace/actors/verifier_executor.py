"""Policy executors: the Ray actors that run verifier policies, apart from the key that signs.

A verifier job worker (``job-worker-verifier-{i}``) holds the database URL and the attestation
signing key; it never runs a policy itself. It hands the policy to its executor
(``verifier-executor-{i}``, same index), which gets nothing but :class:`PolicySettings` (no key,
no JWT or notification secret, no database or Redis URL) and runs the worker's code only inside
the bubblewrap sandbox (marketplace/verifier/sandbox.py). The job worker then hashes, re-reads
the chain and signs. ``MARKETPLACE_VERIFIER_EXECUTOR_RESOURCE`` places executors on nodes that
carry none of the service's secrets (deploy/README.md).

Fault contract: an executor holds nothing. Killed mid-policy (SIGKILL included), its sandbox
dies with it (``--die-with-parent``), the job worker's call fails as transient and the job is
retried; Ray restarts the executor (``max_restarts=-1``), whose ``__init__`` removes the work
dirs that dead executors left. Calls are not retried by Ray (``max_task_retries=0``): a retry is
the job queue's decision.
"""

from __future__ import annotations

import asyncio
import logging
import os

from marketplace.actors.options import ActorSpec
from marketplace.interpreter import freeze_start_up_heap, pin_recursion_limit
from marketplace.verifier.execution import ExecutorReport, PolicyRun, executor_name
from marketplace.verifier.policies import available_policies, run_policy
from marketplace.verifier.policy import PolicyContext, PolicyOutcome, PolicySettings
from marketplace.verifier.sandbox import sandbox_unavailable_reason
from marketplace.verifier.workdirs import job_work_dir, sweep_stale

log = logging.getLogger(__name__)

# Environment variables that name the service's secrets or its stores. The sandbox starts
# commands with an empty environment anyway; this only keeps them out of this process's own
# children should a future policy start one outside the sandbox.
_SCRUBBED_PREFIXES = ("MARKETPLACE_",)


class PolicyExecutorActor:
    def __init__(self, settings: PolicySettings, index: int) -> None:
        pin_recursion_limit()
        freeze_start_up_heap()
        self.settings = settings
        self.index = index
        for name in [n for n in os.environ if n.startswith(_SCRUBBED_PREFIXES)]:
            del os.environ[name]
        removed = sweep_stale()
        if removed:
            log.info("removed %d work dirs left by dead executors", removed)

    async def run(self, request: PolicyRun) -> PolicyOutcome:
        """Run one policy in a fresh work dir (removed on every path)."""
        with job_work_dir() as work_dir:
            context = PolicyContext(self.settings, self.settings.chain_rpc_url, work_dir)
            return await run_policy(request.policy, request.delivery_ref, context)

    async def report(self) -> ExecutorReport:
        """The policies this node can run; the tool probe runs commands once per process."""
        available = await asyncio.to_thread(available_policies, self.settings)
        reason = await asyncio.to_thread(sandbox_unavailable_reason)
        return ExecutorReport(tuple(available), reason)


def executor_spec(index: int, resource: str = "") -> ActorSpec:
    return ActorSpec(
        name=executor_name(index),
        cls=PolicyExecutorActor,
        idempotent_calls=False,
        # One policy at a time (its commands may use the node's CPUs), plus a report.
        max_concurrency=2,
        scheduling_strategy="SPREAD",
        extra={"resources": {resource: 1}} if resource else {},
    )
