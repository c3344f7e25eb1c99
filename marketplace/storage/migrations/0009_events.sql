-- Change events (transactional outbox, docs/events.md). Producers insert their rows in the same
-- transaction as the change, last, under pg_advisory_xact_lock(<events key>), so id order is
-- commit order: a reader that has seen id N will never later find a committed id below N.
CREATE TABLE events (
    id bigserial PRIMARY KEY,
    type text NOT NULL CHECK (type ~ '^[a-z][a-z_]*(\.[a-z][a-z_]*)+$'),
    subject text NOT NULL CHECK (char_length(subject) BETWEEN 1 AND 200),
    payload jsonb NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- How far the relay has copied events to the Redis Stream (one row; a missing row means 0).
CREATE TABLE event_relay_cursor (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    last_relayed_id bigint NOT NULL CHECK (last_relayed_id >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO event_relay_cursor (singleton, last_relayed_id) VALUES (true, 0);
