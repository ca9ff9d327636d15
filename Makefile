# The two set-up commands: `make demo` and `make test` (each installs what it needs first).
.PHONY: bootstrap build-ext demo test lint bench

DEMO_ARGS ?=
PYTEST_ARGS ?=
# TEST_WORKERS=N runs the suite in N processes, a test file's tests together in one (its
# module's cluster started once); each worker starts its own session cluster, and port blocks
# and the loopback qdisc are reserved across processes. 0 (the default) runs it in this
# process: on a 2-core machine the suite is CPU-bound (31 CPU-minutes in one process, 43-49 in
# two workers that contend), and two workers took 32-36 minutes against 38-39 in one, with more
# timing failures.
TEST_WORKERS ?= 0

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
