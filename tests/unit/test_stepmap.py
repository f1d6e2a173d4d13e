"""``engine.stepmap``: a decision's node states read and iterate exactly as the dict they stand
for, the states before it never change, and a decision copies only what changed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.engine.stepmap import StepMap, editable

KEYS = st.sampled_from([f"k{i}" for i in range(60)])
#: Decisions: each a list of (key, value) writes.
DECISIONS = st.lists(st.lists(st.tuples(KEYS, st.integers(0, 9)), max_size=8), max_size=40)


@settings(max_examples=300, deadline=None)
@given(start=st.dictionaries(KEYS, st.integers(0, 9), max_size=40), decisions=DECISIONS)
def test_a_chain_of_decisions_reads_like_a_dict_and_leaves_each_state_as_it_was(
    start: dict[str, int], decisions: list[list[tuple[str, int]]]
) -> None:
    model = dict(start)
    current: object = dict(start)
    published: list[tuple[StepMap, dict[str, int]]] = []
    for writes in decisions:
        if not writes:
            continue
        mine = editable(current)  # type: ignore[arg-type]
        for key, value in writes:
            mine.set(key, value)
            model[key] = value
        current = mine
        published.append((mine, dict(model)))
        # Reads, membership, length, and order (a changed key keeps its place).
        assert list(mine) == list(model) and len(mine) == len(model)
        assert list(mine.items()) == list(model.items())
        assert all(mine[k] == v and mine.get(k) == v and k in mine for k, v in model.items())
        assert mine.get("absent") is None and "absent" not in mine
        assert mine == model and model == mine
    for state, seen in published:  # no later decision changed an earlier state
        assert list(state.items()) == list(seen.items())


def test_a_decision_copies_only_the_changes_until_they_are_folded_in() -> None:
    steps = editable({f"k{i}": i for i in range(1000)})
    steps.set("k1", -1)
    nxt = editable(steps)
    assert nxt._base is steps._base and nxt._delta == {"k1": -1}  # the 1,000 shared
    nxt.set("new", 1)
    assert list(nxt)[-1] == "new" and list(nxt)[1] == "k1" and nxt["k1"] == -1
    for i in range(200):  # a delta past a tenth of the base is folded into a new base
        nxt = editable(nxt)
        nxt.set(f"k{i}", i * 10)
    assert len(nxt._delta) <= 100 and nxt._base is not steps._base
    assert steps["k5"] == 5 and nxt["k5"] == 50 and len(nxt) == 1001
