"""Bodies of ``GET /participants``: each participant's command topic and its consumers."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

__all__ = ["ParticipantOut"]


class ParticipantOut(BaseModel):
    participant: str
    #: The topic its commands go to.
    topic: str
    #: The consumer group that should read it (the participant's name unless configured).
    group: str
    #: The group's state in Kafka (``Stable``, ``Empty``, ``Dead``, ...), when known.
    state: str | None
    #: Live consumers in the group now: 0 means nothing handles its commands.
    members: int
    #: Commands on the topic the group has not consumed yet.
    lag: int | None
    #: When Kafka was asked (answers are shared for a few seconds).
    checked_at: datetime
    #: Since when the API has seen no live consumer for the topic.
    no_consumer_since: datetime | None
    #: Why the figures are missing (Kafka did not answer).
    problem: str | None
