-- Room for HOT updates on the two rows every state change rewrites (issue 16).
--
-- Sagas that fall due together were started together, so their saga rows and node rows sit
-- side by side on the same pages, and one firing batch rewrites every row of a page in one
-- transaction. A HOT update needs the new version to fit on the old one's page; with 20% free
-- (sagas) and none (saga_nodes, inserted full) it rarely does: 100,000 sleeps firing among a
-- million sagas made 34% of the saga updates and 0.2% of the node updates HOT, and every other
-- one wrote a new entry into each index of its table (four on sagas) at a random leaf page.
-- With half of each page free they are 100% and 86% HOT: Postgres CPU per fired timer 144 ->
-- 127 us, WAL per timer 7.3 -> 6.1 kB, for ~1,700 more bytes per sleeping saga.
--
-- Only pages written from now on keep the room: to give existing rows theirs at once, rewrite
-- the tables (VACUUM FULL sagas, saga_nodes, or pg_repack without the exclusive lock).
ALTER TABLE sagas SET (fillfactor = 50);
ALTER TABLE saga_nodes SET (fillfactor = 50);
