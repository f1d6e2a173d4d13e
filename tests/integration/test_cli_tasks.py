"""``saga tasks ...`` against ``python -m coordinator api`` on real Postgres: a person lists
their inbox, reads a task's form, claims it, is refused a bad form field by field,
completes it, and an admin works the finance quorum with delegation."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator

import pytest

from coordinator.cli.ops import main as saga_cli
from tests.integration.task_api_support import EXPENSE, expense_store, monday_clock, token
from tests.integration.test_api_live import Live, served_api
from tests.integration.test_human_tasks_store import answer_commands

pytestmark = pytest.mark.integration

PREFIX = "clitasks"
TOKENS = ",".join(f"{n}:{r}:{token(n)}" for n, r in (("mia", "viewer"), ("fay", "viewer"),
                                                       ("ada", "admin")))


@pytest.fixture
async def live(fresh_db: str) -> AsyncIterator[Live]:
    async with served_api(fresh_db, ["examples.expense_saga:ExpenseSaga"], TOKENS,
                          PREFIX) as served:
        yield served


def saga(live: Live, who: str, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = saga_cli(["--url", live.url, "--token", token(who), *argv], out=out)
    return code, out.getvalue()


async def test_a_person_works_their_tasks_from_the_cli(
        live: Live, capsys: pytest.CaptureFixture[str]) -> None:
    async with expense_store(live.dsn, PREFIX, monday_clock()) as store:
        started = await store.start_saga("expense", EXPENSE, started_by="erin")
        await answer_commands(store, started.record.saga_id)

    code, text = saga(live, "mia", "tasks", "list")
    assert code == 0 and "Expense x-1: 120.00 EUR for erin" in text
    assert text.splitlines()[0].split() == ["ID", "TITLE", "SAGA_TYPE", "NODE", "PRIORITY",
                                            "DUE_AT", "OVERDUE", "ASSIGNEE"]
    task = text.splitlines()[1].split()[0]
    code, text = saga(live, "mia", "tasks", "show", task)
    assert "outcome   " not in text and "excluded  erin (four eyes)" in text
    assert any(line.split()[:4] == ["outcome", "string", "true", "approve,"]
               for line in text.splitlines())
    code, text = saga(live, "mia", "tasks", "claim", task)
    assert code == 0 and "claim done; open, held by mia" in text
    assert saga(live, "ada", "tasks", "claim", task)[0] == 1
    assert "claimed by mia" in capsys.readouterr().err
    code, _ = saga(live, "mia", "tasks", "complete", task, "--field", "outcome=maybe",
                   "--data", json.dumps({"comment": "x" * 2001}))
    err = capsys.readouterr().err
    assert code == 1 and "HTTP 422" in err
    assert "body.data.outcome" in err and "body.data.comment" in err
    assert saga(live, "mia", "tasks", "complete", task)[0] == 2  # no form at all
    assert saga(live, "mia", "tasks", "comment", task, "receipts checked")[0] == 0
    code, text = saga(live, "mia", "tasks", "complete", task, "-f", "outcome=approve")
    assert code == 0 and "complete done; completed, held by mia" in text
    assert text.rstrip().endswith("running")

    code, text = saga(live, "ada", "--json", "tasks", "list", "--scope", "all")
    finance = json.loads(text)["items"]
    assert sorted(t["node"] for t in finance) == ["finance_1", "finance_2", "finance_3"]
    assert saga(live, "mia", "tasks", "list", "--scope", "all")[0] == 1  # admins only
    first = finance[0]["id"]
    assert saga(live, "ada", "tasks", "claim", first)[0] == 0
    code, text = saga(live, "ada", "tasks", "delegate", first, "--to", "fay",
                      "--return-to-owner")
    assert code == 0 and "held by fay" in text
    code, text = saga(live, "fay", "tasks", "list", "--scope", "mine")
    assert first in text
    code, text = saga(live, "fay", "tasks", "complete", first, "-f", "outcome=approve",
                      "-f", "cost_center=4711")  # a text field: "4711" stays a string
    assert code == 0 and "held by ada" in text
    code, text = saga(live, "ada", "--json", "tasks", "show", first)
    assert json.loads(text)["proposal"]["cost_center"] == "4711"
    assert saga(live, "ada", "tasks", "reassign", first)[0] == 2  # --to missing
