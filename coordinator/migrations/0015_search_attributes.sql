-- Search attributes (issue 37): typed fields a saga class declares (``Saga.search``), set from
-- its input and its results, to filter sagas by (GET /sagas?q=customer_id = 'c-42' and ...).
--
-- A sibling of the business key (0012), not more columns on `sagas`: the business key is one
-- text written once at the INSERT, so it lives on the row without costing the row's HOT
-- updates; attributes are many, typed, declared per saga type and change when results come
-- in, so they get a table of their own that only a change of a value touches (the store
-- compares the new values with the old ones and writes nothing when none moved). The filter
-- language reads both: `business_key` is a built-in field over the column and its index.
--
-- One row per attribute value, its value in the column of its kind, the others NULL; a
-- keyword list is one row per keyword (`position` 0, 1, ...). An unset attribute has no row.
-- Text is compared bytewise (COLLATE "C"): the same order everywhere, the index's too.
CREATE TABLE saga_search_attributes (
    saga_id    uuid NOT NULL,
    name       text NOT NULL,
    position   smallint NOT NULL DEFAULT 0,
    kind       text NOT NULL CHECK (kind IN ('str', 'int', 'float', 'bool', 'datetime',
                                             'keywords')),
    text_value text COLLATE "C",
    num_value  numeric,
    bool_value boolean,
    time_value timestamptz,
    PRIMARY KEY (saga_id, name, position),
    CHECK (num_nonnulls(text_value, num_value, bool_value, time_value) = 1)
);

-- A filter on an attribute is an EXISTS over these rows: the index of the value's kind finds
-- the sagas with the value (or in the range) without reading the others; partial, so each
-- holds only the rows of its kind.
CREATE INDEX saga_search_text ON saga_search_attributes (name, text_value, saga_id)
    WHERE text_value IS NOT NULL;
CREATE INDEX saga_search_num ON saga_search_attributes (name, num_value, saga_id)
    WHERE num_value IS NOT NULL;
CREATE INDEX saga_search_bool ON saga_search_attributes (name, bool_value, saga_id)
    WHERE bool_value IS NOT NULL;
CREATE INDEX saga_search_time ON saga_search_attributes (name, time_value, saga_id)
    WHERE time_value IS NOT NULL;
