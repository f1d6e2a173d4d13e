"""How a saga's state is laid out in Postgres: a spine row, the input, one row per node.

A reply changes a few nodes of the tree, so the writer stores only the nodes that changed (the
engine's decision lists the keys it touched: ``Decision.touched``) and the small spine.
Loading a whole state is needed only when this process has not got it: :class:`StateCache`
keeps the states this process wrote, and a cached state is used only when its history seq is
the row's (another replica may have moved the saga since).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final
from uuid import UUID

import asyncpg

from coordinator.engine import SagaState

__all__ = [
    "KEPT_SIGNALS",
    "UPSERT_NODES",
    "NodeWrites",
    "StateCache",
    "dumps",
    "load_nodes",
    "load_states",
    "load_stored",
    "node_writes",
    "spine_json",
    "state_from_rows",
    "steps_json",
    "stored_json",
]

#: Fields of SagaState not in the spine column: the input (its own column), the nodes and the
#: kept signals (their ``saga_signals`` rows, migration 0013).
_OUTSIDE_SPINE: Final[set[str]] = {"steps", "input", "signals"}

#: The kept signals (``SagaState.signals``) of the saga whose id is the column ``sagas.id``:
#: its signal rows no wait consumed, in arrival order, as JSON text (times in UTC, as the
#: engine writes them). A fixed fragment for the loading queries' select lists.
KEPT_SIGNALS: Final = """coalesce((
    SELECT json_agg(json_build_object(
        'signal_id', k.signal_id, 'name', k.name, 'payload', k.payload,
        'received_at', to_char(k.received_at AT TIME ZONE 'UTC',
                               'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')) ORDER BY k.seq)
    FROM saga_signals k WHERE k.saga_id = sagas.id AND k.consumed_by IS NULL
), '[]')::text"""

#: The node upsert, for a data-modifying CTE of the writer's one statement (parameters
#: $12 to $15: :meth:`NodeWrites.upsert_args`); only nodes of the sagas that statement's
#: ``saga`` CTE wrote.
UPSERT_NODES: Final = """
INSERT INTO saga_nodes (saga_id, key, ordinal, state)
SELECT * FROM unnest($12::uuid[], $13::text[], $14::int[], $15::json[])
    AS n(saga_id, key, ordinal, state)
WHERE n.saga_id IN (SELECT id FROM saga)
ON CONFLICT (saga_id, key) DO UPDATE SET state = EXCLUDED.state
"""

DELETE_NODES: Final = """
DELETE FROM saga_nodes n USING unnest($1::uuid[], $2::text[]) AS d(saga_id, key)
WHERE n.saga_id = d.saga_id AND n.key = d.key
"""

_LOAD_SPINES: Final = f"""
SELECT id, snapshot, input, {KEPT_SIGNALS} AS kept FROM sagas WHERE id = ANY($1::uuid[])
"""  # noqa: S608 - fixed fragments only

#: Spine, input and every node row of each saga, the nodes put together as one JSON object
#: by Postgres (one round trip and one row per saga).
_LOAD_STATES: Final = """
SELECT sagas.id, sagas.snapshot, sagas.input, coalesce((
    SELECT '{' || string_agg(to_json(n.key)::text || ':' || n.state::text, ',' ORDER BY n.ordinal)
           || '}'
    FROM saga_nodes n WHERE n.saga_id = sagas.id), '{}') AS steps, """ + KEPT_SIGNALS + """ AS kept
FROM sagas WHERE sagas.id = ANY($1::uuid[])
"""  # noqa: S608 - fixed fragments only

_LOAD_NODES: Final = """
SELECT saga_id, key, state FROM saga_nodes WHERE saga_id = ANY($1::uuid[])
ORDER BY saga_id, ordinal
"""


def dumps(value: Any) -> str:
    # Never sort keys: the state's mappings are ordered and replay depends on that order.
    return json.dumps(value, separators=(",", ":"))


def spine_json(state: SagaState) -> str:
    """The spine column's text: the state without its input and nodes."""
    return state.model_dump_json(exclude=_OUTSIDE_SPINE)


