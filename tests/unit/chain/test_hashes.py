"""Hash helpers against preimages encoded by hand (no eth_abi), per the ABI spec."""

from __future__ import annotations

import uuid

from eth_utils import keccak

from marketplace.chain.hashes import (
    INTENT_DOMAIN,
    direct_config_hash,
    intent_config_hash,
    intent_hash,
    metadata_hash,
)


def _word(n: int) -> bytes:
    return n.to_bytes(32, "big")


def _abi_strings_and_words(items: list[str | bytes]) -> bytes:
    """abi.encode of a tuple of dynamic strings and static bytes32 words, by hand."""
    head, tail = b"", b""
    offset = 32 * len(items)
    for item in items:
        if isinstance(item, bytes):
            head += item
            continue
        data = item.encode()
        padded = data + b"\x00" * (-len(data) % 32)
        head += _word(offset + len(tail))
        tail += _word(len(data)) + padded
    return head + tail


def test_metadata_hash_matches_hand_encoding() -> None:
    fields = [
        "Build a bridge",
        "Across the river, " * 5,
        "https://example.com/r",
        "standard",
        "open",
    ]
    expected = "0x" + keccak(_abi_strings_and_words(list(fields))).hex()
    assert metadata_hash(*fields) == expected
    assert direct_config_hash(*fields) == expected


def test_absent_optional_fields_hash_as_empty_strings() -> None:
    expected = (
        "0x" + keccak(_abi_strings_and_words(["t", "", "", "challenge", "invite_only"])).hex()
    )
    assert metadata_hash("t", None, None, "challenge", "invite_only") == expected
    assert metadata_hash("t", "", "", "challenge", "invite_only") == expected


def test_intent_config_hash_matches_hand_encoding() -> None:
    user_id = uuid.UUID("3fa85f64-5717-4562-b3fc-2c963f66afa6")
    intent_id = uuid.UUID("0b6a2a8e-8a15-4a0e-9d7e-0c4a5f0e7d11")
    nonce = bytes(range(32))
    fields = ["Logo", "A new logo", "", "challenge", "open"]
    meta = keccak(_abi_strings_and_words(list(fields)))
    intent = keccak(_abi_strings_and_words([INTENT_DOMAIN, str(user_id), str(intent_id), nonce]))
    assert intent_hash(user_id, intent_id, "0x" + nonce.hex()) == "0x" + intent.hex()
    expected = "0x" + keccak(meta + intent).hex()
    got = intent_config_hash(
        *fields, user_id=user_id, intent_id=intent_id, intent_nonce="0x" + nonce.hex()
    )
    assert got == expected
    # Any change of the intent changes the hash.
    other = intent_config_hash(
        *fields, user_id=uuid.uuid4(), intent_id=intent_id, intent_nonce=nonce
    )
    assert other != expected


def test_pinned_vector() -> None:
    # Pinned so a change of encoding is caught even if helper and hand encoding changed together.
    assert metadata_hash("a", "b", "c", "standard", "open") == (
        "0x52b9ca02cc9df20cf1822dcdca0851bc76714c703a438cbf30c912855cff0035"
    )
