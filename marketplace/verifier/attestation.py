"""The attestation of a verifier result: an ``AttestationPayload`` signed EIP-712 with the
registry's verifier domain (marketplace/chain/eip712.py, contracts/README.md), which
``attestMilestone`` on the project contract accepts.

- ``deadline``: given by the job (marketplace/verifier/execution.py): at most the chain's latest
  block timestamp, read right before signing, plus ``MARKETPLACE_VERIFIER_ATTESTATION_TTL_SECONDS``
  (the contract compares it with block time, so the server's clock is not used); a request may
  only shorten it.
- ``nonce``: the request's, or the one drawn when the job was created (random 128 bits, so every
  attempt of a job signs the same nonce). Nonces are single use per signer across all projects:
  a requested nonce the registry already consumed fails the job (the contract would refuse it);
  a drawn one that is somehow used is replaced by a new random one.
Chain reads that fail raise :class:`TransientPolicyError`, so the job is retried.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TypedDict

from eth_abi import decode, encode
from eth_account import Account
from eth_utils import keccak, to_checksum_address

from marketplace.chain.eip712 import sign_attestation
from marketplace.chain.rpc import JsonRpcClient
from marketplace.config import Settings
from marketplace.verifier.dispute import chain_call

IS_NONCE_USED = keccak(text="isNonceUsed(address,uint256)")[:4]


class NonceAlreadyUsed(Exception):
    """The requested nonce was already consumed by this signer: no attestation can use it."""


@dataclass(frozen=True)
class Signer:
    key: str
    address: str
    registry: str
    chain_id: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Signer | None:
        """None when this deployment cannot sign (no key or no registry configured)."""
        if settings.verifier_private_key is None or not settings.registry_address:
            return None
        key = settings.verifier_private_key.get_secret_value()
        return cls(
            key=key,
            address=Account.from_key(key).address,
            registry=to_checksum_address(settings.registry_address),
            chain_id=settings.chain_id,
        )


async def nonce_used(rpc: JsonRpcClient, signer: Signer, nonce: int) -> bool:
    data = IS_NONCE_USED + encode(["address", "uint256"], [signer.address, nonce])
    result = await chain_call(
        rpc, "eth_call", [{"to": signer.registry, "data": "0x" + data.hex()}, "latest"]
    )
    (used,) = decode(["bool"], bytes.fromhex(str(result).removeprefix("0x")))
    return bool(used)


class SignedAttestation(TypedDict):
    """The spec's ``AttestationPayload``, as :func:`attest` answers it."""

    project: str
    milestoneIndex: int
    passes: bool
    evidenceHash: str
    deadline: int
    nonce: int
    chainId: int
    signature: str
    signer: str


async def attest(
    rpc: JsonRpcClient,
    signer: Signer,
    *,
    project: str,
    milestone_index: int,
    passes: bool,
    evidence_hash: str,
    nonce: int,
    nonce_requested: bool,
    deadline: int,
) -> SignedAttestation:
    """The signed ``AttestationPayload`` (spec field names). ``deadline`` is the caller's to
    bound (the job: the chain's time at signing plus the TTL, or the request's if earlier)."""
    if await nonce_used(rpc, signer, nonce):
        if nonce_requested:
            raise NonceAlreadyUsed(
                f"nonce {nonce} was already used by the verifier signer {signer.address}"
            )
        nonce = secrets.randbits(128)
    signature = sign_attestation(
        signer.key,
        chain_id=signer.chain_id,
        registry=signer.registry,
        project=project,
        milestone_index=milestone_index,
        passes=passes,
        evidence_hash=evidence_hash,
        deadline=deadline,
        nonce=nonce,
    )
    return {
        "project": to_checksum_address(project),
        "milestoneIndex": milestone_index,
        "passes": passes,
        "evidenceHash": evidence_hash,
        "deadline": deadline,
        "nonce": nonce,
        "chainId": signer.chain_id,
        "signature": "0x" + signature.hex(),
        "signer": signer.address,
    }
