"""The store's array codecs on a new connection without asking the catalog each time.

asyncpg knows the scalar types, ``text[]`` and ``oid[]`` by itself; the first statement on a
connection that binds or returns any other array type makes it introspect the catalog (a
recursive query over ``pg_type``, wrapped in two more round trips that switch JIT off and
back). The store's batched writes bind eight array types (``unnest`` of ``uuid[]``,
``timestamptz[]``, ``jsonb[]``, ...), so a fresh connection paid three introspections on its
first reply, ~20 ms of a function's cold start.

:func:`prime_array_codecs`, a pool's ``init``, hands asyncpg the catalog rows of those eight
built-in types instead (their OIDs are fixed by Postgres); the rows are what the introspection
query returns, and a test checks that both give the same values. That goes through asyncpg's
connection settings, which are not public API: when this asyncpg lacks them, it falls back to
one statement binding all eight types, one introspection.
"""

from __future__ import annotations

import logging
from typing import Any, Final

__all__ = ["ARRAY_TYPES", "prime_array_codecs", "register_builtin_arrays"]

log = logging.getLogger(__name__)

#: (array OID, catalog name, element OID, element type name) of each array type the store and
#: the outbox bind, in :data:`_PRIME`'s order.
ARRAY_TYPES: Final = (
    (2951, "_uuid", 2950, "uuid"),
    (1185, "_timestamptz", 1184, "timestamp with time zone"),
    (199, "_json", 114, "json"),
    (3807, "_jsonb", 3802, "jsonb"),
    (1000, "_bool", 16, "boolean"),
    (1007, "_int4", 23, "integer"),
    (1016, "_int8", 20, "bigint"),
    (1001, "_bytea", 17, "bytea"),
)

#: The rows asyncpg's introspection query returns for :data:`ARRAY_TYPES`.
_TYPE_ROWS: Final = tuple(
    {"oid": oid, "ns": "pg_catalog", "name": name, "kind": b"b", "basetype": None,
     "elemtype": element, "elemdelim": b",", "range_subtype": None, "attrtypoids": None,
     "attrnames": None, "depth": 0, "basetype_name": None, "elemtype_name": element_name,
     "range_subtype_name": None}
    for oid, name, element, element_name in ARRAY_TYPES
)

_PRIME: Final = """
SELECT $1::uuid[] IS NULL AND $2::timestamptz[] IS NULL AND $3::json[] IS NULL
   AND $4::jsonb[] IS NULL AND $5::bool[] IS NULL AND $6::int4[] IS NULL
   AND $7::int8[] IS NULL AND $8::bytea[] IS NULL
"""


def register_builtin_arrays(conn: Any) -> bool:
    """Give ``conn`` the codecs of :data:`ARRAY_TYPES` from their fixed catalog rows; False
    when this asyncpg has no such hook (nothing was registered)."""
    try:
        settings = conn._protocol.get_settings()
        settings.register_data_types(_TYPE_ROWS)
    except Exception as exc:  # any change to a private hook means: introspect instead
        log.debug("asyncpg takes no type rows (%r): introspecting the array types", exc)
        return False
    return True


async def prime_array_codecs(conn: Any) -> None:
    """A pool's ``init``: the array codecs the store needs, set up once per new connection
    without a round trip (or, failing that, with one introspection; works with the statement
    cache off)."""
    if not register_builtin_arrays(conn):
        await conn.fetchval(_PRIME, *([None] * len(ARRAY_TYPES)))
