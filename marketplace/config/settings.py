"""Service settings, read from ``MARKETPLACE_*`` environment variables.

Every field here is listed with its default in README's Configuration table; a test keeps the two
in step.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from marketplace.config.mail import SmtpTarget, check_mail_from, parse_smtp_url
from marketplace.config.notifications import DEFAULT_RATE, NotificationRates
from marketplace.wordfilter.terms import load_terms_file


class LegalAcceptanceMode(enum.StrEnum):
    STRICT = "strict"
    IMPLICIT = "implicit"
    OFF = "off"


class SecretSettingError(Exception):
    """A setting holding a secret is invalid; the message names it without its value."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MARKETPLACE_", extra="ignore", frozen=True)

    # Where `marketplace up` keeps embedded Postgres/Redis/anvil data and the dev JWT secret.
    data_dir: Path = Path(".data")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    public_base_url: str = ""
    # A web app's base URL: links in e-mails open its pages (templated by type,
    # docs/notifications.md) instead of the API's resources. Empty: links go to API resources
    # under public_base_url.
    public_app_url: str = ""

    # External dependencies; empty means "start an embedded one" under `marketplace up`.
    database_url: str = ""
    redis_url: str = ""
    ray_address: str = ""
    ray_namespace: str = "marketplace"
    # On shutdown, a part of the app (a background context) that takes longer than this to stop
    # is abandoned and logged, so the ones started before it (the event relay with its lock,
    # the pools) still stop: one stuck stop must not hold up the whole shutdown.
    context_stop_seconds: float = Field(default=30.0, gt=0, le=600)
    # A custom Ray resource that only the nodes meant to host actors advertise (e.g.
    # `ray start --resources='{"marketplace_actors": 1000}'` on worker nodes): every actor takes
    # one unit of it, so none lands on a CPU-less head or on a frontend's node, and a node hosts
    # at most as many actors as it advertises. Empty: actors may go to any node (one machine).
    ray_actor_resource: str = Field(default="", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$|^$")
    db_pool_min_size: int = Field(default=2, ge=0)
    db_pool_max_size: int = Field(default=20, ge=1)

    # Session JWT verification: exactly one of secret / public key / JWKS URL is used.
    jwt_secret: SecretStr | None = None
    jwt_public_key: str | None = None
    jwks_url: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_leeway_seconds: int = Field(default=30, ge=0)
    # Longest session a token may carry (exp - iat), and the oldest `iat` accepted.
    jwt_max_ttl_seconds: int = Field(default=86_400, ge=60)
    scheduler_secret: SecretStr | None = None

    legal_acceptance_mode: LegalAcceptanceMode = LegalAcceptanceMode.IMPLICIT
    require_verified_email: bool = True

    # Per-route rate limits, "<count>/<seconds>" keyed by route name; `rate_limit_default`
    # applies to routes without an entry. Shared across frontends through Redis.
    rate_limit_default: str = "120/60"
    rate_limits: dict[str, str] = Field(default_factory=dict)
    rate_limit_enabled: bool = True
    # Failed authentications (a bad bearer token or agent key) per client address, "<count>/
    # <seconds>"; once spent, that address gets 429 for any credentials until it recovers.
    rate_limit_auth_failures: str = "20/60"
    # A limiter check waits this long for Redis before enforcing limits per process instead.
    # Measured from the caller's event loop, so it includes time the loop spends elsewhere.
    rate_limit_redis_timeout_ms: int = Field(default=1000, ge=10, le=60_000)
    # Readiness answers from a cached check for this long, so polling it costs little.
    readiness_cache_ms: int = Field(default=1000, ge=0, le=60_000)
    # Comma-separated networks (CIDR) allowed to read /metrics; empty: everyone.
    metrics_allow: str = ""
    # Comma-separated networks (CIDR, or single addresses) of the proxies in front of this
    # server (a load balancer, an ingress). When the TCP peer is one of them, the client address
    # is the right-most address of X-Forwarded-For / Forwarded that is not a trusted proxy; the
    # failed-authentication budget, rate limits and the access log use it. Empty: the peer.
    trusted_proxies: str = ""
    # Comma-separated exact origins (scheme://host[:port]) whose pages may call the API from a
    # browser (CORS). Empty: no CORS headers at all. Never "*".
    cors_origins: str = ""
    # A POST that creates something and carries `Idempotency-Key` answers the first response
    # again for the same key, principal and body within this many hours.
    idempotency_key_ttl_hours: int = Field(default=24, ge=1, le=24 * 30)

    max_body_bytes: int = Field(default=256 * 1024, ge=1024)
    # Number of shard actors hosting per-project state actors. One suits a single small machine
    # (bench/README.md, "Messaging": on 2 cores one shard takes bigger batches per Ray call
    # than two); deployments set one or two per spare core of each worker node.
    project_shards: int = Field(default=1, ge=1, le=256)
    # Number of shard actors serialising per-user mutations (moderation state).
    user_shards: int = Field(default=4, ge=1, le=256)
    actor_call_timeout_seconds: float = Field(default=10.0, gt=0)
    # A new actor's first calls wait this long for its process to start (a Python worker that
    # imports the service, under load several times the call timeout) before the call's own
    # timeout begins; a frontend waits as long at start-up for its project shards.
    actor_start_timeout_seconds: float = Field(default=60.0, gt=0)
    # Liveness (GET /v1/health) fails once this frontend's Ray connection has been unusable (its
    # own raylet gone too, not rejoined) for longer than this, so the orchestrator restarts a
    # frontend that cannot rejoin by itself (docs/operations.md, "Losing the Ray head").
    ray_reconnect_grace_seconds: float = Field(default=120.0, gt=0)

    log_level: str = "INFO"
    log_json: bool = True
    # `auto`: human-readable lines under `marketplace up` on a terminal, JSON otherwise; `json`
    # and `text` force one. `json` also wins over MARKETPLACE_LOG_JSON=false.
    log_format: str = Field(default="auto", pattern=r"^(auto|json|text)$")

    # --- identity (wallet links, API keys, legal assent); see docs/identity.md -----------------
    # Lifetime of a wallet-link challenge.
    wallet_challenge_ttl_seconds: int = Field(default=600, ge=10, le=86_400)
    # `domain` shown in the sign-in message; empty: host of public_base_url, else the configured
    # listen address (never the request's Host header).
    wallet_link_domain: str = ""
    # Chain ids a wallet-link challenge may name; empty: the configured chain only.
    wallet_link_chain_ids: list[int] = Field(default_factory=list)
    # Required legal document versions, {documentType: version}; a type left out requires its
    # newest version file. Every entry must name a shipped document file.
    legal_required_versions: dict[str, str] = Field(default_factory=dict)
    # Prefix of newly issued agent API keys (secret scanners match on it).
    api_key_prefix: str = Field(default="mkt_live_", pattern=r"^[a-z][a-z0-9]*(_[a-z0-9]+)*_$")
    api_key_max_active_per_user: int = Field(default=25, ge=1)
    # The API-key usage log is buffered in process and written every interval or every N rows.
    api_key_audit_flush_interval_ms: int = Field(default=1000, ge=10)
    api_key_audit_flush_max_rows: int = Field(default=500, ge=1)
    # The users of verified session tokens are recorded in process and written every interval or
    # every N users (marketplace/identity/session_recorder.py).
    session_record_flush_interval_ms: int = Field(default=200, ge=10)
    session_record_flush_max_rows: int = Field(default=1000, ge=1)

    # --- chain and indexer; see docs/chain.md ---------------------------------------------------
    # Empty under `marketplace up`: start an anvil devnet and deploy the reference contracts.
    chain_rpc_url: str = ""
    # WebSocket endpoint for `newHeads`; empty: derived from the http(s) RPC URL (ws(s)://same
    # host); a node without subscriptions just means polling only.
    chain_ws_url: str = ""
    chain_id: int = Field(default=31337, ge=1)
    registry_address: str = Field(default="", pattern=r"^(0x[0-9a-fA-F]{40})?$")
    chain_start_block: int = Field(default=0, ge=0)
    # Blocks a claimed creation transaction must be buried under before it counts as final.
    chain_confirmations: int = Field(default=1, ge=0)
    indexer_enabled: bool = True
    indexer_poll_interval_ms: int = Field(default=10_000, ge=50)
    indexer_rollback_blocks: int = Field(default=10, ge=1)
    indexer_max_pages: int = Field(default=50, ge=1)
    indexer_page_blocks: int = Field(default=2_000, ge=1)
    indexer_lag_alert_seconds: int = Field(default=300, ge=1)

    # --- project creation, claims and off-chain records; see docs/claims.md, docs/records.md ---
    project_create_intent_ttl_seconds: int = Field(default=86_400, ge=60)
    # Tolerated difference between block timestamps and this server's clock when a claim
    # compares the creation block's time with the intent's issue and expiry times.
    chain_clock_skew_seconds: int = Field(default=30, ge=0)
    # Wallets (besides the owner and the selected worker) that may read dispute evidence.
    dispute_admin_wallets: list[str] = Field(default_factory=list)

    # --- job queue; see docs/jobs.md -----------------------------------------------------------
    # Start the job worker actors of every registered queue with the frontend.
    jobs_enabled: bool = True
    # Worker actors per queue (a queue may declare its own), and per-queue overrides.
    jobs_workers_per_queue: int = Field(default=2, ge=0, le=64)
    jobs_workers: dict[str, int] = Field(default_factory=dict)
    # Attempts one worker runs at once (a queue may declare its own).
    jobs_concurrency: int = Field(default=4, ge=1, le=256)
    # A running job's lease; heartbeats renew it every third of it. A worker that dies delays
    # its jobs by at most this long.
    jobs_lease_seconds: float = Field(default=30.0, ge=1)
    # Fallback poll when no notification arrives (LISTEN wakes workers at once).
    jobs_poll_interval_ms: int = Field(default=2_000, ge=50)
    # Retry delay after attempt n: uniform in [0, min(cap, base * 2**(n-1))] (full jitter).
    jobs_backoff_base_seconds: float = Field(default=2.0, gt=0)
    jobs_backoff_cap_seconds: float = Field(default=600.0, gt=0)
    # Default attempt timeout (a queue may declare its own).
    jobs_timeout_seconds: float = Field(default=300.0, gt=0)
    # Completed jobs are deleted this long after they finished (failed ones are kept).
    jobs_completed_retention_hours: float = Field(default=168.0, gt=0)
    # /metrics reads queue depth from Postgres at most this often.
    jobs_metrics_cache_seconds: float = Field(default=1.5, ge=0)

    # --- change events (outbox -> Redis Stream); see docs/events.md ----------------------------
    # Run the relay in this frontend (exactly one of all running relays is active at a time).
    events_relay_enabled: bool = True
    events_stream: str = Field(default="marketplace:events", min_length=1)
    # Approximate number of entries the stream keeps (XADD MAXLEN ~); older ones are read from
    # Postgres by consumers that fall behind.
    events_stream_maxlen: int = Field(default=100_000, ge=100)
    # How often the active relay looks for new events when no commit woke it (NOTIFY).
    events_relay_poll_interval_ms: int = Field(default=150, ge=10)
    events_relay_batch_size: int = Field(default=500, ge=1, le=10_000)
    # Relayed events older than this are deleted from Postgres; 0 keeps them forever.
    events_retention_hours: int = Field(default=168, ge=0)
    # Hard bound on the outbox's growth while a durable consumer (notifications, leaderboards)
    # lags: past this age a relayed event is deleted even if that consumer has not read it, and
    # the skip is logged as an error, counted and recorded (docs/events.md, "Retention"). Below
    # it, retention waits for the slowest consumer. 0: never (unread events are kept).
    events_retention_max_hours: int = Field(default=720, ge=0)

    # --- read cache of project read responses; see docs/read-models.md ------------------------
    # Serve viewer-independent project reads (open projects' detail and milestones, anonymous
    # list pages) from a per-frontend cache invalidated by the change events.
    read_cache_enabled: bool = True
    # Longest an entry lives. Every change to a cached read carries an event that drops its
    # entries as soon as it arrives; this is only a safety net against a change written
    # without one (a bug), so it bounds how long such a bug could show.
    read_cache_max_age_ms: int = Field(default=30_000, ge=1, le=300_000)
    # The cache serves only while its event follower was confirmed up to date with the outbox
    # at most this long ago (the staleness bound for changes with an event).
    read_cache_max_lag_ms: int = Field(default=500, ge=10, le=10_000)
    read_cache_max_entries: int = Field(default=20_000, ge=1)
    read_cache_max_bytes: int = Field(default=64 * 1024 * 1024, ge=64 * 1024)

    # --- messaging moderation; see docs/messaging.md -------------------------------------------
    # Terms refused in chat and DM bodies besides the shipped list, one per line, "#" comments.
    # Read when the settings load, so a missing or unreadable file stops startup.
    moderation_terms_file: Path | None = None
    # This many offenses within the window suspend the account's sending for suspend_seconds.
    moderation_suspend_after: int = Field(default=3, ge=1)
    moderation_window_seconds: int = Field(default=86_400, ge=1)
    moderation_suspend_seconds: int = Field(default=86_400, ge=1)

    # --- live event stream (GET /v1/stream); see docs/stream.md --------------------------------
    # A heartbeat comment goes to every open stream this often; it also renews the streams'
    # slot leases in Redis (a lease lives three heartbeats, so a crashed frontend's slots free
    # themselves) and carries the stream's position.
    stream_heartbeat_seconds: float = Field(default=15.0, gt=0, le=3600)
    # Open streams per user across all frontends; one more answers 429 `rate_limited`.
    stream_max_per_user: int = Field(default=5, ge=1, le=1000)
    # Events waiting to be written to one stream; a client that falls this far behind is
    # disconnected (it resumes with Last-Event-ID) instead of holding events for others.
    stream_queue_size: int = Field(default=256, ge=1, le=100_000)
    # A Last-Event-ID older than the newest this-many events (or than the outbox retention) is
    # not replayed: the stream sends `event: reset` and continues live.
    stream_replay_max_events: int = Field(default=1_000, ge=1, le=100_000)
    # Lifetime of a single-use stream ticket (POST /v1/stream/tickets), for browsers whose
    # EventSource cannot send headers.
    stream_ticket_ttl_seconds: int = Field(default=60, ge=5, le=3600)

    # --- notification e-mail (SMTP); see docs/notifications.md ---------------------------------
    # `smtp://[user:password@]host[:port]` (STARTTLS when offered; port 25) or `smtps://...`
    # (TLS from the start; port 465), user and password percent-encoded. Unset under `up`:
    # the embedded server writing .eml files to <data_dir>/mail/. A secret: never logged.
    smtp_url: SecretStr | None = None
    mail_from: str = "Marketplace <marketplace@localhost>"
    # Characters of a chat message or DM quoted in its e-mail; 0: no preview.
    notification_preview_chars: int = Field(default=140, ge=0, le=2000)
    # Sending attempts of one e-mail (transient failures only; a 5xx reply fails at once).
    notification_max_attempts: int = Field(default=5, ge=1, le=50)
    # Key of the HMAC-SHA256 that signs one-click unsubscribe links (at least 32 characters).
    # `marketplace up` keeps one in the data dir when unset; `marketplace serve` refuses to start
    # without it. Changing it invalidates every unsubscribe link already mailed.
    notification_unsubscribe_secret: SecretStr | None = None

    # --- notification pipeline (outbox -> deliveries -> jobs); see docs/notifications.md ------
    # Run the notifications consumer in this frontend (one of all running consumers is active).
    notification_pipeline_enabled: bool = True
    # Per recipient and event type: "N/T" (N per T seconds), or a JSON object of event type
    # (or "default") -> "N/T", e.g. {"direct_message": "10/3600"}. Checked at start-up.
    notification_rate_limit: str = DEFAULT_RATE

    # --- leaderboard boards; see docs/leaderboards.md ------------------------------------------
    # Run the boards consumer (outbox -> entries and standings) in this frontend (one of all
    # running consumers is active).
    leaderboard_consumer_enabled: bool = True
    # A board is `stale` when its consumer is behind the outbox by more than this (or the
    # indexer is stale); also the board's `freshnessTargetMs`.
    leaderboard_freshness_target_ms: int = Field(default=60_000, ge=1)
    # How long a frontend reuses the boards' freshness it computed (0: every request).
    leaderboard_freshness_cache_ms: int = Field(default=1_000, ge=0, le=60_000)

    # --- verifier jobs; see docs/verifier.md ----------------------------------------------------
    # Ray actors running `verifier` jobs, one job at a time each, spread over the cluster's nodes.
    verifier_pool_size: int = Field(default=2, ge=0, le=64)
    # A Ray custom resource that only the nodes meant to run policies (the worker's code, in a
    # sandbox) advertise, with none of the service's secrets; each policy executor takes one
    # unit. Empty: MARKETPLACE_RAY_ACTOR_RESOURCE's nodes (or any node).
    verifier_executor_resource: str = Field(default="", max_length=100)
    # Attempts of one job (transient errors only: a deterministic negative result completes).
    verifier_max_attempts: int = Field(default=3, ge=1, le=20)
    # Raw evidence and execution logs are deleted this long after the job completed.
    verifier_retention_days: int = Field(default=30, ge=1, le=3650)
    # Where `github-ref` and the test policies fetch `OWNER/REPO` from (http(s):// or file://).
    verifier_git_base_url: str = "https://github.com"
    # Host of `figma-ref` URLs.
    verifier_figma_host: str = "www.figma.com"
    # `ipfs://CID/path` is fetched as <gateway>/ipfs/CID/path.
    verifier_ipfs_gateway_url: str = "https://ipfs.io"
    # Let policies fetch from private, loopback and link-local addresses (tests, private
    # deployments); off, every URL is checked after DNS resolution (SSRF).
    verifier_allow_private_hosts: bool = False
    # The attestation signer's key (0x + 64 hex). Unset under `up`: the devnet's dev verifier key.
    # Unset under `serve`: `POST /v1/verifier/jobs` answers 503 (a result without an attestation
    # would not be a VerificationResult). A secret: never logged.
    verifier_private_key: SecretStr | None = None
    # An attestation's deadline: the chain's latest block time plus this.
    verifier_attestation_ttl_seconds: int = Field(default=3600, ge=60, le=30 * 86_400)
    # Limits of one test policy run (`npm-test`, `cargo-test`, `forge-test`): wall clock, CPU
    # seconds and address space of the commands; their output is kept up to max_log_bytes.
    verifier_command_timeout_seconds: float = Field(default=600.0, gt=0, le=7200)
    verifier_command_cpu_seconds: int = Field(default=600, ge=1, le=7200)
    verifier_command_memory_mb: int = Field(default=4096, ge=64, le=65_536)
    verifier_max_log_bytes: int = Field(default=65_536, ge=1024, le=10_485_760)
    # Per HTTP request a policy makes (figma-ref, screenshot-ref) and the largest image accepted.
    verifier_http_timeout_seconds: float = Field(default=20.0, gt=0, le=300)
    verifier_max_image_bytes: int = Field(default=10_485_760, ge=1024, le=104_857_600)

    @field_validator("public_base_url", "public_app_url")
    @classmethod
    def _check_public_url(cls, value: str) -> str:
        # Checked at start: a bad value would otherwise fail only when an e-mail is composed,
        # and its job would retry until it gave up.
        value = value.strip()
        if value:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("not an http(s) URL with a host")
            if parts.query or parts.fragment:
                raise ValueError("must not have a query or fragment")
        return value

    @field_validator("dispute_admin_wallets")
    @classmethod
    def _check_wallets(cls, value: list[str]) -> list[str]:
        for wallet in value:
            if not re.fullmatch(r"0x[0-9a-fA-F]{40}", wallet):
                raise ValueError(f"not an address: {wallet!r}")
        return [wallet.lower() for wallet in value]

    @field_validator("moderation_terms_file", mode="before")
    @classmethod
    def _unset_terms_file(cls, value: object) -> object:
        # An empty variable means "no extra terms", not the current directory.
        return None if value == "" else value

    @field_validator("moderation_terms_file")
    @classmethod
    def _check_terms_file(cls, value: Path | None) -> Path | None:
        if value is not None:
            # Parsed here rather than first used at startup, so the error names the variable.
            try:
                load_terms_file(value)
            except ValueError as exc:
                raise ValueError(f"MARKETPLACE_MODERATION_TERMS_FILE: {exc}") from None
        return value

    @field_validator("smtp_url", mode="before")
    @classmethod
    def _unset_smtp_url(cls, value: object) -> object:
        # An empty variable means "not configured" (the embedded server under `up`).
        return None if value == "" else value

    @field_validator("smtp_url")
    @classmethod
    def _check_smtp_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            try:
                parse_smtp_url(value.get_secret_value())
            except ValueError as exc:
                # Not a ValueError: pydantic would wrap that in a ValidationError quoting the
                # input, password included. The parser's own messages never repeat it.
                raise SecretSettingError(f"MARKETPLACE_SMTP_URL: {exc}") from None
        return value

    @field_validator("mail_from")
    @classmethod
    def _check_mail_from(cls, value: str) -> str:
        return check_mail_from(value)

    @field_validator("notification_unsubscribe_secret", mode="before")
    @classmethod
    def _unset_unsubscribe_secret(cls, value: object) -> object:
        # An empty variable means "not configured" (a dev secret under `up`).
        return None if value == "" else value

    @field_validator("notification_unsubscribe_secret")
    @classmethod
    def _check_unsubscribe_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 32:
            raise ValueError(
                "MARKETPLACE_NOTIFICATION_UNSUBSCRIBE_SECRET must be at least 32 characters"
            )
        return value

    @field_validator("verifier_private_key", mode="before")
    @classmethod
    def _unset_verifier_secrets(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("verifier_private_key")
    @classmethod
    def _check_verifier_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not re.fullmatch(r"0x[0-9a-fA-F]{64}", value.get_secret_value()):
            raise ValueError(
                "MARKETPLACE_VERIFIER_PRIVATE_KEY must be 0x followed by 64 hex digits"
            )
        return value

    @field_validator("verifier_git_base_url", "verifier_ipfs_gateway_url")
    @classmethod
    def _check_verifier_urls(cls, value: str) -> str:
        if not re.fullmatch(r"(https?|file)://\S+", value):
            raise ValueError(f"must be an http(s):// or file:// URL, got {value!r}")
        return value.rstrip("/")

    @field_validator("jobs_workers")
    @classmethod
    def _check_job_workers(cls, value: dict[str, int]) -> dict[str, int]:
        for queue, count in value.items():
            if not 0 <= count <= 64:
                raise ValueError(f"jobs_workers[{queue!r}] must be between 0 and 64")
        return value

    @field_validator("metrics_allow", "trusted_proxies")
    @classmethod
    def _check_networks(cls, value: str) -> str:
        parse_networks(value)
        return value

    @field_validator("cors_origins")
    @classmethod
    def _check_cors_origins(cls, value: str) -> str:
        parse_origins(value)
        return value

    @field_validator("rate_limit_default", "rate_limit_auth_failures")
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

    @field_validator("notification_rate_limit")
    @classmethod
    def _check_notification_rates(cls, value: str) -> str:
        try:
            NotificationRates.parse(value)
        except ValueError as exc:
            raise ValueError(f"MARKETPLACE_NOTIFICATION_RATE_LIMIT: {exc}") from None
        return value

    @property
    def verifier_job_timeout_seconds(self) -> float:
        """One verifier attempt: the test commands' limit plus time to clone and to sign."""
        return self.verifier_command_timeout_seconds + 300.0

    @property
    def notification_rates(self) -> NotificationRates:
        return NotificationRates.parse(self.notification_rate_limit)

    @property
    def accepted_wallet_link_chain_ids(self) -> list[int]:
        return self.wallet_link_chain_ids or [self.chain_id]

    @property
    def listen_address(self) -> str:
        """host:port this server is configured to listen on, as a client would address it."""
        host = "localhost" if self.host in ("", "0.0.0.0", "::") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"{host}:{self.port}"

    @property
    def dev_secret_path(self) -> Path:
        return self.data_dir / "dev-jwt-secret"

    @property
    def dev_notification_secret_path(self) -> Path:
        return self.data_dir / "dev-notification-secret"

    @property
    def metrics_allow_networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        return parse_networks(self.metrics_allow)

    @property
    def cors_origin_list(self) -> list[str]:
        return parse_origins(self.cors_origins)

    @property
    def smtp_target(self) -> SmtpTarget | None:
        """Where notification e-mail goes; None when no SMTP URL is configured."""
        if self.smtp_url is None:
            return None
        return parse_smtp_url(self.smtp_url.get_secret_value())

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


def parse_networks(text: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Parse comma-separated networks (``10.0.0.0/8, ::1``; a bare address is one host)."""
    networks = []
    for part in text.split(","):
        if part.strip():
            try:
                networks.append(ipaddress.ip_network(part.strip(), strict=False))
            except ValueError as exc:
                raise ValueError(f"not a network: {part.strip()!r}") from exc
    return networks


_ORIGIN = re.compile(r"https?://([a-z0-9.-]+|\[[0-9a-f:.]+\])(:[0-9]{1,5})?", re.IGNORECASE)


def parse_origins(text: str) -> list[str]:
    """Parse comma-separated exact origins (``https://app.example.com, http://localhost:3000``).

    An origin is compared byte for byte with the browser's `Origin` header, which is always
    lower-case scheme and host without a trailing slash, so anything else could never match.
    """
    origins = []
    for part in text.split(","):
        origin = part.strip()
        if not origin:
            continue
        if origin == "*" or not _ORIGIN.fullmatch(origin):
            raise ValueError(f"not an origin (scheme://host[:port], never '*'): {origin!r}")
        if origin != origin.lower():
            raise ValueError(f"an origin is lower-case, as browsers send it: {origin!r}")
        origins.append(origin)
    return origins


def load_settings(**overrides: object) -> Settings:
    return Settings(**overrides)  # type: ignore[arg-type]
