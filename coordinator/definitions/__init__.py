"""Sagas declared as data: a JSON or YAML definition, loaded into a real saga class.

::

    from coordinator.definitions import export, load_saga_file, to_yaml

    OrderSaga = load_saga_file("examples/order_saga.yaml")   # a Saga subclass
    print(to_yaml(export(OrderSaga)))                         # and back

* :mod:`~coordinator.definitions.format`: the format's pydantic models (one for JSON and YAML);
* :mod:`~coordinator.definitions.expressions`: JMESPath expressions, bounded;
* :mod:`~coordinator.definitions.schemas`: JSON Schema <-> pydantic input models;
* :mod:`~coordinator.definitions.loading` / ``building``: text -> definition -> saga class;
* :mod:`~coordinator.definitions.exporting`: saga class -> definition -> text;
* :mod:`~coordinator.definitions.published`: the format's published JSON Schema and
  ``sagaflow-coordinator validate``.
"""

from coordinator.definitions.errors import InvalidDefinition, Problem
from coordinator.definitions.exporting import export, to_json, to_yaml
from coordinator.definitions.expressions import Expression, ExpressionFailed, compile_expression
from coordinator.definitions.format import FORMAT, Definition
from coordinator.definitions.loading import (
    load_definition,
    load_saga,
    load_saga_file,
    parse_definition,
)

__all__ = [
    "FORMAT",
    "Definition",
    "Expression",
    "ExpressionFailed",
    "InvalidDefinition",
    "Problem",
    "compile_expression",
    "export",
    "load_definition",
    "load_saga",
    "load_saga_file",
    "parse_definition",
    "to_json",
    "to_yaml",
]
