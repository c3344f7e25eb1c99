"""The wallet-link message and EIP-191 signer recovery, as pure functions."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from eth_account import Account
from eth_account.messages import encode_defunct

from marketplace.identity import wallet_links

# A well-known test key (anvil/hardhat account 0) and its address.
PRIVATE_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
ADDRESS = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"


def _message() -> str:
    issued = datetime(2025, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)
    return wallet_links.build_message(
        domain="app.example",
        uri="https://app.example",
        wallet=ADDRESS.lower(),
        user_id=uuid.UUID("11111111-2222-3333-4444-555555555555"),
        chain_id=8453,
        nonce="0123456789abcdef",
        issued_at=issued,
        expires_at=issued + timedelta(minutes=10),
        challenge_id=uuid.UUID("99999999-8888-7777-6666-555555555555"),
    )


def test_message_follows_the_eip4361_layout() -> None:
    assert _message().split("\n") == [
        "app.example wants you to sign in with your Ethereum account:",
        ADDRESS,
        "",
        "Link this wallet to your Project Marketplace account "
        "11111111-2222-3333-4444-555555555555. Signing proves that you control the wallet; it "
        "sends no transaction and costs no gas.",
        "",
        "URI: https://app.example",
        "Version: 1",
        "Chain ID: 8453",
        "Nonce: 0123456789abcdef",
        "Issued At: 2025-03-01T12:00:00.123Z",
        "Expiration Time: 2025-03-01T12:10:00.123Z",
        "Request ID: 99999999-8888-7777-6666-555555555555",
    ]


def test_nonce_is_alphanumeric_and_random() -> None:
    nonces = {wallet_links.new_nonce() for _ in range(100)}
    assert len(nonces) == 100
    assert all(n.isalnum() and len(n) == 32 for n in nonces)


def test_domain_choice() -> None:
    assert wallet_links.message_domain("app.example", "https://api.example", "h:1") == (
        "app.example",
        "https://api.example",
    )
    assert wallet_links.message_domain("app.example", "", "h:1") == (
        "app.example",
        "https://app.example",
    )
    assert wallet_links.message_domain("", "https://api.example/base", "h:1") == (
        "api.example",
        "https://api.example/base",
    )
    assert wallet_links.message_domain("", "", "127.0.0.1:8080") == (
        "127.0.0.1:8080",
        "http://127.0.0.1:8080",
    )


def test_recover_signer_round_trip() -> None:
    message = _message()
    signature = Account.sign_message(encode_defunct(text=message), PRIVATE_KEY).signature
    assert wallet_links.recover_signer(message, signature.to_0x_hex()) == ADDRESS.lower()
    assert wallet_links.recover_signer(message, signature.hex()) == ADDRESS.lower()  # no 0x
    assert wallet_links.recover_signer(message + "x", signature.to_0x_hex()) != ADDRESS.lower()


@pytest.mark.parametrize(
    "signature", ["0x" + "00" * 64, "0x" + "00" * 66, "0x" + "11" * 65, "0x" + "00" * 65]
)
def test_malformed_signatures(signature: str) -> None:
    with pytest.raises(wallet_links.SignatureMalformed):
        wallet_links.recover_signer(_message(), signature)
