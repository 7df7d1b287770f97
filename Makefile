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
# pytest-xdist workers for `make test` (0: one process). Most tests wait on broker processes, the kubelet or a
# JVM rather than compute, so two workers on two cores finish the suite in well under the time of one.
TEST_WORKERS ?= 2
BENCH_ARGS ?=

# `operator/` (the kelp.operator package) sits at the top of the checkout and
# would shadow the standard library's `operator` if Python put the current
# directory first on sys.path, as `python -m` does. PYTHONSAFEPATH (3.11+)
# stops that for every Python started from here, brokers in tests included.
export PYTHONSAFEPATH := 1

.PHONY: test-long run test lint typecheck e2e bench chaos deps deps-run venv clean spark-jars kafka-tools kafka-connect

# Debian packages in two tiers: a broker needs only Python's venv (`make run`);
# the test tiers need kcat, a JDK, Maven, containerd, runc, CNI... (`make test`).
deps-run:
	@bash scripts/bootstrap-debian.sh run

deps:
	@bash scripts/bootstrap-debian.sh test

$(STAMP): pyproject.toml setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

venv: deps-run $(STAMP)

BROKERS ?= 3

run: venv
	@mkdir -p $(DATA_DIR)
	$(VENV)/bin/kelp dev-cluster --brokers $(BROKERS) --data-dir $(DATA_DIR) --kafka-port $(KAFKA_PORT) --http-port $(HTTP_PORT)

# Spark's own Kafka connector (four jars) and spark-avro (from_avro; docs/spark-avro.md), Maven, cached under
# ~/.cache/kelp/spark-jars: tests never download.
spark-jars: deps venv
	@$(PY) -m kelp.spark.jars >/dev/null

# The example pipeline end to end (examples/spark/README.md): a dev cluster of its own (like `make run`'s,
# loopback, ephemeral ports, data in data/spark-demo), orders produced, orders_pipeline.py under spark-submit
# with --available-now through format(SPARK_SOURCE), its windows printed, the brokers stopped; every step bounded.
# SPARK_SOURCE=kafka uses Spark's connector (the jars above); kelp needs none.
SPARK_SOURCE ?= kelp
.PHONY: spark-demo
spark-demo: deps venv $(if $(filter kafka,$(SPARK_SOURCE)),spark-jars)
	$(PY) examples/spark/run_demo.py --source $(SPARK_SOURCE)

# Apache Kafka's own tools 4.3.1 (Maven, cached under ~/.cache/kelp/kafka-tools-4.3.1) for tests/tools.
kafka-tools: deps venv
	@$(PY) -m kelp.kafka_tools >/dev/null

# Kafka Connect 4.3.1 (worker, FileStream connectors, MirrorMaker 2; Maven, cached under
# ~/.cache/kelp/kafka-connect-4.3.1) for tests/connect.
kafka-connect: deps venv
	@$(PY) -m kelp.kafka_connect >/dev/null

# ruff (pinned in the test extras, configured in pyproject.toml): pycodestyle, pyflakes, import order and
# bugbear over the whole checkout. Seconds; `make test` runs it first and stops on any finding.
lint: venv
	$(VENV)/bin/ruff check .

# mypy (pinned in the test extras, configured under [tool.mypy] in pyproject.toml) over kelp/, broker/,
# operator/, pyspark_kelp.py and bench/, through scripts/typecheck.py, which links broker/ and operator/ in
# as kelp.broker and kelp.operator. About 11 s from a clean clone, under 1 s with its cache (.mypy_cache);
# `make test` runs it after lint and stops on any finding. MYPY_ARGS go to mypy (paths: checkout paths).
MYPY_ARGS ?=
typecheck: venv
	$(PY) scripts/typecheck.py $(MYPY_ARGS)

test: lint typecheck deps venv spark-jars kafka-tools kafka-connect
	$(PY) -m pytest -n $(TEST_WORKERS) -m "not long" $(PYTEST_ARGS)

# The long tier (tests marked `long`): the churn cases `make test` leaves out (docs/kube-test-tier.md), one worker.
test-long: deps venv kafka-tools
	$(PY) -m pytest -p no:xdist -m long $(PYTEST_ARGS)

# End-to-end on a real Kubernetes cluster: kind or any reachable kubeconfig (e2e/README.md).
# Not part of `make test` (testpaths is tests/). Without a cluster it skips with one line and
# exits 0. `make e2e KELP_E2E_KIND_CLUSTER=kind` builds kelp:0.1.0 and loads it into kind first.
e2e: deps venv
	$(PY) -m pytest -q -rs e2e $(PYTEST_ARGS)

# bench/ is not installed: append the checkout to the end of sys.path, after the standard library.
bench: deps venv
	$(PY) -c "import runpy, sys; sys.path.append('$(CURDIR)'); sys.argv[0] = 'bench'; runpy.run_module('bench', run_name='__main__', alter_sys=True)" $(BENCH_ARGS)

# The fault suite (docs/chaos.md): three brokers of its own (network namespaces when root), idempotent acks=all
# producers and consumer groups, a seeded nemesis for SECONDS seconds of faults, then the checker's table.
# `make chaos CHAOS_ARGS="--set log.flush.interval.messages=1"` adds a power loss of every broker to the kinds.
# `make chaos CHAOS_ARGS="--replay data/chaos/<run>/history.jsonl.gz"` re-checks a run; the short seeded form
# is tests/chaos/test_chaos_short.py (in `make test`).
SEED ?= 1
SECONDS ?= 600
CHAOS_ARGS ?=
chaos: deps venv
	$(PY) -c "import runpy, sys; sys.path.append('$(CURDIR)'); sys.argv[0] = 'chaos'; runpy.run_module('tests.chaos.runner', run_name='__main__', alter_sys=True)" --seed $(SEED) --seconds $(SECONDS) $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) $(DATA_DIR) .pytest_cache .ruff_cache .mypy_cache

# crds/ is the source of truth; the chart ships byte-identical copies
# (tests/chart fails when they drift).
.PHONY: chart-crds
chart-crds:
	rm -f charts/kelp/crds/*.yaml
	cp crds/*.yaml charts/kelp/crds/

# The Cluster CRD's pod template fields carry Kubernetes' own schemas, generated from
# kubernetes-validate's (tests/chart/k8s_schemas.py); tests/chart fails when they are stale.
.PHONY: crd-schemas
crd-schemas:
	$(PY) tests/chart/k8s_schemas.py
	$(MAKE) chart-crds
