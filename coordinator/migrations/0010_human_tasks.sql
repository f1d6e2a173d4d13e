-- Human tasks (HumanTask nodes): one row per opening of a task node. The saga's snapshot holds
-- the truth (the node's payload); this table is its projection, written in the same
-- transaction as every decision that opens, changes or closes a task, so that inboxes are
-- one indexed query. States: open, completed, rejected, expired, cancelled.
CREATE TABLE human_tasks (
    id               text PRIMARY KEY,                -- uuid5 of saga, node key and opening
    saga_id          uuid NOT NULL,
    saga_type        text NOT NULL,
    node             text NOT NULL,                   -- the task node's key in the saga
    state            text NOT NULL,
    title            text NOT NULL,
    description      text NOT NULL DEFAULT '',
    candidate_users  text[] NOT NULL DEFAULT '{}',
    candidate_groups text[] NOT NULL DEFAULT '{}',
    excluded_users   text[] NOT NULL DEFAULT '{}',    -- four eyes: may not complete it
    assignee         text,                            -- who holds it (claimed or handed to)
    owner            text,                            -- who delegated it
    delegation       text,                            -- pending, resolved
    proposal         jsonb,                           -- a delegate's form, back to the owner
    priority         int NOT NULL,                    -- 0..100
    due_at           timestamptz,                     -- the SLA
    escalation_tier  int NOT NULL DEFAULT 0,
    reminders        int NOT NULL DEFAULT 0,
    chain            text,
    form_schema      jsonb,
    outcome          text,
    result           jsonb,
    completed_by     text,
    comments         jsonb NOT NULL DEFAULT '[]',
    created_at       timestamptz NOT NULL,
    claimed_at       timestamptz,
    updated_at       timestamptz NOT NULL,
    closed_at        timestamptz
);

-- The inbox: open tasks of a person (held, or offered to them or their groups), most urgent
-- first (earliest due, then highest priority).
CREATE INDEX human_tasks_open_users ON human_tasks USING gin (candidate_users)
    WHERE state = 'open';
CREATE INDEX human_tasks_open_groups ON human_tasks USING gin (candidate_groups)
    WHERE state = 'open';
CREATE INDEX human_tasks_open_assignee ON human_tasks (assignee) WHERE state = 'open';
CREATE INDEX human_tasks_open_owner ON human_tasks (owner)
    WHERE state = 'open' AND owner IS NOT NULL;
CREATE INDEX human_tasks_open_order
    ON human_tasks ((coalesce(due_at, 'infinity'::timestamptz)), priority DESC, id)
    WHERE state = 'open';
CREATE INDEX human_tasks_saga ON human_tasks (saga_id);
