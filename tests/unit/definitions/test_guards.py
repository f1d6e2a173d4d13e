"""Bad input never crashes the loader and never becomes a saga class: size, depth, aliases,
unknown fields, expression limits, and a fuzz test of the whole loader."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.definitions import (
    ExpressionFailed,
    InvalidDefinition,
    compile_expression,
    export,
    load_saga,
)
from coordinator.definitions.expressions import EVALUATION_BUDGET, MAX_EXPRESSION_CHARS
from coordinator.definitions.loading import MAX_DEFINITION_BYTES, MAX_NESTING, MAX_NODES
from coordinator.engine.compiled import compile_saga
from coordinator.language.saga import Saga

ROOT = Path(__file__).resolve().parents[3]
VALID: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "checkout_saga.yaml").read_text())


def _refused(text: str | bytes) -> list[str]:
    with pytest.raises(InvalidDefinition) as refused:
        load_saga(text)
    return [str(p) for p in refused.value.problems]


def test_a_file_over_the_size_limit_is_refused_before_parsing() -> None:
    assert "more than the" in _refused("#" * (MAX_DEFINITION_BYTES + 1))[0]


@pytest.mark.parametrize("text", [
    "a: " + "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1),
    '{"a": ' + "[" * 5000 + "]" * 5000 + "}",
    "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, MAX_NESTING + 2)),
])
def test_deep_nesting_is_refused_in_yaml_and_json(text: str) -> None:
    assert any("nests deeper than" in p for p in _refused(text))


def test_too_many_values_are_refused() -> None:
    text = json.dumps({"name": "x", "steps": list(range(MAX_NODES + 1))})
    assert any(f"more than {MAX_NODES} values" in p for p in _refused(text))


def test_yaml_aliases_cannot_expand_a_small_file() -> None:
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    assert _refused(laughs) == ["(file): YAML anchors and aliases are not allowed in a "
                                "definition"]


@pytest.mark.parametrize("text", [b"\xff\xfe\x00", "[1, 2]", "just text", "", "{\"a\": }"])
def test_text_that_is_no_definition_is_one_problem_for_the_file(text: str | bytes) -> None:
    problems = _refused(text)
    assert len(problems) >= 1 and problems[0].startswith(("(file)", "name", "version"))


def test_unknown_fields_are_refused_everywhere_with_their_path() -> None:
    data = copy.deepcopy(VALID)
    data["colour"] = 1
    data["steps"][1]["body"][0]["retry"]["jitterr"] = 0.5
    data["input"]["properties"]["lines"]["items"]["uniqueItems"] = True
    assert {p.split(":")[0] for p in _refused(json.dumps(data))} == {
        "colour", "steps[1].body[0].retry.jitterr", "input.properties.lines.items.uniqueItems"}


def test_an_expression_is_bounded_in_length_and_parts() -> None:
    with pytest.raises(ValueError, match=f"more than {MAX_EXPRESSION_CHARS}"):
        compile_expression("a" * (MAX_EXPRESSION_CHARS + 1))
    with pytest.raises(ValueError, match="parts"):
        compile_expression(" || ".join(["a"] * 300))
    with pytest.raises(ValueError, match="nests deeper than"):
        compile_expression("!" * 60 + "a")
    with pytest.raises(ValueError, match="not a JMESPath expression"):
        compile_expression("!" * 900 + "a")  # the parser's own recursion, caught


@pytest.mark.parametrize("source", [
    "input" + " | [@, @]" * 40 + " | length(to_string(@))",  # each step doubles the value
    "input" + " | [@, @]" * 20 + " | [] " * 20,
    "repeat(input, `10000`) | [*].[@, @, @, @, @, @, @, @, @, @]",
    "input" + " | [@, @]" * 40,  # a result that would serialise to gigabytes
])
def test_an_expression_doing_too_much_work_fails_within_its_budget(source: str) -> None:
    with pytest.raises(ExpressionFailed, match=f"more than {EVALUATION_BUDGET} units of work"):
        compile_expression(source).evaluate({"input": "x"})


def test_repeat_is_bounded() -> None:
    with pytest.raises(ExpressionFailed, match="repeat"):
        compile_expression("repeat('x', `10001`)").evaluate({})
    assert compile_expression("repeat('x', `3`)").evaluate({}) == ["x", "x", "x"]


# -- fuzz -----------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.sampled_from(["tcc", "saga", "foreach", "race", "PT1S", "@",
                                              "input.x", "{a: b}", "[*]", "object"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=30)


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*at, i))
    return out


def _outcome(text: str | bytes) -> type[Saga] | None:
    """Load ``text``: only ``InvalidDefinition`` may come out, with a message for each
    problem; a class that comes out must be a whole saga (it compiles and exports back)."""
    try:
        cls = load_saga(text)
    except InvalidDefinition as exc:
        assert exc.problems and all(p.message for p in exc.problems)
        return None
    assert issubclass(cls, Saga)
    compile_saga(cls)
    export(cls)
    return cls


FUZZ = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.data())
def test_a_mutated_definition_is_refused_with_paths_or_is_a_whole_saga(data: st.DataObject) -> None:
    doc = copy.deepcopy(VALID)
    paths = _paths(doc)[1:]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if data.draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = data.draw(JSON)
        except (KeyError, IndexError, TypeError):
            continue
    text = json.dumps(doc) if data.draw(st.booleans()) else yaml.safe_dump(doc)
    _outcome(text)


@FUZZ
@given(JSON)
def test_any_json_value_is_refused_with_paths(value: Any) -> None:
    assert _outcome(json.dumps(value)) is None


@FUZZ
@given(st.binary(max_size=300) | st.text(max_size=300))
def test_any_bytes_or_text_are_refused(text: str | bytes) -> None:
    assert _outcome(text) is None


def test_a_value_nested_too_deeply_for_python_fails_the_expression_not_the_process() -> None:
    value: Any = 1
    for _ in range(3000):
        value = [value]
    with pytest.raises(ExpressionFailed, match="nested too deeply"):
        compile_expression("to_string(input)").evaluate({"input": value})


@pytest.mark.parametrize(("text", "says"), [
    ("name: a\nversion: 1\nname: b\n", "(file): not YAML: key 'name' given twice at line 3"),
    ('{"name": "a", "version": 1, "name": "b"}', "(file): not a definition: key 'name' given "
                                                  "twice"),
])
def test_a_key_given_twice_is_refused_not_silently_overwritten(text: str, says: str) -> None:
    assert _refused(text)[0].startswith(says), _refused(text)
