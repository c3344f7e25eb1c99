-- What a verdict may judge (docs/verifier.md, "What a verdict means").

-- The acceptance policy of each milestone, fixed by the owner before bidding opens (in the claim
-- or with PATCH .../metadata while the project is draft): a JSON array of
-- {"milestoneIndex": int, "checkPolicyId": text}, ordered by index, at most one per index.
ALTER TABLE project_metadata
    ADD COLUMN milestone_policies jsonb NOT NULL DEFAULT '[]'::jsonb
        CHECK (jsonb_typeof(milestone_policies) = 'array');

-- The dispute a job judges: the on-chain disputeOpenedAt of the project's active dispute when the
-- job was accepted. One verdict per dispute: a new request finds the dispute's job that has not
-- failed (NULL for jobs accepted before this migration, which judged no particular dispute).
ALTER TABLE verifier_jobs ADD COLUMN dispute_opened_at bigint CHECK (dispute_opened_at >= 0);
CREATE INDEX verifier_jobs_dispute ON verifier_jobs (project_address, milestone_index,
                                                     dispute_opened_at, seq DESC)
    WHERE dispute_opened_at IS NOT NULL;
