"""Principals and how credentials become one (spec section 5).

Three carriers exist: a session JWT (``Authorization: Bearer <jwt>``), an agent API key
(``x-agent-api-key``) and the scheduler secret (``Authorization: Bearer <secret>``). Resolving is
pure except for the API-key lookup, which the identity module provides through
:class:`ApiKeyResolver`; until one is registered, no key matches.
"""

from __future__ import annotations

import asyncio
import enum
import hmac
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

import jwt

from marketplace.config import Settings
from marketplace.errors import PrincipalMismatch, ServiceUnavailable, Unauthorized
from marketplace.ttl_cache import TtlCache


class PrincipalKind(enum.StrEnum):
    SESSION = "session"
    AGENT_KEY = "agent_key"


@dataclass(frozen=True)
class Principal:
    """A user acting through a session token or one of their agent keys (or both, agreeing)."""

    user_id: uuid.UUID
    kind: PrincipalKind
    email_verified: bool
    api_key_id: uuid.UUID | None = None
    # Until when the session token is accepted (Unix seconds), when one authenticated the call:
    # what outlives the request (an event stream) ends then.
    session_expires_at: float | None = None

    @property
    def has_session(self) -> bool:
        return self.kind is PrincipalKind.SESSION


@dataclass(frozen=True)
class SchedulerPrincipal:
    """The internal scheduler, authenticated by the shared scheduler secret."""


@dataclass(frozen=True)
class ResolvedApiKey:
    key_id: uuid.UUID
    user_id: uuid.UUID
    email_verified: bool


class ApiKeyResolver(Protocol):
    async def resolve(self, secret: str) -> ResolvedApiKey | None: ...


class NoApiKeys:
    """Resolver used until an identity module registers a real one: no key matches."""

    async def resolve(self, secret: str) -> ResolvedApiKey | None:
        return None


@dataclass(frozen=True)
class SessionClaims:
    user_id: uuid.UUID
    email_verified: bool
    # `iat`: orders the tokens of one user, so the newest one's flags win wherever it is seen.
    issued_at: int
    # The `email` claim, when present and shaped like an address (see email_claim).
    email: str | None = None
    # Until when the token is accepted: `exp` plus the verifier's leeway, Unix seconds (0:
    # unknown, for claims not made from a token).
    accepted_until: float = 0.0


# Bounds of a stored address (RFC 5321 limits a path to 256 octets; 320 is the common
# local@domain maximum). The `users.email` column checks the same bounds.
EMAIL_MAX_LENGTH = 320


def email_claim(value: object) -> str | None:
    """The token's `email` claim as an address, or None when it is absent or not one.

    The claim is informational (where to notify the user), so a malformed one does not make the
    token invalid: it only counts as absent.
    """
    if not isinstance(value, str):
        return None
    email = value.strip()
    if not 3 <= len(email) <= EMAIL_MAX_LENGTH or "@" not in email[1:-1]:
        return None
    if any(char.isspace() or not char.isprintable() for char in email):
        return None
    return email


# What a client learns about a refused token: a category, never the library's own wording.
# Bounds the memory a flood of distinct valid tokens can take (about 1 KiB each).
VERIFIED_TOKEN_CACHE_SIZE = 20_000

_TOKEN_ERRORS: tuple[tuple[type[Exception], str], ...] = (
    (jwt.ExpiredSignatureError, "session token expired"),
    (jwt.ImmatureSignatureError, "session token is not valid yet (iat or nbf in the future)"),
    (jwt.InvalidAudienceError, "session token audience is not accepted"),
    (jwt.InvalidIssuerError, "session token issuer is not accepted"),
    (jwt.InvalidAlgorithmError, "session token algorithm is not accepted"),
    (jwt.InvalidSignatureError, "session token signature does not verify"),
    (jwt.PyJWKClientError, "session token signing key is unknown"),
    (jwt.DecodeError, "session token is malformed"),
)
_NUMERIC_DATE_CLAIMS = ("exp", "iat", "nbf")


def _is_numeric_date(value: object) -> bool:
    # RFC 7519 NumericDate is a JSON number; PyJWT would also take "1700000000" or true.
    return isinstance(value, int | float) and not isinstance(value, bool)


