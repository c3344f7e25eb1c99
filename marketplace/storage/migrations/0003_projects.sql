-- Project and milestone read models, indexed from the chain, plus the indexer's cursor and the
-- recent-block record it needs for reorg handling. Addresses and hashes are stored lower-case;
-- USDC amounts in whole-token display units (on-chain base units / 10^6, rounded down).

CREATE TABLE projects (
    project_address text PRIMARY KEY CHECK (project_address ~ '^0x[0-9a-f]{40}$'),
    chain_id bigint NOT NULL,
    owner_address text NOT NULL CHECK (owner_address ~ '^0x[0-9a-f]{40}$'),
    status text NOT NULL
        CHECK (status IN ('draft', 'bidding', 'building', 'dispute', 'complete', 'failed')),
    project_mode text NOT NULL CHECK (project_mode IN ('standard', 'challenge')),
    bidding_access text NOT NULL CHECK (bidding_access IN ('invite_only', 'open')),
    config_hash text NOT NULL CHECK (config_hash ~ '^0x[0-9a-f]{64}$'),
    selected_builder_address text,
    milestone_count integer NOT NULL CHECK (milestone_count BETWEEN 0 AND 100),
    bid_bond_usdc numeric(78, 0),
    challenge_payout_usdc numeric(78, 0),
    challenge_submission_count integer,
    challenge_submission_window_seconds bigint,
    challenge_owner_response_window_seconds bigint,
    challenge_submission_deadline bigint,
    challenge_owner_response_deadline bigint,
    challenge_selection_phase boolean NOT NULL DEFAULT false,
    dispute_phase text CHECK (dispute_phase IN ('challenged', 'verifier_verdict')),
    dispute_reason text CHECK (dispute_reason IN ('deadline_missed', 'low_quality', 'owner_inaction')),
    dispute_raised_by text,
    dispute_milestone_index integer,
    dispute_opened_at bigint,
    dispute_verdict_submitted_at bigint,
    dispute_owner_evidence_hash text,
    dispute_worker_evidence_hash text,
    -- On-chain allowlist of invite-only projects (lower-case), for visibility checks.
    allowlist text[] NOT NULL DEFAULT '{}',
    -- Where ProjectCreated was logged: the stable order of listings (newest first).
    created_block bigint NOT NULL,
    created_log_index integer NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    snapshot_block bigint NOT NULL
);
CREATE UNIQUE INDEX projects_listing_order ON projects (created_block DESC, created_log_index DESC);
CREATE INDEX projects_owner_order
    ON projects (owner_address, created_block DESC, created_log_index DESC);
CREATE INDEX projects_status_order
    ON projects (status, created_block DESC, created_log_index DESC);
CREATE INDEX projects_allowlist ON projects USING gin (allowlist);

CREATE TABLE milestones (
    project_address text NOT NULL REFERENCES projects (project_address) ON DELETE CASCADE,
    milestone_index integer NOT NULL CHECK (milestone_index BETWEEN 0 AND 65535),
    status text NOT NULL
        CHECK (status IN ('pending', 'submitted', 'approved', 'rejected', 'disputed', 'attested')),
    payout_usdc numeric(78, 0),
    deadline_at timestamptz,
    submitted_at timestamptz,
    approved_at timestamptz,
    resolved_at timestamptz,
    delivery_ref_hash text,
    latest_evidence_hash text,
    attested_on_chain boolean NOT NULL DEFAULT false,
    -- Filled by the verifier capability, never by the indexer.
    latest_verifier_job_id uuid,
    latest_verifier_passes boolean,
    PRIMARY KEY (project_address, milestone_index)
);

-- Off-chain metadata bound to a project by the claim step (may arrive before the project is
-- indexed: it is then kept here and shows up on the read model once the project does).
CREATE TABLE project_metadata (
    project_address text PRIMARY KEY CHECK (project_address ~ '^0x[0-9a-f]{40}$'),
    owner_address text NOT NULL,
    title text NOT NULL CHECK (char_length(title) BETWEEN 1 AND 200),
    description text CHECK (char_length(description) <= 2000),
    repo_url text CHECK (char_length(repo_url) <= 1024),
    image_url text CHECK (char_length(image_url) <= 1024),
    project_mode text NOT NULL CHECK (project_mode IN ('standard', 'challenge')),
    bidding_access text NOT NULL CHECK (bidding_access IN ('invite_only', 'open')),
    claimed_by uuid NOT NULL REFERENCES users (user_id),
    claimed_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE indexer_cursors (
    chain_id bigint PRIMARY KEY,
    registry_address text NOT NULL,
    start_block bigint NOT NULL,
    last_synced_block bigint NOT NULL,
    head_block bigint NOT NULL DEFAULT 0,
    -- Timestamp of block last_synced_block: lag in seconds is measured in chain time.
    last_synced_block_time timestamptz,
    last_successful_sync_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Hashes of the recent blocks the indexer processed, and which projects each touched, so a
-- reorg can be detected and exactly the affected projects re-snapshotted.
CREATE TABLE indexer_blocks (
    chain_id bigint NOT NULL,
    block_number bigint NOT NULL,
    block_hash text NOT NULL,
    touched_projects text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (chain_id, block_number)
);
