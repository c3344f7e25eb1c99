-- Idempotency keys of POST requests that create something (docs/api.md, "Retries and
-- idempotency"; marketplace/http/idempotency.py).

-- One row per (user, key). A request claims its key by inserting the row with `locked_until`
-- set and no response; when it ends with a response worth answering again, the row gets that
-- response and `locked_until` goes back to NULL; when it does not (a 5xx, a refusal before the
-- handler ran), the row is deleted and the key is free again. A claim whose process died is
-- taken over once `locked_until` has passed. Rows are swept once `expires_at` has passed.
-- No foreign key to users: the claim is made before the caller's users row is written.
-- The key itself is not stored, only its SHA-256, and a stored response body is encrypted with
-- a key derived from the Idempotency-Key (AES-256-GCM): a create response may hold a secret
-- shown once (a new API key), and this table must not hand it to whoever reads the database.
CREATE TABLE idempotency_keys (
    user_id uuid NOT NULL,
    key_digest bytea NOT NULL CHECK (octet_length(key_digest) = 32),
    -- SHA-256 of the method, the path with its query and the body as sent.
    request_hash bytea NOT NULL CHECK (octet_length(request_hash) = 32),
    route text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    -- Set while the first request runs; NULL once its response is stored. `claim_token` names
    -- the request that holds the claim: only it may store the response or release the key.
    locked_until timestamptz,
    claim_token uuid NOT NULL,
    response_status smallint CHECK (response_status BETWEEN 200 AND 499),
    response_headers jsonb,
    -- 12-byte nonce, then the AES-GCM ciphertext and tag.
    response_body bytea,
    PRIMARY KEY (user_id, key_digest),
    CHECK ((locked_until IS NULL) = (response_status IS NOT NULL)),
    CHECK ((response_status IS NULL) = (response_body IS NULL))
);

CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
