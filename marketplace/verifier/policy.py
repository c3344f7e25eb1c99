"""What every verifier policy is: its id, what it answers, and how it fails.

A policy checks one ``deliveryRef`` and answers a :class:`PolicyOutcome`. A deterministic
negative result (no code at the address, ref not found, tests fail) is an outcome with
``passes=False``; only failures worth retrying raise :class:`TransientPolicyError`. A
``deliveryRef`` the policy cannot even read raises :class:`InvalidDeliveryRef` from
:func:`Policy.parse_ref`, before any job exists (the API answers 400).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marketplace.config import Settings


class PolicyId(enum.StrEnum):
    GITHUB_REF = "github-ref"
    ADDRESS_SMOKE = "address-smoke"
    FORGE_TEST = "forge-test"
    CARGO_TEST = "cargo-test"
    NPM_TEST = "npm-test"
    FIGMA_REF = "figma-ref"
    SCREENSHOT_REF = "screenshot-ref"


class InvalidDeliveryRef(ValueError):
    """The ``deliveryRef`` does not have the form the policy reads (message says which)."""


class TransientPolicyError(Exception):
    """Worth retrying: RPC unreachable, HTTP 5xx, a timeout, the git host down."""


@dataclass(frozen=True)
class PolicyOutcome:
    passes: bool
    # The facts the check established: JSON of str, int, bool, None, lists and objects only
    # (no floats), hashed canonically (marketplace/verifier/evidence.py).
    evidence: dict[str, Any]
    # What the run saw beyond the facts (HTTP headers, resolved refs, command exit codes...),
    # kept until the retention sweep.
    raw: dict[str, Any] = field(default_factory=dict)
    # Execution output (commands' stdout/stderr), already cut to the configured bound.
    logs: str = ""


@dataclass(frozen=True)
class PolicySettings:
    """The settings a policy run may read, and nothing else: no signing key, no JWT or
    notification secret, no database or Redis URL. This is all that crosses into the process
    that executes policies (docs/verifier.md, "Security"), so a secret cannot leak from there
    because it was never sent."""

    verifier_git_base_url: str
    verifier_figma_host: str
    verifier_ipfs_gateway_url: str
    verifier_allow_private_hosts: bool
    verifier_http_timeout_seconds: float
    verifier_command_timeout_seconds: float
    verifier_command_cpu_seconds: int
    verifier_command_memory_mb: int
    verifier_max_log_bytes: int
    verifier_max_image_bytes: int
    # The chain's JSON-RPC URL (address-smoke reads code at an address).
    chain_rpc_url: str

    @classmethod
    def from_settings(cls, settings: Settings) -> PolicySettings:
        return cls(
            verifier_git_base_url=settings.verifier_git_base_url,
            verifier_figma_host=settings.verifier_figma_host,
            verifier_ipfs_gateway_url=settings.verifier_ipfs_gateway_url,
            verifier_allow_private_hosts=settings.verifier_allow_private_hosts,
            verifier_http_timeout_seconds=settings.verifier_http_timeout_seconds,
            verifier_command_timeout_seconds=settings.verifier_command_timeout_seconds,
            verifier_command_cpu_seconds=settings.verifier_command_cpu_seconds,
            verifier_command_memory_mb=settings.verifier_command_memory_mb,
            verifier_max_log_bytes=settings.verifier_max_log_bytes,
            verifier_max_image_bytes=settings.verifier_max_image_bytes,
            chain_rpc_url=settings.chain_rpc_url,
        )


def as_policy_settings(settings: Settings | PolicySettings) -> PolicySettings:
    return (
        settings if isinstance(settings, PolicySettings) else PolicySettings.from_settings(settings)
    )


@dataclass(frozen=True)
class PolicyContext:
    settings: PolicySettings
    # The chain's JSON-RPC URL (address-smoke).
    rpc_url: str
    # A directory the policy may create temporary files under (removed by the caller).
    work_dir: Path


@dataclass(frozen=True)
class Policy:
    id: PolicyId
    description: str
    # Raises InvalidDeliveryRef; returns the normalised reference the run receives.
    parse_ref: Callable[[str, PolicySettings], Any]
    run: Callable[[Any, PolicyContext], Awaitable[PolicyOutcome]]
    # Whether this node has what the policy needs (git, npm, cargo, forge...).
    available: Callable[[PolicySettings], bool]
