"""The expense saga: hold the money, then a two-level approval chain, then pay out.

The employee's manager approves first; then two of three finance approvers must approve, and
with four eyes neither the employee who filed it (the saga's starter) nor the manager may be
one of them. A rejection anywhere releases the held money (the TCC cancel), and so does a
manager who does not decide within three business days. A reminder goes out after four
hours, and after one business day the finance leads see the manager's task too.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from coordinator.language import RetryPolicy, Saga, StepContext, TccStep
from coordinator.language.calendars import BusinessCalendar
from coordinator.language.tasks import (
    Escalation,
    HumanTask,
    approval_chain,
    approvers,
    quorum,
)

#: Weekends and German public holidays are closed days for the SLAs.
OFFICE = BusinessCalendar(country="DE")


class ExpenseInput(BaseModel):
    expense_id: str = Field(min_length=1, max_length=100)
    employee: str = Field(min_length=1, max_length=100)
    manager: str = Field(min_length=1, max_length=100)
    amount_cents: int = Field(gt=0)
    purpose: str = Field(default="", max_length=500)


class FinanceReview(BaseModel):
    """What a finance approver fills in."""

    outcome: Literal["approve", "reject"]
    cost_center: str = Field(default="", max_length=50)
    comment: str = Field(default="", max_length=2000)


def hold(ctx: StepContext[ExpenseInput]) -> dict[str, Any]:
    return {"customer": f"budget-{ctx.input.employee}", "amount": ctx.input.amount_cents}


def title(ctx: StepContext[ExpenseInput]) -> str:
    return (f"Expense {ctx.input.expense_id}: {ctx.input.amount_cents / 100:.2f} EUR "
            f"for {ctx.input.employee}")


_QUICK = RetryPolicy(max_attempts=5, initial_backoff=timedelta(milliseconds=200),
                     max_backoff=timedelta(seconds=5))

MANAGER = HumanTask(
    "manager_approval", title=title, description=lambda ctx: ctx.input.purpose,
    users=lambda ctx: [ctx.input.manager], priority=50,
    due=timedelta(days=2), calendar=OFFICE, timezone="Europe/Berlin",
    remind_after=timedelta(hours=4), remind_every=timedelta(hours=4), max_reminders=3,
    escalations=(Escalation(after=timedelta(days=1), to_groups=("finance-leads",),
                            priority=80),),
    timeout=timedelta(days=3), on_timeout="reject")

FINANCE = approvers("finance", 3, title=title, form=FinanceReview, groups=("finance",),
                    due=timedelta(days=2), calendar=OFFICE, timezone="Europe/Berlin")


class ExpenseSaga(Saga):
    """Hold the expense's money, have it approved (manager, then 2 of 3 finance), pay it."""

    name = "expense"
    version = 1
    input_model = ExpenseInput
    steps = (
        TccStep("hold_money", "payments", "charge", payload=hold, retry=_QUICK,
                deadline=timedelta(seconds=10)),
        approval_chain("approval", MANAGER, quorum("finance_quorum", 2, *FINANCE)),
    )
