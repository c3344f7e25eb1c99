"""Link a dev account's wallet to a user through the API, as a wallet app would
(``marketplace devnet link-wallet``): request the challenge, sign its message with EIP-191
personal sign, submit the signature. Standard library HTTP, so the command needs no event loop.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from eth_account import Account
from eth_account.messages import encode_defunct

from marketplace_devstack.devnet.client import DevnetError


class ApiUnreachable(DevnetError):
    """Nothing answers HTTP at the API URL."""


class ApiRefused(DevnetError):
    """The API answered with an error body."""

    def __init__(self, route: str, status: int, code: str, message: str) -> None:
        super().__init__(f"{route} answered {status} {code}: {message}")
        self.status = status
        self.code = code


@dataclass(frozen=True)
class WalletLinkResult:
    challenge: dict[str, Any]
    signature: str
    verified: dict[str, Any]


def sign_challenge(message: str, private_key: str) -> str:
    """EIP-191 personal-sign signature of ``message``, ``0x`` + 130 hex digits (hexbytes 2's
    ``.hex()`` drops the ``0x``, which the API's signature pattern requires)."""
    signed = Account.sign_message(encode_defunct(text=message), private_key=private_key)
    return signed.signature.to_0x_hex()


def _post(api_url: str, path: str, token: str, body: dict[str, Any], timeout: float) -> Any:
    request = urllib.request.Request(
        api_url.rstrip("/") + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        },
    )
    route = f"POST {path}"
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            error = json.loads(raw)
            code, message = str(error["error"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            code, message = "http_error", raw[:200].decode(errors="replace")
        raise ApiRefused(route, exc.code, code, message) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ApiUnreachable(
            f"the API at {api_url} does not answer ({reason}); is `marketplace up` running "
            "there? (--api-url names another)"
        ) from None


def link_wallet(
    api_url: str, token: str, *, private_key: str, chain_id: int, timeout: float = 30.0
) -> WalletLinkResult:
    """Challenge, sign, verify; raises :class:`ApiRefused` with the API's error code."""
    wallet = Account.from_key(private_key).address
    challenge = _post(
        api_url,
        "/v1/wallet-links/challenge",
        token,
        {"walletAddress": wallet, "chainId": chain_id},
        timeout,
    )
    signature = sign_challenge(challenge["message"], private_key)
    verified = _post(
        api_url,
        "/v1/wallet-links/verify",
        token,
        {
            "challengeId": challenge["challengeId"],
            "walletAddress": wallet,
            "signature": signature,
        },
        timeout,
    )
    return WalletLinkResult(challenge, signature, verified)
