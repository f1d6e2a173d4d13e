"""The saga coordinator, one package per layer (``docs/architecture.md`` draws them):

* :mod:`coordinator.language`: what a saga author declares (sagas, steps, policies, nodes);
* :mod:`coordinator.engine`: the pure engine (compiles the language, decides, replays);
* :mod:`coordinator.sagas`: saga types (registry, loading, queries, diagrams, patterns);
* :mod:`coordinator.store` and :mod:`coordinator.migrations`: state in Postgres;
* :mod:`coordinator.runtime`: the worker, the serverless functions, their wiring and hints;
* :mod:`coordinator.schedules`, :mod:`coordinator.observability`, :mod:`coordinator.versioning`;
* :mod:`coordinator.api`, :mod:`coordinator.ui`, :mod:`coordinator.cli`: the operator's side;
* :mod:`coordinator.client` (the app client) and :mod:`coordinator.testing` (the test kit).
"""

from coordinator._moved import install as _install_moved_names

_install_moved_names()
