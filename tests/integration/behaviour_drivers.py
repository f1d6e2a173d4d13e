"""The small interface the shared behaviour suite drives a saga through, over the
time-skipping kit (``coordinator.testing``) and over the operator API (``SagaClient``) on the
real stack (worker, relay, Kafka, SDK participants with their barrier in Postgres).

Both raise :class:`Refused` with the API's stable error code, so one case checks both."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

import asyncpg
import httpx

from coordinator.client import SagaApiError, SagaClient, UpdateRejected
from coordinator.engine import InvalidTransition
from coordinator.language.saga import Saga
from coordinator.sagas.queries import QueryFailed, UnknownQuery
from coordinator.store import StoreError
from coordinator.testing import SagaRun, SagaTestEnv
from participant_sdk import Participant

__all__ = ["ApiDriver", "Driver", "KitDriver", "Refused"]

#: How long the stack may take to reach a state (generous: the machine is shared).
PATIENCE_S = 30.0


class Refused(Exception):
    """The call was refused; ``code`` is the API's error code (``saga_finished``, ...)."""

    def __init__(self, code: str, message: str) -> None:
        self.code, self.message = code, message
        super().__init__(f"{code}: {message}")


class Driver(Protocol):
    async def start(self, saga: type[Saga]) -> uuid.UUID: ...
    async def signal(self, saga_id: uuid.UUID, name: str, payload: dict[str, Any], *,
                     signal_id: str | None = None) -> bool:
        """True when the signal id was already applied (a duplicate)."""
    async def signal_with_start(self, saga: type[Saga], saga_id: uuid.UUID, name: str,
                                payload: dict[str, Any], *, signal_id: str
                                ) -> tuple[bool, bool]:
        """(started, duplicate)."""
    async def query(self, saga_id: uuid.UUID, name: str) -> dict[str, Any]: ...
    async def update(self, saga_id: uuid.UUID, name: str, payload: dict[str, Any], *,
                     update_id: str) -> tuple[str, Any]:
        """(``accepted``, the result) or (``rejected``, the reason)."""
    async def repair(self, saga_id: uuid.UUID, verb: str, reason: str,
                     **options: Any) -> str:
        """The saga's status after the repair."""
    async def reach(self, saga_id: uuid.UUID, key: str, phase: str) -> None:
        """Run the saga until node ``key`` is in ``phase``."""
    async def finish(self, saga_id: uuid.UUID) -> str: ...
    async def results(self, saga_id: uuid.UUID) -> dict[str, Any]: ...
    async def effects(self, saga_id: uuid.UUID) -> list[tuple[str, str]]: ...


def _refused(exc: Exception) -> Refused:
    """The API's code for an error the kit raised (the mapping of ``api.errors``)."""
    if isinstance(exc, StoreError):
        return Refused(exc.code, str(exc))
    if isinstance(exc, UnknownQuery):
        return Refused("unknown_query", str(exc))
    if isinstance(exc, QueryFailed):
        return Refused("query_failed", str(exc))
    if isinstance(exc, InvalidTransition):
        return Refused("invalid_transition", str(exc))
    raise exc


class KitDriver:
    def __init__(self, sagas: Sequence[type[Saga]], participant: Participant) -> None:
        self.participant = participant
        self.runs: dict[uuid.UUID, SagaRun] = {}
        self.envs = {cls.name: SagaTestEnv(cls, [participant]) for cls in sagas}

    async def start(self, saga: type[Saga]) -> uuid.UUID:
        run = await self.envs[saga.name].start({})
        self.runs[run.state.saga_id] = run
        return run.state.saga_id

    async def signal(self, saga_id: uuid.UUID, name: str, payload: dict[str, Any], *,
                     signal_id: str | None = None) -> bool:
        try:
            sent = await self.runs[saga_id].signal(name, payload, signal_id=signal_id)
        except (StoreError, InvalidTransition) as exc:
            raise _refused(exc) from exc
        return sent.duplicate

    async def signal_with_start(self, saga: type[Saga], saga_id: uuid.UUID, name: str,
                                payload: dict[str, Any], *, signal_id: str
                                ) -> tuple[bool, bool]:
        try:
            run, sent = await self.envs[saga.name].signal_with_start(
                {}, name, payload, saga_id=saga_id, signal_id=signal_id)
        except (StoreError, InvalidTransition) as exc:
            raise _refused(exc) from exc
        self.runs[saga_id] = run
        return sent.started, sent.duplicate

    async def update(self, saga_id: uuid.UUID, name: str, payload: dict[str, Any], *,
                     update_id: str) -> tuple[str, Any]:
        try:
            answer = await self.runs[saga_id].update(name, payload, update_id=update_id)
        except StoreError as exc:
            raise _refused(exc) from exc
        return answer.outcome, answer.result if answer.accepted else answer.reason

    async def query(self, saga_id: uuid.UUID, name: str) -> dict[str, Any]:
        try:
            answer = self.runs[saga_id].query(name)
        except (UnknownQuery, QueryFailed) as exc:
            raise _refused(exc) from exc
        assert isinstance(answer, dict)
        return answer

    async def repair(self, saga_id: uuid.UUID, verb: str, reason: str, **options: Any) -> str:
        try:
            return await self.runs[saga_id].repair(verb, reason, **options)
        except (StoreError, InvalidTransition) as exc:
            raise _refused(exc) from exc

    async def reach(self, saga_id: uuid.UUID, key: str, phase: str) -> None:
        run = self.runs[saga_id]
        await run.run_until_idle()
        while not (key in run.state.steps and run.state.steps[key].phase.value == phase):
            assert await run.skip(), f"{key} never reached {phase}"

    async def finish(self, saga_id: uuid.UUID) -> str:
        return await self.runs[saga_id].run_to_end()

    async def results(self, saga_id: uuid.UUID) -> dict[str, Any]:
        return self.runs[saga_id].results()

    async def effects(self, saga_id: uuid.UUID) -> list[tuple[str, str]]:
        rows = [r for env in self.envs.values() for r in env.harnesses[
            self.participant.name].tables.get("effects", []) if r["saga_id"] == saga_id]
        return [(r["step"], r["kind"]) for r in rows]


