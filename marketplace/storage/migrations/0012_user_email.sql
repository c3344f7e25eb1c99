-- The e-mail address of the user's newest session token, when that token says it is verified
-- (NULL otherwise): where notifications may be sent. Written with the e-mail flag by the session
-- recorder (marketplace/identity/session_recorder.py); the bounds match what the claim parser
-- accepts (marketplace/auth.py), so a recorded batch can never fail this check.
ALTER TABLE users
    ADD COLUMN email text CHECK (email IS NULL OR char_length(email) BETWEEN 3 AND 320);
