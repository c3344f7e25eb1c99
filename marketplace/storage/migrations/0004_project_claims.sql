-- Project create intents and what a claim binds to a project (see docs/claims.md).

CREATE TABLE project_create_intents (
    intent_id uuid PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    intent_nonce text NOT NULL CHECK (intent_nonce ~ '^0x[0-9a-f]{64}$'),
    -- pending: issued; used: bound to project_address by a claim; cancelled: withdrawn.
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'used', 'cancelled')),
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at timestamptz,
    project_address text UNIQUE,
    CHECK ((status = 'used') = (project_address IS NOT NULL))
);
CREATE INDEX project_create_intents_by_user ON project_create_intents (user_id, created_at DESC);

ALTER TABLE project_metadata
    ADD COLUMN claim_mode text NOT NULL CHECK (claim_mode IN ('intent', 'direct')),
    ADD COLUMN hash_version text NOT NULL CHECK (hash_version IN ('v1_intent', 'v1_direct')),
    ADD COLUMN intent_id uuid REFERENCES project_create_intents (intent_id),
    ADD COLUMN tx_hash text NOT NULL CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
    ADD COLUMN config_hash text NOT NULL CHECK (config_hash ~ '^0x[0-9a-f]{64}$'),
    ADD CHECK ((claim_mode = 'intent') = (intent_id IS NOT NULL));
