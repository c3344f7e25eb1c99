-- The `iat` of the newest session token whose flags were stored for the user. Frontends record
-- the flags they see, in any order; only a token at least as new as the stored one may change
-- them, so a stale frontend cache can never roll the flags back.
ALTER TABLE users ADD COLUMN session_iat bigint;
