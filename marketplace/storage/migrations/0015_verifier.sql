-- Verifier jobs (docs/verifier.md): one row per accepted request. Its attempts run as a job on the
-- `verifier` queue (`job_id`); while that job is not completed, its status, attempts, next attempt
-- and error are read from the queue's row, and the completion writes them here, with the result,
-- in the transaction that completes the queue's job (so a job completes, and attests, once).
CREATE TABLE verifier_jobs (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    job_id bigint,
    created_by uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    project_address text NOT NULL CHECK (project_address ~ '^0x[0-9a-f]{40}$'),
    milestone_index integer NOT NULL CHECK (milestone_index BETWEEN 0 AND 65535),
    check_policy_id text NOT NULL CHECK (
        check_policy_id IN ('github-ref', 'address-smoke', 'forge-test', 'cargo-test', 'npm-test',
                            'figma-ref', 'screenshot-ref')
    ),
    delivery_ref text NOT NULL CHECK (char_length(delivery_ref) BETWEEN 1 AND 2048),
    chain_id bigint NOT NULL CHECK (chain_id >= 1),
    -- As requested (null: the server chose), and the nonce the attestation uses: the requested
    -- one, or a fresh random one drawn at creation so every attempt signs the same nonce.
    requested_nonce numeric(78, 0) CHECK (requested_nonce >= 0),
    requested_deadline numeric(78, 0) CHECK (requested_deadline >= 1),
    attestation_nonce numeric(78, 0) NOT NULL CHECK (attestation_nonce >= 0),
    max_attempts integer NOT NULL CHECK (max_attempts >= 1),
    -- Final state (completed), written with the result; NULL while the queue's job decides.
    status text CHECK (status IS NULL OR status = 'completed'),
    attempt_count integer CHECK (attempt_count >= 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    retention_expires_at timestamptz,
    passes boolean,
    evidence_hash text CHECK (evidence_hash IS NULL OR evidence_hash ~ '^0x[0-9a-f]{64}$'),
    evidence jsonb,
    attestation jsonb,
    -- What the attempts saw (per attempt: node, actor, raw facts) and their output; deleted by
    -- the retention sweep after retention_expires_at (raw_deleted_at records when).
    raw_evidence jsonb,
    logs text,
    raw_deleted_at timestamptz,
    CONSTRAINT verifier_jobs_completed CHECK (
        (status = 'completed') = (completed_at IS NOT NULL AND passes IS NOT NULL
                                  AND evidence_hash IS NOT NULL AND attestation IS NOT NULL)
    )
);
-- Listings, newest first (keyset on seq), by creator and by project.
CREATE INDEX verifier_jobs_creator ON verifier_jobs (created_by, seq DESC);
CREATE INDEX verifier_jobs_project ON verifier_jobs (project_address, milestone_index, seq DESC);
CREATE UNIQUE INDEX verifier_jobs_job ON verifier_jobs (job_id);
-- The retention sweep's work list.
CREATE INDEX verifier_jobs_retention ON verifier_jobs (retention_expires_at)
    WHERE raw_deleted_at IS NULL AND retention_expires_at IS NOT NULL;

-- The milestone read model's latestEvidenceHash comes from the newest completed verifier job
-- (falling back to the chain's value); the indexer's upsert never writes this column.
ALTER TABLE milestones ADD COLUMN latest_verifier_evidence_hash text
    CHECK (latest_verifier_evidence_hash IS NULL OR latest_verifier_evidence_hash ~ '^0x[0-9a-f]{64}$');
