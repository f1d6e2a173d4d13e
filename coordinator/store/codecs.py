"""One type introspection per connection instead of one per statement that needs it.

asyncpg knows the scalar types, ``text[]`` and ``oid[]`` by itself; the first statement on a
connection that binds or returns any other array type makes it introspect the catalog (a
recursive query over ``pg_type``, wrapped in two more round trips that switch JIT off and
back). The store's batched writes bind eight array types (``unnest`` of ``uuid[]``,
``timestamptz[]``, ``jsonb[]``, ...), so a fresh connection paid three introspections, ~7 ms
each, on its first reply. :func:`prime_array_codecs`, a pool's ``init``, pays one.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["ARRAY_TYPES", "prime_array_codecs"]

#: The array types the store and the outbox bind, in :data:`_PRIME`'s order.
ARRAY_TYPES: Final = ("uuid[]", "timestamptz[]", "json[]", "jsonb[]", "bool[]", "int4[]",
                      "int8[]", "bytea[]")

_PRIME: Final = """
SELECT $1::uuid[] IS NULL AND $2::timestamptz[] IS NULL AND $3::json[] IS NULL
   AND $4::jsonb[] IS NULL AND $5::bool[] IS NULL AND $6::int4[] IS NULL
   AND $7::int8[] IS NULL AND $8::bytea[] IS NULL
"""


async def prime_array_codecs(conn: Any) -> None:
    """Have asyncpg introspect every array type the store binds, in one statement (a pool's
    ``init``: it runs once per new connection, and works with the statement cache off)."""
    await conn.fetchval(_PRIME, *([None] * len(ARRAY_TYPES)))
