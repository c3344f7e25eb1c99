-- Messaging and moderation (docs/messaging.md): project chat and direct messages in one table,
-- DM threads (one per pair of users), blocks and mutes, reports with their admin workflow,
-- offenses, suspensions and the moderation audit log. Written in the transaction of the change
-- together with its outbox events and audit entries.

-- One thread per unordered pair of users: the pair is stored ordered (user_low < user_high) so
-- the UNIQUE constraint, not a read, decides which concurrent first message creates it.
-- Every message of a thread takes the next value of this sequence as the thread's
-- activity_seq: unique, so it is a keyset position, and increasing in send order.
CREATE SEQUENCE dm_threads_activity_seq AS bigint;
CREATE TABLE dm_threads (
    thread_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_low uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    user_high uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_message_at timestamptz NOT NULL DEFAULT now(),
    -- Keyset position of the thread lists (newest activity first), bumped with last_message_at.
    activity_seq bigint NOT NULL DEFAULT nextval('dm_threads_activity_seq'),
    CONSTRAINT dm_threads_ordered_pair CHECK (user_low < user_high),
    CONSTRAINT dm_threads_one_per_pair UNIQUE (user_low, user_high)
);
ALTER SEQUENCE dm_threads_activity_seq OWNED BY dm_threads.activity_seq;
CREATE INDEX dm_threads_by_low ON dm_threads (user_low, activity_seq DESC);
CREATE INDEX dm_threads_by_high ON dm_threads (user_high, activity_seq DESC);

-- `seq` orders messages (newest first in lists) and is the cursor position; ids are uuids.
-- There is no foreign key to `projects`, as for the off-chain records: a reorg may drop a project
-- and bring it back, and its chat must survive that.
CREATE TABLE messages (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    kind text NOT NULL CHECK (kind IN ('project_chat', 'direct')),
    project_address text CHECK (project_address ~ '^0x[0-9a-f]{40}$'),
    thread_id uuid REFERENCES dm_threads (thread_id) ON DELETE CASCADE,
    sender_user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    sender_wallet_address text CHECK (sender_wallet_address ~ '^0x[0-9a-f]{40}$'),
    recipient_user_id uuid REFERENCES users (user_id) ON DELETE CASCADE,
    body text NOT NULL CHECK (char_length(body) BETWEEN 1 AND 4000),
    body_status text NOT NULL DEFAULT 'visible'
        CHECK (body_status IN ('visible', 'reported', 'removed')),
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT messages_kind_fields CHECK (
        (kind = 'project_chat' AND project_address IS NOT NULL AND sender_wallet_address IS NOT NULL
            AND thread_id IS NULL AND recipient_user_id IS NULL)
        OR (kind = 'direct' AND thread_id IS NOT NULL AND recipient_user_id IS NOT NULL
            AND project_address IS NULL AND sender_wallet_address IS NULL)
    )
);
CREATE INDEX messages_project_chat ON messages (project_address, seq DESC)
    WHERE kind = 'project_chat';
CREATE INDEX messages_thread ON messages (thread_id, seq DESC) WHERE kind = 'direct';
CREATE INDEX messages_sender ON messages (sender_user_id);

-- Blocks and mutes: directed (user_id blocks/mutes the other), idempotent by primary key.
CREATE TABLE user_blocks (
    user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    blocked_user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, blocked_user_id),
    CONSTRAINT user_blocks_not_self CHECK (user_id <> blocked_user_id)
);
CREATE INDEX user_blocks_blocked ON user_blocks (blocked_user_id);

CREATE TABLE user_mutes (
    user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    muted_user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, muted_user_id),
    CONSTRAINT user_mutes_not_self CHECK (user_id <> muted_user_id)
);

-- Reports: one per (message, reporter); a second report by the same reporter returns the first.
CREATE TABLE message_reports (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    message_id uuid NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    reporter_user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    reason text NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 1000),
    status text NOT NULL DEFAULT 'open'
        CHECK (status IN ('open', 'reviewing', 'actioned', 'dismissed')),
    note text CHECK (char_length(note) <= 2000),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    resolved_by_user_id uuid REFERENCES users (user_id) ON DELETE SET NULL,
    CONSTRAINT message_reports_one_per_reporter UNIQUE (message_id, reporter_user_id)
);
CREATE INDEX message_reports_by_status ON message_reports (status, seq DESC);
CREATE INDEX message_reports_open_by_message ON message_reports (message_id)
    WHERE status IN ('open', 'reviewing');

-- Offenses: a send refused by the term filter. `id` is chosen by the frontend before it asks the
-- moderation counter actor to record it, so a retried call (the actor died mid-call) records the
-- offense once. `seq` orders a user's offense list (newest first) and is its cursor position.
CREATE TABLE moderation_offenses (
    id uuid PRIMARY KEY,
    seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    -- The matched term (as written in its list), never the message body.
    term text NOT NULL CHECK (char_length(term) BETWEEN 1 AND 200),
    context text NOT NULL CHECK (context IN ('project_chat', 'direct')),
    created_at timestamptz NOT NULL DEFAULT now()
);
-- The window count (offenses of a user after a time) and the offense list.
CREATE INDEX moderation_offenses_by_user ON moderation_offenses (user_id, created_at DESC);
CREATE INDEX moderation_offenses_list ON moderation_offenses (user_id, seq DESC);

-- Suspensions of sending. Active: lifted_at IS NULL AND ends_at > now(). Each is started by the
-- offense that reached the threshold (`offense_id`, UNIQUE: a retried offense cannot start a
-- second one), at that offense's time.
CREATE TABLE moderation_suspensions (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    offense_id uuid NOT NULL UNIQUE REFERENCES moderation_offenses (id) ON DELETE CASCADE,
    starts_at timestamptz NOT NULL DEFAULT now(),
    ends_at timestamptz NOT NULL,
    lifted_at timestamptz,
    lifted_by_user_id uuid REFERENCES users (user_id) ON DELETE SET NULL,
    CONSTRAINT moderation_suspensions_span CHECK (ends_at > starts_at),
    CONSTRAINT moderation_suspensions_lift CHECK (lifted_at IS NULL OR lifted_at >= starts_at)
);
CREATE INDEX moderation_suspensions_by_user ON moderation_suspensions (user_id, starts_at DESC);
-- The check every send makes (one index entry per unlifted suspension of the user).
CREATE INDEX moderation_suspensions_unlifted ON moderation_suspensions (user_id, ends_at DESC)
    WHERE lifted_at IS NULL;

-- The audit log: one entry per offense, suspension, lift, report and report transition, written
-- in the change's transaction. `actor_user_id` is NULL for the system (the term filter).
CREATE TABLE moderation_audit (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    subject_user_id uuid NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    actor_user_id uuid REFERENCES users (user_id) ON DELETE SET NULL,
    action text NOT NULL CHECK (action IN (
        'offense', 'suspension', 'suspension_lifted', 'report_created', 'report_status_changed'
    )),
    reason text CHECK (char_length(reason) <= 2000),
    details jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(details) = 'object'),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX moderation_audit_by_subject ON moderation_audit (subject_user_id, seq DESC);
