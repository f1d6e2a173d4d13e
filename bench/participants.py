"""The example services plus the actions the bench sagas need.

``python -m bench.participants NAME`` runs one of them like ``python -m examples.services.NAME``:

* ``shipping``: the example service plus a TCC action, ``book``, for the all-TCC sagas;
* ``payments`` and ``inventory``: the example services plus a saga-step action each
  (``debit``, ``take``: the try's writes as the action, the cancel's as its compensation)
  for ``bench.sagas:Steps3``. Their TCC actions are the examples' own, unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field

from examples.services.inventory import Inventory, Reservation
from examples.services.inventory import install_tables as _inventory_tables
from examples.services.payments import Payment, Payments
from examples.services.payments import install_tables as _payments_tables
from examples.services.shipping import Shipping
from examples.services.shipping import install_tables as _shipping_tables
from participant_sdk import (
    HandlerContext,
    Participant,
    on_action,
    on_cancel,
    on_compensate,
    on_confirm,
    on_try,
    run_participant,
)

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
    async def release_booking(self, ctx: HandlerContext, b: Booking) -> None:
        await self._close(ctx, "released")

    async def _close(self, ctx: HandlerContext, status: str) -> None:
        await ctx.conn.execute(
            "UPDATE shipping_bookings SET status = $3 WHERE saga_id = $1 AND step = $2"
            " AND status = 'held'", ctx.saga_id, ctx.step, status)


class BenchPayments(Payments):
    """Payments with ``debit``: the hold as a saga step, released by its compensation."""

    @on_action("debit")
    async def debit(self, ctx: HandlerContext, p: Payment) -> dict[str, Any]:
        return await self.hold(ctx, p)

    @on_compensate("debit")
    async def refund(self, ctx: HandlerContext, p: Payment) -> None:
        await self.release(ctx, p)


class BenchInventory(Inventory):
    """Inventory with ``take``: the reservation as a saga step, put back by its compensation."""

    @on_action("take")
    async def take(self, ctx: HandlerContext, r: Reservation) -> dict[str, Any]:
        return await self.reserve(ctx, r)

    @on_compensate("take")
    async def put_back(self, ctx: HandlerContext, r: Reservation) -> None:
        await self.release(ctx, r)


async def install_tables(conn: Any) -> None:
    await _shipping_tables(conn)
    await conn.execute(DDL)


#: name -> (participant, table setup).
SERVICES: dict[str, tuple[Callable[[], Participant], Callable[[Any], Awaitable[None]]]] = {
    "payments": (BenchPayments, _payments_tables),
    "inventory": (BenchInventory, _inventory_tables),
    "shipping": (BenchShipping, install_tables),
}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in SERVICES:
        print(f"usage: python -m bench.participants {{{','.join(SERVICES)}}}", file=sys.stderr)
        return 2
    participant, setup = SERVICES[argv[0]]
    run_participant(participant(), setup=setup)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
