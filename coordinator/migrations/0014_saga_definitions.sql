-- Saga definitions uploaded over the API (coordinator.definitions): one row per type and
-- version, never changed once written (a new definition is a new version). Workers and API
-- processes register the rows they do not know yet, without a restart.
CREATE TABLE saga_definitions (
    name        text NOT NULL,
    version     int NOT NULL CHECK (version >= 1),
    definition  jsonb NOT NULL,                 -- the definition as uploaded, in JSON form
    digest      text NOT NULL,                  -- sha256 of its canonical JSON: same upload twice
    uploaded_by text NOT NULL,
    uploaded_at timestamptz NOT NULL,
    PRIMARY KEY (name, version)
);
CREATE INDEX saga_definitions_uploaded ON saga_definitions (uploaded_at);
