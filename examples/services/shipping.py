"""Shipping: a saga-step participant: create a shipment (action), cancel it (compensation).

Run: ``SAGAFLOW_PARTICIPANT_DSN=... SAGAFLOW_KAFKA_BOOTSTRAP=...``
``python -m examples.services.shipping``

The address ``nowhere`` is rejected as undeliverable (the deterministic failure for demos).
"""

from __future__ import annotations

import uuid
from typing import Any

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
_SHIPMENT_NS = uuid.UUID("0b7e1d8a-94c2-5f3e-8a6d-1f2e3d4c5b6a")

DDL = """
CREATE TABLE IF NOT EXISTS shipping_shipments (
    shipment_id uuid PRIMARY KEY, saga_id uuid NOT NULL, step text NOT NULL,
    address text NOT NULL, status text NOT NULL, UNIQUE (saga_id, step));
CREATE TABLE IF NOT EXISTS shipping_ledger (
    id bigserial PRIMARY KEY, saga_id uuid NOT NULL, step text NOT NULL, kind text NOT NULL,
    shipment_id uuid NOT NULL, at timestamptz NOT NULL DEFAULT now());
"""


class Shipment(BaseModel):
    address: str = Field(min_length=1)
    items: list[str] = Field(default_factory=list)


class Shipping(Participant):
    name = "shipping"

    @on_action("ship")
    async def create(self, ctx: HandlerContext, s: Shipment) -> dict[str, Any]:
        if s.address == UNDELIVERABLE:
            raise BusinessRejection("undeliverable address", details={"address": s.address})
        shipment_id = uuid.uuid5(_SHIPMENT_NS, f"{ctx.saga_id}/{ctx.step}")
        await ctx.conn.execute(
            "INSERT INTO shipping_shipments VALUES ($1, $2, $3, $4, 'created')",
            shipment_id, ctx.saga_id, ctx.step, s.address)
        await _ledger(ctx, "created", shipment_id)
        return {"shipment_id": str(shipment_id)}

    @on_compensate("ship")
    async def cancel(self, ctx: HandlerContext, s: Shipment) -> None:
        shipment_id = await ctx.conn.fetchval(
            "UPDATE shipping_shipments SET status = 'cancelled' WHERE saga_id = $1 AND step = $2"
            " AND status = 'created' RETURNING shipment_id", ctx.saga_id, ctx.step)
        if shipment_id is not None:
            await _ledger(ctx, "cancelled", shipment_id)


async def _ledger(ctx: HandlerContext, kind: str, shipment_id: uuid.UUID) -> None:
    await ctx.conn.execute(
        "INSERT INTO shipping_ledger (saga_id, step, kind, shipment_id) VALUES ($1, $2, $3, $4)",
        ctx.saga_id, ctx.step, kind, shipment_id)


async def install_tables(conn: Any) -> None:
    await conn.execute(DDL)


if __name__ == "__main__":
    run_participant(Shipping(), setup=install_tables)
