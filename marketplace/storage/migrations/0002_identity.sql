-- Identity and consent: wallet links, usernames, agent API keys and their usage log, legal assent.
-- Addresses are stored lower-case (compared case-insensitively, returned EIP-55 checksummed).

-- Single-use wallet-link challenges. A challenge is consumed by setting used_at in the same
-- transaction that writes the link, so a replay cannot win a race.
CREATE TABLE wallet_link_challenges (
    challenge_id uuid PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    wallet_address text NOT NULL CHECK (wallet_address ~ '^0x[0-9a-f]{40}$'),
    chain_id bigint NOT NULL CHECK (chain_id >= 1),
    nonce text NOT NULL,
    message text NOT NULL,
    issued_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    used_at timestamptz
);
CREATE INDEX wallet_link_challenges_user_expiry ON wallet_link_challenges (user_id, expires_at);

-- Proven wallet ownership. At most one active (revoked_at IS NULL) link per wallet; revoked rows
-- are kept as history.
CREATE TABLE wallet_links (
    link_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    wallet_address text NOT NULL CHECK (wallet_address ~ '^0x[0-9a-f]{40}$'),
    chain_id bigint NOT NULL CHECK (chain_id >= 1),
    verification_method text NOT NULL
        CHECK (verification_method IN ('eip191_sign_message', 'eip712_sign_typed_data')),
    challenge_id uuid REFERENCES wallet_link_challenges (challenge_id) ON DELETE SET NULL,
    verified_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    -- 'user' (DELETE by the owner) or 'superseded' (another user proved the same wallet)
    revoked_reason text CHECK (revoked_reason IN ('user', 'superseded'))
);
CREATE UNIQUE INDEX wallet_links_one_active_per_wallet
    ON wallet_links (wallet_address) WHERE revoked_at IS NULL;
CREATE INDEX wallet_links_active_by_user ON wallet_links (user_id) WHERE revoked_at IS NULL;

-- Usernames: one per user, globally unique case-insensitively (the index, not a read, decides).
CREATE TABLE usernames (
    user_id uuid PRIMARY KEY REFERENCES users (user_id) ON DELETE CASCADE,
    username text NOT NULL CHECK (username ~ '^[a-z0-9_]{3,24}$'),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX usernames_lower_unique ON usernames (lower(username));

-- Agent API keys. Secrets are never stored: only SHA-256 hashes, in api_key_secrets, so that a
-- rotation with a grace period can keep the previous secret valid until its expires_at.
CREATE TABLE api_keys (
    key_id uuid PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    name text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 100),
    key_prefix text NOT NULL,
    key_last4 text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    rotated_at timestamptz,
    last_used_at timestamptz,
    revoked_at timestamptz
);
CREATE INDEX api_keys_by_user ON api_keys (user_id, created_at);

CREATE TABLE api_key_secrets (
    secret_hash bytea PRIMARY KEY CHECK (octet_length(secret_hash) = 32),
    key_id uuid NOT NULL REFERENCES api_keys (key_id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- NULL: the current secret; otherwise a rotated-out secret valid until this instant
    expires_at timestamptz
);
CREATE INDEX api_key_secrets_by_key ON api_key_secrets (key_id);

-- Usage log of agent keys, written in batches by each frontend (never on the request path).
CREATE TABLE api_key_usage (
    usage_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key_id uuid NOT NULL REFERENCES api_keys (key_id) ON DELETE CASCADE,
    occurred_at timestamptz NOT NULL,
    method text NOT NULL,
    route text NOT NULL,
    status integer NOT NULL,
    client_address text
);
CREATE INDEX api_key_usage_by_key_time ON api_key_usage (key_id, occurred_at DESC, usage_id DESC);

-- Legal assent. Explicit and implied assent are separate rows so the history shows both; each is
-- recorded at most once per (user, document, version).
CREATE TABLE legal_acceptances (
    user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    document_type text NOT NULL CHECK (document_type IN (
        'terms', 'privacy', 'draft_license', 'ai_verifier_disclaimer', 'challenge_mode_disclaimer'
    )),
    version text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('explicit', 'implied')),
    accepted_at timestamptz NOT NULL DEFAULT now(),
    -- 'session' or 'agent_key': which principal kind made the request
    accepted_via text NOT NULL CHECK (accepted_via IN ('session', 'agent_key')),
    api_key_id uuid,
    -- for implied assent: "METHOD /route/template" of the guarded mutation that triggered it
    trigger_route text,
    PRIMARY KEY (user_id, document_type, version, kind)
);
