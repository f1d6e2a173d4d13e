"""Payments: a TCC participant that holds funds (try), captures (confirm) or releases (cancel).

Run: ``SAGAFLOW_PARTICIPANT_DSN=... SAGAFLOW_KAFKA_BOOTSTRAP=...``
``python -m examples.services.payments``

Accounts open on first use with 1,000.00; the customer ``broke`` opens with 0, so any payment
of theirs is rejected as insufficient funds (the deterministic failure for demos).
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

OPENING_BALANCE = 100_000  # cents
BROKE_CUSTOMER = "broke"

DDL = """
CREATE TABLE IF NOT EXISTS payments_accounts (
    customer text PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0),
    held bigint NOT NULL DEFAULT 0 CHECK (held >= 0));
CREATE TABLE IF NOT EXISTS payments_holds (
    saga_id uuid NOT NULL, step text NOT NULL, customer text NOT NULL, amount bigint NOT NULL,
    status text NOT NULL, PRIMARY KEY (saga_id, step));
CREATE TABLE IF NOT EXISTS payments_ledger (
    id bigserial PRIMARY KEY, saga_id uuid NOT NULL, step text NOT NULL, kind text NOT NULL,
    customer text NOT NULL, amount bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());
"""


class Payment(BaseModel):
    customer: str = Field(min_length=1)
    amount: int = Field(gt=0, description="cents")


class Payments(Participant):
    name = "payments"

    @on_try("charge")
    async def hold(self, ctx: HandlerContext, p: Payment) -> dict[str, Any]:
        opening = 0 if p.customer == BROKE_CUSTOMER else OPENING_BALANCE
        await ctx.conn.execute(
            "INSERT INTO payments_accounts (customer, balance) VALUES ($1, $2)"
            " ON CONFLICT DO NOTHING", p.customer, opening)
        balance = await ctx.conn.fetchval(
            "UPDATE payments_accounts SET balance = balance - $2, held = held + $2"
            " WHERE customer = $1 AND balance >= $2 RETURNING balance", p.customer, p.amount)
        if balance is None:
            raise BusinessRejection("insufficient funds", details={"customer": p.customer})
        await ctx.conn.execute(
            "INSERT INTO payments_holds VALUES ($1, $2, $3, $4, 'held')",
            ctx.saga_id, ctx.step, p.customer, p.amount)
        await _ledger(ctx, "reserved", p)
        return {"held": p.amount, "balance": balance}

    @on_confirm("charge")
    async def capture(self, ctx: HandlerContext, p: Payment) -> None:
        await self._close(ctx, p, "captured", release=False)

    @on_cancel("charge")
    async def release(self, ctx: HandlerContext, p: Payment) -> None:
        await self._close(ctx, p, "released", release=True)

    async def _close(self, ctx: HandlerContext, p: Payment, kind: str, *, release: bool) -> None:
        amount = await ctx.conn.fetchval(
            "UPDATE payments_holds SET status = $3 WHERE saga_id = $1 AND step = $2"
            " AND status = 'held' RETURNING amount", ctx.saga_id, ctx.step, kind)
        if amount is None:
            return
        await ctx.conn.execute(
            "UPDATE payments_accounts SET held = held - $2,"
            " balance = balance + CASE WHEN $3 THEN $2 ELSE 0 END WHERE customer = $1",
            p.customer, amount, release)
        await _ledger(ctx, kind, p)


async def _ledger(ctx: HandlerContext, kind: str, p: Payment) -> None:
    await ctx.conn.execute(
        "INSERT INTO payments_ledger (saga_id, step, kind, customer, amount)"
        " VALUES ($1, $2, $3, $4, $5)", ctx.saga_id, ctx.step, kind, p.customer, p.amount)


async def install_tables(conn: Any) -> None:
    await conn.execute(DDL)


if __name__ == "__main__":
    run_participant(Payments(), setup=install_tables)
