"""The example shipping service plus a TCC action, ``book``, for the all-TCC bench sagas.

``python -m bench.participants`` runs it like ``python -m examples.services.shipping``. Payments
and inventory are the example services unchanged.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from examples.services.shipping import Shipping
from examples.services.shipping import install_tables as _shipping_tables
from participant_sdk import HandlerContext, on_cancel, on_confirm, on_try, run_participant

DDL = """
CREATE TABLE IF NOT EXISTS shipping_bookings (
    saga_id uuid NOT NULL, step text NOT NULL, address text NOT NULL, status text NOT NULL,
    PRIMARY KEY (saga_id, step));
"""


class Booking(BaseModel):
    address: str = Field(min_length=1)
    items: list[str] = Field(default_factory=list)


class BenchShipping(Shipping):
    """Shipping with a courier slot booked (try), confirmed or released (cancel)."""

    @on_try("book")
    async def book(self, ctx: HandlerContext, b: Booking) -> dict[str, Any]:
        await ctx.conn.execute(
            "INSERT INTO shipping_bookings VALUES ($1, $2, $3, 'held')",
            ctx.saga_id, ctx.step, b.address)
        return {"booked": len(b.items)}

    @on_confirm("book")
    async def confirm(self, ctx: HandlerContext, b: Booking) -> None:
        await self._close(ctx, "confirmed")

    @on_cancel("book")
    async def release(self, ctx: HandlerContext, b: Booking) -> None:
        await self._close(ctx, "released")

    async def _close(self, ctx: HandlerContext, status: str) -> None:
        await ctx.conn.execute(
            "UPDATE shipping_bookings SET status = $3 WHERE saga_id = $1 AND step = $2"
            " AND status = 'held'", ctx.saga_id, ctx.step, status)


async def install_tables(conn: Any) -> None:
    await _shipping_tables(conn)
    await conn.execute(DDL)


if __name__ == "__main__":
    run_participant(BenchShipping(), setup=install_tables)
