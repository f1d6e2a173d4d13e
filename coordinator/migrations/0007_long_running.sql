-- Signals sent to sagas (coordinator.flow.WaitForSignal), one row per (saga, signal id).
--
-- The row is inserted in the transaction that applies the signal, with the saga row locked:
-- a re-sent signal (same id) conflicts and is applied once. The core keeps a signal that
-- came before its wait in the saga's state; when a wait takes it, the same transaction marks
-- the row consumed (consumed_at, consumed_by: the wait's node key). Rows are an audit trail:
-- who sent what, when, and which wait took it.
CREATE TABLE saga_signals (
    saga_id     uuid NOT NULL,
    signal_id   text NOT NULL,
    name        text NOT NULL,
    payload     json NOT NULL,
    sender      text NOT NULL,                   -- api:<principal>, kafka, cli, ...
    received_at timestamptz NOT NULL,
    consumed_at timestamptz,
    consumed_by text,
    PRIMARY KEY (saga_id, signal_id)
);

-- Deliberate waits, for stuck detection without reading JSON (set with every snapshot, like
-- the activity columns of 0004; not indexed, so updates stay HOT): `waiting` when the saga's
-- only progress is a sleep or a wait for a signal (no command in flight), and `wait_due_at`
-- the latest time one of those waits is due to end (NULL: a wait for a signal with no
-- timeout). Sagas in flight before this migration have no such waits: the defaults hold.
ALTER TABLE sagas
    ADD COLUMN waiting boolean NOT NULL DEFAULT false,
    ADD COLUMN wait_due_at timestamptz;
