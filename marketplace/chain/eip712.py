"""EIP-712 signing for the verifier signer (and EIP-2612 permits for TestUSDC).

Pure functions over ``eth_account``; nothing here talks to a node, so the production verifier
service can import them. The typed-data layouts are the ones the contracts hash
(``contracts/README.md``, "EIP-712 (verifier signer)"):

- domain ``name = "MarketplaceVerifier"``, ``version = "1"``, ``chainId``,
  ``verifyingContract`` = the **registry** (one signer key signs for every project);
- ``Attestation(address project,uint16 milestoneIndex,bool passes,bytes32 evidenceHash,
  uint256 deadline,uint256 nonce,uint256 chainId)``;
- ``ChallengeFallback(address project,bytes32 rankedSubmittersHash,bytes32 rankingHash,
  uint256 deadline,uint256 nonce,uint256 chainId)``, where ``rankedSubmittersHash`` is
  ``keccak256(abi.encodePacked(address[]))`` (:func:`ranked_submitters_hash`).

Signatures are 65 bytes ``r || s || v`` with ``v`` in {27, 28} (eth_account produces low-s).
Nonces are single use per signer across all projects (the registry tracks them): callers pick
fresh ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from eth_account import Account
from eth_utils import keccak, to_checksum_address

VERIFIER_DOMAIN_NAME = "MarketplaceVerifier"
VERIFIER_DOMAIN_VERSION = "1"
ATTESTATION_TYPES: dict[str, list[dict[str, str]]] = {
    "Attestation": [
        {"name": "project", "type": "address"},
        {"name": "milestoneIndex", "type": "uint16"},
        {"name": "passes", "type": "bool"},
        {"name": "evidenceHash", "type": "bytes32"},
        {"name": "deadline", "type": "uint256"},
        {"name": "nonce", "type": "uint256"},
        {"name": "chainId", "type": "uint256"},
    ]
}
CHALLENGE_FALLBACK_TYPES: dict[str, list[dict[str, str]]] = {
    "ChallengeFallback": [
        {"name": "project", "type": "address"},
        {"name": "rankedSubmittersHash", "type": "bytes32"},
        {"name": "rankingHash", "type": "bytes32"},
        {"name": "deadline", "type": "uint256"},
        {"name": "nonce", "type": "uint256"},
        {"name": "chainId", "type": "uint256"},
    ]
}
PERMIT_TYPES: dict[str, list[dict[str, str]]] = {
    "Permit": [
        {"name": "owner", "type": "address"},
        {"name": "spender", "type": "address"},
        {"name": "value", "type": "uint256"},
        {"name": "nonce", "type": "uint256"},
        {"name": "deadline", "type": "uint256"},
    ]
}
#: EIP-712 domain name and version of the devnet's TestUSDC (EIP-2612 permits).
TEST_USDC_PERMIT_NAME = "Test USD Coin"
TEST_USDC_PERMIT_VERSION = "1"


class Eip712Domain(TypedDict):
    name: str
    version: str
    chainId: int
    verifyingContract: str


class AttestationMessage(TypedDict):
    """The ``Attestation`` struct as :data:`ATTESTATION_TYPES` lays it out."""

    project: str
    milestoneIndex: int
    passes: bool
    evidenceHash: bytes
    deadline: int
    nonce: int
    chainId: int


def bytes32(value: bytes | str) -> bytes:
    """``value`` as exactly 32 bytes (``0x``-hex text or raw bytes)."""
    raw = bytes.fromhex(value.removeprefix("0x")) if isinstance(value, str) else bytes(value)
    if len(raw) != 32:
        raise ValueError(f"expected 32 bytes, got {len(raw)}")
    return raw


def ranked_submitters_hash(addresses: Sequence[str]) -> bytes:
    """keccak256 of the 32-byte left-padded addresses, concatenated (the EIP-712 encoding of an
    ``address[]``, equal to ``keccak256(abi.encodePacked(address[]))``)."""
    return keccak(b"".join(bytes(12) + bytes.fromhex(a.removeprefix("0x")) for a in addresses))


def verifier_domain(chain_id: int, registry: str) -> Eip712Domain:
    return {
        "name": VERIFIER_DOMAIN_NAME,
        "version": VERIFIER_DOMAIN_VERSION,
        "chainId": chain_id,
        "verifyingContract": to_checksum_address(registry),
    }


def attestation_message(
    *,
    chain_id: int,
    project: str,
    milestone_index: int,
    passes: bool,
    evidence_hash: bytes | str,
    deadline: int,
    nonce: int,
) -> AttestationMessage:
    return {
        "project": to_checksum_address(project),
        "milestoneIndex": milestone_index,
        "passes": passes,
        "evidenceHash": bytes32(evidence_hash),
        "deadline": deadline,
        "nonce": nonce,
        "chainId": chain_id,
    }


def sign_attestation(
    key: str | bytes,
    *,
    chain_id: int,
    registry: str,
    project: str,
    milestone_index: int,
    passes: bool,
    evidence_hash: bytes | str,
    deadline: int,
    nonce: int,
    signed_chain_id: int | None = None,
) -> bytes:
    """65-byte signature of an ``Attestation`` for ``attestMilestone``. ``signed_chain_id``
    (tests only) puts a different chain id in the message than in the domain."""
    message = attestation_message(
        chain_id=chain_id if signed_chain_id is None else signed_chain_id,
        project=project,
        milestone_index=milestone_index,
        passes=passes,
        evidence_hash=evidence_hash,
        deadline=deadline,
        nonce=nonce,
    )
    # eth_account types its arguments as plain dicts.
    signed = Account.sign_typed_data(
        key, dict(verifier_domain(chain_id, registry)), ATTESTATION_TYPES, dict(message)
    )
    return bytes(signed.signature)


def recover_attestation_signer(
    signature: bytes,
    *,
    chain_id: int,
    registry: str,
    project: str,
    milestone_index: int,
    passes: bool,
    evidence_hash: bytes | str,
    deadline: int,
    nonce: int,
) -> str:
    """The checksummed address that produced ``signature`` over this attestation."""
    from eth_account.messages import encode_typed_data

    signable = encode_typed_data(
        dict(verifier_domain(chain_id, registry)),
        ATTESTATION_TYPES,
        dict(
            attestation_message(
                chain_id=chain_id,
                project=project,
                milestone_index=milestone_index,
                passes=passes,
                evidence_hash=evidence_hash,
                deadline=deadline,
                nonce=nonce,
            )
        ),
    )
    return str(Account.recover_message(signable, signature=signature))


def sign_fallback(
    key: str | bytes,
    *,
    chain_id: int,
    registry: str,
    project: str,
    ranked: Sequence[str],
    ranking_hash: bytes | str,
    deadline: int,
    nonce: int,
    signed_chain_id: int | None = None,
) -> bytes:
    """65-byte signature of a ``ChallengeFallback`` for ``settleChallengeFallback``."""
    message = {
        "project": to_checksum_address(project),
        "rankedSubmittersHash": ranked_submitters_hash(ranked),
        "rankingHash": bytes32(ranking_hash),
        "deadline": deadline,
        "nonce": nonce,
        "chainId": chain_id if signed_chain_id is None else signed_chain_id,
    }
    signed = Account.sign_typed_data(
        key, dict(verifier_domain(chain_id, registry)), CHALLENGE_FALLBACK_TYPES, message
    )
    return bytes(signed.signature)


def sign_permit(
    key: str | bytes,
    *,
    chain_id: int,
    token: str,
    owner: str,
    spender: str,
    value: int,
    nonce: int,
    deadline: int,
    name: str = TEST_USDC_PERMIT_NAME,
    version: str = TEST_USDC_PERMIT_VERSION,
) -> tuple[int, bytes, bytes]:
    """``(v, r, s)`` of an EIP-2612 permit (``nonce`` is the token's ``nonces(owner)``)."""
    domain = {
        "name": name,
        "version": version,
        "chainId": chain_id,
        "verifyingContract": to_checksum_address(token),
    }
    message = {
        "owner": to_checksum_address(owner),
        "spender": to_checksum_address(spender),
        "value": value,
        "nonce": nonce,
        "deadline": deadline,
    }
    signed = Account.sign_typed_data(key, domain, PERMIT_TYPES, message)
    return signed.v, signed.r.to_bytes(32, "big"), signed.s.to_bytes(32, "big")
