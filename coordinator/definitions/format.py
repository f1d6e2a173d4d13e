"""The definition format: one set of pydantic models for JSON and YAML.

A definition names the saga, its version, its input (JSON Schema), its queries and its
steps. Each node is an object whose ``kind`` says what it is (``tcc``, ``saga``,
``sequence``, ``parallel``, ``foreach``, ``race``, ``choice``, ``patched``, ``child``,
``sleep``, ``sleep_until``, ``wait``, ``task``, ``catch``, ``loop``); a *branch* is a list
of nodes run in order.
Payloads, guards, item lists and choices are JMESPath expressions
(:mod:`coordinator.definitions.expressions`); a text or a list of people that may be either
fixed or computed is written as the value itself or as ``{"expr": "..."}``. Durations are
ISO 8601 (``PT10S``) or seconds. Unknown fields are refused everywhere.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from coordinator.definitions.expressions import compile_expression
from coordinator.definitions.schemas import JsonSchema
from coordinator.definitions.update_format import UpdateDef
from coordinator.language.calendars import BusinessCalendar
from coordinator.language.flow_nodes import ITERATIONS_CEILING
from coordinator.language.policies import RetryPolicy

__all__ = ["FORMAT", "Branch", "Definition", "Expr", "Node", "Timed"]

#: The format's identifier, written as ``format`` in every exported definition.
FORMAT: Final = "sagaflow/v1"

Name = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_\-]{0,99}$")]
Text = Annotated[str, Field(max_length=2000)]
Names = Annotated[list[Name], Field(max_length=100)]


def _parses(source: str) -> str:
    compile_expression(source)  # raises ValueError (a validation error at its path)
    return source


#: A JMESPath expression over ``{"input", "results", "item", "index"}``, parsed when the
#: definition is read, so a syntax error is reported with the others, at its path.
Expression = Annotated[str, Field(min_length=1, max_length=2000), AfterValidator(_parses)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Expr(_Strict):
    """A computed value: the expression's result where a fixed value could stand."""

    expr: Expression


class _Node(_Strict):
    name: Name
    description: Text = ""


class _Step(_Node):
    participant: Name
    action: Name
    #: The forward command's payload (an object); default: the whole saga input.
    payload: Expression | None = None
    #: The step runs only when this is true (JMESPath truthiness); otherwise it is skipped.
    when: Expression | None = None
    retry: RetryPolicy | None = None
    deadline: timedelta | None = None
    rollback_deadline: timedelta | None = None


class TccStepDef(_Step):
    kind: Literal["tcc"]
    confirm_retry: RetryPolicy | None = None
    cancel_retry: RetryPolicy | None = None
    #: Payload of confirm and cancel; default: the try payload.
    finish_payload: Expression | None = None


class SagaStepDef(_Step):
    kind: Literal["saga"]
    #: Whether the participant compensates the action: said out loud, as in a class.
    compensable: bool
    compensation_retry: RetryPolicy | None = None
    compensation_payload: Expression | None = None


class Timed(_Node):
    """A composite or a child saga: it may have a timeout of its own (from its entry), which
    fails the node (``fail``, kind ``timeout``) or parks the saga as dead (``dead``)."""

    timeout: timedelta | None = None
    on_timeout: Literal["fail", "dead"] = "fail"


class SequenceDef(Timed):
    kind: Literal["sequence"]
    steps: Branch


class ParallelDef(Timed):
    kind: Literal["parallel"]
    branches: list[Branch] = Field(min_length=1, max_length=100)


class RaceDef(Timed):
    kind: Literal["race"]
    branches: list[Branch] = Field(min_length=1, max_length=100)
    quorum: int = Field(default=1, ge=1)
    verdicts: Literal["decided", "first_rejection", "all"] = "decided"


class ForEachDef(Timed):
    kind: Literal["foreach"]
    #: The list of items; the body sees each as ``item`` and its position as ``index``.
    items: Expression
    body: Branch
    max_concurrency: int | None = Field(default=None, ge=1)
    max_items: int = Field(default=100, ge=1)


class ChoiceBranchDef(_Strict):
    when: Expression
    steps: Branch


class ChoiceDef(Timed):
    kind: Literal["choice"]
    branches: list[ChoiceBranchDef] = Field(min_length=1, max_length=100)
    otherwise: Branch | None = None


class PatchedDef(_Strict):
    """A version guard: ``new`` replaces ``old`` (absent: ``new`` was added) by ``change``."""

    kind: Literal["patched"]
    change: Name
    new: Branch
    old: Branch | None = None
    name: Name | None = None
    description: Text = ""


class ChildDef(Timed):
    kind: Literal["child"]
    #: The registered saga type the child runs.
    saga: Name
    input: Expression | None = None
    when: Expression | None = None
    version: int | None = Field(default=None, ge=1)
    deadline: timedelta | None = None
    finish_retry: RetryPolicy | None = None


class SleepDef(_Node):
    kind: Literal["sleep"]
    duration: timedelta | Expr


