-- Child sagas (coordinator.flow.ChildSaga) and deliveries between sagas.
--
-- parent_id never changes after the insert, so indexing it keeps the saga-row updates HOT;
-- the index is partial: top-level sagas (most rows) are not in it.
ALTER TABLE sagas ADD COLUMN parent_id uuid;
CREATE INDEX sagas_parent ON sagas (parent_id, created_at) WHERE parent_id IS NOT NULL;

-- A delivery is an event for another saga (a parent's confirm or cancel to its child, a
-- child's answer to its parent), written in the sender's transaction and applied in the
-- receiver's own, by the timer loop: one change never locks two saga rows, so parents and
-- children finishing and rolling back at once cannot deadlock. A delivery is a timer due at
-- once whose `event` holds the event to apply (kind 'deliver'); timers of a saga that ended
-- are cleared, deliveries never are (an answer may still be due to a parent).
ALTER TABLE timers ADD COLUMN event json;
