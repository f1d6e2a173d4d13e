"""The ``saga`` CLI's calls to the operator API, and how it finds the saga an operator means."""

from __future__ import annotations

import re
from typing import Any
from uuid import UUID

import httpx

__all__ = ["CliError", "call", "find_saga"]

_PREFIX = re.compile(r"[0-9a-fA-F]{4}[0-9a-fA-F-]*")


class CliError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def call(client: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
    """One API call; a refusal becomes a :class:`CliError` with the API's code and message."""
    try:
        response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        raise CliError(f"cannot reach the API at {client.base_url}: {exc}", 2) from None
    if response.status_code >= 400:
        try:
            err = response.json()["error"]
            message = f"{err['code']}: {err['message']}"
        except (ValueError, KeyError, TypeError):
            message = response.text[:500]
        if response.status_code == 401 and "authorization" not in client.headers:
            message += " (no token given: pass --token or set SAGAFLOW_API_TOKEN)"
        raise CliError(f"HTTP {response.status_code} {message}",
                       3 if response.status_code >= 500 else 1)
    if response.status_code == 204:
        return {}
    return response.json()


def find_saga(client: httpx.Client, text: str) -> str:
    """A saga id from a full id, its business key, or its first hex digits (hyphens
    optional): one saga, or an error that says why not."""
    try:
        return str(UUID(text))
    except ValueError:
        pass
    if not text.strip() or len(text) > 200:
        raise CliError(f"{text!r} is not a saga id, an id prefix nor a business key", 1)
    keyed = call(client, "GET", "/sagas", params={"business_key": text, "limit": 3})["items"]
    if len(keyed) == 1:
        return str(keyed[0]["saga_id"])
    if keyed:
        live = [k for k in keyed if k["status"] not in ("completed", "compensated", "cancelled")]
        if len(live) == 1:
            return str(live[0]["saga_id"])
        raise CliError(f"business key {text!r} names more than one saga ("
                       f"{', '.join(str(k['saga_id']) for k in keyed)}, ...): give the id", 1)
    if not _PREFIX.fullmatch(text):
        raise CliError(f"no saga has the business key {text!r} (nor is it an id or the first "
                       "hex digits of one, at least 4)", 1)
    page = call(client, "GET", "/sagas", params={"id_prefix": text, "limit": 2})
    ids = [item["saga_id"] for item in page["items"]]
    if not ids:
        raise CliError(f"no saga id starts with {text!r}, and no saga has it as business key", 1)
    if len(ids) > 1:
        raise CliError(f"{text!r} starts more than one saga id ({ids[0]}, {ids[1]}, ...): "
                       "give more digits", 1)
    return str(ids[0])
