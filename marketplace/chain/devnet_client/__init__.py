"""Client-side driver of the marketplace contracts.

- :mod:`.enums`: the contracts' enumerations (``ProjectStatus``, ``MilestoneStatus``, ...).
- :mod:`.signing`: EIP-712 signing for the verifier signer (attestations, challenge fallbacks)
  and EIP-2612 permits. Pure functions, no node access: the production verifier imports these.
- :mod:`.client`: :class:`~.client.DevnetClient`, which sends transactions from node-unlocked
  accounts as a client would, and :func:`~.client.locate_devnet` (the devnet of
  ``marketplace up``).
- :mod:`.seed`: fills a devnet with projects in every status (``marketplace devnet seed``).

The enums and signing helpers are re-exported here; the client and seeder import web3-free but
heavier machinery and are imported from their modules.
"""

from marketplace.chain.devnet_client.enums import (
    BiddingAccess,
    DisputeOutcome,
    DisputePhase,
    DisputeReason,
    MilestoneStatus,
    ProjectMode,
    ProjectStatus,
    label,
)
from marketplace.chain.devnet_client.signing import (
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
