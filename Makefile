# The two set-up commands: `make demo` and `make test` (each installs what it needs first).
.PHONY: bootstrap build-ext demo test lint bench

DEMO_ARGS ?=
PYTEST_ARGS ?=
# TEST_WORKERS=N runs the suite in N processes (0: in this one), a test file's tests together in
# one (its module's cluster started once), the files marked minutes(n) handed out first, longest
# first (tests/conftest.py); each worker starts its own session cluster, and port blocks and the
# loopback qdisc are reserved across processes. Two by default: on a clean clone of this 2-core
# machine `make test` took 20-22 minutes in two workers (2026-12-05/06: pytest 1,199-1,338 s,
# 2,161 passed, one timing rerun, 32-38 busy-CPU minutes) against 33.2 in one. The suite's CPU
# sets its floor: 32-38 busy-CPU minutes on 2 cores cannot take less than 16-19. In the
# 2026-12-06 run (37.6) the two workers' session clusters took 10.4 of them, 6.7 at their idle
# rate alone (3 idle KRaft brokers use 0.18 of a core).
TEST_WORKERS ?= 2

bootstrap:
	@bash scripts/bootstrap.sh

# The request log's compiled block scanner (agent/requestlog/scanner.py loads it; without it the
# agent reads the log by the pure-Python path and says so).
SCAN_SO := agent/requestlog/_scan.so
build-ext: $(SCAN_SO)

$(SCAN_SO): agent/requestlog/_scan.c
	cc -O2 -Wall -Wextra -shared -fPIC -o $@ $<

demo: bootstrap
	.venv/bin/linkwatch demo $(DEMO_ARGS)

test: bootstrap
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .
