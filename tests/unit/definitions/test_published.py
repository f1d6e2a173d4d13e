"""The published JSON Schema matches the models; ``validate`` lists every problem with its
path and says so in its exit code."""

from __future__ import annotations

import io
import json
from pathlib import Path

import jsonschema_rs
import pytest
import yaml

from coordinator.cli.main import main
from coordinator.cli.validate import main_validate
from coordinator.definitions.published import definition_schema, definition_schema_text

ROOT = Path(__file__).resolve().parents[3]
PUBLISHED = ROOT / "docs" / "saga-definition.schema.json"
EXAMPLES = [ROOT / "examples" / "order_saga.yaml", ROOT / "examples" / "checkout_saga.yaml"]

BROKEN = """
name: broken
version: 0
input: {type: object, properties: {n: {type: integer}}}
steps:
  - kind: tcc
    name: pay
    participant: payments
    action: charge
    payload: "{amount: input.n"
    retry: {max_attempts: 0}
    colour: blue
  - kind: foreach
    name: lines
    items: input.lines
    body: []
"""

CLASS_PROBLEMS = """
name: twice
version: 1
input: {type: object, properties: {n: {type: integer}}}
steps:
  - {kind: saga, name: pay, participant: payments, action: charge, compensable: true}
  - kind: race
    name: ship
    quorum: 3
    branches:
      - [{kind: saga, name: pay, participant: carrier, action: book, compensable: false}]
"""


def test_the_published_schema_is_generated_from_the_models() -> None:
    assert PUBLISHED.read_text() == definition_schema_text(), (
        "regenerate: sagaflow-coordinator validate --schema > docs/saga-definition.schema.json")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_editors_accept_the_examples_with_the_published_schema(path: Path) -> None:
    validator = jsonschema_rs.validator_for(json.loads(PUBLISHED.read_text()))
    data = json.loads(json.dumps(yaml.safe_load(path.read_text()), default=str))
    assert validator.is_valid(data), list(validator.iter_errors(data))[:3]
    data["steps"][0]["colour"] = "blue"
    assert not validator.is_valid(data)  # unknown fields are refused there too


def test_the_schema_names_every_node_kind() -> None:
    node = definition_schema()["$defs"]["SequenceDef"]["properties"]["steps"]["items"]
    kinds = set(node["discriminator"]["mapping"])
    assert kinds == {"tcc", "saga", "sequence", "parallel", "race", "foreach", "choice",
                     "patched", "child", "sleep", "sleep_until", "wait", "task", "catch",
                     "loop"}


def _validate(tmp_path: Path, text: str) -> tuple[int, list[str]]:
    file = tmp_path / "saga.yaml"
    file.write_text(text)
    out = io.StringIO()
    code = main_validate([str(file)], out=out)
    return code, [line.removeprefix(f"{file}: ") for line in out.getvalue().splitlines()]


def test_validate_reports_every_problem_of_the_format_at_once_with_its_path(
    tmp_path: Path,
) -> None:
    code, lines = _validate(tmp_path, BROKEN)
    assert code == 1
    paths = [line.split(": ", 1)[0] for line in lines]
    assert paths == ["version", "steps[0].payload", "steps[0].retry.max_attempts",
                     "steps[0].colour", "steps[1].body"], lines
    assert "not a JMESPath expression" in lines[1]
    assert "Extra inputs are not permitted" in lines[3]


def test_validate_reports_what_the_class_checks_find_at_their_nodes(tmp_path: Path) -> None:
    code, lines = _validate(tmp_path, CLASS_PROBLEMS)
    assert code == 1
    assert "node pay: duplicate node name 'pay'" in lines
    assert any(line.startswith("node pay: a step inside a Race must be reversible")
               for line in lines), lines
    assert any(line.startswith("node ship: quorum must be") for line in lines), lines


def test_validate_passes_the_examples_through_the_main_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["validate", *map(str, EXAMPLES)]) == 0
    said = capsys.readouterr().out
    assert "order_saga.yaml: ok: order v1" in said and "checkout_saga.yaml: ok: checkout v1" in said


def test_validate_says_when_a_file_is_missing_or_not_yaml(tmp_path: Path) -> None:
    code, lines = _validate(tmp_path, "name: [unclosed")
    assert code == 1 and lines[0].startswith("(file): not YAML:"), lines
    out = io.StringIO()
    assert main_validate([str(tmp_path / "absent.yaml")], out=out) == 1
    assert "cannot read" in out.getvalue()