class NodeWrites:
    """Node rows to upsert and to delete, gathered over the sagas of one transaction."""

    __slots__ = ("deleted", "gone_ids", "keys", "ordinals", "saga_ids", "states")

    def __init__(self) -> None:
        self.saga_ids: list[UUID] = []
        self.keys: list[str] = []
        self.ordinals: list[int] = []
        self.states: list[str] = []
        self.gone_ids: list[UUID] = []
        self.deleted: list[str] = []

    def add(self, saga_id: UUID, before: SagaState | None, after: SagaState,
            touched: Iterable[str] | None = None) -> None:
        """The rows that turn ``before`` (as stored; ``None`` for a new saga) into ``after``.
        ``touched``: the only keys that may differ, new ones in the order ``after`` added
        them (the decisions' ``touched``); ``None`` compares every node (by identity: the
        engine replaces the state object of a node it changes)."""
        if before is None or touched is None:
            self._compare_all(saga_id, {} if before is None else before.steps, after)
            return
        old, position = before.steps, len(before.steps)
        for key in touched:
            node, was = after.steps.get(key), old.get(key)
            if node is None:
                if was is not None:
                    self._delete(saga_id, key)
            elif was is not node:
                if was is None:
                    position += 1  # a new key: added at the end of the mapping
                # An existing row keeps its ordinal (the upsert sets only the state).
                self._upsert(saga_id, key, position if was is None else 0, node)

    def _compare_all(self, saga_id: UUID, old: Mapping[str, Any], after: SagaState) -> None:
        new = 0
        for ordinal, (key, node) in enumerate(after.steps.items(), start=1):
            was = old.get(key)
            if was is not node:
                new += was is None
                self._upsert(saga_id, key, ordinal, node)
        if len(old) + new != len(after.steps):  # some old key is gone
            for key in old.keys() - after.steps.keys():
                self._delete(saga_id, key)

    def _upsert(self, saga_id: UUID, key: str, ordinal: int, node: Any) -> None:
        self.saga_ids.append(saga_id)
        self.keys.append(key)
        self.ordinals.append(ordinal)
        self.states.append(node.model_dump_json())

    def _delete(self, saga_id: UUID, key: str) -> None:
        self.gone_ids.append(saga_id)
        self.deleted.append(key)

    def upsert_args(self) -> tuple[list[UUID], list[str], list[int], list[str]]:
        """The parameters of :data:`UPSERT_NODES`."""
        return self.saga_ids, self.keys, self.ordinals, self.states

    async def delete(self, conn: asyncpg.Connection) -> None:
        """Delete the node rows of keys a state no longer has (none, as the engine works)."""
        if self.deleted:
            await conn.execute(DELETE_NODES, self.gone_ids, self.deleted)


def node_writes(changes: Iterable[tuple[UUID, SagaState | None, SagaState, Iterable[str]]]
                ) -> NodeWrites:
    """(saga id, state as stored, new state, keys touched since) for each saga."""
    writes = NodeWrites()
    for saga_id, before, after, touched in changes:
        writes.add(saga_id, before, after, touched)
    return writes


def stored_json(spine: Mapping[str, Any], input: Any, nodes: Sequence[tuple[str, str]],
                kept: Any = ()) -> dict[str, Any]:
    """The state's JSON as stored: spine, input, node rows (in their order) and kept signals
    put together."""
    return {**spine, "input": input, "steps": {key: json.loads(text) for key, text in nodes},
            "signals": list(kept)}


def state_from_rows(spine: str, input: str, steps: str, kept: str) -> SagaState:
    """The state from its columns' JSON texts (``steps``: the node rows as one JSON object,
    see :func:`steps_json`; ``kept``: :data:`KEPT_SIGNALS`), put together as text and decoded
    in one pass: no Python dicts on the way (loading states is on the path of every timer and
    uncached reply). ``kept`` comes last: it wins over a list an older snapshot still holds."""
    return SagaState.model_validate_json(
        f'{spine.rstrip()[:-1]},"input":{input},"steps":{steps},"signals":{kept}}}')


