# Two entry points a new machine needs: `make run` and `make test`.
# Each bootstraps what it needs (Debian packages, .venv, pinned packages)
# idempotently; a stamp file keeps the second run fast.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kelp-installed
DATA_DIR ?= $(CURDIR)/data
KAFKA_PORT ?= 9092
HTTP_PORT ?= 8080
PYTEST_ARGS ?=

.PHONY: run test bench deps venv clean

deps:
	@bash scripts/bootstrap-debian.sh

$(STAMP): pyproject.toml setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

venv: deps $(STAMP)

run: venv
	@mkdir -p $(DATA_DIR)
	$(VENV)/bin/kelp broker --log-dirs $(DATA_DIR) --port $(KAFKA_PORT) --http-port $(HTTP_PORT)

test: venv
	$(PY) -m pytest $(PYTEST_ARGS)

bench: venv
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(DATA_DIR) .pytest_cache
