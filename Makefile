# txstream: setup, the native local stack, demo, tests and benchmarks.
# Everything a fresh machine lacks is installed here: Debian packages, the venv, Kafka jars.

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
KAFKA_LIBS := build/kafka/libs
SPARK_JARS := build/spark/jars
APT_PACKAGES := docker-compose kcat prometheus postgresql openssl graphviz chromium gcc
MVN := mvn -q -B
PEERS_VENV := .venv-peers

.PHONY: setup apt venv native kafka-jars spark-jars etl up down status demo test lint unit integration faults bench bench-full report docs peers-venv clean

setup: apt venv native kafka-jars spark-jars

apt:
	@# "installed" only: a removed package keeps a dpkg record (its config files) that dpkg -s accepts
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml apps/pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c requirements.lock -e '.[dev,bench,etl,docs]' -e apps
	@touch $@

# The hot path's modules compiled by mypyc (txstream/native.py says which, and why a stale
# build never runs); rebuilt only when a source changed. TXSTREAM_NATIVE=0 runs the sources.
native: venv apt
	@$(BIN)/python libs/txstream/build_native.py

kafka-jars: $(KAFKA_LIBS)/.installed

$(KAFKA_LIBS)/.installed: deps/kafka/pom.xml
	@echo "fetching Kafka broker jars with mvn (cached under ~/.m2)"
	@rm -rf $(KAFKA_LIBS) && mkdir -p $(KAFKA_LIBS)
	$(MVN) -f deps/kafka/pom.xml org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
	  -DoutputDirectory=$(abspath $(KAFKA_LIBS)) -DincludeScope=runtime
	@touch $@

# Delta and the Kafka source for Spark (deps/spark/pom.xml); pyspark ships the rest.
spark-jars: $(SPARK_JARS)/.installed

$(SPARK_JARS)/.installed: deps/spark/pom.xml
	@echo "fetching Spark's Delta and Kafka jars with mvn (cached under ~/.m2)"
	@rm -rf $(SPARK_JARS) && mkdir -p $(SPARK_JARS)
	$(MVN) -f deps/spark/pom.xml org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
	  -DoutputDirectory=$(abspath $(SPARK_JARS)) -DincludeScope=runtime
	@touch $@

up: setup
	$(BIN)/txstream stack up

down:
	@if [ -x $(BIN)/txstream ]; then $(BIN)/txstream stack down; fi

status:
	$(BIN)/txstream stack status

demo: setup
	$(BIN)/python -m leaderboard.demo
	$(MAKE) --no-print-directory etl

# The warehouse ETL in local mode: the newest demo app's committed topics into Delta tables
# under .txstream/warehouse, then the maintenance job. ETL_APP=<app> loads another app, and
# ETL_CONFIG=<file> names its warehouse (what to load, and into what).
ETL_APP ?= latest
ETL_CONFIG ?= apps/leaderboard/warehouse.toml
etl: up
	$(BIN)/txstream etl run --app $(ETL_APP) --config $(ETL_CONFIG) --once
	$(BIN)/txstream etl maintain --app $(ETL_APP) --config $(ETL_CONFIG)

# lint-imports keeps the layers and refuses import circles (contracts in .importlinter).
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

unit: venv
	$(BIN)/pytest -q tests/unit

integration: setup
	$(BIN)/pytest -q -m "not slow" tests/integration

# The suite runs the compiled hot path (`make native`); its modules' own unit tests run
# from source too, as the wheel's users run them.
NATIVE_UNIT_TESTS = $(wildcard tests/unit/engine/test_engine*.py tests/unit/engine/test_record_limit.py \
  tests/unit/engine/test_hops.py tests/unit/engine/test_windows.py tests/unit/state tests/unit/schemas)

test: setup lint
	$(BIN)/pytest -q -ra --durations=12 -m "not slow" tests
	TXSTREAM_NATIVE=0 $(BIN)/pytest -q $(NATIVE_UNIT_TESTS)

# The fault suite at full length: more votes, more kills, three seeds per case, every
# recovery mode and damage; the warehouse ETL's kill test with a kill between two table
# commits of one micro-batch; the order pipeline on more partition, worker and batch-size
# choices; all five Leaderboard reference cases (`make test` runs two).
# And, left out of `make test` to keep it short: workers killed during consumer-group
# rebalances; the order pipeline's and a repartitioned edge's workers SIGKILLed; promised
# reservations with the coordinator and workers SIGKILLed; the bank run with its
# coordinator and workers killed; the sequencer killed mid-stream; three brokers with one
# killed; the broker SIGKILLed under a worker; the ETL on a secured cluster and
# docs/guides/security.md; the native stack with a Spark cluster, and SIGKILLed then
# restarted; a stream's schema changed under the warehouse both ways; and the bank's
# warehouse loaded every half second beside 2PC load with its driver SIGKILLed three times,
# beside spanning transfers, and around a held 2PC transfer.
# A failing case names its seed; rerun it alone with TXSTREAM_FAULT_SEED=<seed>. Also the
# engine's property tests at 5,000 examples, the commit-protocol simulation at 10,000
# seeds and the spanning-procedure simulation at 3,000 (a failing one says how to rerun it
# alone: TXSTREAM_SIM_SEED=<seed>).
faults: setup
	TXSTREAM_FAULTS=long $(BIN)/pytest -q -ra -m "faults or slow" tests

