# Developer entry points. `make demo` and `make test` are the two commands a newcomer needs.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.sagaflow-installed

.PHONY: bootstrap services demo test lint down status

## bootstrap: create the venv and install sagaflow with dev extras (again only when pyproject changes)
bootstrap: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $@

## services: start Postgres, Kafka and Jaeger locally (no-op when already up)
services: bootstrap
	$(BIN)/python -m devstack up all

## demo: start everything, run the example sagas, then serve the web UI until Ctrl-C
##       (make demo DEMO_ARGS=--once runs the sagas and exits)
demo: services
	eval "$$($(BIN)/python -m devstack env)"; $(BIN)/python -m examples.demo $(DEMO_ARGS)

## lint: ruff and mypy (strict on the packages)
lint: bootstrap
	$(BIN)/ruff check .
	$(BIN)/mypy

## test: lint, then every test suite against the local services
test: services lint
	eval "$$($(BIN)/python -m devstack env)"; $(BIN)/python -m pytest

## status / down: inspect or stop the local services
status: bootstrap
	$(BIN)/python -m devstack status

down:
	$(BIN)/python -m devstack down all
