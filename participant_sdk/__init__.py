"""Participant SDK: build idempotent TCC and saga-step handlers that talk to the coordinator.

Declare a :class:`Participant` with decorated handlers, run it with :class:`ParticipantRunner`
(or :func:`run_participant` in a process), and unit-test it with
:class:`participant_sdk.testing.ParticipantHarness`.
"""

from typing import TYPE_CHECKING

from participant_sdk.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from participant_sdk.barrier import BARRIER_TABLE, install_barrier, purge_barrier
    from participant_sdk.batch import CommandBatchHandler, CommandBatchResult
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
    from participant_sdk.runner import ParticipantRunner, run_participant
    from participant_sdk.settings import ParticipantSettings

#: Every public name, loaded from its module on first use: a function's cold start
#: pays for every import, and the coordinator imports this package only to speak the protocol.
_LAZY = {
    "BARRIER_TABLE": "participant_sdk.barrier",
    "BusinessRejection": "participant_sdk.errors",
    "CommandBatchHandler": "participant_sdk.batch",
    "CommandBatchResult": "participant_sdk.batch",
    "CommandEnvelope": "participant_sdk.protocol",
    "ConfigurationError": "participant_sdk.errors",
    "DEAD_LETTER_TABLE": "participant_sdk.dead_letters",
    "DeadLetter": "participant_sdk.dead_letters",
    "ErrorInfo": "participant_sdk.protocol",
    "ErrorKind": "participant_sdk.protocol",
    "HandlerContext": "participant_sdk.handlers",
    "LocalRetry": "participant_sdk.executor",
    "Outcome": "participant_sdk.protocol",
    "PROTOCOL_VERSION": "participant_sdk.protocol",
    "Participant": "participant_sdk.handlers",
    "ParticipantError": "participant_sdk.errors",
    "ParticipantMetrics": "participant_sdk.metrics",
    "ParticipantRunner": "participant_sdk.runner",
    "ParticipantSettings": "participant_sdk.settings",
    "Phase": "participant_sdk.protocol",
    "ProtocolError": "participant_sdk.protocol",
    "ReplyEnvelope": "participant_sdk.protocol",
    "TransientError": "participant_sdk.errors",
    "command_topic": "participant_sdk.protocol",
    "handles": "participant_sdk.handlers",
    "install_barrier": "participant_sdk.barrier",
    "install_dead_letters": "participant_sdk.dead_letters",
    "list_dead_letters": "participant_sdk.dead_letters",
    "on_action": "participant_sdk.handlers",
    "on_cancel": "participant_sdk.handlers",
    "on_compensate": "participant_sdk.handlers",
    "on_confirm": "participant_sdk.handlers",
    "on_try": "participant_sdk.handlers",
    "purge_barrier": "participant_sdk.barrier",
    "record_dead_letter": "participant_sdk.dead_letters",
    "reply_topic": "participant_sdk.protocol",
    "run_participant": "participant_sdk.runner",
}


__getattr__ = lazy_exports(__name__, globals(), _LAZY)


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