def steps_json(nodes: Sequence[tuple[str, str]]) -> str:
    """Node rows (key, JSON text), in their order, as the text of one JSON object."""
    return "{" + ",".join(f"{dumps(key)}:{text}" for key, text in nodes) + "}"


async def load_nodes(conn: asyncpg.Connection, saga_ids: Sequence[UUID]
                     ) -> dict[UUID, list[tuple[str, str]]]:
    """The node rows (key, JSON text) of each saga in ``saga_ids``, in their order."""
    nodes: dict[UUID, list[tuple[str, str]]] = {}
    if saga_ids:
        for row in await conn.fetch(_LOAD_NODES, list(saga_ids)):
            nodes.setdefault(row["saga_id"], []).append((row["key"], row["state"]))
    return nodes


async def load_stored(conn: asyncpg.Connection, saga_ids: Sequence[UUID]
                      ) -> dict[UUID, dict[str, Any]]:
    """The stored JSON of each saga in ``saga_ids`` that exists (two queries in all)."""
    if not saga_ids:
        return {}
    spines = {r["id"]: r for r in await conn.fetch(_LOAD_SPINES, list(saga_ids))}
    nodes = await load_nodes(conn, list(spines))
    return {sid: stored_json(json.loads(r["snapshot"]), json.loads(r["input"]),
                             nodes.get(sid, []), json.loads(r["kept"]))
            for sid, r in spines.items()}


async def load_states(conn: asyncpg.Connection, saga_ids: Sequence[UUID]
                      ) -> dict[UUID, SagaState]:
    """The state of each saga in ``saga_ids`` that exists."""
    if not saga_ids:
        return {}
    return {r["id"]: state_from_rows(r["snapshot"], r["input"], r["steps"], r["kept"])
            for r in await conn.fetch(_LOAD_STATES, list(saga_ids))}


class StateCache:
    """The latest states this process committed, by saga id, holding at most ``max_nodes``
    nodes in all (memory grows with nodes, not sagas; least recently used go first). An
    entry is only good for the history seq it was written at."""

    def __init__(self, max_nodes: int) -> None:
        if max_nodes < 0:
            raise ValueError(f"state cache size must be >= 0 nodes, got {max_nodes}")
        self._max_nodes = max_nodes
        self._nodes = 0
        self._entries: OrderedDict[UUID, tuple[int, SagaState, Mapping[str, str]]] = (
            OrderedDict())

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, saga_id: UUID, seq: int) -> SagaState | None:
        """The cached state of ``saga_id`` if it is the one at history seq ``seq``."""
        entry = self._entries.get(saga_id)
        if entry is None or entry[0] != seq:
            return None
        self._entries.move_to_end(saga_id)
        return entry[1]

    def latest(self, saga_id: UUID) -> tuple[int, SagaState, Mapping[str, str]] | None:
        """The last state this process wrote for ``saga_id``: its history seq, the state and
        the saga row's trace context. Another process may have moved the saga since: use it
        only where the seq is checked when writing."""
        entry = self._entries.get(saga_id)
        if entry is not None:
            self._entries.move_to_end(saga_id)
        return entry

    def put(self, saga_id: UUID, seq: int, state: SagaState,
            trace_context: Mapping[str, str] | None = None) -> None:
        self.drop(saga_id)
        size = _size(state)
        if size > self._max_nodes:
            return
        self._entries[saga_id] = (seq, state, trace_context or {})
        self._nodes += size
        while self._nodes > self._max_nodes:
            _, (_, old, _) = self._entries.popitem(last=False)
            self._nodes -= _size(old)

    def drop(self, saga_id: UUID) -> None:
        entry = self._entries.pop(saga_id, None)
        if entry is not None:
            self._nodes -= _size(entry[1])


def _size(state: SagaState) -> int:
    return len(state.steps) + 1
