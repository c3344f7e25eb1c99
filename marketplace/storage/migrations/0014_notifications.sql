-- Notifications (docs/notifications.md): lifecycle e-mails made from the change-event outbox.

-- One row per (outbox event, recipient), written by the notifications consumer in the same
-- transaction as the job that sends it (status queued) or with its final status at once
-- (suppressed, rate_limited). `event_id` is not a foreign key: relayed events may be swept by
-- the outbox's retention while their deliveries stay.
CREATE TABLE notification_deliveries (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    event_id bigint NOT NULL,
    event_type text NOT NULL CHECK (
        event_type IN ('bid_draft', 'dispute_evidence', 'project_chat_message', 'direct_message')
    ),
    recipient_user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    channel text NOT NULL DEFAULT 'email' CHECK (channel = 'email'),
    status text NOT NULL
        CHECK (status IN ('queued', 'sent', 'failed', 'rate_limited', 'suppressed')),
    -- Why a delivery was not sent (suppressed: no_email, muted, blocked, unsubscribed).
    reason text CHECK (reason IS NULL OR reason ~ '^[a-z_]{1,40}$'),
    attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error text CHECK (last_error IS NULL OR char_length(last_error) <= 2000),
    subject text NOT NULL CHECK (char_length(subject) BETWEEN 1 AND 300),
    -- The address the e-mail goes to (NULL when there is none: suppressed, no_email).
    email text CHECK (email IS NULL OR char_length(email) BETWEEN 3 AND 320),
    -- The job on the `notifications` queue that sends it (queued, sent, failed).
    job_id bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    sent_at timestamptz,
    CONSTRAINT notification_deliveries_once UNIQUE (event_id, recipient_user_id),
    CONSTRAINT notification_deliveries_sent CHECK ((status = 'sent') = (sent_at IS NOT NULL))
);
-- A recipient's log, newest first (keyset on seq).
CREATE INDEX notification_deliveries_recipient
    ON notification_deliveries (recipient_user_id, seq DESC);
-- The rate limiter's rebuild: a recipient's deliveries of one type that count against the limit.
CREATE INDEX notification_deliveries_window
    ON notification_deliveries (recipient_user_id, event_type, created_at DESC)
    WHERE status IN ('queued', 'sent', 'failed');

-- Per user and event type: e-mail on (default, no row) or off (unsubscribed).
CREATE TABLE notification_preferences (
    user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    event_type text NOT NULL CHECK (
        event_type IN ('bid_draft', 'dispute_evidence', 'project_chat_message', 'direct_message')
    ),
    email boolean NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, event_type)
);

-- How far the notifications consumer has read the outbox (one row): it resumes after this id.
CREATE TABLE notification_consumer_cursor (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    last_event_id bigint NOT NULL DEFAULT 0 CHECK (last_event_id >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
