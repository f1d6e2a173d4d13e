-- sagaflow coordinator schema, version 13: web UI sessions kept on the server.
--
-- The UI's cookie holds a random session id; this table holds its digest and who signed in, so
-- that sign-out, a removed token and the idle timeout end the session on every API replica.
-- `credential` names the configured credential the session came from (a static token entry's
-- key id, or 'jwt'); a session whose credential is no longer configured is refused and deleted.

CREATE TABLE ui_sessions (
    id_digest    bytea PRIMARY KEY,              -- sha256 of the cookie's session id
    user_name    text NOT NULL,
    role         text NOT NULL,
    groups       text[] NOT NULL DEFAULT '{}',
    credential   text NOT NULL,
    created_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL            -- sign-in + max age, or the JWT's exp
);

-- Purging ended sessions.
CREATE INDEX ui_sessions_expires ON ui_sessions (expires_at);
CREATE INDEX ui_sessions_last_seen ON ui_sessions (last_seen_at);
