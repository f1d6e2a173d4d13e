-- Kept signals live in their saga_signals rows, no longer in the saga's snapshot (issue 37).
--
-- A signal no wait has taken yet was kept twice: as its row (0007) and inside the snapshot's
-- `signals` list, which every state change of the saga rewrote (999 such signals made a 91 kB
-- snapshot). The row is enough: a saga's kept signals are its rows not consumed yet, read in
-- arrival order (`seq`) when its state is loaded, and a wait that takes one marks its row in
-- the same transaction, as before. Snapshots written before keep their `signals` list until
-- the saga's next change rewrites them; loading ignores it (the rows' list comes last).
ALTER TABLE saga_signals ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
CREATE INDEX saga_signals_kept ON saga_signals (saga_id, seq) WHERE consumed_by IS NULL;
