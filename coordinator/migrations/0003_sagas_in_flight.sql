-- In-flight sagas, for the observability scan (sagaflow_sagas_in_flight gauge) and stuck
-- detection (coordinator.observability.stuck.list_stuck, GET /sagas?stuck=true).
--
-- Both queries must not read every saga ever run: completed sagas pile up forever, in-flight
-- ones stay few. This partial index holds only running/compensating/dead rows, so a scan costs
-- O(sagas in flight). Like sagas_dead it keeps the saga-row updates HOT: its key (saga_type)
-- never changes, and its predicate column (status) changes only a few times per saga, while
-- the columns rewritten on every change (snapshot, last_progress_at, history_seq, updated_at)
-- are deliberately NOT indexed: an index on last_progress_at would make every update non-HOT
-- and touch all four indexes of the table. The time filter runs on the few candidates instead.
CREATE INDEX sagas_in_flight ON sagas (saga_type, status)
    WHERE status IN ('running', 'compensating', 'dead');
