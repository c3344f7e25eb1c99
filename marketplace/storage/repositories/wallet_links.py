"""Wallet-link challenges and links. Wallet addresses are passed and stored lower-case.

Other capabilities use :func:`is_active_link`, :func:`active_wallets` and
:func:`active_owner_of_wallet` to authorize wallet-specific actions.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import NamedTuple

from marketplace.storage import rows
from marketplace.storage.pool import Conn, Connection, fetch_one

INSERT_CHALLENGE = """
INSERT INTO wallet_link_challenges
    (challenge_id, user_id, wallet_address, chain_id, nonce, message, issued_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
"""
# Housekeeping on each new challenge: drop this user's challenges that expired a day ago (kept
# that long so a late replay still gets a precise error).
DELETE_STALE_CHALLENGES = """
DELETE FROM wallet_link_challenges
WHERE user_id = $1 AND expires_at < now() - interval '1 day'
"""
SELECT_CHALLENGE = """
SELECT challenge_id, user_id, wallet_address, chain_id, nonce, message, issued_at, expires_at,
       used_at, expires_at <= now() AS expired
FROM wallet_link_challenges WHERE challenge_id = $1
"""
# The single statement that decides whether a challenge may be used: concurrent verifies of the
# same challenge serialise on the row, and only the first sees used_at IS NULL.
CONSUME_CHALLENGE = """
UPDATE wallet_link_challenges SET used_at = now()
WHERE challenge_id = $1 AND user_id = $2 AND used_at IS NULL AND expires_at > now()
RETURNING challenge_id, wallet_address, chain_id, used_at
"""
# Serialises link writes per wallet (two users proving one wallet at once); the two-key form
# keeps these locks apart from single-key advisory locks such as the migration lock.
LOCK_WALLET = "SELECT pg_advisory_xact_lock(20482, hashtext($1))"
SELECT_ACTIVE_LINK_OF_WALLET = """
SELECT link_id, user_id, wallet_address, chain_id, verification_method, verified_at
FROM wallet_links WHERE wallet_address = $1 AND revoked_at IS NULL
"""
SUPERSEDE_LINK = """
UPDATE wallet_links SET revoked_at = now(), revoked_reason = 'superseded'
WHERE link_id = $1 AND revoked_at IS NULL
"""
REFRESH_LINK = """
UPDATE wallet_links
SET verified_at = now(), chain_id = $2, verification_method = $3, challenge_id = $4
WHERE link_id = $1
RETURNING wallet_address, verified_at, verification_method
"""
INSERT_LINK = """
INSERT INTO wallet_links (user_id, wallet_address, chain_id, verification_method, challenge_id)
VALUES ($1, $2, $3, $4, $5)
RETURNING wallet_address, verified_at, verification_method
"""
SELECT_ACTIVE_LINKS_OF_USER = """
SELECT wallet_address, chain_id, verification_method, verified_at
FROM wallet_links WHERE user_id = $1 AND revoked_at IS NULL
ORDER BY verified_at, wallet_address
"""
REVOKE_LINK = """
UPDATE wallet_links SET revoked_at = now(), revoked_reason = 'user'
WHERE user_id = $1 AND wallet_address = $2 AND revoked_at IS NULL
RETURNING wallet_address, revoked_at
"""
SELECT_IS_ACTIVE_LINK = """
SELECT EXISTS (
    SELECT 1 FROM wallet_links
    WHERE user_id = $1 AND wallet_address = $2 AND revoked_at IS NULL
)
"""
SELECT_ACTIVE_OWNER = """
SELECT user_id FROM wallet_links WHERE wallet_address = $1 AND revoked_at IS NULL
"""


class ChallengeRow(NamedTuple):
    challenge_id: uuid.UUID
    user_id: uuid.UUID
    wallet_address: str
    chain_id: int
    nonce: str
    message: str
    issued_at: datetime
    expires_at: datetime
    used_at: datetime | None
    expired: bool


class ConsumedChallengeRow(NamedTuple):
    challenge_id: uuid.UUID
    wallet_address: str
    chain_id: int
    used_at: datetime


class ActiveLinkRow(NamedTuple):
    link_id: uuid.UUID
    user_id: uuid.UUID
    wallet_address: str
    chain_id: int
    verification_method: str
    verified_at: datetime


class VerifiedLinkRow(NamedTuple):
    wallet_address: str
    verified_at: datetime
    verification_method: str


class WalletLinkRow(NamedTuple):
    wallet_address: str
    chain_id: int
    verification_method: str
    verified_at: datetime


class RevokedLinkRow(NamedTuple):
    wallet_address: str
    revoked_at: datetime


async def insert_challenge(
    conn: Conn,
    *,
    challenge_id: uuid.UUID,
    user_id: uuid.UUID,
    wallet: str,
    chain_id: int,
    nonce: str,
    message: str,
    issued_at: datetime,
    expires_at: datetime,
) -> None:
    await conn.execute(DELETE_STALE_CHALLENGES, user_id)
    await conn.execute(
        INSERT_CHALLENGE,
        challenge_id,
        user_id,
        wallet,
        chain_id,
        nonce,
        message,
        issued_at,
        expires_at,
    )


async def get_challenge(conn: Conn, challenge_id: uuid.UUID) -> ChallengeRow | None:
    return rows.maybe(ChallengeRow, await conn.fetchrow(SELECT_CHALLENGE, challenge_id))


async def consume_challenge(
    conn: Connection, challenge_id: uuid.UUID, user_id: uuid.UUID
) -> ConsumedChallengeRow | None:
    record = await conn.fetchrow(CONSUME_CHALLENGE, challenge_id, user_id)
    return rows.maybe(ConsumedChallengeRow, record)


async def lock_wallet(conn: Connection, wallet: str) -> None:
    await conn.execute(LOCK_WALLET, wallet)


async def active_link_of_wallet(conn: Conn, wallet: str) -> ActiveLinkRow | None:
    return rows.maybe(ActiveLinkRow, await conn.fetchrow(SELECT_ACTIVE_LINK_OF_WALLET, wallet))


async def supersede_link(conn: Connection, link_id: uuid.UUID) -> None:
    await conn.execute(SUPERSEDE_LINK, link_id)


async def refresh_link(
    conn: Connection,
    link_id: uuid.UUID,
    *,
    chain_id: int,
    method: str,
    challenge_id: uuid.UUID,
) -> VerifiedLinkRow:
    record = await fetch_one(conn, REFRESH_LINK, link_id, chain_id, method, challenge_id)
    return rows.one(VerifiedLinkRow, record)


async def insert_link(
    conn: Connection,
    *,
    user_id: uuid.UUID,
    wallet: str,
    chain_id: int,
    method: str,
    challenge_id: uuid.UUID,
) -> VerifiedLinkRow:
    record = await fetch_one(conn, INSERT_LINK, user_id, wallet, chain_id, method, challenge_id)
    return rows.one(VerifiedLinkRow, record)


async def list_active_links(conn: Conn, user_id: uuid.UUID) -> list[WalletLinkRow]:
    return rows.many(WalletLinkRow, await conn.fetch(SELECT_ACTIVE_LINKS_OF_USER, user_id))


async def revoke_link(conn: Conn, user_id: uuid.UUID, wallet: str) -> RevokedLinkRow | None:
    return rows.maybe(RevokedLinkRow, await conn.fetchrow(REVOKE_LINK, user_id, wallet))


async def is_active_link(conn: Conn, user_id: uuid.UUID, wallet: str) -> bool:
    """Whether ``wallet`` (any case) is actively linked to ``user_id``."""
    return bool(await conn.fetchval(SELECT_IS_ACTIVE_LINK, user_id, wallet.lower()))


async def active_wallets(conn: Conn, user_id: uuid.UUID) -> list[str]:
    """The lower-case wallets actively linked to ``user_id``."""
    return [link.wallet_address for link in await list_active_links(conn, user_id)]


async def active_owner_of_wallet(conn: Conn, wallet: str) -> uuid.UUID | None:
    """The user the wallet (any case) is actively linked to, if any."""
    return await conn.fetchval(SELECT_ACTIVE_OWNER, wallet.lower())