class ApiDriver:
    """Every call through the operator API's HTTP routes (in process, over ASGI)."""

    def __init__(self, app: Any, token: str, ledger: asyncpg.Connection) -> None:
        self.client = SagaClient("http://api", token=token,
                                 transport=httpx.ASGITransport(app=app))
        self.ledger = ledger

    async def _call(self, call: Any) -> Any:
        try:
            return await call
        except SagaApiError as exc:
            raise Refused(exc.code, exc.message) from exc

    async def start(self, saga: type[Saga]) -> uuid.UUID:
        saga_id: uuid.UUID = await self.client.start(saga, {})
        return saga_id

    async def signal(self, saga_id: uuid.UUID, name: str, payload: dict[str, Any], *,
                     signal_id: str | None = None) -> bool:
        sent = await self._call(self.client.signal(saga_id, name, payload,
                                                   signal_id=signal_id))
        return bool(sent["duplicate"])

    async def signal_with_start(self, saga: type[Saga], saga_id: uuid.UUID, name: str,
                                payload: dict[str, Any], *, signal_id: str
                                ) -> tuple[bool, bool]:
        sent = await self._call(self.client.signal_with_start(saga, saga_id, {}, name, payload,
                                                              signal_id=signal_id))
        return bool(sent["started"]), bool(sent["duplicate"])

    async def update(self, saga_id: uuid.UUID, name: str, payload: dict[str, Any], *,
                     update_id: str) -> tuple[str, Any]:
        try:
            result = await self._call(self.client.update(saga_id, name, payload,
                                                         update_id=update_id))
        except UpdateRejected as exc:
            return "rejected", exc.reason
        return "accepted", result

    async def query(self, saga_id: uuid.UUID, name: str) -> dict[str, Any]:
        answer: dict[str, Any] = await self._call(self.client.query(saga_id, name))
        return answer

    async def repair(self, saga_id: uuid.UUID, verb: str, reason: str, **options: Any) -> str:
        done = await self._call(getattr(self.client, verb)(saga_id, reason, **options))
        return str(done["status"])

    async def reach(self, saga_id: uuid.UUID, key: str, phase: str) -> None:
        deadline = time.monotonic() + PATIENCE_S
        while True:
            steps = {s["key"]: s["phase"] for s in (await self.client.get(saga_id))["steps"]}
            if steps.get(key) == phase:
                return
            assert time.monotonic() < deadline, f"{key} never reached {phase}: {steps}"
            await asyncio.sleep(0.05)

    async def finish(self, saga_id: uuid.UUID) -> str:
        deadline = time.monotonic() + PATIENCE_S
        while True:
            status = str((await self.client.get(saga_id))["status"])
            if status not in ("running", "compensating", "scheduled"):
                return status
            assert time.monotonic() < deadline, status
            await asyncio.sleep(0.05)

    async def results(self, saga_id: uuid.UUID) -> dict[str, Any]:
        results: dict[str, Any] = (await self.client.result(saga_id))["results"]
        return results

    async def effects(self, saga_id: uuid.UUID) -> list[tuple[str, str]]:
        rows = await self.ledger.fetch("SELECT step, kind FROM effects WHERE saga_id = $1 "
                                       "ORDER BY id", saga_id)
        return [(r["step"], r["kind"]) for r in rows]
