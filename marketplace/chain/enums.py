"""The contracts' enumerations (``uint8`` on the ABI; ``contracts/README.md``, "Enumerations").

``member.name.lower()`` is the spelling the read models and the spec use (``draft``,
``verifier_verdict``, ``invite_only``, ``low_quality``, ...); :func:`label` returns it.
"""

from __future__ import annotations

import enum


class ProjectStatus(enum.IntEnum):
    DRAFT = 0
    BIDDING = 1
    BUILDING = 2
    DISPUTE = 3
    COMPLETE = 4
    FAILED = 5


class MilestoneStatus(enum.IntEnum):
    PENDING = 0
    SUBMITTED = 1
    APPROVED = 2
    REJECTED = 3
    DISPUTED = 4
    ATTESTED = 5


class ProjectMode(enum.IntEnum):
    STANDARD = 0
    CHALLENGE = 1


class BiddingAccess(enum.IntEnum):
    INVITE_ONLY = 0
    OPEN = 1


class DisputePhase(enum.IntEnum):
    NONE = 0
    CHALLENGED = 1
    VERIFIER_VERDICT = 2
    MULTISIG_OVERRIDE = 3
    FINALIZED = 4


class DisputeReason(enum.IntEnum):
    DEADLINE_MISSED = 0
    LOW_QUALITY = 1
    OWNER_INACTION = 2


class DisputeOutcome(enum.IntEnum):
    """``resolveDispute`` outcome; ``NONE`` is rejected by the contract as invalid."""

    NONE = 0
    APPROVE = 1
    REJECT = 2


def label(member: enum.IntEnum) -> str:
    """The read-model / spec spelling of an enum member (``ProjectStatus.DRAFT`` -> ``draft``)."""
    return member.name.lower()
