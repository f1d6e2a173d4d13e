"""Carriers: two shipping carriers, each a saga-step participant: book a shipment (action),
cancel the booking (compensation). The checkout saga races them; the loser's booking is undone.

Run one process per carrier, each with its own database:
``SAGAFLOW_PARTICIPANT_DSN=... SAGAFLOW_KAFKA_BOOTSTRAP=...``
``python -m examples.services.carriers carrier_a`` (or ``carrier_b``).

``carrier_b`` answers a booking after 1.5 s, ``carrier_a`` at once, so the race has a visible
loser; ``SAGAFLOW_CARRIER_DELAY_MS`` sets a carrier's delay instead. The address ``nowhere``
is refused by both (the deterministic failure for demos). Rows carry the carrier's name, so
the two may also share one database.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from participant_sdk import (
    BusinessRejection,
    HandlerContext,
    Participant,
    on_action,
    on_compensate,
    run_participant,
)

UNDELIVERABLE = "nowhere"
DELAY_ENV = "SAGAFLOW_CARRIER_DELAY_MS"
_BOOKING_NS = uuid.UUID("5c1d7e0a-2b3f-5a4e-9c8d-7e6f5a4b3c2d")

DDL = """
CREATE TABLE IF NOT EXISTS carrier_bookings (
    booking_id uuid PRIMARY KEY, carrier text NOT NULL, saga_id uuid NOT NULL,
    step text NOT NULL, order_id text NOT NULL, address text NOT NULL, parcels int NOT NULL,
    status text NOT NULL, UNIQUE (carrier, saga_id, step));
CREATE TABLE IF NOT EXISTS carrier_ledger (
    id bigserial PRIMARY KEY, carrier text NOT NULL, saga_id uuid NOT NULL, step text NOT NULL,
    kind text NOT NULL, booking_id uuid NOT NULL, at timestamptz NOT NULL DEFAULT now());
"""
#: Serialises the two carriers' CREATE TABLE IF NOT EXISTS when they share a database.
_DDL_LOCK = 0x5A6A_CA77


class Booking(BaseModel):
    order_id: str = Field(min_length=1)
    address: str = Field(min_length=1)
    parcels: int = Field(gt=0)


class Carrier(Participant):
    """Books one shipment per saga step, after ``delay_ms`` (how slow this carrier is)."""

    default_delay_ms: ClassVar[int] = 0

    def __init__(self, delay_ms: int | None = None) -> None:
        self.delay_ms = self.default_delay_ms if delay_ms is None else delay_ms

    @on_action("book")
    async def book(self, ctx: HandlerContext, b: Booking) -> dict[str, Any]:
        await asyncio.sleep(self.delay_ms / 1000)
        if b.address == UNDELIVERABLE:
            raise BusinessRejection("undeliverable address", details={"address": b.address})
        booking_id = uuid.uuid5(_BOOKING_NS, f"{self.name}/{ctx.saga_id}/{ctx.step}")
        await ctx.conn.execute(
            "INSERT INTO carrier_bookings VALUES ($1, $2, $3, $4, $5, $6, $7, 'booked')",
            booking_id, self.name, ctx.saga_id, ctx.step, b.order_id, b.address, b.parcels)
        await self._ledger(ctx, "booked", booking_id)
        return {"carrier": self.name, "booking_id": str(booking_id)}

    @on_compensate("book")
    async def cancel(self, ctx: HandlerContext, b: Booking) -> None:
        booking_id = await ctx.conn.fetchval(
            "UPDATE carrier_bookings SET status = 'cancelled' WHERE carrier = $1"
            " AND saga_id = $2 AND step = $3 AND status = 'booked' RETURNING booking_id",
            self.name, ctx.saga_id, ctx.step)
        if booking_id is not None:
            await self._ledger(ctx, "cancelled", booking_id)

    async def _ledger(self, ctx: HandlerContext, kind: str, booking_id: uuid.UUID) -> None:
        await ctx.conn.execute(
            "INSERT INTO carrier_ledger (carrier, saga_id, step, kind, booking_id)"
            " VALUES ($1, $2, $3, $4, $5)", self.name, ctx.saga_id, ctx.step, kind, booking_id)


class CarrierA(Carrier):
    name = "carrier_a"


class CarrierB(Carrier):
    name = "carrier_b"
    default_delay_ms = 1500


CARRIERS: dict[str, type[Carrier]] = {c.name: c for c in (CarrierA, CarrierB)}


async def install_tables(conn: Any) -> None:
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _DDL_LOCK)
        await conn.execute(DDL)


def carrier_from(argv: Sequence[str], env: dict[str, str]) -> Carrier:
    """The carrier named by ``argv``, with its delay from the environment; ``SystemExit``
    with one line saying what is wrong otherwise."""
    if len(argv) != 1 or argv[0] not in CARRIERS:
        raise SystemExit(f"usage: python -m examples.services.carriers {{{','.join(CARRIERS)}}}"
                         f" (got {' '.join(argv) or 'nothing'})")
    raw = env.get(DELAY_ENV)
    if raw is None:
        return CARRIERS[argv[0]]()
    if not raw.isdigit() or int(raw) > 60_000:
        raise SystemExit(f"{DELAY_ENV} must be a whole number of milliseconds from 0 to 60000,"
                         f" got {raw!r}")
    return CARRIERS[argv[0]](int(raw))


if __name__ == "__main__":
    run_participant(carrier_from(sys.argv[1:], dict(os.environ)), setup=install_tables)
