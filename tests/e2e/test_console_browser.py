"""The operator's console in headless Chromium (issue 42), against the API in its own process
and a real Postgres: told "trip T-3002 is stuck", the operator types the trip's number into
the search box, lands on the dead saga, reads why it rolled back and why it died, sees that a
late ok arrived, retries, and the page then tells the true story.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from aiokafka import AIOKafkaConsumer
from pydantic import BaseModel

from coordinator.engine import ReplyReceived
from coordinator.language import RetryPolicy, Saga, TccStep
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import CommandEnvelope, ErrorKind, Outcome, Phase, decode_command
from tests.e2e.browser import api_process, chromium, click_through, need_browser, sign_in
from tests.integration.test_api_support import OPERATOR, TOKENS
from tests.integration.test_store_support import (
    ManualClock,
    migrated,
    outbox_commands,
    reply_to,
)

pytestmark = pytest.mark.e2e

#: Four cancel attempts: three retries before the saga dies, as many as the stuck scan's
#: default allows (``SAGAFLOW_STUCK_RETRIES=3``), so counting them after a repair would flag it.
CANCEL = RetryPolicy(max_attempts=4, initial_backoff=timedelta(milliseconds=100),
                     max_backoff=timedelta(milliseconds=100), jitter=0.0)


class TripInput(BaseModel):
    trip_id: str


class Trip(Saga):
    """A hotel room, then a car; known by its trip number."""

    name = "trip"
    input_model = TripInput
    business_key = "trip_id"
    steps = (TccStep("hold_room", participant="hotels", action="hold", cancel_retry=CANCEL),
             TccStep("rent_car", participant="cars", action="rent"))


@dataclass
class Site:
    base: str
    dsn: str
    prefix: str
    trip: UUID
    #: The hold_room cancel the engine gave up on: its late ok arrives during the test.
    given_up: CommandEnvelope
    kafka: str


def _registry(prefix: str) -> SagaRegistry:
    return SagaRegistry(topic_prefix=prefix, sagas=[Trip])


def _script(cmd: CommandEnvelope) -> Outcome | tuple[Outcome, ErrorKind]:
    if cmd.step == "rent_car" and cmd.phase is Phase.TRY:
        return Outcome.REJECTED  # no car: the trip rolls back
    if cmd.step == "hold_room" and cmd.phase is Phase.CANCEL:
        return Outcome.FAILED, ErrorKind.TRANSIENT  # the hotels service is down
    return Outcome.OK


@pytest.fixture
async def seeded(fresh_db: str, topic_prefix: str) -> AsyncIterator[tuple[UUID, CommandEnvelope]]:
    need_browser()
    await migrated(fresh_db)
    clock = ManualClock()
    async with await SagaStore.open(fresh_db, _registry(topic_prefix), max_size=2,
                                    clock=clock) as store:
        trip = (await store.start_saga("trip", {"trip_id": "T-3002"})).record.saga_id
        await store.start_saga("trip", {"trip_id": "T-3003"})  # another trip, in flight
        last: CommandEnvelope | None = None
        for _ in range(20):
            record = await store.get_saga(trip)
            if record is not None and record.status == "dead":
                break
            for cmd in await outbox_commands(store):
                if cmd.saga_id != trip:
                    continue
                if cmd.step == "hold_room" and cmd.phase is Phase.CANCEL:
                    last = cmd
                await store.apply(cmd.saga_id, ReplyReceived(reply=reply_to(cmd, _script(cmd))),
                                  actor=f"participant:{cmd.participant}")
            clock.advance(timedelta(seconds=1))
            await store.fire_due_timers()
        else:
            raise AssertionError("the trip did not die")
    assert last is not None and last.attempt == 4
    yield trip, last


@pytest.fixture
def site(seeded: tuple[UUID, CommandEnvelope], fresh_db: str, topic_prefix: str,
         kafka_bootstrap: str, tmp_path: Path) -> Iterator[Site]:
    trip, given_up = seeded
    groups = {"hotels": f"{topic_prefix}-hotels", "cars": f"{topic_prefix}-cars"}
    env = {"SAGAFLOW_API_TOKENS": TOKENS, "SAGAFLOW_UI_SESSION_SECRET": "e2e-secret-42",
           "SAGAFLOW_API_RUN_JOBS": "false", "SAGAFLOW_WAKE_RELAYS": "false",
           "SAGAFLOW_KAFKA_BOOTSTRAP": kafka_bootstrap,
           "SAGAFLOW_PARTICIPANT_GROUPS": json.dumps(groups)}
    args = ["--dsn", fresh_db, "--topic-prefix", topic_prefix,
            "--saga", f"{__name__}:Trip"]
    with api_process(env, args, tmp_path / "api.log") as base:
        yield Site(base, fresh_db, topic_prefix, trip, given_up, kafka_bootstrap)


@contextmanager
def hotels_service(site: Site) -> Iterator[list[CommandEnvelope]]:
    """A consumer in the hotels group, polling in a thread of its own: the service is back.
    Yields the commands it reads (the test answers them through the store)."""
    stop = threading.Event()
    started = threading.Event()
    read: list[CommandEnvelope] = []

    async def consume() -> None:
        consumer = AIOKafkaConsumer(f"{site.prefix}.hotels.commands",
                                    bootstrap_servers=site.kafka,
                                    group_id=f"{site.prefix}-hotels",
                                    auto_offset_reset="earliest")
        await consumer.start()
        started.set()
        try:
            while not stop.is_set():
                for batch in (await consumer.getmany(timeout_ms=200)).values():
                    read.extend(decode_command(r.value) for r in batch if r.value)
        finally:
            await consumer.stop()

    thread = threading.Thread(target=asyncio.run, args=(consume(),), daemon=True)
    thread.start()
    assert started.wait(30), "the consumer did not start"
    try:
        yield read
    finally:
        stop.set()
        thread.join(30)


async def _reply(site: Site, *commands: CommandEnvelope) -> None:
    """Play the hotels service: ok for each of ``commands``."""
    async with await SagaStore.open(site.dsn, _registry(site.prefix), max_size=1) as store:
        for c in commands:
            await store.apply(c.saga_id, ReplyReceived(reply=reply_to(c, Outcome.OK)),
                              actor=f"participant:{c.participant}")


def test_an_operator_finds_the_trip_by_its_number_and_the_repair_tells_the_truth(
        site: Site, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with chromium(tmp_path / "profile") as driver:
        sign_in(driver, site.base, "/ui/sagas", OPERATOR)
        keys = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "#saga-table td.mono")]
        assert "T-3002" in keys and "T-3003" in keys  # the list shows the business keys
        driver.find_element(By.ID, "q").send_keys("T-3002")
        click_through(driver, driver.find_element(By.ID, "apply-filter"))
        assert driver.current_url.endswith(f"/ui/sagas/{site.trip}")  # the only T-3002
        assert driver.find_element(By.ID, "business-key").text == "T-3002"
        banner = driver.find_element(By.ID, "failure").text
        assert "dead at step hold_room" in banner
        assert "rent_car" in driver.find_element(By.ID, "rollback-cause").text
        assert not driver.find_elements(By.ID, "late-ok")
        # The diagram: where it died, and the car's undo as the null compensation it was.
        driver.find_element(By.CSS_SELECTOR, 'svg.machine g.mark-died[data-state="hold_room"]')
        car = driver.find_element(By.CSS_SELECTOR, 'svg g.mark-null[data-state="rent_car"]')
        assert "null compensation" in car.text
        hold = driver.find_element(By.CSS_SELECTOR, "tr.phase-cancelling td.attempts").text
        assert hold == "try\u00d71 cancel\u00d74"  # in the order they happened
        car_row = driver.find_element(By.CSS_SELECTOR, "tr.phase-cancelled").text
        assert "rent_car" in car_row and "null compensation" in car_row
        driver.get(f"{site.base}/ui/types")  # both trips are at hold_room (one dead there)
        assert "hold_room 2" in driver.find_element(By.ID, "counts-trip-1").text
        driver.find_element(By.CSS_SELECTOR, '#type-trip-1 svg g.mark-here[data-state="hold_room"]')
        driver.get(f"{site.base}/ui/sagas/{site.trip}")

        asyncio.run(_reply(site, site.given_up))  # the hotels service did it after all
        driver.get(f"{site.base}/ui/sagas/{site.trip}")
        late = driver.find_element(By.ID, "late-ok").text
        assert "A late ok for the dead step arrived" in late and "Retry will complete it" in late
        assert "a late ok for the dead step arrived" in driver.find_element(By.ID, "history").text

        driver.find_element(By.CSS_SELECTOR, "#verb-retry summary").click()
        driver.find_element(By.ID, "reason-retry").send_keys("hotels is back, INC-42")
        click_through(driver, driver.find_element(By.ID, "confirm-retry"))
        assert "retry applied by olga" in driver.find_element(By.ID, "flash").text
        head = driver.find_element(By.CSS_SELECTOR, ".head").text
        assert "compensating" in head and "stuck" not in head  # the old retries do not count
        retry = driver.find_element(By.ID, "retry-hold_room")
        assert "cancel attempt 1 of 4" in retry.text and "reply due" in retry.text
        assert "gives up by" in retry.text and "UTC" in retry.text
        retry.find_element(By.CSS_SELECTOR, "details.policy summary").click()
        assert "cancel: 4 attempts, backoff 0.1 s" in retry.text
        assert "try: 3 attempts, backoff 1 s times 2 up to 1 min" in retry.text  # the default
        assert "cancelling for" in driver.find_element(By.CSS_SELECTOR, "tr.phase-cancelling").text
        topic = f"{site.prefix}.hotels.commands"
        unheard = driver.find_element(By.ID, "no-consumer-hold_room").text
        assert f"No live consumer for {topic} since" in unheard and "UTC" in unheard
        driver.get(f"{site.base}/ui/")
        assert "no live consumer" in driver.find_element(By.ID, "participant-hotels").text
        with hotels_service(site) as read:
            def consumers(d: Any) -> bool:
                d.get(f"{site.base}/ui/")  # answers are shared for 5 s: look again
                row = d.find_element(By.ID, "participant-hotels").text
                return "no live consumer" not in row and f"{site.prefix}-hotels" in row
            WebDriverWait(driver, 60, poll_frequency=2).until(consumers)
            driver.get(f"{site.base}/ui/sagas/{site.trip}")
            assert not driver.find_elements(By.ID, "no-consumer-hold_room")
            WebDriverWait(driver, 30).until(lambda _d: any(c.saga_id == site.trip for c in read))
            retried = [c for c in read if c.saga_id == site.trip]

        assert [(c.step, c.phase, c.attempt) for c in retried] == [
            ("hold_room", Phase.CANCEL, 5)]
        asyncio.run(_reply(site, *retried))  # its barrier answers the retried cancel: ok
        driver.get(f"{site.base}/ui/sagas/{site.trip}")
        head = driver.find_element(By.CSS_SELECTOR, ".head").text
        assert "compensated" in head and "stuck" not in head
        banner = driver.find_element(By.ID, "failure").text
        assert "dead at" not in banner.split("\n")[0]  # no dead reason on a repaired saga
        assert "rent_car" in driver.find_element(By.ID, "rollback-cause").text
        repaired = driver.find_element(By.ID, "repaired").text
        assert "Repaired by operator:olga" in repaired or "Repaired by olga" in repaired
        assert "hotels is back, INC-42" in repaired and "hold_room" in repaired
        history = driver.find_element(By.ID, "history").text
        assert "saga dead at hold_room" in history  # the dead reason stays in the history
        driver.find_element(By.CSS_SELECTOR, 'svg.machine g.mark-undone[data-state="hold_room"]')

        driver.get(f"{site.base}/ui/sagas")
        driver.find_element(By.ID, "q").send_keys("T-9999")
        click_through(driver, driver.find_element(By.ID, "apply-filter"))
        assert "No saga with the id, id prefix or business key “T-9999”" in (
            driver.find_element(By.ID, "no-saga").text)
        assert driver.find_element(By.ID, "q").get_attribute("value") == "T-9999"
