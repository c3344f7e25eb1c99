"""Wallet links: prove control of a wallet by signing a single-use challenge (EIP-191).

The challenge message follows the Sign-In with Ethereum (EIP-4361) layout so wallets display it
as a sign-in request. The signature is an EIP-191 personal-sign signature of exactly the stored
message; the signer is recovered with eth-account and compared case-insensitively with the
challenge's wallet.

A wallet is actively linked to at most one user. When another user proves a wallet that is
actively linked to someone, the newer proof wins (a valid signature proves *current* control) and
the older link is revoked with reason ``superseded``.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import asyncpg
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_keys.exceptions import BadSignature
from eth_utils import to_checksum_address

from marketplace.errors import Conflict, Forbidden, MarketplaceError, NotFound
from marketplace.identity.models import VerificationMethod
from marketplace.storage.repositories import wallet_links as repo

SIGNATURE_BYTES = 65
STATEMENT = (
    "Link this wallet to your Project Marketplace account {user_id}. Signing proves that you "
    "control the wallet; it sends no transaction and costs no gas."
)


class ChallengeNotFound(NotFound):
    code = "challenge_not_found"
    default_message = "no such wallet-link challenge"


class ChallengeExpired(MarketplaceError):
    code = "challenge_expired"
    status = 410
    default_message = "the wallet-link challenge has expired; request a new one"


class ChallengeUserMismatch(Forbidden):
    code = "challenge_user_mismatch"
    default_message = "the wallet-link challenge was issued to another user"


class ChallengeAlreadyUsed(Conflict):
    code = "challenge_already_used"
    default_message = "the wallet-link challenge has already been used"


class WalletMismatch(MarketplaceError):
    code = "wallet_mismatch"
    status = 400
    default_message = "walletAddress differs from the challenge's wallet"


class SignatureMalformed(MarketplaceError):
    code = "signature_malformed"
    status = 400
    default_message = "the signature is not a valid 65-byte ECDSA signature"


class SignatureMismatch(MarketplaceError):
    code = "signature_mismatch"
    status = 400
    default_message = "the signature does not recover to the challenge's wallet"


class WalletLinkNotFound(NotFound):
    code = "wallet_link_not_found"
    default_message = "this wallet is not actively linked to the account"


VERIFY_ERRORS: tuple[type[MarketplaceError], ...] = (
    ChallengeNotFound,
    ChallengeExpired,
    ChallengeUserMismatch,
    ChallengeAlreadyUsed,
    WalletMismatch,
    SignatureMalformed,
    SignatureMismatch,
)


# --- pure rules -----------------------------------------------------------------------------


def rfc3339(moment: datetime) -> str:
    """UTC, millisecond precision, ``Z`` suffix (the EIP-4361 timestamp form)."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_nonce() -> str:
    """An EIP-4361 nonce: alphanumeric, 128 random bits."""
    return secrets.token_hex(16)


def message_domain(configured: str, public_base_url: str, listen_address: str) -> tuple[str, str]:
    """The (domain, uri) to name in the message: the configured domain, else the public base
    URL's host, else the address this server is configured to listen on. Never the request's
    Host header: a client must not choose which site the user is told it signs in to."""
    if configured:
        return configured, public_base_url or f"https://{configured}"
    if public_base_url:
        return urlsplit(public_base_url).netloc or public_base_url, public_base_url
    return listen_address, f"http://{listen_address}"


class ChainNotAccepted(MarketplaceError):
    code = "chain_not_accepted"
    status = 400
    default_message = "wallet links are not accepted for this chain id"


def check_chain_id(chain_id: int, accepted: Iterable[int]) -> None:
    allowed = sorted(set(accepted))
    if chain_id not in allowed:
        raise ChainNotAccepted(
            f"chainId {chain_id} is not accepted here; accepted: {', '.join(map(str, allowed))}"
        )


def build_message(
    *,
    domain: str,
    uri: str,
    wallet: str,
    user_id: uuid.UUID,
    chain_id: int,
    nonce: str,
    issued_at: datetime,
    expires_at: datetime,
    challenge_id: uuid.UUID,
) -> str:
    """The EIP-4361 style text the wallet shows and signs."""
    return "\n".join(
        [
            f"{domain} wants you to sign in with your Ethereum account:",
            to_checksum_address(wallet),
            "",
            STATEMENT.format(user_id=user_id),
            "",
            f"URI: {uri}",
            "Version: 1",
            f"Chain ID: {chain_id}",
            f"Nonce: {nonce}",
            f"Issued At: {rfc3339(issued_at)}",
            f"Expiration Time: {rfc3339(expires_at)}",
            f"Request ID: {challenge_id}",
        ]
    )


