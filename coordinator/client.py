"""An async client for applications: start sagas, signal, query, wait for results, repair.

::

    async with SagaClient("http://coordinator:8000", token=TOKEN) as client:
        saga = await client.start(OrderSaga, OrderInput(order_id="o-1", amount=10))
        await client.signal(saga, "paid", Payment(amount_cents=100))
        moved = await client.update(saga, "change_address", AddressChange(address="..."))
        progress = await client.query(saga, "progress", PaymentProgress)
        outcome = await client.result(saga, wait=timedelta(minutes=5))
        task = (await client.tasks.list(scope="available"))[0]
        await client.tasks.claim(task["id"])
        await client.tasks.complete(task["id"], Approval(outcome="approve"))

It speaks the operator API over httpx. Connection errors are retried (with backoff) only where
a repeat is safe: reads, starts (the client picks the saga id, so a repeat is the same start)
and signals and updates (the client picks the id, so a repeat is applied once). A repair is
repeated only when the request never left (a refused connection). Waiting for a result is a
series of server-side long polls (``GET /sagas/{id}/result?wait=``), not a sleep loop here.
Human tasks are acted on as the token's person (``client.tasks``); the server decides who
may, and a refusal is a :class:`SagaApiError` (``task_claimed``, ``task_four_eyes``, ...).

Exceptions::

    SagaClientError            root
     ├── SagaApiError          the API answered 4xx/5xx: ``status``, ``code``, ``message``
     │    └── UpdateTimedOut   the saga did not answer an update in time (nothing applied)
     └── UpdateRejected        the saga's validator rejected an update: ``reason``
"""

from __future__ import annotations

import asyncio
import builtins
import time
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Self, TypeVar
from uuid import UUID, uuid4

import httpx
from pydantic import BaseModel

from coordinator.language.saga import Saga

__all__ = ["SagaApiError", "SagaClient", "SagaClientError", "TaskVerbs", "UpdateRejected",
           "UpdateTimedOut"]

M = TypeVar("M", bound=BaseModel)
SagaRef = UUID | str
_LONG_POLL_S = 50.0
#: Rows of a listing (an alias: ``TaskVerbs.list`` shadows the builtin in its class).
Rows = list[dict[str, Any]]


class SagaClientError(Exception):
    """Root of the client's errors."""


class SagaApiError(SagaClientError):
    """The API refused the call; ``code`` is the API's stable error code."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        self.status, self.code, self.message, self.details = status, code, message, details
        super().__init__(f"{status} {code}: {message}")


class UpdateTimedOut(SagaApiError):
    """The saga stayed busy past the update's wait (HTTP 504 ``update_timed_out``): nothing
    was applied. Send the same ``update_id`` again (or fetch it: ``update_answer``)."""

    def __init__(self, error: SagaApiError, update_id: str) -> None:
        super().__init__(error.status, error.code, error.message, error.details)
        self.update_id = update_id


class UpdateRejected(SagaClientError):
    """The saga's validator rejected the update: nothing was applied (``reason`` says why).
    The rejection is the stored answer of ``update_id``: a resend gets it again."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.saga_id, self.update_id = answer["saga_id"], answer["update_id"]
        self.name, self.reason = answer["name"], answer["reason"]
        super().__init__(f"update {self.name!r} ({self.update_id}) of saga {self.saga_id} "
                         f"rejected: {self.reason}")


def _json(value: BaseModel | dict[str, Any] | None) -> dict[str, Any]:
    if value is None:
        return {}
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else dict(value)


