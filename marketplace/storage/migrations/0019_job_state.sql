-- One job, one state (docs/jobs.md, docs/verifier.md, docs/notifications.md).

-- The failure as an API may show it (the exception's type and message, never a traceback; null
-- once the job completed), beside `last_error`, which keeps the frames for operators. Existing
-- failures get the part of `last_error` before its frames.
ALTER TABLE jobs ADD COLUMN error_message text
    CHECK (error_message IS NULL OR char_length(error_message) <= 8000);
UPDATE jobs SET error_message = split_part(last_error, E'\n  File "', 1)
WHERE last_error IS NOT NULL AND status <> 'completed';

-- Completed jobs are pruned per queue (each queue's workers prune their own; a queue whose
-- completed jobs are a domain's record keeps them).
DROP INDEX jobs_completed;
CREATE INDEX jobs_completed ON jobs (queue, finished_at) WHERE status = 'completed';

-- The completion with an effect in one statement (repositories/jobs.py, COMPLETE_WITH) passes
-- the completion's result through this function: no lease (NULL) aborts the whole statement,
-- the effect included.
CREATE FUNCTION jobs_lease_held(total_seconds float8) RETURNS float8
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF total_seconds IS NULL THEN
        RAISE EXCEPTION 'the job''s lease is lost' USING ERRCODE = 'MJ001';
    END IF;
    RETURN total_seconds;
END
$$;

-- Verifier jobs read their state (status, attempts, next attempt, error) from their queue job,
-- which the `verifier` queue never prunes: the row's own status and attempt count go. A row
-- whose queue job is missing (pruned after completion, or never linked) gets one that says
-- what the row said.
INSERT INTO jobs (queue, payload, status, attempt_count, max_attempts, next_attempt_at,
                  idempotency_key, created_at, started_at, finished_at, error_message, last_error)
SELECT 'verifier', jsonb_build_object('verifierJobId', v.id::text),
       CASE WHEN v.status = 'completed' THEN 'completed' ELSE 'failed' END,
       coalesce(v.attempt_count, 0), v.max_attempts, v.created_at, v.id::text, v.created_at,
       v.completed_at, coalesce(v.completed_at, v.updated_at),
       CASE WHEN v.status IS NULL THEN 'the job record is gone' END,
       CASE WHEN v.status IS NULL THEN 'the job record is gone' END
FROM verifier_jobs v
WHERE v.job_id IS NULL OR NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = v.job_id)
ON CONFLICT (queue, idempotency_key) DO NOTHING;
UPDATE verifier_jobs v SET job_id = j.id
FROM jobs j
WHERE j.queue = 'verifier' AND j.idempotency_key = v.id::text
  AND (v.job_id IS NULL OR NOT EXISTS (SELECT 1 FROM jobs k WHERE k.id = v.job_id));
-- A completed row's job says completed (it always did: both were written in one transaction).
UPDATE jobs j SET status = 'completed', error_message = NULL,
                  finished_at = coalesce(j.finished_at, v.completed_at),
                  lease_owner = NULL, lease_expires_at = NULL
FROM verifier_jobs v
WHERE v.job_id = j.id AND v.status = 'completed' AND j.status <> 'completed';

ALTER TABLE verifier_jobs DROP CONSTRAINT verifier_jobs_completed;
ALTER TABLE verifier_jobs DROP COLUMN status, DROP COLUMN attempt_count;
ALTER TABLE verifier_jobs ALTER COLUMN job_id SET NOT NULL;
ALTER TABLE verifier_jobs ADD CONSTRAINT verifier_jobs_job_fk
    FOREIGN KEY (job_id) REFERENCES jobs (id);
-- Completed (completed_at set) with its whole result, or not at all.
ALTER TABLE verifier_jobs ADD CONSTRAINT verifier_jobs_completed CHECK (
    (completed_at IS NOT NULL) = (passes IS NOT NULL AND evidence_hash IS NOT NULL
                                  AND attestation IS NOT NULL)
);

-- Notification deliveries keep their own status (suppressed and rate-limited ones have no job,
-- sent ones outlive their pruned job), changed in the transaction that changes their job's:
-- `sent` with the completion, an attempt's failure (and `failed` after the last) by the queue's
-- failure hook, found by the job's id. A queued delivery always has its job (both are inserted
-- in one statement). Deliveries left queued by a failed or vanished job are failed here, once.
CREATE UNIQUE INDEX notification_deliveries_job ON notification_deliveries (job_id);
UPDATE notification_deliveries d
SET status = 'failed', attempts = greatest(d.attempts, j.attempt_count),
    last_error = left(coalesce(j.error_message, 'the sending job failed'), 2000),
    updated_at = now()
FROM jobs j
WHERE d.status = 'queued' AND j.id = d.job_id AND j.status IN ('failed', 'completed');
UPDATE notification_deliveries d
SET status = 'failed', last_error = 'the sending job is gone', updated_at = now()
WHERE d.status = 'queued'
  AND (d.job_id IS NULL OR NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = d.job_id));
ALTER TABLE notification_deliveries ADD CONSTRAINT notification_deliveries_queued_job
    CHECK (status <> 'queued' OR job_id IS NOT NULL);
