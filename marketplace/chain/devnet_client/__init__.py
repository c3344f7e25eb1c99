"""Client-side driver of the marketplace contracts.

- :mod:`.client`: :class:`~.client.DevnetClient`, which sends transactions from node-unlocked
  accounts as a client would, and :func:`~.client.locate_devnet` (the devnet of
  ``marketplace up``).
- :mod:`.seed`: fills a devnet with projects in every status (``marketplace devnet seed``).

The contracts' enumerations (:mod:`marketplace.chain.enums`) and the EIP-712 signing helpers
(:mod:`marketplace.chain.eip712`, also used by the production verifier) are re-exported here for
convenience; the client and seeder are imported from their modules.
"""

from marketplace.chain.eip712 import (
    ATTESTATION_TYPES,
    CHALLENGE_FALLBACK_TYPES,
    PERMIT_TYPES,
    VERIFIER_DOMAIN_NAME,
    VERIFIER_DOMAIN_VERSION,
    ranked_submitters_hash,
    recover_attestation_signer,
    sign_attestation,
    sign_fallback,
    sign_permit,
    verifier_domain,
)
from marketplace.chain.enums import (
    BiddingAccess,
    DisputeOutcome,
    DisputePhase,
    DisputeReason,
    MilestoneStatus,
    ProjectMode,
    ProjectStatus,
    label,
)

__all__ = [
    "ATTESTATION_TYPES",
    "CHALLENGE_FALLBACK_TYPES",
    "PERMIT_TYPES",
    "VERIFIER_DOMAIN_NAME",
    "VERIFIER_DOMAIN_VERSION",
    "BiddingAccess",
    "DisputeOutcome",
    "DisputePhase",
    "DisputeReason",
    "MilestoneStatus",
    "ProjectMode",
    "ProjectStatus",
    "label",
    "ranked_submitters_hash",
    "recover_attestation_signer",
    "sign_attestation",
    "sign_fallback",
    "sign_permit",
    "verifier_domain",
]