class SagaClient:
    """One connection pool to the API. Use ``async with``; ``aclose()`` is idempotent."""

    def __init__(self, base_url: str, *, token: str | None = None,
                 timeout: timedelta = timedelta(seconds=10), retries: int = 4,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # A long poll takes up to its wait: the read timeout must outlast it.
        limits = httpx.Timeout(timeout.total_seconds(), read=_LONG_POLL_S + 10)
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=limits,
                                       transport=transport)
        self._retries = retries
        #: The human-task verbs, acting as the token's person.
        self.tasks = TaskVerbs(self._call)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- plumbing ------------------------------------------------------------------------

    async def _call(self, method: str, path: str, *, safe: bool = True, **kw: Any) -> Any:
        """One API call; connection errors retried (all of them when ``safe``, only a
        refused connection otherwise)."""
        delay = 0.1
        for attempt in range(self._retries + 1):
            try:
                response = await self._http.request(method, path, **kw)
                break
            except (httpx.ConnectError, httpx.ConnectTimeout):
                pass
            except httpx.TransportError:
                if not safe:
                    raise
            if attempt == self._retries:
                raise SagaClientError(f"{method} {path}: API unreachable after "
                                      f"{self._retries + 1} attempts")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
            except (ValueError, KeyError, TypeError):
                error = {"code": "http_error", "message": response.text[:500]}
            raise SagaApiError(response.status_code, error.get("code", "http_error"),
                               error.get("message", ""), error.get("details"))
        return response.json() if response.content else {}

    # -- starting ------------------------------------------------------------------------

    async def start(self, saga: type[Saga] | str, input: BaseModel | dict[str, Any], *,
                    saga_id: UUID | None = None, version: int | None = None,
                    start_at: datetime | None = None, delay: timedelta | None = None
                    ) -> UUID:
        """Start a saga (validated against the class's input model when a class is given);
        returns its id. Idempotent: the same id and input return the same saga. A business
        key held by a saga in flight raises ``SagaApiError`` (409, ``details.saga_id`` names
        it), or returns that saga's id when its class declares ``on_conflict="return"``."""
        name = saga if isinstance(saga, str) else saga.name
        if not isinstance(saga, str) and not isinstance(input, BaseModel):
            input = saga.input_model.model_validate(input)
        body: dict[str, Any] = {"type": name, "input": _json(input),
                                "saga_id": str(saga_id or uuid4())}
        if version is not None:
            body["version"] = version
        if start_at is not None:
            body["start_at"] = start_at.isoformat()
        if delay is not None:
            body["delay_seconds"] = delay.total_seconds()
        return UUID((await self._call("POST", "/sagas", json=body))["saga_id"])

    # -- reading -------------------------------------------------------------------------

    async def get(self, saga_id: SagaRef) -> dict[str, Any]:
        data: dict[str, Any] = await self._call("GET", f"/sagas/{saga_id}")
        return data

    async def list(self, **filters: Any) -> list[dict[str, Any]]:
        """One page of ``GET /sagas`` (filters: ``type``, ``status``, ``limit``, ...)."""
        data = await self._call("GET", "/sagas", params=filters)
        items: list[dict[str, Any]] = data["items"]
        return items

    async def find(self, business_key: str, *, saga_type: str | None = None
                   ) -> builtins.list[dict[str, Any]]:
        """The sagas known by ``business_key`` (their class's ``business_key``), newest first."""
        if not business_key:
            raise ValueError("business_key must not be empty")
        filters = {"business_key": business_key}
        if saga_type is not None:
            filters["type"] = saga_type
        return await self.list(**filters)

    async def query(self, saga_id: SagaRef, name: str, model: type[M] | None = None
                    ) -> M | dict[str, Any]:
        data = await self._call("GET", f"/sagas/{saga_id}/queries/{name}")
        result: dict[str, Any] = data["result"]
        return model.model_validate(result) if model is not None else result

    async def result(self, saga_id: SagaRef, *, wait: timedelta | None = None
                     ) -> dict[str, Any]:
        """Wait until the saga finishes or goes dead (``done``), or ``wait`` passes
        (``None``: wait for ever), through server-side long polls; the last answer."""
        deadline = None if wait is None else time.monotonic() + wait.total_seconds()
        while True:
            left = _LONG_POLL_S if deadline is None else max(0.0, deadline - time.monotonic())
            poll = min(left, _LONG_POLL_S)
            data: dict[str, Any] = await self._call(
                "GET", f"/sagas/{saga_id}/result", params={"wait": f"{poll:.3f}s"})
            if data["done"] or (deadline is not None and time.monotonic() >= deadline):
                return data

    # -- signals -------------------------------------------------------------------------

    async def signal(self, saga_id: SagaRef, name: str,
                     payload: BaseModel | dict[str, Any] | None = None, *,
                     signal_id: str | None = None) -> dict[str, Any]:
        """Send a signal; its id (default: a new one, kept across retries) makes a
        repeat apply once."""
        body = {"signal_id": signal_id or str(uuid4()), "payload": _json(payload)}
        data: dict[str, Any] = await self._call("POST", f"/sagas/{saga_id}/signals/{name}",
                                                json=body)
        return data

    async def signal_with_start(self, saga: type[Saga] | str, saga_id: UUID,
                                input: BaseModel | dict[str, Any], name: str,
                                payload: BaseModel | dict[str, Any] | None = None, *,
                                signal_id: str | None = None) -> dict[str, Any]:
        body = {"type": saga if isinstance(saga, str) else saga.name,
                "saga_id": str(saga_id), "input": _json(input), "signal": name,
                "signal_id": signal_id or str(uuid4()), "payload": _json(payload)}
        data: dict[str, Any] = await self._call("POST", "/signal-with-start", json=body)
        return data

    async def update(self, saga_id: SagaRef, name: str,
                     payload: BaseModel | dict[str, Any] | None = None, *,
                     update_id: str | None = None, wait: timedelta = timedelta(seconds=10),
                     model: type[M] | None = None) -> M | dict[str, Any]:
        """Send an update and return its result once the saga durably applied it.

        Raises :class:`UpdateRejected` (the validator's reason; nothing applied) or
        :class:`UpdateTimedOut` (the saga stayed busy past ``wait``; nothing applied: send
        the same ``update_id`` again). The id (default: a new one, kept across retries)
        makes a repeat get the stored answer, never a second application."""
        uid = update_id or str(uuid4())
        body = {"update_id": uid, "payload": _json(payload),
                "wait_seconds": wait.total_seconds()}
        read = httpx.Timeout(self._http.timeout.connect, read=wait.total_seconds() + 10)
        try:
            answer = await self._call("POST", f"/sagas/{saga_id}/updates/{name}", json=body,
                                      timeout=read)
        except SagaApiError as exc:
            if exc.code == "update_timed_out":
                raise UpdateTimedOut(exc, uid) from exc
            raise
        return _update_result(answer, model)

    async def update_answer(self, saga_id: SagaRef, name: str, update_id: str
                            ) -> dict[str, Any]:
        """The stored answer of an update id (``outcome``, ``result`` or ``reason``); a
        :class:`SagaApiError` ``update_not_found`` when it was never applied."""
        data: dict[str, Any] = await self._call(
            "GET", f"/sagas/{saga_id}/updates/{name}/{update_id}")
        return data

    # -- repairs (operator role) ---------------------------------------------------------

    async def _repair(self, verb: str, saga_id: SagaRef, reason: str, **body: Any
                      ) -> dict[str, Any]:
        fields = {k: v for k, v in body.items() if v is not None}
        data: dict[str, Any] = await self._call("POST", f"/sagas/{saga_id}/{verb}",
                                                safe=False, json={"reason": reason, **fields})
        return data

    async def retry(self, saga_id: SagaRef, reason: str, *, step: str | None = None,
                    payload: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self._repair("retry", saga_id, reason, step=step, payload=payload)

    async def skip(self, saga_id: SagaRef, reason: str, *, step: str | None = None,
                   result: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self._repair("skip", saga_id, reason, step=step, result=result)

    async def compensate(self, saga_id: SagaRef, reason: str, *, step: str | None = None
                         ) -> dict[str, Any]:
        return await self._repair("compensate", saga_id, reason, step=step)

    async def cancel(self, saga_id: SagaRef, reason: str) -> dict[str, Any]:
        return await self._repair("cancel", saga_id, reason)

    async def resolve(self, saga_id: SagaRef, reason: str, *, status: str = "completed"
                      ) -> dict[str, Any]:
        return await self._repair("resolve", saga_id, reason, status=status)


def _update_result(answer: dict[str, Any], model: type[M] | None) -> M | dict[str, Any]:
    if answer.get("outcome") != "accepted":
        raise UpdateRejected(answer)
    result: dict[str, Any] = answer.get("result") or {}
    return model.model_validate(result) if model is not None else result


def _query(params: dict[str, Any]) -> dict[str, str]:
    """Query parameters as the API reads them (``true``/``false``; ``None`` left out)."""
    return {k: str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in params.items() if v is not None}


class TaskVerbs:
    """Human tasks through the API: the inbox, one task, and the actions on it. Reads are
    retried; actions only when the request never left (a repeated completion would be a
    409 ``task_closed``)."""

    def __init__(self, call: Any) -> None:
        self._call = call

    async def list(self, *, scope: str = "inbox", limit: int = 50, cursor: str | None = None,
                   **filters: Any) -> Rows:
        """One page of ``GET /tasks`` (``scope``: inbox, mine, available, all; filters:
        ``state``, ``overdue``, ``saga_type``, ``saga_id``, ``min_priority``, ``assignee``,
        ``candidate_group``, ``text``)."""
        page = await self.page(scope=scope, limit=limit, cursor=cursor, **filters)
        items: Rows = page["items"]
        return items

    async def page(self, **params: Any) -> dict[str, Any]:
        """``GET /tasks`` as the API answers it: ``items`` and ``next_cursor``."""
        data: dict[str, Any] = await self._call("GET", "/tasks", params=_query(params))
        return data

    async def counts(self, *, scope: str = "inbox", **filters: Any) -> dict[str, int]:
        data: dict[str, int] = await self._call(
            "GET", "/tasks/counts", params=_query({"scope": scope, **filters}))
        return data

    async def get(self, task_id: str) -> dict[str, Any]:
        """One task, with ``form_schema`` (the form's JSON Schema) and ``comments``."""
        data: dict[str, Any] = await self._call("GET", f"/tasks/{task_id}")
        return data

    async def of_saga(self, saga_id: SagaRef) -> Rows:
        data: Rows = await self._call("GET", f"/sagas/{saga_id}/tasks")
        return data

    async def _act(self, task_id: str, verb: str, body: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
        data: dict[str, Any] = await self._call("POST", f"/tasks/{task_id}/{verb}",
                                                safe=False, json=body)
        return data

    async def claim(self, task_id: str) -> dict[str, Any]:
        return await self._act(task_id, "claim")

    async def unclaim(self, task_id: str) -> dict[str, Any]:
        return await self._act(task_id, "unclaim")

    async def complete(self, task_id: str, form: BaseModel | dict[str, Any]
                       ) -> dict[str, Any]:
        """Complete a task you hold; ``form`` is validated by the server (422 per field)."""
        return await self._act(task_id, "complete", {"data": _json(form)})

    async def reassign(self, task_id: str, to_user: str) -> dict[str, Any]:
        return await self._act(task_id, "reassign", {"to_user": to_user})

    async def delegate(self, task_id: str, to_user: str, *, return_to_owner: bool = False
                       ) -> dict[str, Any]:
        return await self._act(task_id, "delegate", {"to_user": to_user,
                                                     "return_to_owner": return_to_owner})

    async def comment(self, task_id: str, text: str) -> dict[str, Any]:
        return await self._act(task_id, "comments", {"text": text})
