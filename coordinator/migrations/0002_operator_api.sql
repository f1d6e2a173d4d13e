-- sagaflow coordinator schema, version 2: durable bulk-repair jobs of the operator API.
--
-- A job is the verb, the reason and the filter an operator gave; the sagas it matched are fixed
-- when the job is created (one item row each), so a resumed job repairs exactly those sagas.
-- A runner claims a job with FOR UPDATE SKIP LOCKED and then holds a lease (owner,
-- lease_until) that it renews while it works; a job whose lease ran out (its runner died) is
-- claimed again by any replica, which skips the items already done.

CREATE TABLE repair_jobs (
    id          uuid PRIMARY KEY,
    verb        text NOT NULL,                   -- retry, skip, compensate, cancel, resolve
    reason      text NOT NULL,
    actor       text NOT NULL,                   -- the authenticated principal's name
    filter      jsonb NOT NULL,                  -- the SagaFilter, for the record
    options     jsonb NOT NULL DEFAULT '{}',     -- step, payload, result, status
    status      text NOT NULL DEFAULT 'pending', -- pending, running, done
    total       integer NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at  timestamptz,
    finished_at timestamptz,
    owner       text,                            -- runner holding the lease
    lease_until timestamptz
);

-- Runner claim: unfinished jobs, oldest first.
CREATE INDEX repair_jobs_unfinished ON repair_jobs (created_at) WHERE status <> 'done';

CREATE TABLE repair_job_items (
    job_id      uuid NOT NULL REFERENCES repair_jobs (id) ON DELETE CASCADE,
    position    integer NOT NULL,
    saga_id     uuid NOT NULL,
    outcome     text NOT NULL DEFAULT 'pending', -- pending, applied, refused, not_found, failed
    status      text,                            -- saga status after the repair
    message     text,                            -- why it was refused or failed
    finished_at timestamptz,
    PRIMARY KEY (job_id, position),
    UNIQUE (job_id, saga_id)
);
