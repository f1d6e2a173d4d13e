-- The saga state split so that a reply costs the same whatever the size of the tree
-- (issue 15): a 1,000-item for-each used to rewrite its whole snapshot for every reply.
--
-- * saga_nodes: one row per node state (SagaState.steps), rewritten only when that node
--   changes. `ordinal` is the node's position when it was entered: the steps mapping is
--   ordered, and loading ORDER BY ordinal rebuilds that order. No index but the key, so the
--   updates stay HOT.
-- * sagas.input: the validated input, written once at the start.
-- * sagas.snapshot keeps the rest of the state (the spine: status, stage, parent, reason,
--   counters), rewritten with every change; SagaState = spine + input + nodes.
CREATE TABLE saga_nodes (
    saga_id  uuid NOT NULL,
    key      text NOT NULL,
    ordinal  integer NOT NULL,
    state    json NOT NULL,
    PRIMARY KEY (saga_id, key)
);

ALTER TABLE sagas ADD COLUMN input json;

-- Existing sagas: their nodes and input move out of the snapshot, as exact JSON text (json,
-- not jsonb, keeps each value's text and the order of the keys).
INSERT INTO saga_nodes (saga_id, key, ordinal, state)
SELECT s.id, n.key, n.ordinality::integer, n.value
FROM sagas AS s, json_each(s.snapshot->'steps') WITH ORDINALITY AS n(key, value, ordinality);

UPDATE sagas AS s
SET input = s.snapshot->'input',
    snapshot = (SELECT json_object_agg(f.key, f.value ORDER BY f.ordinality)
                FROM json_each(s.snapshot) WITH ORDINALITY AS f(key, value, ordinality)
                WHERE f.key NOT IN ('steps', 'input'));

ALTER TABLE sagas ALTER COLUMN input SET NOT NULL;
