"""One duration syntax for every setting of every sagaflow process.

``"250ms"``, ``"5s"``, ``"1.5m"``, ``"2h"``, ``"7d"``, plain seconds (``"90"``, ``"0.2"``) and
ISO 8601 (``"PT10S"``) all parse; so do a ``timedelta`` and a number of seconds from code.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

__all__ = ["Duration", "format_duration", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# ASCII: Python's Unicode case folding would read the long s (U+017F) as "s", then find no
# unit for it; and only ASCII digits and spaces, as the API's schema pattern says.
_SIMPLE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE | re.ASCII)
_ISO = re.compile(
    r"^\s*P(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?\s*$",
    re.IGNORECASE | re.ASCII,
)
HINT = "use e.g. 250ms, 5s, 5m, 1h, 2d, plain seconds or ISO 8601 PT10S"


def parse_duration(text: str) -> timedelta:
    """Parse one duration; a ``ValueError`` names the text and the accepted forms."""
    simple = _SIMPLE.match(text)
    if simple is not None:
        return timedelta(seconds=float(simple[1]) * _UNITS[(simple[2] or "s").lower()])
    iso = _ISO.match(text)
    if iso is not None and any(iso.groupdict().values()):
        parts = {k: float(v) for k, v in iso.groupdict().items() if v}
        return timedelta(days=parts.get("d", 0), hours=parts.get("h", 0),
                         minutes=parts.get("m", 0), seconds=parts.get("s", 0))
    raise ValueError(f"not a duration: {text!r} ({HINT})")


def format_duration(value: timedelta) -> str:
    """The shortest form ``parse_duration`` reads back: ``5m``, ``250ms``, ``0s``."""
    ms = round(value.total_seconds() * 1000)
    if ms == 0:
        return "0s"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _coerce(value: Any) -> Any:
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    return value


#: A ``timedelta`` setting that reads every form above and prints as ``format_duration``.
Duration = Annotated[timedelta, BeforeValidator(_coerce), PlainSerializer(format_duration,
                                                                           when_used="json")]
