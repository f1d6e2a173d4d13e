-- sagaflow coordinator schema, version 1.
--
-- Index policy: the saga row is rewritten on every state change, so only immutable columns
-- (plus the rarely changing status, in one partial index) are indexed; this keeps those updates
-- HOT. "What is due" lives in the narrow timers table, never in an index on the saga row.
-- History and timers carry no foreign key to sagas: FK checks would take KEY SHARE locks on the
-- saga row from every insert (MultiXact pressure) and the saga row is locked by the writer anyway.
-- Snapshots and events are `json`, not `jsonb`: jsonb reorders object keys, and the state's
-- step mapping is ordered, so only the exact text guarantees replay == snapshot. Cast to jsonb
-- to query into them.

CREATE TABLE sagas (
    id               uuid PRIMARY KEY,           -- apply(): SELECT ... WHERE id = $1 FOR NO KEY UPDATE
    saga_type        text NOT NULL,
    saga_version     integer NOT NULL,
    status           text NOT NULL,
    snapshot         json NOT NULL,              -- SagaState.to_json() after history_seq
    input_hash       bytea NOT NULL,             -- sha256 of the canonical validated input
    trace_context    jsonb NOT NULL DEFAULT '{}'::jsonb,  -- W3C traceparent/tracestate
    history_seq      bigint NOT NULL,            -- seq of the last saga_history row
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    last_progress_at timestamptz NOT NULL        -- last change that was not an ignored event
) WITH (fillfactor = 80);

-- list_sagas(saga_type=..., [saga_version=...]) newest first with keyset pagination.
CREATE INDEX sagas_type_created ON sagas (saga_type, created_at DESC, id DESC);
-- list_sagas() without a type filter, and age filters (created_before / created_after).
CREATE INDEX sagas_created ON sagas (created_at DESC, id DESC);
-- The dead-saga queue: list_sagas(status='dead'). Partial, so it holds only parked sagas and an
-- update leaves it alone unless the status itself changes.
CREATE INDEX sagas_dead ON sagas (created_at DESC, id DESC) WHERE status = 'dead';

-- Append-only event log; replay(history) rebuilds the snapshot. Rows are never updated
-- (a trigger enforces it); compaction may only move rows behind a checkpoint to the archive.
CREATE TABLE saga_history (
    saga_id     uuid NOT NULL,
    seq         bigint NOT NULL,
    event       json NOT NULL,                   -- Event.to_json()
    recorded_at timestamptz NOT NULL,            -- the `now` given to advance()
    actor       text NOT NULL,                   -- who caused it: api, worker, timer, operator:<name>
    annotation  jsonb,                           -- the decision's history entries (what happened)
    ignored     text,                            -- why the core ignored the event, else NULL
    PRIMARY KEY (saga_id, seq)                   -- get_history(), replay from a checkpoint
);

CREATE TABLE saga_history_archive (LIKE saga_history INCLUDING ALL);

CREATE FUNCTION saga_history_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'saga history is append-only (% on %)', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER saga_history_no_update BEFORE UPDATE ON saga_history
    FOR EACH ROW EXECUTE FUNCTION saga_history_immutable();
CREATE TRIGGER saga_history_archive_no_update BEFORE UPDATE ON saga_history_archive
    FOR EACH ROW EXECUTE FUNCTION saga_history_immutable();

-- Compaction checkpoints: the state after history row `seq`, so replay can start there.
CREATE TABLE saga_snapshots (
    saga_id    uuid NOT NULL,
    seq        bigint NOT NULL,
    state      json NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (saga_id, seq)                   -- latest checkpoint: ORDER BY seq DESC LIMIT 1
);

-- Durable timers (retry backoff, deadlines, sleeps). Insert and delete only; a narrow queue table.
CREATE TABLE timers (
    id         text PRIMARY KEY,                 -- deterministic id: insert ON CONFLICT DO NOTHING,
                                                 -- cancel by id
    saga_id    uuid NOT NULL,
    due_at     timestamptz NOT NULL,
    step       text,
    phase      text,
    attempt    integer,
    kind       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.05,
        autovacuum_vacuum_threshold = 50);

-- Timer claim: WHERE due_at <= $now ORDER BY due_at LIMIT n FOR UPDATE SKIP LOCKED, and the
-- worker's "when is the next timer due" wake-up query (min(due_at)).
CREATE INDEX timers_due ON timers (due_at);
-- Dropping every timer of a saga that reached a terminal status, and listing a saga's timers.
CREATE INDEX timers_saga ON timers (saga_id);

-- Dead letters (undecodable replies, replies for unknown sagas) go to the shared
-- sagaflow_dead_letters table of participant_sdk.dead_letters, installed by the runner.
