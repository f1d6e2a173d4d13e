"""The node kinds, one module each; :mod:`base` holds what they share."""

from coordinator.engine.nodes import (
    base,
    catch,
    choice,
    foreach,
    loop,
    parallel,
    patched,
    race,
    sequence,
    sleep,
    step,
    task,
    wait,
)
from coordinator.engine.nodes.base import ROOT, Progress, Scope, forward, undo

base.KINDS.update({
    "tcc": step.KIND,
    "saga": step.KIND,
    "child": step.KIND,  # a child saga is a step whose participant is another saga
    "sequence": sequence.KIND,
    "parallel": parallel.KIND,
    "foreach": foreach.KIND,
    "race": race.KIND,
    "choice": choice.KIND,
    "patched": patched.KIND,
    "sleep": sleep.KIND,
    "signal": wait.KIND,
    "task": task.KIND,
    "catch": catch.KIND,
    "loop": loop.KIND,
})

__all__ = ["ROOT", "Progress", "Scope", "forward", "undo"]
