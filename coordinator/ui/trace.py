"""A saga's trace, read server-side from Jaeger's query API and laid out as a span timeline.

``span_rows`` is the layout ``docs/render_trace_svg.py`` draws as a static SVG: spans as a tree
(children under their ``CHILD_OF`` parent, by start time), database client spans left out
unless asked, offsets and widths as fractions of the whole trace. The browser never talks to
Jaeger: the API fetches ``/api/traces/{id}`` (Jaeger's v1 JSON, still served by Jaeger v2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["SpanRow", "TraceFetch", "TraceView", "fetch_trace", "span_rows", "trace_id_of"]


@dataclass(frozen=True, slots=True)
class SpanRow:
    depth: int
    span_id: str
    service: str
    operation: str
    #: Index into the service palette (the CSS classes ``svc0`` … ``svc7``).
    colour: int
    error: bool
    #: Start offset and duration as fractions of the trace (0..1).
    offset: float
    width: float
    duration_ms: float
    start_ms: float
    tags: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TraceView:
    trace_id: str
    rows: list[SpanRow]
    services: dict[str, int]
    duration_ms: float
    depth: int
    total_spans: int


@dataclass(frozen=True, slots=True)
class TraceFetch:
    """The trace, or why there is none (Jaeger off, unreachable, trace aged out)."""

    view: TraceView | None
    problem: str | None


PALETTE_SIZE = 8


def trace_id_of(trace_context: Mapping[str, str]) -> str | None:
    """The trace id of a W3C ``traceparent`` (``00-<trace id>-<span id>-<flags>``)."""
    parts = trace_context.get("traceparent", "").split("-")
    if len(parts) == 4 and len(parts[1]) == 32 and parts[1].strip("0"):
        return parts[1]
    return None


def tags_of(span: Mapping[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span.get("tags", [])}


def _parent(span: Mapping[str, Any]) -> str | None:
    for ref in span.get("references", []):
        if ref.get("refType") == "CHILD_OF":
            return str(ref["spanID"])
    return None


def _is_db_client(tags: Mapping[str, Any]) -> bool:
    return bool({"db.system", "db.system.name"} & tags.keys()) and tags.get("span.kind") == "client"


def span_rows(data: Mapping[str, Any], *, with_db: bool = False) -> TraceView:
    """Lay out one trace of Jaeger's v1 JSON (``{"traceID", "spans", "processes"}``)."""
    every = {s["spanID"]: s for s in data["spans"]}
    service = {sid: data["processes"][s["processID"]]["serviceName"] for sid, s in every.items()}
    spans = {sid: s for sid, s in every.items() if with_db or not _is_db_client(tags_of(s))}
    children: dict[str | None, list[str]] = {}
    for sid, span in spans.items():
        parent = _parent(span)
        children.setdefault(parent if parent in spans else None, []).append(sid)
    order: list[tuple[int, str]] = []

    def walk(sid: str, depth: int) -> None:
        order.append((depth, sid))
        for kid in sorted(children.get(sid, []), key=lambda k: spans[k]["startTime"]):
            walk(kid, depth + 1)

    for root in sorted(children.get(None, []), key=lambda k: spans[k]["startTime"]):
        walk(root, 0)
    start = min((s["startTime"] for s in spans.values()), default=0)
    end = max((s["startTime"] + s["duration"] for s in spans.values()), default=1)
    total = max(end - start, 1)
    colours = {name: i % PALETTE_SIZE for i, name in enumerate(sorted(set(service.values())))}
    rows = []
    for depth, sid in order:
        span = spans[sid]
        tags = tags_of(span)
        rows.append(SpanRow(
            depth=depth, span_id=sid, service=service[sid], operation=span["operationName"],
            colour=colours[service[sid]], error=tags.get("error") is True,
            offset=(span["startTime"] - start) / total, width=span["duration"] / total,
            duration_ms=span["duration"] / 1000, start_ms=(span["startTime"] - start) / 1000,
            tags=tags))
    return TraceView(trace_id=str(data.get("traceID", "")), rows=rows, services=colours,
                     duration_ms=total / 1000, depth=max((d for d, _ in order), default=0) + 1,
                     total_spans=len(every))


async def fetch_trace(base_url: str | None, trace_id: str | None, *, wait: float,
                      transport: httpx.AsyncBaseTransport | None = None) -> TraceFetch:
    """``GET {base_url}/api/traces/{trace_id}``, with a sentence for every way it can fail."""
    if not base_url:
        return TraceFetch(None, "Tracing is not configured: set SAGAFLOW_JAEGER_QUERY to "
                                "Jaeger's query URL.")
    if trace_id is None:
        return TraceFetch(None, "This saga carries no trace context.")
    url = f"{base_url.rstrip('/')}/api/traces/{trace_id}"
    try:
        async with httpx.AsyncClient(timeout=wait, transport=transport) as client:
            resp = await client.get(url)
    except httpx.HTTPError as exc:
        return TraceFetch(None, f"Jaeger did not answer ({type(exc).__name__}).")
    if resp.status_code == 404:
        return TraceFetch(None, f"Jaeger has no trace {trace_id} (not exported yet, or aged "
                                "out of its storage).")
    if resp.status_code != 200:
        return TraceFetch(None, f"Jaeger answered HTTP {resp.status_code}.")
    try:
        data = resp.json()["data"][0]
        return TraceFetch(span_rows(data), None)
    except (ValueError, KeyError, IndexError, TypeError):
        return TraceFetch(None, "Jaeger's answer is not a trace this page can read.")
