"""Hash rules of the spec (section 2, "Hash rules"): ABI-encoded preimages, keccak256.

- direct: ``configHash = H(abi.encode(title, description, repoUrl, projectMode, biddingAccess))``
- intent: ``metadataHash`` as above; ``intentHash = H(abi.encode(
  "service.project_create_intent_v1", userId, intentId, intentNonce))``;
  ``configHash = H(abi.encode(metadataHash, intentHash))``.

Types of the preimage fields (the spec names them but not their ABI types; chosen here and
documented, with a worked example a client can check, in docs/hashes.md): the five metadata
fields are ``string`` (an absent description or repoUrl is the empty string); ``userId`` and
``intentId`` are ``string`` holding the canonical lower-case hyphenated UUID text;
``intentNonce``, ``metadataHash`` and ``intentHash`` are ``bytes32``.
"""

from __future__ import annotations

import uuid

from eth_abi import encode
from eth_utils import keccak

INTENT_DOMAIN = "service.project_create_intent_v1"


def _bytes32(value: str | bytes) -> bytes:
    raw = bytes.fromhex(value.removeprefix("0x")) if isinstance(value, str) else value
    if len(raw) != 32:
        raise ValueError("expected 32 bytes")
    return raw


def _hex(digest: bytes) -> str:
    return "0x" + digest.hex()


def metadata_hash(
    title: str,
    description: str | None,
    repo_url: str | None,
    project_mode: str,
    bidding_access: str,
) -> str:
    preimage = encode(
        ["string", "string", "string", "string", "string"],
        [title, description or "", repo_url or "", project_mode, bidding_access],
    )
    return _hex(keccak(preimage))


# Direct mode: the configHash is the metadata hash itself.
direct_config_hash = metadata_hash


def intent_hash(user_id: uuid.UUID, intent_id: uuid.UUID, intent_nonce: str | bytes) -> str:
    preimage = encode(
        ["string", "string", "string", "bytes32"],
        [INTENT_DOMAIN, str(user_id), str(intent_id), _bytes32(intent_nonce)],
    )
    return _hex(keccak(preimage))


def intent_config_hash(
    title: str,
    description: str | None,
    repo_url: str | None,
    project_mode: str,
    bidding_access: str,
    *,
    user_id: uuid.UUID,
    intent_id: uuid.UUID,
    intent_nonce: str | bytes,
) -> str:
    meta = metadata_hash(title, description, repo_url, project_mode, bidding_access)
    intent = intent_hash(user_id, intent_id, intent_nonce)
    preimage = encode(["bytes32", "bytes32"], [_bytes32(meta), _bytes32(intent)])
    return _hex(keccak(preimage))
