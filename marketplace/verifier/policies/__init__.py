"""The seven deterministic verifier policies (docs/verifier.md, "Policies").

- :data:`POLICIES`: every policy by id, in :class:`PolicyId` order.
- :func:`available_policies`: the ones this node has the tooling for (probed once per process).
- :func:`parse_delivery_ref`: reads a ``deliveryRef`` or raises :class:`InvalidDeliveryRef`
  (the API's 400, before a job exists).
- :func:`run_policy`: runs one; a deterministic negative is ``passes=False``, a failure worth
  retrying raises :class:`TransientPolicyError`, a policy whose tooling is missing here also
  raises it (another node may have it): never a pass without the check.
"""

from __future__ import annotations

from typing import Any

from marketplace.config import Settings
from marketplace.types import JsonObject
from marketplace.verifier.net import HostNotFound, HostRefused
from marketplace.verifier.policies import commands, gitrepo
from marketplace.verifier.policies.address import parse_address, run_address_smoke
from marketplace.verifier.policies.tooling import probe
from marketplace.verifier.policies.web import (
    parse_figma,
    parse_screenshot,
    run_figma,
    run_screenshot,
)
from marketplace.verifier.policy import (
    InvalidDeliveryRef,
    Policy,
    PolicyContext,
    PolicyId,
    PolicyOutcome,
    PolicySettings,
    TransientPolicyError,
    as_policy_settings,
)

__all__ = [
    "POLICIES",
    "available_policies",
    "parse_delivery_ref",
    "run_policy",
]


async def run_github_ref(ref: gitrepo.RepoRef, ctx: PolicyContext) -> PolicyOutcome:
    scratch = gitrepo.scratch_dir(ctx, "github-ref-")
    home = scratch / "home"
    home.mkdir()
    evidence: JsonObject = {
        "policy": "github-ref",
        "repository": ref.slug,
        "repositoryUrl": ref.url,
        "ref": ref.ref,
    }
    try:
        resolved, missing = await gitrepo.resolve(ref, ctx, home)
    except HostNotFound as exc:
        # The git host is the deployment's own setting: a name that does not resolve is DNS
        # trouble to retry, not the delivery's fault.
        raise TransientPolicyError(str(exc)) from exc
    except HostRefused as exc:
        evidence.update(found=False, refName=None, refKind=None, commit=None)
        evidence["reason"] = "host_refused"
        return PolicyOutcome(passes=False, evidence=evidence, raw={"error": str(exc)})
    except OSError as exc:
        raise TransientPolicyError(f"git host {ref.url}: {exc}") from exc
    if resolved is None:
        evidence.update(found=False, refName=None, refKind=None, commit=None, reason=missing)
        return PolicyOutcome(passes=False, evidence=evidence)
    evidence.update(
        found=True,
        refName=resolved.ref_name,
        refKind=resolved.kind,
        commit=resolved.commit,
        reason=None,
    )
    return PolicyOutcome(passes=True, evidence=evidence)


async def _run_npm(ref: gitrepo.RepoRef, ctx: PolicyContext) -> PolicyOutcome:
    return await commands.run_suite(commands.NPM, ref, ctx)


async def _run_cargo(ref: gitrepo.RepoRef, ctx: PolicyContext) -> PolicyOutcome:
    return await commands.run_suite(commands.CARGO, ref, ctx)


async def _run_forge(ref: gitrepo.RepoRef, ctx: PolicyContext) -> PolicyOutcome:
    return await commands.run_suite(commands.FORGE, ref, ctx)


def _always(settings: PolicySettings) -> bool:
    return True


def _has_git(settings: PolicySettings) -> bool:
    return probe().git is not None


POLICIES: dict[PolicyId, Policy] = {
    policy.id: policy
    for policy in (
        Policy(
            id=PolicyId.GITHUB_REF,
            description="Repository reference valid: the branch, tag or commit exists.",
            parse_ref=gitrepo.parse_repo_ref,
            run=run_github_ref,
            available=_has_git,
        ),
        Policy(
            id=PolicyId.ADDRESS_SMOKE,
            description="On-chain address liveness: the address holds contract code.",
            parse_ref=parse_address,
            run=run_address_smoke,
            available=_always,
        ),
        Policy(
            id=PolicyId.FORGE_TEST,
            description="`forge test` passes at the repository reference.",
            parse_ref=gitrepo.parse_repo_ref,
            run=_run_forge,
            available=lambda s: commands.suite_available(commands.FORGE),
        ),
        Policy(
            id=PolicyId.CARGO_TEST,
            description="`cargo test` passes at the repository reference.",
            parse_ref=gitrepo.parse_repo_ref,
            run=_run_cargo,
            available=lambda s: commands.suite_available(commands.CARGO),
        ),
        Policy(
            id=PolicyId.NPM_TEST,
            description="`npm ci && npm test` passes at the repository reference.",
            parse_ref=gitrepo.parse_repo_ref,
            run=_run_npm,
            available=lambda s: commands.suite_available(commands.NPM),
        ),
        Policy(
            id=PolicyId.FIGMA_REF,
            description="Design artifact reference accessible: the Figma URL answers 200.",
            parse_ref=parse_figma,
            run=run_figma,
            available=_always,
        ),
        Policy(
            id=PolicyId.SCREENSHOT_REF,
            description="Image artifact reference exists: the URL serves a PNG, JPEG, GIF "
            "or WebP image within the size limit.",
            parse_ref=parse_screenshot,
            run=run_screenshot,
            available=_always,
        ),
    )
}


def available_policies(settings: Settings | PolicySettings) -> list[PolicyId]:
    """The policies this node can run, in :class:`PolicyId` order."""
    policy_settings = as_policy_settings(settings)
    return [pid for pid in PolicyId if POLICIES[pid].available(policy_settings)]


def parse_delivery_ref(
    policy_id: PolicyId, delivery_ref: str, settings: Settings | PolicySettings
) -> Any:
    """The normalised reference (picklable), or :class:`InvalidDeliveryRef`."""
    if len(delivery_ref) > 2048:
        raise InvalidDeliveryRef("deliveryRef is longer than 2048 characters")
    return POLICIES[PolicyId(policy_id)].parse_ref(delivery_ref, as_policy_settings(settings))


async def run_policy(policy_id: PolicyId, delivery_ref: str, ctx: PolicyContext) -> PolicyOutcome:
    policy = POLICIES[PolicyId(policy_id)]
    parsed = policy.parse_ref(delivery_ref, ctx.settings)
    if not policy.available(ctx.settings):
        raise TransientPolicyError(f"{policy.id} is not available on this node")
    return await policy.run(parsed, ctx)
