-- Updates (coordinator.language.updates): the answer to each update id a saga was sent,
-- accepted (with the handler's result) or rejected (with the validator's reason), so a resend
-- of the id gets the same answer and is never applied twice, and the answer can be fetched by
-- id after a caller's wait ran out. Written in the saga's own transaction (its row locked),
-- with the history row of an accepted update; a rejected one changes nothing else.
CREATE TABLE saga_updates (
    saga_id     uuid NOT NULL,
    update_id   text NOT NULL,
    name        text NOT NULL,
    payload     json NOT NULL,
    outcome     text NOT NULL CHECK (outcome IN ('accepted', 'rejected')),
    result      json,                            -- accepted: the handler's result
    reason      text,                            -- rejected: the validator's reason
    sender      text NOT NULL,                   -- api:<principal>, kit, ...
    answered_at timestamptz NOT NULL,
    PRIMARY KEY (saga_id, update_id),
    CHECK ((outcome = 'accepted') = (result IS NOT NULL)),
    CHECK ((outcome = 'rejected') = (reason IS NOT NULL))
);
