"""Inventory: a TCC participant that reserves stock (try), commits (confirm) or releases (cancel).

Run: ``SAGAFLOW_PARTICIPANT_DSN=... SAGAFLOW_KAFKA_BOOTSTRAP=...``
``python -m examples.services.inventory``

A SKU is stocked with 100 units on first use, except SKUs starting ``OOS-``, which have none:
reserving one is rejected as out of stock (the deterministic failure for demos).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from participant_sdk import (
    BusinessRejection,
    HandlerContext,
    Participant,
    on_cancel,
    on_confirm,
    on_try,
    run_participant,
)

INITIAL_STOCK = 100

DDL = """
CREATE TABLE IF NOT EXISTS inventory_stock (
    sku text PRIMARY KEY, available int NOT NULL CHECK (available >= 0),
    reserved int NOT NULL DEFAULT 0 CHECK (reserved >= 0));
CREATE TABLE IF NOT EXISTS inventory_reservations (
    saga_id uuid NOT NULL, step text NOT NULL, sku text NOT NULL, quantity int NOT NULL,
    status text NOT NULL, PRIMARY KEY (saga_id, step));
CREATE TABLE IF NOT EXISTS inventory_ledger (
    id bigserial PRIMARY KEY, saga_id uuid NOT NULL, step text NOT NULL, kind text NOT NULL,
    sku text NOT NULL, quantity int NOT NULL, at timestamptz NOT NULL DEFAULT now());
"""


class Reservation(BaseModel):
    sku: str = Field(min_length=1)
    quantity: int = Field(gt=0)


class Inventory(Participant):
    name = "inventory"

    @on_try("reserve")
    async def reserve(self, ctx: HandlerContext, r: Reservation) -> dict[str, Any]:
        initial = 0 if r.sku.startswith("OOS-") else INITIAL_STOCK
        await ctx.conn.execute(
            "INSERT INTO inventory_stock (sku, available) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            r.sku, initial)
        left = await ctx.conn.fetchval(
            "UPDATE inventory_stock SET available = available - $2, reserved = reserved + $2"
            " WHERE sku = $1 AND available >= $2 RETURNING available", r.sku, r.quantity)
        if left is None:
            raise BusinessRejection("out of stock", details={"sku": r.sku})
        await ctx.conn.execute(
            "INSERT INTO inventory_reservations VALUES ($1, $2, $3, $4, 'reserved')",
            ctx.saga_id, ctx.step, r.sku, r.quantity)
        await _ledger(ctx, "reserved", r)
        return {"reserved": r.quantity, "available": left}

    @on_confirm("reserve")
    async def commit(self, ctx: HandlerContext, r: Reservation) -> None:
        await self._close(ctx, r, "committed", release=False)

    @on_cancel("reserve")
    async def release(self, ctx: HandlerContext, r: Reservation) -> None:
        await self._close(ctx, r, "released", release=True)

    async def _close(
        self, ctx: HandlerContext, r: Reservation, kind: str, *, release: bool
    ) -> None:
        quantity = await ctx.conn.fetchval(
            "UPDATE inventory_reservations SET status = $3 WHERE saga_id = $1 AND step = $2"
            " AND status = 'reserved' RETURNING quantity", ctx.saga_id, ctx.step, kind)
        if quantity is None:
            return
        await ctx.conn.execute(
            "UPDATE inventory_stock SET reserved = reserved - $2,"
            " available = available + CASE WHEN $3 THEN $2 ELSE 0 END WHERE sku = $1",
            r.sku, quantity, release)
        await _ledger(ctx, kind, r)


async def _ledger(ctx: HandlerContext, kind: str, r: Reservation) -> None:
    await ctx.conn.execute(
        "INSERT INTO inventory_ledger (saga_id, step, kind, sku, quantity)"
        " VALUES ($1, $2, $3, $4, $5)", ctx.saga_id, ctx.step, kind, r.sku, r.quantity)


async def install_tables(conn: Any) -> None:
    await conn.execute(DDL)


if __name__ == "__main__":
    run_participant(Inventory(), setup=install_tables)
