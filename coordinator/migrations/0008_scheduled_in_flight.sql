-- Delayed starts (0007) add the status 'scheduled': such a saga is live (a worker must register
-- its version, the drain report counts it, the in-flight gauge shows it), so the partial index
-- of in-flight sagas (0003) covers it too. Same key and the same HOT reasoning as 0003.
DROP INDEX sagas_in_flight;
CREATE INDEX sagas_in_flight ON sagas (saga_type, status)
    WHERE status IN ('scheduled', 'running', 'compensating', 'dead');
