"""Service settings, read from ``MARKETPLACE_*`` environment variables.

Every field here is listed with its default in README's Configuration table; a test keeps the two
in step.
"""

from __future__ import annotations

import enum
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class LegalAcceptanceMode(enum.StrEnum):
    STRICT = "strict"
    IMPLICIT = "implicit"
    OFF = "off"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MARKETPLACE_", extra="ignore", frozen=True)

    # Where `marketplace up` keeps embedded Postgres/Redis/anvil data and the dev JWT secret.
    data_dir: Path = Path(".data")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    public_base_url: str = ""

    # External dependencies; empty means "start an embedded one" under `marketplace up`.
    database_url: str = ""
    redis_url: str = ""
    ray_address: str = ""
    ray_namespace: str = "marketplace"
    db_pool_min_size: int = Field(default=2, ge=0)
    db_pool_max_size: int = Field(default=20, ge=1)

    # Session JWT verification: exactly one of secret / public key / JWKS URL is used.
    jwt_secret: SecretStr | None = None
    jwt_public_key: str | None = None
    jwks_url: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_leeway_seconds: int = Field(default=30, ge=0)
    scheduler_secret: SecretStr | None = None

    legal_acceptance_mode: LegalAcceptanceMode = LegalAcceptanceMode.IMPLICIT
    require_verified_email: bool = True

    # Per-route rate limits, "<count>/<seconds>" keyed by route name; `rate_limit_default`
    # applies to routes without an entry. Shared across frontends through Redis.
    rate_limit_default: str = "120/60"
    rate_limits: dict[str, str] = Field(default_factory=dict)
    rate_limit_enabled: bool = True

    max_body_bytes: int = Field(default=256 * 1024, ge=1024)
    # Number of shard actors hosting per-project state actors.
    project_shards: int = Field(default=4, ge=1, le=256)
    actor_call_timeout_seconds: float = Field(default=10.0, gt=0)

    log_level: str = "INFO"
    log_json: bool = True

    @field_validator("rate_limit_default")
    @classmethod
    def _check_rate(cls, value: str) -> str:
        parse_rate(value)
        return value

    @field_validator("rate_limits")
    @classmethod
    def _check_rates(cls, value: dict[str, str]) -> dict[str, str]:
        for rate in value.values():
            parse_rate(rate)
        return value

    @property
    def dev_secret_path(self) -> Path:
        return self.data_dir / "dev-jwt-secret"

    def rate_for(self, route_name: str) -> tuple[int, int]:
        return parse_rate(self.rate_limits.get(route_name, self.rate_limit_default))


def parse_rate(text: str) -> tuple[int, int]:
    """Parse ``"<count>/<seconds>"`` into ``(count, seconds)``."""
    try:
        count_text, period_text = text.split("/", 1)
        count, period = int(count_text), int(period_text)
    except ValueError as exc:
        raise ValueError(f"rate must look like '120/60', got {text!r}") from exc
    if count < 1 or period < 1:
        raise ValueError(f"rate must be positive, got {text!r}")
    return count, period


def load_settings(**overrides: object) -> Settings:
    return Settings(**overrides)  # type: ignore[arg-type]
