-- Leaderboard boards (docs/leaderboards.md, "Boards"): the completed milestones of indexed
-- projects with a selected worker, the standings aggregated from them per (category, window,
-- worker wallet), and the cursor of the outbox consumer that keeps both current.

-- One row per completed (status 'approved') milestone of an indexed project with a selected
-- worker. Rebuilt per project from milestones + projects + milestone_category_tags.
CREATE TABLE leaderboard_entries (
    project_address text NOT NULL,
    milestone_index integer NOT NULL,
    worker_wallet text NOT NULL,            -- lower-case, the project's selected_builder_address
    payout_usdc numeric NOT NULL,
    completed_at timestamptz NOT NULL,      -- approved_at, else resolved_at
    invite_only boolean NOT NULL,
    categories text[] NOT NULL DEFAULT '{}',  -- the milestone's tag set (empty: untagged)
    PRIMARY KEY (project_address, milestone_index)
);
-- Re-aggregating a wallet's standings reads its entries.
CREATE INDEX leaderboard_entries_worker ON leaderboard_entries (worker_wallet);
-- Boards of several categories (categories && $wanted).
CREATE INDEX leaderboard_entries_categories ON leaderboard_entries USING gin (categories);
-- The windows' decay: entries that left a window since the last refresh.
CREATE INDEX leaderboard_entries_completed ON leaderboard_entries (completed_at);

-- One row per (category, window, worker wallet) with at least one completed milestone.
CREATE TABLE leaderboard_standings (
    category text NOT NULL,                 -- a slug, or '*' for every completed milestone
    time_window text NOT NULL CHECK (time_window IN ('all', '90d', '30d')),
    wallet_address text NOT NULL,
    completed_milestones integer NOT NULL,
    total_payout_usdc numeric NOT NULL,
    projects integer NOT NULL,
    categories text[] NOT NULL,             -- union of the categories of those milestones
    last_completed_at timestamptz NOT NULL,
    PRIMARY KEY (category, time_window, wallet_address)
);
-- One index per sort: a page is one index range (ties: wallet address ascending).
CREATE INDEX leaderboard_standings_payout
    ON leaderboard_standings (category, time_window, total_payout_usdc DESC, wallet_address);
CREATE INDEX leaderboard_standings_milestones
    ON leaderboard_standings (category, time_window, completed_milestones DESC, wallet_address);
CREATE INDEX leaderboard_standings_recent
    ON leaderboard_standings (category, time_window, last_completed_at DESC, wallet_address);
-- Re-aggregating a wallet deletes its rows of every category and window.
CREATE INDEX leaderboard_standings_wallet ON leaderboard_standings (wallet_address);

-- How far the boards consumer has read the outbox (one row), and when it last moved the
-- 90d/30d windows forward.
CREATE TABLE leaderboard_consumer_cursor (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    last_event_id bigint NOT NULL DEFAULT 0 CHECK (last_event_id >= 0),
    windows_refreshed_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
