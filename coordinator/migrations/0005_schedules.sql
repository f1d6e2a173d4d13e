-- Schedules (issue 20): recurring and delayed saga starts, and the record of every nominal
-- fire time. A replica claims a due schedule with FOR UPDATE SKIP LOCKED; each firing is an
-- idempotent start whose saga id is derived from (schedule id, nominal time), so a replica
-- killed mid-firing neither loses nor doubles a run.

CREATE TABLE schedules (
    id               text PRIMARY KEY,
    saga_type        text NOT NULL,
    saga_version     integer,                      -- NULL: the latest registered version
    input            jsonb NOT NULL,
    fire_time_field  text,                         -- input field that receives the fire time
    spec             jsonb NOT NULL,               -- ScheduleSpec (cron, intervals, at, calendar)
    overlap          text NOT NULL,
    catchup_window_s double precision NOT NULL,
    jitter_s         double precision NOT NULL DEFAULT 0,
    paused           boolean NOT NULL DEFAULT false,
    note             text NOT NULL DEFAULT '',
    source           text NOT NULL,                -- 'api' or 'code' (declared next to a saga)
    next_fire_at     timestamptz,                  -- next nominal time not handled yet
    due_at           timestamptz,                  -- when a replica should look at it next
    last_saga_id     uuid,                         -- latest run started: overlap reads its status
    buffered         jsonb NOT NULL DEFAULT '[]',  -- nominal times waiting for the previous run
    cancel_requested uuid,                         -- cancel_other: the run asked to roll back
    fired_count      bigint NOT NULL DEFAULT 0,
    skipped_count    bigint NOT NULL DEFAULT 0,
    missed_count     bigint NOT NULL DEFAULT 0,
    last_fired_at    timestamptz,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    created_by       text NOT NULL,
    updated_by       text NOT NULL
);

-- The firing loop: SELECT ... WHERE NOT paused AND due_at <= now ORDER BY due_at ... SKIP LOCKED.
CREATE INDEX schedules_due ON schedules (due_at) WHERE NOT paused AND due_at IS NOT NULL;

-- One row per nominal fire time handled: started, skipped, missed, buffered, failed,
-- triggered or backfilled. The primary key is the exactly-once record an auditor reads.
CREATE TABLE schedule_runs (
    schedule_id text NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    nominal_at  timestamptz NOT NULL,
    outcome     text NOT NULL,
    saga_id     uuid,
    reason      text,
    recorded_at timestamptz NOT NULL,
    started_at  timestamptz,
    actor       text NOT NULL,
    PRIMARY KEY (schedule_id, nominal_at)
);

-- A schedule's latest runs, newest first.
CREATE INDEX schedule_runs_recent ON schedule_runs (schedule_id, recorded_at DESC);
