-- Users are created on their first authenticated request; `sub` of the session JWT is the id.
CREATE TABLE users (
    user_id uuid PRIMARY KEY,
    email_verified boolean NOT NULL DEFAULT false,
    moderation_admin boolean NOT NULL DEFAULT false,
    verifier_admin boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
