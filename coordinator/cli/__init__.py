"""The command lines: ``sagaflow-coordinator``, ``saga`` (the operator CLI) and the
configuration reference."""
