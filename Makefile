# Developer entry points. `make demo` and `make test` are the two commands a newcomer needs.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.sagaflow-installed
APP_STAMP := $(VENV)/.sagaflow-app-installed

.PHONY: bootstrap bootstrap-app constraints system-deps services demo test test-failover lint \
	docs down status

## bootstrap: create the venv and install sagaflow with dev extras, at the versions pinned in
##            constraints.txt (again only when pyproject.toml or constraints.txt changes)
bootstrap: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	@touch $@ $(APP_STAMP)

## bootstrap-app: only what the demo runs (the coordinator extra, no test or lint tools), so a
##                fresh clone's `make demo` installs less; `make bootstrap` adds the rest
bootstrap-app: $(APP_STAMP)

$(APP_STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[coordinator]'
	@touch $@

## constraints: re-resolve the newest versions pyproject.toml allows and pin them in
##              constraints.txt (review the diff, run make test, commit)
constraints:
	rm -rf .constraints-venv
	$(PYTHON) -m venv .constraints-venv
	.constraints-venv/bin/python -m pip install -q -e '.[dev]'
	{ sed -n '/^#/p' constraints.txt; .constraints-venv/bin/pip freeze --exclude-editable; } \
		> constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .constraints-venv

## system-deps: install the system packages the tests need (Postgres server binaries, Chromium
##              and its driver, PgBouncer, make, python3.11-venv) or say which and how, and stop
system-deps:
	$(PYTHON) -m devstack.system_deps

## services: start Postgres, Kafka and Jaeger locally (no-op when already up)
services: bootstrap
	$(BIN)/python -m devstack up all

## demo: start everything, run the example sagas, then serve the web UI until Ctrl-C
##       (make demo DEMO_ARGS=--once runs the sagas and exits)
##       Jaeger's first build (minutes) runs in the background: the demo does not wait for it,
##       its spans are kept meanwhile, and it says when the trace view is ready
##       Postgres and Kafka are fetched and set up while the virtual environment installs.
demo:
	$(PYTHON) -m devstack.system_deps --demo
	@mkdir -p .local; { $(PYTHON) -m devstack install postgres && \
		$(PYTHON) -m devstack install kafka; } > .local/demo-install.log 2>&1 & \
	$(MAKE) --no-print-directory bootstrap-app; \
	wait $$! || { cat .local/demo-install.log; exit 1; }
	$(BIN)/python -m devstack up all --jaeger-in-background
	eval "$$($(BIN)/python -m devstack env)"; $(BIN)/python -m examples.demo $(DEMO_ARGS)

## lint: ruff, mypy (strict on the packages), the layer contracts (architecture.toml) and the
##       documentation site built strictly (a broken link or a page missing from the nav fails)
lint: bootstrap
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports architecture.toml
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir .site

## docs: serve the documentation site at http://127.0.0.1:8000 (rebuilt on every edit)
docs: bootstrap
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

## test: lint, then every test suite against the local services (the failover scenarios
##       included: they start and stop their own HA stack)
test: system-deps services lint
	eval "$$($(BIN)/python -m devstack env)"; $(BIN)/python -m pytest --durations=30

## test-failover: only the failover chaos scenarios
test-failover: services
	eval "$$($(BIN)/python -m devstack env)"; $(BIN)/python -m pytest -m failover

## status / down: inspect or stop the local services
status: bootstrap-app
	$(BIN)/python -m devstack status

down:
	$(BIN)/python -m devstack down all