def recover_signer(message: str, signature: str) -> str:
    """The lower-case address whose EIP-191 personal-sign signature of ``message`` this is."""
    raw = signature[2:] if signature[:2].lower() == "0x" else signature
    if len(raw) != SIGNATURE_BYTES * 2:
        raise SignatureMalformed(
            f"signature must be {SIGNATURE_BYTES} bytes ({SIGNATURE_BYTES * 2} hex digits)"
        )
    try:
        signer = Account.recover_message(encode_defunct(text=message), signature=bytes.fromhex(raw))
    except (BadSignature, ValueError) as exc:
        raise SignatureMalformed(f"signature cannot be recovered: {exc}") from None
    return str(signer).lower()


# --- operations -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Challenge:
    challenge_id: uuid.UUID
    user_id: uuid.UUID
    wallet: str
    chain_id: int
    nonce: str
    message: str
    expires_at: datetime


async def create_challenge(
    pool: asyncpg.Pool,
    *,
    user_id: uuid.UUID,
    wallet: str,
    chain_id: int,
    ttl_seconds: int,
    domain: str,
    uri: str,
) -> Challenge:
    """``wallet`` lower-case, as the request models give it (and the table stores it)."""
    challenge_id = uuid.uuid4()
    nonce = new_nonce()
    now = datetime.now(UTC)
    issued_at = now.replace(microsecond=now.microsecond // 1000 * 1000)
    expires_at = issued_at + timedelta(seconds=ttl_seconds)
    message = build_message(
        domain=domain,
        uri=uri,
        wallet=wallet,
        user_id=user_id,
        chain_id=chain_id,
        nonce=nonce,
        issued_at=issued_at,
        expires_at=expires_at,
        challenge_id=challenge_id,
    )
    await repo.insert_challenge(
        pool,
        challenge_id=challenge_id,
        user_id=user_id,
        wallet=wallet,
        chain_id=chain_id,
        nonce=nonce,
        message=message,
        issued_at=issued_at,
        expires_at=expires_at,
    )
    return Challenge(challenge_id, user_id, wallet, chain_id, nonce, message, expires_at)


@dataclass(frozen=True)
class VerifiedLink:
    wallet: str
    verified_at: datetime
    method: VerificationMethod


def _check_challenge(row: repo.ChallengeRow | None, user_id: uuid.UUID, wallet: str) -> None:
    """The rejections that need no signature, in the order a client can act on them."""
    if row is None:
        raise ChallengeNotFound()
    if row.user_id != user_id:
        raise ChallengeUserMismatch()
    if row.used_at is not None:
        raise ChallengeAlreadyUsed()
    if row.expired:
        raise ChallengeExpired()
    if row.wallet_address != wallet:
        raise WalletMismatch(
            f"walletAddress differs from the challenge's wallet "
            f"{to_checksum_address(row.wallet_address)}"
        )


async def verify(
    pool: asyncpg.Pool,
    *,
    user_id: uuid.UUID,
    challenge_id: uuid.UUID,
    wallet: str,
    signature: str,
) -> VerifiedLink:
    """``wallet`` lower-case, as the request models give it: it is compared with the stored
    challenge's wallet and the recovered signer, both lower-case."""
    challenge = await repo.get_challenge(pool, challenge_id)
    _check_challenge(challenge, user_id, wallet)
    assert challenge is not None
    # Pure CPU (about 0.15 ms with coincurve); a bad signature does not consume the challenge,
    # so a user who picked the wrong account in the wallet can retry.
    if recover_signer(challenge.message, signature) != wallet:
        raise SignatureMismatch()
    method = VerificationMethod.EIP191_SIGN_MESSAGE
    async with pool.acquire() as conn, conn.transaction():
        await repo.lock_wallet(conn, wallet)
        consumed = await repo.consume_challenge(conn, challenge_id, user_id)
        if consumed is None:
            # Lost a race (a concurrent verify used it) or expired in between: say which.
            _check_challenge(await repo.get_challenge(conn, challenge_id), user_id, wallet)
            raise ChallengeAlreadyUsed()
        current = await repo.active_link_of_wallet(conn, wallet)
        if current is not None and current.user_id == user_id:
            row = await repo.refresh_link(
                conn,
                current.link_id,
                chain_id=consumed.chain_id,
                method=method.value,
                challenge_id=challenge_id,
            )
        else:
            if current is not None:
                await repo.supersede_link(conn, current.link_id)
            row = await repo.insert_link(
                conn,
                user_id=user_id,
                wallet=wallet,
                chain_id=consumed.chain_id,
                method=method.value,
                challenge_id=challenge_id,
            )
    return VerifiedLink(row.wallet_address, row.verified_at, method)


async def revoke(pool: asyncpg.Pool, *, user_id: uuid.UUID, wallet: str) -> repo.RevokedLinkRow:
    """``wallet`` lower-case, as the request models give it."""
    row = await repo.revoke_link(pool, user_id, wallet)
    if row is None:
        raise WalletLinkNotFound()
    return row
