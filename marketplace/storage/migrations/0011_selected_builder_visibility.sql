-- The selected worker of an invite-only project sees it (docs/read-models.md, Visibility). A
-- signed-in listing's count finds the invite-only projects a caller may see through its wallets,
-- one index per way in (owner, selected worker, allowlist), combined by a BitmapOr; without this
-- index the selected-worker branch would turn that count into a scan of the whole table.
CREATE INDEX projects_selected_builder
    ON projects (selected_builder_address) WHERE selected_builder_address IS NOT NULL;
