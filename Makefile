# The two commands: `make run` (start Millrace locally) and `make test` (lint + tests).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install run test lint format check-migrations clean bench-log bench-broker bench-groups \
	bench-rebalance bench-replication bench-streams bench-spark bench-console bench-browse \
	bench-metadata bench-codec bench-transactions bench-signup bench-usage chaos soak screenshots

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

## Start web, Celery worker and beat on embedded defaults (or DATABASE_URL/REDIS_URL if set).
run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py up

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(PY) manage.py makemigrations --check --dry-run

## Lint, then the whole suite (Postgres/Redis when DATABASE_URL/REDIS_URL are set).
test: lint
	$(VENV)/bin/pytest -n 2 --dist loadscope $(PYTEST_ARGS)

## Partition-log benchmark (JSON lines; see docs/performance.md). BENCH_DIR picks the disk.
bench-log: install
	$(PY) -m bench.log $(if $(BENCH_DIR),--dir $(BENCH_DIR),)

## Broker benchmark against Redis Streams on this machine (see docs/performance.md).
bench-broker: install
	$(PY) -m bench.broker

## Usage metering: hourly aggregation of 1,000 tenants x 100 topics from 3 brokers (Postgres).
bench-usage: install
	$(PY) -m bench.usage

## Metadata at hosted scale: 3 brokers, 1,000 tenants x 100 partitions; Metadata latency, REST
## topic creation to every broker's Metadata, controller tick, RSS, start-up (Postgres).
bench-metadata: install
	$(PY) -m bench.metadata $(if $(BENCH_RF),--replication-factor $(BENCH_RF),)

## Consumer-group benchmark: rebalance times, offset-commit latency (metadata on local Postgres).
bench-groups: install
	$(PY) -m bench.groups

## Rebalance benchmark: join, clean leave, kill -9 on 900 partitions, classic against KIP-848.
bench-rebalance: install
	$(PY) -m bench.rebalance

## Per-request costs in-process: Fetch/Produce encode and decode, first appends to new logs.
bench-codec: install
	$(PY) -m bench.codec

## Replication benchmark: acks=all RF 3 throughput, end-to-end latency, kill -9 failover (3 brokers).
bench-replication: install
	$(PY) -m bench.replication

## Transactions benchmark: transactional produce, consume-transform-produce, read_committed (3 brokers).
bench-transactions: install
	$(PY) -m bench.transactions

## Sign-up to the first produced record in headless Chromium (real SMTP server and broker): time and steps.
bench-signup: install
	$(VENV)/bin/pytest -p no:xdist -q -s tests/browser/test_signup.py | grep signup_to_first_record

## Connect benchmark: CDC source and Postgres sink against their baselines, worker kill -9 (Postgres, a broker).
bench-connect: install
	$(PY) -m bench.connect

## Data API benchmark: REST produce, WebSocket delivery and latency (daphne + a broker; Postgres, Redis).
bench-streams: install
	$(PY) -m bench.streams

## Console pages: p50/p95 with 1,000 topics and 100 groups in the tenant (daphne + a broker; Postgres).
bench-console: install
	$(PY) -m bench.console

## Spark batch read of 1,000,000 records against the client alone (docs/performance.md).
bench-spark: install
	$(PY) -m bench.spark

## Message browser scans against a confluent-kafka consumer, 1,000,000 records (docs/performance.md).
bench-browse: install
	$(PY) -m bench.browse $(if $(BENCH_COMPRESSION),--compression $(BENCH_COMPRESSION),)

## Soak (docs/reliability.md): manage.py up on embedded defaults for SOAK_SECONDS (default 1800)
## beside CPU burners, with a steady producer and consumer; exits non-zero if anything broke.
soak: install
	$(PY) -m bench.soak --seconds $(or $(SOAK_SECONDS),1800) $(if $(SOAK_RATE),--rate $(SOAK_RATE),)

## Long fault-injection runs (docs/reliability.md): replication, then exactly once; CHAOS_FAULTS faults each (default 100), CHAOS_SEED; Postgres.
chaos: install
	CHAOS_FAULTS=$(or $(CHAOS_FAULTS),100) $(VENV)/bin/pytest -p no:xdist tests/broker/test_chaos.py -x -s -k under_faults

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache

## The console's browser suite, saving its screenshots where docs/console.md shows them.
screenshots: install
	CONSOLE_SCREENSHOTS=docs/images/console $(VENV)/bin/pytest -p no:xdist tests/browser -q
