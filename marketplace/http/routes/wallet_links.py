"""Wallet links: challenge, verify (EIP-191), list, revoke. Rules in marketplace.identity."""

from __future__ import annotations

from marketplace.errors import Forbidden
from marketplace.http.paths import WalletAddressPath
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.identity import wallet_links
from marketplace.identity.access import ensure_self
from marketplace.identity.models import (
    UserIdQuery,
    WalletLinkChallengeRequest,
    WalletLinkChallengeResponse,
    WalletLinkItem,
    WalletLinkListResponse,
    WalletLinkRevokeResponse,
    WalletLinkVerifyRequest,
    WalletLinkVerifyResponse,
)
from marketplace.storage.repositories import wallet_links as repo

routes = RouteTable(tag="wallet-links")


@routes.get(
    "/v1/wallet-links",
    name="listWalletLinks",
    summary="List the caller's active wallet links",
    auth=AuthMode.EITHER,
    response=WalletLinkListResponse,
    query=UserIdQuery,
    errors=(Forbidden,),
)
async def list_wallet_links(call: Call[None, UserIdQuery, None]) -> WalletLinkListResponse:
    """`userId` defaults to the caller; naming another user is refused (403)."""
    user_id = ensure_self(call.require_principal(), call.query.userId)
    rows = await repo.list_active_links(call.pool, user_id)
    items = [WalletLinkItem.from_row(row) for row in rows]
    return WalletLinkListResponse(userId=user_id, items=items, count=len(items))


@routes.post(
    "/v1/wallet-links/challenge",
    name="createWalletLinkChallenge",
    summary="Issue a single-use wallet-link challenge to sign",
    auth=AuthMode.EITHER,
    response=WalletLinkChallengeResponse,
    body=WalletLinkChallengeRequest,
    errors=(Forbidden, wallet_links.ChainNotAccepted),
)
async def create_challenge(
    call: Call[WalletLinkChallengeRequest, None, None],
) -> WalletLinkChallengeResponse:
    """The returned `message` is an EIP-4361 style text naming the service, the wallet, the chain,
    the nonce, issue and expiry time. The domain and URI it names come from the server's
    configuration (`MARKETPLACE_WALLET_LINK_DOMAIN`, `MARKETPLACE_PUBLIC_BASE_URL`), never from the
    request. `chainId` must be one the deployment accepts (`MARKETPLACE_WALLET_LINK_CHAIN_IDS`,
    default: the configured chain), else 400 `chain_not_accepted`. Sign it unchanged with
    EIP-191 personal sign (`personal_sign` / `signMessage`) and submit it to
    `/v1/wallet-links/verify` before `expiresAt`. A challenge can be used once."""
    user_id = ensure_self(call.require_principal(), call.body.userId)
    settings = call.settings
    wallet_links.check_chain_id(call.body.chainId, settings.accepted_wallet_link_chain_ids)
    domain, uri = wallet_links.message_domain(
        settings.wallet_link_domain, settings.public_base_url, settings.listen_address
    )
    challenge = await wallet_links.create_challenge(
        call.pool,
        user_id=user_id,
        wallet=call.body.walletAddress,
        chain_id=call.body.chainId,
        ttl_seconds=settings.wallet_challenge_ttl_seconds,
        domain=domain,
        uri=uri,
    )
    return WalletLinkChallengeResponse(
        challengeId=challenge.challenge_id,
        userId=challenge.user_id,
        walletAddress=challenge.wallet,
        chainId=challenge.chain_id,
        nonce=challenge.nonce,
        message=challenge.message,
        expiresAt=challenge.expires_at,
    )


@routes.post(
    "/v1/wallet-links/verify",
    name="verifyWalletLink",
    summary="Prove control of a wallet with the signed challenge",
    auth=AuthMode.EITHER,
    response=WalletLinkVerifyResponse,
    body=WalletLinkVerifyRequest,
    errors=wallet_links.VERIFY_ERRORS,
)
async def verify_wallet_link(
    call: Call[WalletLinkVerifyRequest, None, None],
) -> WalletLinkVerifyResponse:
    """Recovers the EIP-191 signer of the challenge message. If the wallet is actively linked to
    another user, this newer proof wins and that link is revoked (`superseded`)."""
    principal = call.require_principal()
    link = await wallet_links.verify(
        call.pool,
        user_id=principal.user_id,
        challenge_id=call.body.challengeId,
        wallet=call.body.walletAddress,
        signature=call.body.signature,
    )
    return WalletLinkVerifyResponse(
        walletAddress=link.wallet, verifiedAt=link.verified_at, verificationMethod=link.method
    )


@routes.delete(
    "/v1/wallet-links/{walletAddress}",
    name="revokeWalletLink",
    summary="Revoke one of the caller's wallet links",
    auth=AuthMode.EITHER,
    response=WalletLinkRevokeResponse,
    path_params=WalletAddressPath,
    query=UserIdQuery,
    errors=(Forbidden, wallet_links.WalletLinkNotFound),
)
async def revoke_wallet_link(
    call: Call[None, UserIdQuery, WalletAddressPath],
) -> WalletLinkRevokeResponse:
    """Soft revoke: the link is kept with `revokedAt` and no longer authorizes anything."""
    user_id = ensure_self(call.require_principal(), call.query.userId)
    row = await wallet_links.revoke(call.pool, user_id=user_id, wallet=call.path.walletAddress)
    return WalletLinkRevokeResponse.from_row(row)
