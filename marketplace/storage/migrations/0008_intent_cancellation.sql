-- A create intent can be withdrawn by its owner (DELETE /v1/projects/create-intents/{intentId});
-- a claim naming it then answers project_create_intent_not_pending.
ALTER TABLE project_create_intents ADD COLUMN cancelled_at timestamptz;
ALTER TABLE project_create_intents
    ADD CONSTRAINT project_create_intents_cancelled_at
    CHECK ((status = 'cancelled') = (cancelled_at IS NOT NULL));