# Quix Streams, a peer in the leaderboard benchmark, pins confluent-kafka < 2.13: its own venv.
peers-venv: $(PEERS_VENV)/.installed

$(PEERS_VENV)/.installed: bench/leaderboard_peers/requirements-peers.txt
	@test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install -q -r $<
	@touch $@

# The short run (under 10 minutes) records the leaderboard, latency and trigger-chain figures
# in docs/figures; its recovery and bank runs are trimmed and write to build/bench instead, so
# the documented full-size figures stay. bench-full is the long run, all into docs/figures.
bench: up peers-venv
	$(BIN)/python -m bench.leaderboard_peers --votes 8000 --threshold 2000 --latency --latency-seconds 5
	$(BIN)/python -m bench.engine_bench --votes 20000 --groups 1,20,5000
	$(BIN)/python -m bench.live_cost --pairs 1 --seconds 6
	$(BIN)/python -m bench.interleave --votes 20000 --repeat 2
	$(BIN)/python -m bench.txn_floor --rounds 300
	$(BIN)/python bench/trigger_chains_bench.py --lengths 1,5,10 --batches 15000 --pg-batches 2000
	$(BIN)/python bench/sequencer_bench.py --events 20000
	$(BIN)/python bench/recovery_bench.py --lengths 1,10 --batches 3000 --batches-off 50 \
	  --recovery-batches 5000 --out build/bench/recovery_bench.json --figures build/bench
	$(BIN)/python bench/bank_bench.py --accounts 100000 --transfers 1000 --out build/bench/bank_bench.json
	$(BIN)/python -m bench.ycsb_bench --records 10000 --ops 5000
	$(BIN)/python -m bench.inventory_bench --reservations 1000
	$(BIN)/python -m bench.tpcc_bench --warehouses 4 --txns 1000
	$(BIN)/python bench/etl_bench.py --votes 20000 --rate 1000
	$(BIN)/python bench/orders_bench.py --events 3000 --workers 1,2 --batch-sizes 1 --out build/bench/orders_bench.json
	$(BIN)/python bench/transfers_bench.py --accounts 2000 --transfers 3000 --workers 1 --batch-sizes 1,10
	$(BIN)/python bench/hops_bench.py --events 5000 --workers 1 --batch-sizes 1,10
	$(BIN)/python bench/query_bench.py --accounts 2000 --transfers 5000 --queries 20 \
	  --out build/bench/query_bench.json
	$(BIN)/python -m bench.commit_sweep --intervals 5,10,20 --sizes 1,10 --batches 8000 \
	  --figures build/bench

bench-full: up peers-venv
	$(BIN)/python -m bench.leaderboard_peers --votes 100000 --latency --latency-seconds 20
	$(BIN)/python bench/leaderboard_bench.py --votes 20000 --profile
	$(BIN)/python -m bench.commit_sweep
	$(BIN)/python bench/trigger_chains_bench.py --batches 50000 --pg-batches 10000
	$(BIN)/python bench/sequencer_bench.py --events 50000
	$(BIN)/python bench/recovery_bench.py --batches 5000 --batches-off 100 --recovery-batches 5000,50000
	$(BIN)/python bench/bank_bench.py --accounts 100000 --transfers 6000
	$(BIN)/python -m bench.ycsb_bench --records 100000 --ops 50000
	$(BIN)/python -m bench.inventory_bench --reservations 10000
	$(BIN)/python -m bench.tpcc_bench --warehouses 4 --items 10000 --customers 1000 --txns 20000
	$(BIN)/python bench/etl_bench.py --votes 50000 --rate 1000
	$(BIN)/python bench/orders_bench.py --events 20000 --workers 1,2,4 --batch-sizes 1,10
	$(BIN)/python bench/transfers_bench.py --accounts 10000 --transfers 20000 --workers 1,2 --batch-sizes 1,10
	$(BIN)/python bench/hops_bench.py --events 20000 --workers 1,2 --batch-sizes 1,10
	$(BIN)/python bench/query_bench.py --partitions 8 --accounts 10000 --transfers 20000

# The tables of docs/benchmarks.md that the benchmarks' JSON in docs/figures holds, as markdown
# (bench/report.py): the Leaderboard's peers, the trigger chains, recovery and the bank. Runs no
# benchmark; `make bench` or `make bench-full` first writes the JSON anew.
report: venv
	$(BIN)/python -m bench.report

# The documentation site (mkdocs.yml: docs/ and the API reference from txstream.__all__'s
# docstrings) into build/site; any warning fails it: a broken link or anchor between the
# pages, a page left out of the navigation, a docstring mkdocstrings cannot read.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean: down
	rm -rf .txstream build
