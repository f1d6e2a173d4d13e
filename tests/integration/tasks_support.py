"""The expense saga with its reminder and escalation due in seconds, for tests on the real
stack (no tests here; a separate process imports it too)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from coordinator.language import Saga
from coordinator.language.tasks import Escalation, approval_chain, quorum
from examples.expense_saga import FINANCE, MANAGER, ExpenseInput, ExpenseSaga

QUICK_MANAGER = dataclasses.replace(
    MANAGER, calendar=None, remind_after=timedelta(seconds=1), remind_every=None,
    escalations=(Escalation(after=timedelta(seconds=2), to_groups=("finance-leads",),
                            priority=80),),
    timeout=timedelta(minutes=5))


class QuickExpense(Saga):
    """:class:`ExpenseSaga` with seconds for hours and days."""

    name = "quick_expense"
    input_model = ExpenseInput
    steps = (ExpenseSaga.steps[0],
             approval_chain("approval", QUICK_MANAGER, quorum("finance_quorum", 2, *FINANCE)))
