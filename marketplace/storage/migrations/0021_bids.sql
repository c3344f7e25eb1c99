-- On-chain bids (issue 27): the bid logs the indexer decoded (BidPosted, BidUpdated,
-- BidCancelled, BidSelected, BondReclaimed), append-only and keyed by where they were logged,
-- and the current bid per (project, bidder) derived from them (docs/read-models.md, "Bids").
-- A reorg deletes the logs above the fork block and derives the affected projects' bids again,
-- so `bids` is always exactly the fold of `bid_events`. Both go with their project (a reorg that
-- drops the project's creation, a registry change).

CREATE TABLE bid_events (
    project_address text NOT NULL REFERENCES projects (project_address) ON DELETE CASCADE,
    block_number bigint NOT NULL,
    log_index integer NOT NULL,
    kind text NOT NULL
        CHECK (kind IN ('posted', 'updated', 'cancelled', 'selected', 'bond_reclaimed')),
    bidder_address text NOT NULL CHECK (bidder_address ~ '^0x[0-9a-f]{40}$'),
    block_time timestamptz NOT NULL,
    -- posted, updated, selected: the bid as logged (USDC in base units, exact).
    bid_hash text CHECK (bid_hash ~ '^0x[0-9a-f]{64}$'),
    payouts numeric(78, 0)[],
    durations_seconds bigint[],
    total_payout numeric(78, 0),
    -- posted: the bond taken; cancelled: the bond refunded; bond_reclaimed: the amount.
    amount numeric(78, 0),
    PRIMARY KEY (project_address, block_number, log_index)
);
-- A reorg deletes the logs above its fork block.
CREATE INDEX bid_events_block ON bid_events (block_number);

CREATE TABLE bids (
    project_address text NOT NULL REFERENCES projects (project_address) ON DELETE CASCADE,
    bidder_address text NOT NULL CHECK (bidder_address ~ '^0x[0-9a-f]{40}$'),
    status text NOT NULL
        CHECK (status IN ('active', 'cancelled', 'selected', 'not_selected', 'bond_reclaimed')),
    bid_hash text NOT NULL CHECK (bid_hash ~ '^0x[0-9a-f]{64}$'),
    -- USDC in whole-token display units (base units / 10^6, rounded down), like `milestones`.
    payouts_usdc numeric(78, 0)[] NOT NULL,
    durations_seconds bigint[] NOT NULL,
    total_payout_usdc numeric(78, 0) NOT NULL,
    bond_usdc numeric(78, 0) NOT NULL,
    -- Block times of the latest BidPosted and of the latest change.
    posted_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    -- Where the bidder's first BidPosted was logged: the listing order (first-bid order).
    first_block bigint NOT NULL,
    first_log_index integer NOT NULL,
    -- The last log that changed this row.
    last_block bigint NOT NULL,
    last_log_index integer NOT NULL,
    -- Also what the direct-message rule probes: (project, bidder wallet).
    PRIMARY KEY (project_address, bidder_address)
);
CREATE UNIQUE INDEX bids_listing_order ON bids (project_address, first_block, first_log_index);
