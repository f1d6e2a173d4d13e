"""Participant SDK: build idempotent TCC and saga-step handlers that talk to the coordinator.

Declare a :class:`Participant` with decorated handlers, run it with :class:`ParticipantRunner`
(or :func:`run_participant` in a process), and unit-test it with
:class:`participant_sdk.testing.ParticipantHarness`.
"""

import importlib
from typing import TYPE_CHECKING, Any

from participant_sdk.barrier import BARRIER_TABLE, install_barrier, purge_barrier
from participant_sdk.dead_letters import (
    DEAD_LETTER_TABLE,
    DeadLetter,
    install_dead_letters,
    list_dead_letters,
    record_dead_letter,
)
from participant_sdk.errors import (
    BusinessRejection,
    ConfigurationError,
    ParticipantError,
    TransientError,
)
from participant_sdk.executor import LocalRetry
from participant_sdk.handlers import (
    HandlerContext,
    Participant,
    handles,
    on_action,
    on_cancel,
    on_compensate,
    on_confirm,
    on_try,
)
from participant_sdk.metrics import ParticipantMetrics
from participant_sdk.protocol import (
    PROTOCOL_VERSION,
    CommandEnvelope,
    ErrorInfo,
    ErrorKind,
    Outcome,
    Phase,
    ProtocolError,
    ReplyEnvelope,
    command_topic,
    reply_topic,
)
from participant_sdk.settings import ParticipantSettings

if TYPE_CHECKING:
    from participant_sdk.batch import CommandBatchHandler, CommandBatchResult
    from participant_sdk.runner import ParticipantRunner, run_participant

#: Loaded on first use: the Kafka clients they import are not needed to speak the protocol
#: (the coordinator imports this package for it, and a cold start pays for every import).
_LAZY = {
    "CommandBatchHandler": "participant_sdk.batch",
    "CommandBatchResult": "participant_sdk.batch",
    "ParticipantRunner": "participant_sdk.runner",
    "run_participant": "participant_sdk.runner",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'participant_sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

__all__ = [
    "BARRIER_TABLE",
    "DEAD_LETTER_TABLE",
    "PROTOCOL_VERSION",
    "BusinessRejection",
    "CommandBatchHandler",
    "CommandBatchResult",
    "CommandEnvelope",
    "ConfigurationError",
    "DeadLetter",
    "ErrorInfo",
    "ErrorKind",
    "HandlerContext",
    "LocalRetry",
    "Outcome",
    "Participant",
    "ParticipantError",
    "ParticipantMetrics",
    "ParticipantRunner",
    "ParticipantSettings",
    "Phase",
    "ProtocolError",
    "ReplyEnvelope",
    "TransientError",
    "command_topic",
    "handles",
    "install_barrier",
    "install_dead_letters",
    "list_dead_letters",
    "on_action",
    "on_cancel",
    "on_compensate",
    "on_confirm",
    "on_try",
    "purge_barrier",
    "record_dead_letter",
    "reply_topic",
    "run_participant",
]
