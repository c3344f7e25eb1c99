-- Off-chain records (see docs/records.md): bid drafts, challenge-submission artifact
-- registrations and dispute evidence payloads. Written only by the project's shard actor.
-- Addresses and hashes are stored lower-case. There is deliberately no foreign key to
-- `projects`: the indexer deletes projects a reorg dropped, and records must neither block that
-- nor vanish with it (a project that reappears finds its records again).

-- One non-binding draft per (project, bidder wallet); upserted.
CREATE TABLE bid_drafts (
    draft_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_address text NOT NULL CHECK (project_address ~ '^0x[0-9a-f]{40}$'),
    bidder_address text NOT NULL CHECK (bidder_address ~ '^0x[0-9a-f]{40}$'),
    draft_hash text NOT NULL CHECK (draft_hash ~ '^0x[0-9a-f]{64}$'),
    artifact_uri text
        CHECK (char_length(artifact_uri) <= 1024 AND artifact_uri ~ '^(https|ipfs)://'),
    notes text CHECK (char_length(notes) <= 4000),
    -- The users whose principal wrote the first and the latest version.
    created_by uuid REFERENCES users (user_id) ON DELETE SET NULL,
    updated_by uuid REFERENCES users (user_id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT bid_drafts_one_per_bidder UNIQUE (project_address, bidder_address)
);

-- One artifact registration per (project, submitter wallet); its hash mirrors the submitter's
-- on-chain challengeSubmissionOf() at the time it was written.
CREATE TABLE challenge_submissions (
    submission_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_address text NOT NULL CHECK (project_address ~ '^0x[0-9a-f]{40}$'),
    submitter_address text NOT NULL CHECK (submitter_address ~ '^0x[0-9a-f]{40}$'),
    submission_hash text NOT NULL
        CHECK (submission_hash ~ '^0x[0-9a-f]{64}$' AND submission_hash !~ '^0x0{64}$'),
    artifact_uri text
        CHECK (char_length(artifact_uri) <= 1024 AND artifact_uri ~ '^(https|ipfs)://'),
    notes text CHECK (char_length(notes) <= 4000),
    created_by uuid REFERENCES users (user_id) ON DELETE SET NULL,
    updated_by uuid REFERENCES users (user_id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT challenge_submissions_one_per_submitter UNIQUE (project_address, submitter_address)
);

-- Evidence of a dispute party. A milestone is disputed at most once (a dispute ends with the
-- milestone approved or the project failed), so "one submission per party per disputed
-- milestone" is this UNIQUE constraint. The payload is `json`, not `jsonb`, so it is returned
-- exactly as stored (key order kept); its size limit is checked on the compact serialization
-- before it gets here.
CREATE TABLE dispute_evidence (
    evidence_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_address text NOT NULL CHECK (project_address ~ '^0x[0-9a-f]{40}$'),
    milestone_index integer NOT NULL CHECK (milestone_index BETWEEN 0 AND 65535),
    submitter_address text NOT NULL CHECK (submitter_address ~ '^0x[0-9a-f]{40}$'),
    submitter_role text NOT NULL CHECK (submitter_role IN ('owner', 'worker')),
    evidence_hash text NOT NULL
        CHECK (evidence_hash ~ '^0x[0-9a-f]{64}$' AND evidence_hash !~ '^0x0{64}$'),
    evidence_payload json CHECK (evidence_payload IS NULL OR json_typeof(evidence_payload) = 'object'),
    -- When the dispute was opened on chain (disputeOpenedAt of the read model), for audit.
    dispute_opened_at bigint,
    submitted_by uuid REFERENCES users (user_id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT dispute_evidence_one_per_party
        UNIQUE (project_address, milestone_index, submitter_role)
);
