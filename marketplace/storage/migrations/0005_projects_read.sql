-- Project read API (marketplace/storage/repositories/projects.py): open projects newest first.
-- Anonymous listings walk it in order, and the open part of every listing count is an
-- index-only scan of it rather than a scan of the whole table.
CREATE INDEX projects_open_order
    ON projects (created_block DESC, created_log_index DESC) WHERE bidding_access = 'open';
