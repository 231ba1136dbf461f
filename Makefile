# txstream: setup, the native local stack, demo, tests and benchmarks.
# Everything a fresh machine lacks is installed here: Debian packages, the venv, Kafka jars.

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
KAFKA_LIBS := build/kafka/libs
APT_PACKAGES := docker-compose kcat prometheus
MVN := mvn -q -B

.PHONY: setup apt venv kafka-jars up down status demo test lint unit integration faults bench clean

setup: apt venv kafka-jars

apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

kafka-jars: $(KAFKA_LIBS)/.installed

$(KAFKA_LIBS)/.installed: deps/kafka/pom.xml
	@echo "fetching Kafka broker jars with mvn (cached under ~/.m2)"
	@rm -rf $(KAFKA_LIBS) && mkdir -p $(KAFKA_LIBS)
	$(MVN) -f deps/kafka/pom.xml org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
	  -DoutputDirectory=$(abspath $(KAFKA_LIBS)) -DincludeScope=runtime
	@touch $@

up: setup
	$(BIN)/txstream stack up

down:
	@if [ -x $(BIN)/txstream ]; then $(BIN)/txstream stack down; fi

status:
	$(BIN)/txstream stack status

demo: setup
	$(BIN)/python -m leaderboard.demo

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest -q tests/unit

integration: setup
	$(BIN)/pytest -q tests/integration

test: setup lint
	$(BIN)/pytest -q -ra --durations=12 tests

# The fault suite at full length: more votes, more kills, three seeds per case.
# A failing case names its seed; rerun it alone with TXSTREAM_FAULT_SEED=<seed>.
faults: setup
	TXSTREAM_FAULTS=long $(BIN)/pytest -q -ra tests/faults

bench: up
	$(BIN)/python bench/leaderboard_bench.py --votes 50000
	$(BIN)/python bench/leaderboard_bench.py --votes 20000 --profile
	$(BIN)/python bench/sequencer_bench.py --events 50000
	$(BIN)/python bench/recovery_bench.py --batches 5000 --batches-off 100 --recovery-batches 5000,50000
	$(BIN)/python bench/bank_bench.py --accounts 100000 --transfers 3000

clean: down
	rm -rf .txstream build
