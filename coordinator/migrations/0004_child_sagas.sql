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

-- What stuck detection needs, kept in columns the writer sets with every snapshot, so the
-- scan of in-flight sagas reads no JSON: the stage, the active step keys, and the active
-- step with the most attempts in its current phase (its phase and that attempt number).
-- None is indexed, so updates stay HOT. A finished saga's stage is 'done' (the default);
-- the rows in flight are filled in from their snapshots once, here.
ALTER TABLE sagas
    ADD COLUMN stage text NOT NULL DEFAULT 'done',
    ADD COLUMN active_steps text[] NOT NULL DEFAULT '{}',
    ADD COLUMN busiest_step text,
    ADD COLUMN busiest_phase text,
    ADD COLUMN busiest_attempt integer NOT NULL DEFAULT 0;

UPDATE sagas AS s
SET stage = coalesce(s.snapshot->>'stage', 'forward'),
    active_steps = coalesce(cur.steps, '{}'),
    busiest_step = cur.step,
    busiest_phase = cur.step_phase,
    busiest_attempt = coalesce(cur.attempt, 0)
FROM sagas AS f
LEFT JOIN LATERAL (
    SELECT (array_agg(a.key ORDER BY a.attempt DESC, a.key))[1] AS step,
           (array_agg(a.phase ORDER BY a.attempt DESC, a.key))[1] AS step_phase,
           max(a.attempt) AS attempt,
           array_agg(a.key ORDER BY a.key) AS steps
    FROM (
        SELECT st.key, st.value->>'phase' AS phase,
               coalesce((st.value->'attempts'->>(CASE st.value->>'phase'
                   WHEN 'trying' THEN 'try' WHEN 'confirming' THEN 'confirm'
                   WHEN 'cancelling' THEN 'cancel' WHEN 'executing' THEN 'action'
                   ELSE 'compensate' END))::int, 0) AS attempt
        FROM jsonb_each((f.snapshot->'steps')::jsonb) AS st
        WHERE st.value->>'phase' IN ('trying', 'confirming', 'cancelling', 'executing',
                                     'compensating')
    ) AS a
) AS cur ON true
WHERE s.id = f.id AND f.status IN ('running', 'compensating', 'dead');
