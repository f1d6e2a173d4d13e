-- Business keys (issue 42): the id people know a saga by (a trip or order number), declared by
-- its class (``Saga.business_key``) and written once, at the start.
--
-- A plain column: it never changes after the INSERT, so the saga row's updates stay HOT. The
-- partial index holds only the sagas that have a key; it serves GET /sagas?business_key=, the
-- console's search box, and the start's uniqueness check (run under a transaction advisory
-- lock on the type and key, so two concurrent starts with one key cannot both pass it).
ALTER TABLE sagas ADD COLUMN business_key text;
CREATE INDEX sagas_business_key ON sagas (business_key, saga_type, created_at DESC)
    WHERE business_key IS NOT NULL;
