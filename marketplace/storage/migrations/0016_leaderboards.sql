-- Leaderboards (docs/leaderboards.md): categories, and the owner's category tags of completed
-- milestones with every revision kept.
--
-- A board is derived from these and the indexed read model, never stored beside them: the
-- completed milestones (milestones.status = 'approved') joined with their tag set on
-- (project_address, milestone_index), filtered by `categories && $wanted` (GIN index), ranked by
-- the project's selected worker wallet. Tags are off-chain records of a milestone, so they carry
-- no foreign key to the read model: a reorg that removes a project (or an approval) must not
-- destroy what the owner said; the join with the read model decides what counts.

CREATE TABLE leaderboard_categories (
    slug text PRIMARY KEY
        CHECK (slug ~ '^[a-z0-9]+(?:-[a-z0-9]+)*$' AND char_length(slug) <= 64),
    display_name text NOT NULL CHECK (char_length(display_name) BETWEEN 1 AND 100),
    description text CHECK (description IS NULL OR char_length(description) BETWEEN 1 AND 500),
    sort_order integer NOT NULL CHECK (sort_order >= 1),
    is_active boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX leaderboard_categories_order ON leaderboard_categories (sort_order, slug);

-- seed:begin (the shipped categories; tests re-apply exactly this block after their TRUNCATE)
INSERT INTO leaderboard_categories (slug, display_name, description, sort_order) VALUES
    ('smart-contracts', 'Smart contracts', 'Solidity and other on-chain code, audits of it', 1),
    ('frontend', 'Frontend', 'Web and mobile user interfaces', 2),
    ('backend', 'Backend', 'Servers, APIs, databases and indexers', 3),
    ('design', 'Design', 'Product, interaction and visual design', 4),
    ('data', 'Data', 'Data engineering, analytics and dashboards', 5),
    ('devops', 'DevOps', 'Infrastructure, deployment and operations', 6),
    ('security', 'Security', 'Security reviews, threat models and hardening', 7),
    ('ai-agents', 'AI agents', 'Autonomous agents and machine-learning systems', 8),
    ('docs', 'Documentation', 'Technical writing and documentation', 9)
ON CONFLICT (slug) DO NOTHING;
-- seed:end

-- The current tag set of one milestone. `revision` is the number of the newest revision row; the
-- upsert locks this row (SELECT ... FOR UPDATE) before writing the next one, so concurrent
-- upserts of one milestone serialise and none loses a revision.
CREATE TABLE milestone_category_tags (
    project_address text NOT NULL CHECK (project_address ~ '^0x[0-9a-f]{40}$'),
    milestone_index integer NOT NULL CHECK (milestone_index BETWEEN 0 AND 65535),
    owner_wallet_address text NOT NULL CHECK (owner_wallet_address ~ '^0x[0-9a-f]{40}$'),
    categories text[] NOT NULL CHECK (cardinality(categories) BETWEEN 1 AND 5),
    revision integer NOT NULL CHECK (revision >= 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_address, milestone_index)
);
-- Boards filtered by category: `categories && $wanted`.
CREATE INDEX milestone_category_tags_categories
    ON milestone_category_tags USING gin (categories);

-- Every change of a tag set, newest last. The UNIQUE (project, milestone, revision) is the
-- second guard against a lost or duplicated revision.
CREATE TABLE milestone_category_tag_revisions (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    project_address text NOT NULL CHECK (project_address ~ '^0x[0-9a-f]{40}$'),
    milestone_index integer NOT NULL CHECK (milestone_index BETWEEN 0 AND 65535),
    revision integer NOT NULL CHECK (revision >= 1),
    owner_wallet_address text NOT NULL CHECK (owner_wallet_address ~ '^0x[0-9a-f]{40}$'),
    categories text[] NOT NULL CHECK (cardinality(categories) BETWEEN 1 AND 5),
    -- The tag set this revision replaced; empty for revision 1.
    previous_categories text[] NOT NULL DEFAULT '{}',
    changed_by uuid REFERENCES users (user_id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT milestone_category_tag_revisions_once
        UNIQUE (project_address, milestone_index, revision)
);
-- A milestone's revisions, newest first (keyset on seq).
CREATE INDEX milestone_category_tag_revisions_milestone
    ON milestone_category_tag_revisions (project_address, milestone_index, seq DESC);
