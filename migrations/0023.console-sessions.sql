-- Console sessions kept on the server (issue 44): the cookie holds only an opaque random id;
-- signing out, removing a person from CONSOLE_USERS or `router-backend console sessions end`
-- ends a session at once in every process. The id is stored as a keyed hash (HMAC with
-- CONSOLE_SECRET), never as it is.
CREATE TABLE console_sessions (
    id_hash      bytea        PRIMARY KEY,
    name         text         NOT NULL,
    credential   text         NOT NULL,  -- fingerprint of the credential it was made with
    csrf         text         NOT NULL,
    address      text         NOT NULL,
    started_at   timestamptz  NOT NULL DEFAULT now(),
    last_seen_at timestamptz  NOT NULL DEFAULT now(),
    expires_at   timestamptz  NOT NULL
);
CREATE INDEX console_sessions_name_idx ON console_sessions (name);
