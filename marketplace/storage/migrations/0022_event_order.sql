-- Commit order without a lock (issue 28; docs/events.md, "Ordering and delivery").
--
-- Producers insert events without any lock: `id` is only the insertion key, in the order the
-- rows were inserted, not committed. Each row records its top-level transaction id (`xid`). A
-- positioner (the active relay, or a durable consumer; one at a time) gives committed events
-- without a position their `position` in one statement, whole transactions at a time, in
-- (xid, id) order: a transaction that committed before another began has the smaller xid. The
-- position is what every consumer sees as the event's id: positions only ever grow, and every
-- position a reader can see belongs to a committed event, so "after position N" stays a
-- complete cursor. A position is max(id, previous position + 1): equal to the id whenever
-- events commit in id order, which keeps every id handed out before this migration valid.
ALTER TABLE events
    ADD COLUMN position bigint,
    ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
UPDATE events SET position = id;
-- Partial: a producer's insert (no position yet) adds no entry here.
CREATE UNIQUE INDEX events_position_key ON events (position) WHERE position IS NOT NULL;
-- What the positioner looks for; small (only committed-but-unpositioned and in-flight rows).
CREATE INDEX events_unpositioned ON events (xid, id) WHERE position IS NULL;

-- The newest position handed out (one row); kept apart from the events so that retention
-- cannot make positions go back.
CREATE TABLE event_positions (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    last_position bigint NOT NULL CHECK (last_position >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO event_positions (singleton, last_position)
SELECT true, coalesce(max(id), 0) FROM events;

-- Positions committed events, at most `max_transactions` transactions' worth, if no other
-- positioner is at work (`lock_key`: pg_try_advisory_xact_lock, held to the end of the calling
-- transaction, so positioners commit one after the other and a reader never sees a position
-- without every smaller one; `wait`: wait for the one at work instead, for a reader that needs
-- every event committed before it asked, such as the read cache's freshness probe). Each statement of a plpgsql function takes a new snapshot (READ
-- COMMITTED), so the UPDATE sees what committed up to the moment the lock was taken. Returns
-- the number of events positioned, or -1 when another positioner held the lock; NOTIFYs
-- `wake` (at commit) when it positioned any.
CREATE FUNCTION events_position(
    max_transactions integer, lock_key bigint, wake text, wait boolean DEFAULT false
)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    last bigint;
    assigned integer;
    newest bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM events WHERE position IS NULL) THEN
        RETURN 0;
    END IF;
    IF wait THEN
        PERFORM pg_advisory_xact_lock(lock_key);
    ELSIF NOT pg_try_advisory_xact_lock(lock_key) THEN
        RETURN -1;
    END IF;
    SELECT coalesce(max(p.last_position), 0) INTO last FROM event_positions p;
    WITH transactions AS (
        SELECT DISTINCT e.xid FROM events e
        WHERE e.position IS NULL
        ORDER BY e.xid
        LIMIT max_transactions
    ),
    pending AS (
        SELECT e.id, row_number() OVER (ORDER BY e.xid, e.id) AS n
        FROM events e JOIN transactions t ON t.xid = e.xid
        WHERE e.position IS NULL
    ),
    -- position_n = max(id_n, position_(n-1) + 1), position_0 = last, as a running max.
    numbered AS (
        SELECT p.id, p.n + greatest(last, max(p.id - p.n) OVER (ORDER BY p.n)) AS position
        FROM pending p
    ),
    done AS (
        UPDATE events e SET position = numbered.position
        FROM numbered
        WHERE e.id = numbered.id AND e.position IS NULL
        RETURNING e.position
    )
    SELECT count(*), max(done.position) INTO assigned, newest FROM done;
    IF assigned > 0 THEN
        INSERT INTO event_positions AS p (singleton, last_position) VALUES (true, newest)
        ON CONFLICT (singleton) DO UPDATE SET last_position = EXCLUDED.last_position,
                                              updated_at = now();
        PERFORM pg_notify(wake, '');
    END IF;
    RETURN assigned;
END
$$;

-- Waits until the positioner at work (if any) has committed, holding nothing afterwards (a
-- session lock taken and given back at once, which waits for the transaction-level one).
CREATE FUNCTION events_await_positioner(lock_key bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_lock_shared(lock_key);
    PERFORM pg_advisory_unlock_shared(lock_key);
END
$$;

-- Durable consumers' cursors, one row per consumer: retention never deletes an event a
-- consumer has not read (up to MARKETPLACE_EVENTS_RETENTION_MAX_HOURS).
CREATE VIEW event_consumer_cursors (consumer, position, updated_at) AS
SELECT 'notifications', last_event_id, updated_at FROM notification_consumer_cursor
UNION ALL
SELECT 'leaderboards', last_event_id, updated_at FROM leaderboard_consumer_cursor;

-- Unread events the retention sweep deleted past MARKETPLACE_EVENTS_RETENTION_MAX_HOURS: the
-- consumer skipped positions after_position < p <= through_position (`events` of its types or
-- not); never silent.
CREATE TABLE event_consumer_skips (
    id bigserial PRIMARY KEY,
    consumer text NOT NULL,
    after_position bigint NOT NULL,
    through_position bigint NOT NULL CHECK (through_position > after_position),
    events bigint NOT NULL CHECK (events > 0),
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX event_consumer_skips_consumer ON event_consumer_skips (consumer, id);
