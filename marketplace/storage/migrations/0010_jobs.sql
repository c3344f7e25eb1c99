-- The durable job queue (see docs/jobs.md). A job is a row; workers claim due rows with
-- FOR UPDATE SKIP LOCKED and hold a lease (owner + expiry) renewed by heartbeats. A running job
-- whose lease expired is claimable again, so a dead worker delays its jobs, never loses them.
CREATE TABLE jobs (
    id bigserial PRIMARY KEY,
    queue text NOT NULL CHECK (queue ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    payload jsonb NOT NULL DEFAULT '{}'::jsonb,
    status text NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'running', 'completed', 'failed')),
    -- Attempts started so far: incremented by every claim, including a takeover after a lease
    -- expired, so a job that kills its worker cannot be retried forever.
    attempt_count integer NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    max_attempts integer NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    -- Earliest time the job may be claimed (enqueue time, a requested delay, or a backoff).
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_owner text,
    lease_expires_at timestamptz,
    last_error text,
    -- Deduplicates enqueues: a second enqueue with the same key on the same queue returns the
    -- first job (NULL keys never conflict).
    idempotency_key text CHECK (char_length(idempotency_key) <= 200),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Start of the latest attempt.
    started_at timestamptz,
    finished_at timestamptz,
    CONSTRAINT jobs_idempotency UNIQUE (queue, idempotency_key),
    CONSTRAINT jobs_lease CHECK (
        (status = 'running') = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)
    ),
    CONSTRAINT jobs_finished CHECK (
        (status IN ('completed', 'failed')) = (finished_at IS NOT NULL)
    )
);

-- The claim walks this index in its ORDER BY (id included, so jobs enqueued in one transaction,
-- which share next_attempt_at, need no sort) and stops at its LIMIT. Completed jobs (the bulk of
-- the table) stay out of it.
CREATE INDEX jobs_claim ON jobs (queue, next_attempt_at, id) WHERE status IN ('queued', 'running');
-- Expired leases, found by the reaper without walking the backlog.
CREATE INDEX jobs_leases ON jobs (queue, lease_expires_at) WHERE status = 'running';
-- Completed jobs are pruned by age.
CREATE INDEX jobs_completed ON jobs (finished_at) WHERE status = 'completed';
-- Failed jobs are kept for inspection and counted per queue.
CREATE INDEX jobs_failed ON jobs (queue, finished_at) WHERE status = 'failed';