class SessionVerifier:
    """Verifies session JWTs with a shared secret (HS256), a PEM public key or a JWKS URL."""

    def __init__(self, settings: Settings, dev_secret: str | None = None) -> None:
        self._issuer = settings.jwt_issuer
        self._audience = settings.jwt_audience
        self._leeway = settings.jwt_leeway_seconds
        self._max_ttl = settings.jwt_max_ttl_seconds
        self._jwks: jwt.PyJWKClient | None = None
        self._key: str | None = None
        # Verified tokens, so a client's every request does not pay the signature check again.
        self._verified: TtlCache[str, SessionClaims] = TtlCache(
            VERIFIED_TOKEN_CACHE_SIZE, clock=time.time
        )
        if settings.jwt_secret is not None:
            self._key, self._algorithms = settings.jwt_secret.get_secret_value(), ["HS256"]
        elif settings.jwt_public_key:
            self._key, self._algorithms = settings.jwt_public_key, ["RS256", "ES256"]
        elif settings.jwks_url:
            self._jwks = jwt.PyJWKClient(settings.jwks_url, cache_keys=True, lifespan=300)
            self._algorithms = ["RS256", "ES256"]
        elif dev_secret is not None:
            self._key, self._algorithms = dev_secret, ["HS256"]
        else:
            raise ValueError(
                "no session verification configured: set MARKETPLACE_JWT_SECRET, "
                "MARKETPLACE_JWT_PUBLIC_KEY or MARKETPLACE_JWKS_URL"
            )

    async def verify(self, token: str) -> SessionClaims:
        cached = self._verified.get(token)
        if cached is not None:
            return cached
        claims = await self._verify(token)
        # Until exp plus leeway (PyJWT's own test): the same token verifies the same way until
        # then, whatever key rotation happens meanwhile.
        self._verified.put(token, claims, claims.accepted_until - time.time())
        return claims

    async def _verify(self, token: str) -> SessionClaims:
        try:
            if self._jwks is not None:
                # PyJWKClient fetches over blocking urllib; keep it off the event loop.
                signing_key = await asyncio.to_thread(self._jwks.get_signing_key_from_jwt, token)
                key: object = signing_key.key
            else:
                key = self._key
            claims = jwt.decode(
                token,
                key,  # type: ignore[arg-type]
                algorithms=self._algorithms,
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._leeway,
                options={
                    "require": ["exp", "iat", "sub"],
                    "verify_aud": self._audience is not None,
                },
            )
        except jwt.PyJWKClientConnectionError as exc:
            # Our key set is unreachable: not the caller's fault, and not a failed login.
            raise ServiceUnavailable("session signing keys are unavailable; retry shortly") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthorized(f"session token lacks the required claim {exc.claim!r}") from exc
        except (jwt.PyJWTError, ValueError) as exc:
            message = next(
                (text for cls, text in _TOKEN_ERRORS if isinstance(exc, cls)),
                "session token is invalid",
            )
            raise Unauthorized(message) from exc
        return self._checked_claims(claims)

    def _checked_claims(self, claims: dict[str, object]) -> SessionClaims:
        # With exp checked by PyJWT, a bounded exp - iat also bounds how old an accepted iat is.
        for name in _NUMERIC_DATE_CLAIMS:
            if name in claims and not _is_numeric_date(claims[name]):
                raise Unauthorized(f"session token claim {name!r} must be a JSON number")
        issued_at, expires_at = float(claims["iat"]), float(claims["exp"])  # type: ignore[arg-type]
        if expires_at - issued_at > self._max_ttl:
            raise Unauthorized(
                f"session token lifetime (exp - iat) exceeds {self._max_ttl} seconds"
            )
        try:
            user_id = uuid.UUID(str(claims["sub"]))
        except ValueError as exc:
            raise Unauthorized("session token subject is not a uuid") from exc
        if user_id.int == 0:
            raise Unauthorized("session token subject is the nil uuid")
        return SessionClaims(
            user_id=user_id,
            email_verified=claims.get("email_verified") is True,
            issued_at=int(issued_at),
            email=email_claim(claims.get("email")),
            accepted_until=expires_at + self._leeway,
        )


def issue_session_token(
    secret: str,
    user_id: uuid.UUID,
    *,
    email_verified: bool,
    ttl_seconds: int,
    now: int,
    email: str | None = None,
) -> str:
    """An HS256 session JWT; ``email`` becomes the `email` claim (where notifications go, once
    recorded from a token whose `email_verified` is true)."""
    claims: dict[str, object] = {
        "sub": str(user_id),
        "email_verified": email_verified,
        "iat": now,
        "exp": now + ttl_seconds,
    }
    if email is not None:
        claims["email"] = email
    return jwt.encode(claims, secret, algorithm="HS256")


def bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Authorization header must be 'Bearer <token>'")
    return token.strip()


def is_scheduler_token(token: str, scheduler_secret: str | None) -> bool:
    if not scheduler_secret:
        return False
    return hmac.compare_digest(token.encode(), scheduler_secret.encode())


def combine_principals(
    session: SessionClaims | None, key: ResolvedApiKey | None
) -> Principal | None:
    """Spec section 5 rule 2: when both carriers are present they must name the same user."""
    if session is not None and key is not None:
        if session.user_id != key.user_id:
            raise PrincipalMismatch()
        return Principal(
            user_id=session.user_id,
            kind=PrincipalKind.SESSION,
            email_verified=session.email_verified,
            api_key_id=key.key_id,
            session_expires_at=session.accepted_until or None,
        )
    if session is not None:
        return Principal(
            session.user_id,
            PrincipalKind.SESSION,
            session.email_verified,
            session_expires_at=session.accepted_until or None,
        )
    if key is not None:
        return Principal(key.user_id, PrincipalKind.AGENT_KEY, key.email_verified, key.key_id)
    return None