class SleepUntilDef(_Node):
    kind: Literal["sleep_until"]
    until: datetime | Expr


class WaitDef(_Node):
    kind: Literal["wait"]
    signal: Name
    #: The signal's payload as JSON Schema; absent: any payload.
    payload: JsonSchema | None = None
    timeout: timedelta | None = None
    on_timeout: Literal["fail", "continue"] = "fail"


class EscalationDef(_Strict):
    after: timedelta
    to_users: list[Name] = Field(default_factory=list, max_length=100)
    to_groups: list[Name] = Field(default_factory=list, max_length=100)
    replace: bool = False
    priority: int | None = Field(default=None, ge=0, le=100)


class TaskDef(_Strict):
    """A human task: waits for a person to complete ``form`` (default: approve/reject)."""

    kind: Literal["task"]
    name: Name
    title: Text | Expr
    description: Text | Expr = ""
    form: JsonSchema | None = None
    outcome_field: Name = "outcome"
    reject: list[str] = Field(default_factory=lambda: ["reject"], max_length=50)
    users: Names | Expr = Field(default_factory=list)
    groups: Names | Expr = Field(default_factory=list)
    priority: int = Field(default=50, ge=0, le=100)
    due: timedelta | Expr | None = None
    calendar: BusinessCalendar | None = None
    timezone: str = Field(default="UTC", max_length=64)
    remind_after: timedelta | None = None
    remind_every: timedelta | None = None
    max_reminders: int = Field(default=3, ge=0, le=50)
    escalations: list[EscalationDef] = Field(default_factory=list, max_length=20)
    timeout: timedelta | None = None
    #: ``reject``, ``fail``, or a completed form taken as the default decision.
    on_timeout: Literal["reject", "fail"] | dict[str, Any] = "reject"
    four_eyes: bool = False
    chain: Name | None = None


#: The failure kinds a catch can name (``coordinator.language.flow_nodes.CATCHABLE``).
CatchKind = Literal["business", "deadline", "timeout", "transient", "unexpected", "bad_command",
                    "barrier_refused", "malformed_reply", "mapper", "max_iterations", "node"]


class CatchDef(Timed):
    """Run ``body``; on a failure of a kind in ``on`` run ``fallback`` in its place."""

    kind: Literal["catch"]
    body: Branch
    fallback: Branch
    #: ``all``, or the kinds caught.
    failures: Literal["all"] | Annotated[list[CatchKind], Field(min_length=1, max_length=20)]
    #: ``first``: undo what the body completed before the fallback runs; ``kept``: keep it.
    undo: Literal["first", "kept"] = "first"


class LoopDef(Timed):
    """Do-while: ``body`` runs, then again while ``until`` (over the iteration just done:
    its nodes by bare name in ``results``, its number as ``index``) is false."""

    kind: Literal["loop"]
    body: Branch
    until: Expression
    max_iterations: int = Field(ge=1, le=ITERATIONS_CEILING)


class SearchAttributeDef(_Strict):
    """A search attribute: a typed value computed from ``{"input", "results"}``, stored and
    indexed to filter sagas by (``GET /sagas?q=customer_id = 'c-42'``); ``null`` leaves it
    unset. ``keywords``: a list of texts (a filter's ``=`` means "contains")."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")]
    type: Literal["str", "int", "float", "bool", "datetime", "keywords"]
    expr: Expression
    description: Text = ""


Node = Annotated[
    TccStepDef | SagaStepDef | SequenceDef | ParallelDef | RaceDef | ForEachDef | ChoiceDef
    | PatchedDef | ChildDef | SleepDef | SleepUntilDef | WaitDef | TaskDef | CatchDef
    | LoopDef,
    Field(discriminator="kind"),
]
#: Nodes run in order.
Branch = Annotated[list[Node], Field(min_length=1, max_length=500)]


class Definition(_Strict):
    """A saga declared as data."""

    format: Literal["sagaflow/v1"] = "sagaflow/v1"
    name: Name
    version: int = Field(ge=1)
    description: Text = ""
    #: The input model as JSON Schema (an object schema).
    input: JsonSchema
    #: Read-only queries: name -> an expression over ``{"status", "input", "results"}``.
    queries: dict[Name, Expression] = Field(default_factory=dict, max_length=100)
    #: How long the saga may run forward, from its start; then it rolls back or goes dead.
    timeout: timedelta | None = None
    on_timeout: Literal["rollback", "dead"] = "rollback"
    #: Updates: name -> payload schema, require/reason checks, result expression, signal.
    updates: dict[Name, UpdateDef] = Field(default_factory=dict, max_length=100)
    #: Search attributes: typed, indexed values to filter sagas by.
    search: list[SearchAttributeDef] = Field(default_factory=list, max_length=50)
    steps: Branch


for _model in (SequenceDef, ParallelDef, RaceDef, ForEachDef, ChoiceBranchDef, ChoiceDef,
               PatchedDef, CatchDef, LoopDef, Definition):
    _model.model_rebuild()
