# The two set-up commands: `make demo` and `make test` (each installs what it needs first).
.PHONY: bootstrap build-ext demo test lint bench

DEMO_ARGS ?=
PYTEST_ARGS ?=
# TEST_WORKERS=N runs the suite in N processes (0: in this one), a test file's tests together in
# one (its module's cluster started once); each worker starts its own session cluster, and port
# blocks and the loopback qdisc are reserved across processes. A worker's next file is the one
# tests/scheduling.py picks: files marked minutes(n) first, longest first, and one that fits
# beside the other worker's file by their cores(x) marks (two live stacks side by side run at
# half speed, and burn CPU while they wait). Two workers by default; measured 2026-12-05 on this
# 2-core machine: paired by cores 19.1 minutes (working tree, 30.6 busy-CPU minutes) and 20.4
# (clean clone, 2,173 passed, one timing rerun, 33.9 busy-CPU minutes); longest-first only 20.8
# and 21.9 (clean clones); 29.7 in one process (27.5 busy-CPU minutes). The suite's CPU sets the
# floor: 30.6-33.9 busy-CPU minutes on 2 cores cannot take less than 15.3-17.0.
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
